"""deploy/kubernetes.yaml is valid Kubernetes (schemas of kubernetes-validate, strict: no
unknown fields), its probes and resources are the ones docs/deployment.md's memory sum gives,
and Kubernetes waits for the server's shutdown grace."""

import json
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from app.memory import stated_bound
from atlas_engine.config import Settings
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.sizing import model_size

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "kubernetes.yaml"
DEPLOYMENT_DOC = REPO / "docs" / "deployment.md"
CACHE = REPO / "var" / "cache"  # where the suite's converted SmolLM2 copy is
SHUTDOWN_MARGIN_SECONDS = 10
"""What Kubernetes waits past the server's grace before it kills it: the lifespan's end, a
pass's last layer (0.7 s at 8,192 tokens) and the interpreter's exit."""
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
    bound = stated_bound(manifest_settings())
    limit = quantity(container["resources"]["limits"]["memory"])
    request = quantity(container["resources"]["requests"]["memory"])
    assert request == limit >= bound, (request, limit, bound)
    assert limit - bound < 512 * 2**20  # sized from the sum, not guessed generously
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]


def manifest_settings() -> Settings:
    """The settings the manifest's environment gives the server."""
    _, container = the_container()
    env = {e["name"]: e["value"] for e in container["env"]}
    return Settings(
        forward_cache_bytes=int(env["ATLAS_FORWARD_CACHE_BYTES"]),
        inflight_bytes=int(env["ATLAS_INFLIGHT_BYTES"]),
        model_bytes=int(env["ATLAS_MODEL_BYTES"]),
        preload=json.loads(env["ATLAS_PRELOAD"]),
    )


def test_the_models_the_manifest_preloads_fit_its_model_bytes():
    """The bound's model term is ATLAS_MODEL_BYTES: the models a replica preloads must fit in
    it together, sized from their files as the server sizes them before a load."""
    settings = manifest_settings()
    manager = ModelManager.from_settings(settings.model_copy(update={"cache_dir": str(CACHE)}))
    sizes = [
        model_size(manager.spec(m), manager.cache_dir, manager.placement).resident
        for m in settings.preload
    ]
    assert len(sizes) == 2 and sum(sizes) <= settings.model_bytes, (sizes, settings.model_bytes)


def the_container() -> tuple[dict, dict]:
    deployment = next(d for d in documents() if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def test_kubernetes_waits_for_the_shutdown_grace_and_a_margin():
    pod, container = the_container()
    env = {e["name"]: e["value"] for e in container["env"]}
    grace = Settings.model_fields["shutdown_grace_seconds"].default
    assert float(env["ATLAS_SHUTDOWN_GRACE_SECONDS"]) == grace
    assert pod["terminationGracePeriodSeconds"] == grace + SHUTDOWN_MARGIN_SECONDS


def test_the_cpu_request_is_the_limit():
    """The heavy lane's threads are counted from the limit, and its nice value weighs it only
    against the server's own threads (docs/deployment.md, "Cores")."""
    _, container = the_container()
    resources = container["resources"]
    assert resources["requests"]["cpu"] == resources["limits"]["cpu"]


def test_the_deployment_doc_gives_the_manifests_memory():
    """docs/deployment.md said 2,560 Mi long after the manifest moved to 3072Mi."""
    _, container = the_container()
    stated = re.findall(r"\b([\d,]+) ?Mi\b", DEPLOYMENT_DOC.read_text())  # 3,072 Mi; not MiB
    assert stated, "docs/deployment.md no longer states the manifest's memory"
    for figure in stated:
        assert int(figure.replace(",", "")) * 2**20 == quantity(
            container["resources"]["limits"]["memory"]
        )


def test_the_ingress_routes_a_text_to_one_replica():
    """The balancer hashes the key the page and the client send (attention_atlas.client)."""
    from attention_atlas.client import ROUTE_HEADER

    ingress = next(d for d in documents() if d["kind"] == "Ingress")
    header = "$http_" + ROUTE_HEADER.lower().replace("-", "_")
    assert (
        ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"] == header
    )
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert (
        backend["name"]
        == next(d for d in documents() if d["kind"] == "Service")["metadata"]["name"]
    )
    script = (REPO / ".ci" / "replicas-test.sh").read_text()
    assert "hash \\$atlas_route consistent" in script and "\\$http_x_atlas_key" in script
