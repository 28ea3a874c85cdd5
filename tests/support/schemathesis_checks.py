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
from hypothesis import strategies
from schemathesis.specs.openapi.checks import is_unexpected_http_status_case

from atlas_engine.schemas.generate import MAX_NEW_TOKENS
from attention_core.training import MAX_STEPS

ACCEPTED = {404, 429}  # unknown model ids, rate limits: as schemathesis's own default

# POST /api/attention/generate costs ~0.1 s a new token on SmolLM2 here (float32 weights read
# once a token): random lengths up to 128 made the fuzzing phase spend 30-190 s on that route
# alone, by seed. A schema-valid length drawn for it is folded into 1..16; a length the schema
# refuses (over 128, under 1, not an integer) is sent as drawn, and the coverage phase, which
# these hooks do not change, still sends the boundary lengths 127, 128 and 129.
GENERATE = "/api/attention/generate"
FUZZED_NEW_TOKENS = 16
# POST /api/lab/train runs up to 60 estimated seconds, one at a time: a schema-valid `steps`
# drawn for it is folded into 1..8 (a refused one is sent as drawn), so a case costs well
# under a second and a second case never meets the first still running (503).
TRAIN = "/api/lab/train"
FUZZED_STEPS = 8


@schemathesis.hook
def map_body(ctx, body):
    if ctx.operation is None or not isinstance(body, dict):
        return body
    if ctx.operation.path == TRAIN:
        steps = body.get("steps")
        if type(steps) is int and FUZZED_STEPS < steps <= MAX_STEPS:
            body = {**body, "steps": 1 + steps % FUZZED_STEPS}
        return body
    if ctx.operation.path != GENERATE:
        return body
    length = body.get("max_new_tokens")
    if type(length) is int and FUZZED_NEW_TOKENS < length <= MAX_NEW_TOKENS:
        body = {**body, "max_new_tokens": 1 + length % FUZZED_NEW_TOKENS}
    return body


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


def _zipped_example() -> bytes:
    """The HeadVis format's worked example as a zip: a tree the import route takes (201)."""
    import io
    import tempfile
    import zipfile
    from pathlib import Path

    from tests.support.headvis import write_example_tree

    out = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(out, "w") as archive:
        tree = write_example_tree(Path(tmp) / "tree")
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                archive.writestr(path.relative_to(tree).as_posix(), path.read_bytes())
    return out.getvalue()


# POST /api/corpus/import takes a zip: bytes of any kind, and now and then a real tree.
schemathesis.openapi.media_type(
    "application/zip",
    strategies.binary(max_size=2048) | strategies.just(_zipped_example()),
)
