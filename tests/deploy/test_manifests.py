"""deploy/kubernetes.yaml is valid Kubernetes (schemas of kubernetes-validate, strict: no
unknown fields), and its probes and resources are the ones the README's memory sum gives."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from app.memory import EMBEDDED_MODELS_RSS, worst_case_rss

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes.yaml"
KUBERNETES_VERSION = "1.30.0"
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def documents() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]


def quantity(text: str) -> int:
    for suffix, factor in UNITS.items():
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


@pytest.mark.parametrize("doc", documents(), ids=lambda d: d["kind"])
def test_every_document_is_valid_kubernetes(doc):
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_an_unknown_field_would_be_caught():
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["memoryLimit"] = "1Gi"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_probes_resources_and_service_fit_the_app():
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    service = next(d for d in documents() if d["kind"] == "Service")
    pod = deployment["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert deployment["spec"]["replicas"] >= 2
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/api/health"
    env = {e["name"]: e["value"] for e in container["env"]}
    bound = worst_case_rss(
        EMBEDDED_MODELS_RSS,
        int(env["ATLAS_FORWARD_CACHE_BYTES"]),
        int(env["ATLAS_INFLIGHT_BYTES"]),
    )
    limit = quantity(container["resources"]["limits"]["memory"])
    request = quantity(container["resources"]["requests"]["memory"])
    assert request == limit >= bound, (request, limit, bound)
    assert limit - bound < 512 * 2**20  # sized from the sum, not guessed generously
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
