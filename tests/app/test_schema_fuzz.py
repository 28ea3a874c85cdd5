"""Schemathesis fuzzes every route of the OpenAPI schema: no 5xx, every answer fits its schema."""

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.config import Settings
from app.main import create_app
from tests.conftest import CACHE_DIR

pytestmark = pytest.mark.slow

APP = create_app(
    Settings(preload=[], rate_limit_per_minute=0, cache_dir=str(CACHE_DIR), max_loaded_models=2)
)
SCHEMA = schemathesis.openapi.from_asgi("/openapi.json", APP)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
EXAMPLES = 250


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: op.label)
def test_route_survives_fuzzing(operation):
    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    def fuzz(case):
        response = case.call()
        assert response.status_code < 500, (
            f"{case.method} {case.formatted_path}: {response.status_code} {response.text[:300]}"
        )
        # Cross-field rules (rectangular matrices, q/k widths that agree, a text's token count)
        # cannot be written in JSON Schema, so schema-valid bodies may still get a 422.
        case.validate_response(response, excluded_checks=[positive_data_acceptance])

    fuzz()


def test_all_routes_are_fuzzed():
    labels = {op.label for op in OPERATIONS}
    for route in (
        "POST /api/attention",
        "POST /api/attention/detail",
        "POST /api/core/attention",
        "GET /api/models",
        "POST /api/lab/masks",
        "POST /api/lab/scaling",
        "GET /api/health",
    ):
        assert route in labels
