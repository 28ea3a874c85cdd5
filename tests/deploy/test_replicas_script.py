"""Issue 50.8: .ci/replicas-test.sh sends every load test and probe to 127.0.0.1, each replica
publishing its port there alone (it loaded one replica at its pod's address on podman's
network). The script needs podman and takes minutes; this reads what it would play and send."""

import re
import subprocess
import sys

import yaml

from tests.deploy.test_manifests import REPO, documents

SCRIPT = (REPO / ".ci" / "replicas-test.sh").read_text()


def played(tmp_path, first_port: int = 18081) -> tuple[list[dict], list[int]]:
    """The manifest as the script hands it to podman kube play, and the ports it prints."""
    transform = re.search(r"<<'PY'\n(.*?)\nPY\n", SCRIPT, re.S).group(1)
    out = tmp_path / "kube.yaml"
    printed = subprocess.run(
        [sys.executable, "-", "localhost/attention-atlas:test", "1", str(first_port), str(out)],
        input=transform, capture_output=True, text=True, check=True, cwd=REPO,
    ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out.read_text()) if d], [int(p) for p in printed.split()]


def test_each_replica_publishes_its_own_port_on_127_0_0_1_only(tmp_path):
    docs, ports = played(tmp_path)
    shipped = next(d for d in documents() if d["kind"] == "Deployment")
    replicas = [d for d in docs if d["kind"] == "Deployment"]
    assert len(replicas) == shipped["spec"]["replicas"] == len(ports) == len(set(ports))
    for replica, port in zip(replicas, ports, strict=True):
        assert replica["spec"]["replicas"] == 1
        pod = replica["spec"]["template"]
        assert pod["metadata"]["labels"] == shipped["spec"]["template"]["metadata"]["labels"]
        (published,) = pod["spec"]["containers"][0]["ports"]
        assert published == {
            "name": "http", "containerPort": 8000, "hostIP": "127.0.0.1", "hostPort": port,
        }  # fmt: skip


def test_every_load_test_and_probe_is_sent_to_127_0_0_1():
    urls = re.findall(r'(?:--url|curl [^\n]*?)\s*"(http://[^"/]+)', SCRIPT)
    assert urls and all(u.startswith("http://127.0.0.1:") for u in urls), urls
    assert "IPAddress" not in SCRIPT  # no pod address is looked up
    upstreams = re.findall(r"server (\S+) max_fails", SCRIPT)
    assert upstreams == ["127.0.0.1:$port"], upstreams
