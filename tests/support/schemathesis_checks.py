"""schemathesis hooks for the schema test: loaded with SCHEMATHESIS_HOOKS=tests.support.schemathesis_checks.

positive_data_acceptance (a request the schema calls valid must be accepted) is kept in full,
with one documented exception: a 422 whose code is 'input_rule', the code the API gives for a
rule JSON Schema cannot state (every such rule is named in the route's docs: a ragged matrix,
shapes that must agree, more tokens than the model takes, an index past the model's count, a
text pair for a decoder). Any other refusal of schema-valid data is still a failure.
"""

from __future__ import annotations

import json

import schemathesis
from schemathesis.specs.openapi.checks import is_unexpected_http_status_case

ACCEPTED = {404, 429}  # unknown model ids, rate limits: as schemathesis's own default


@schemathesis.check
def positive_data_accepted_unless_input_rule(ctx, response, case):
    meta = case.meta
    if meta is None or is_unexpected_http_status_case(case):
        return True
    if not meta.generation.mode.is_positive:
        return None
    status = response.status_code
    if status < 400 or status in ACCEPTED or status >= 500:  # 5xx: not_a_server_error's job
        return None
    if status == 422:
        try:
            if json.loads(response.content).get("code") == "input_rule":
                return None
        except ValueError:
            pass
    raise AssertionError(f"Schema-valid data was refused with {status}: {response.content[:300]!r}")
