"""Who sent a request and the queue limits it is admitted under, named for the compute lanes
(atlas_engine.admission) at the start of every HTTP request."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from atlas_engine.admission import CLIENT, LIMITS, QueueLimits


class AdmissionContext:
    """Names the request's client and the app's queue limits for the lanes (context variables
    live for the request's task: the route and everything it awaits)."""

    def __init__(self, app: ASGIApp, limits: QueueLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        tokens = (CLIENT.set(client[0] if client else None), LIMITS.set(self.limits))
        try:
            await self.app(scope, receive, send)
        finally:
            LIMITS.reset(tokens[1])
            CLIENT.reset(tokens[0])
