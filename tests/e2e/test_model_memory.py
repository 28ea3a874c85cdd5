"""Issue 50.5-6: what models take stays within the stated memory bound, on a live server.

A load that fails is remembered until the model's files change and gives back what it took; a
model is sized from its files before any of it is loaded, and one that would take more than
ATLAS_MODEL_BYTES (a config claiming hidden_size 4096 over a tiny checkpoint, Gemma 3's
conversion) is refused before it allocates anything. RSS is sampled every 50 ms (PeakRss).
"""

import json
import shutil
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from app.memory import stated_bound
from atlas_engine.config import Settings
from atlas_engine.models.registry import GEMMA3_ID, MINILM_ID, SMOLLM2_ID
from atlas_engine.models.sources import GEMMA3, _part_paths, smollm2_folder
from tests.e2e.test_memory_bound import PeakRss
from tests.support.live import REPO, rss_bytes, start_server

pytestmark = [pytest.mark.slow, pytest.mark.alone]

MiB = 2**20
CACHE_DIR = REPO / "var" / "cache"
LENS_TEXT = "The Eiffel Tower is in the city of Paris, and the Colosseum is in the city of Rome. "


def post(base: str, path: str, body: dict, timeout: float = 600) -> tuple[int, dict, float]:
    """(status, JSON body, seconds) of a POST."""
    request = urllib.request.Request(
        base + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read()), time.monotonic() - start
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), time.monotonic() - start


def tiny_llama(folder: Path, **claims) -> Path:
    """A small Llama checkpoint (SmolLM2's tokenizer, random weights, 25 MB) whose config.json
    then claims `claims`: weights the claimed model cannot load."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer = smollm2_folder(CACHE_DIR, lambda *_: None)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer / name, folder / name)
    written = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**written, **claims}))
    return folder


def test_a_failed_load_is_not_retried_and_gives_back_what_it_took(tmp_path):
    """'wide' claims a 0.9 GB model (fits ATLAS_MODEL_BYTES): its load allocates it, then finds
    weights of another shape. 'huge' claims hidden_size 4096 (3.2 GB): refused unloaded. Each
    is asked three times; the server's RSS after each answer is what it was before."""
    wide = tiny_llama(
        tmp_path / "wide", hidden_size=1024, intermediate_size=4096, num_hidden_layers=8,
        num_attention_heads=16, num_key_value_heads=16,
    )  # fmt: skip
    huge = tiny_llama(
        tmp_path / "huge", hidden_size=4096, intermediate_size=11008, num_attention_heads=32,
        num_key_value_heads=32,
    )  # fmt: skip
    extra = json.dumps([f"bad/wide={wide}", f"bad/huge={huge}"])
    server = start_server(tmp_path / "server.log", {"ATLAS_EXTRA_MODELS": extra})
    try:
        assert post(server.base, "/api/attention", {"model": MINILM_ID, "text": "Warm."})[0] == 200
        ready = rss_bytes(server.process.pid)
        seen = {}
        for model in ("bad/wide", "bad/huge"):
            with PeakRss(server.process.pid, ready) as rss:
                answers = [
                    post(server.base, "/api/attention", {"model": model, "text": "Hi."})
                    for _ in range(3)
                ]
                time.sleep(0.2)
            after = rss_bytes(server.process.pid)
            seen[model] = (answers, rss.peak, after)
            print(
                f"{model}: {[a[0] for a in answers]} in {[round(a[2], 2) for a in answers]} s; "
                f"RSS ready {ready / MiB:.0f}, peak {rss.peak / MiB:.0f}, after {after / MiB:.0f} MiB"
            )
        log = server.log()
    finally:
        server.stop()
    for model, (answers, _, after) in seen.items():
        assert [a[0] for a in answers] == [503] * 3, answers
        assert len({a[1]["detail"] for a in answers}) == 1  # the reason, remembered
        assert max(a[2] for a in answers[1:]) < 0.5, answers  # not loaded again
        assert after - ready < 64 * MiB, f"{model}: {(after - ready) / MiB:.0f} MiB kept"
    assert log.count("loading bad/wide failed") == 1, log[-3000:]
    assert "could not be loaded" in seen["bad/wide"][0][0][1]["detail"]
    huge_answers, huge_peak, _ = seen["bad/huge"]
    assert "ATLAS_MODEL_BYTES" in huge_answers[0][1]["detail"]
    assert huge_peak - ready < 64 * MiB, f"sized after {(huge_peak - ready) / MiB:.0f} MiB"


def manifest_env() -> dict[str, str]:
    manifest = yaml.safe_load_all((REPO / "deploy" / "kubernetes.yaml").read_text())
    deployment = next(d for d in manifest if d and d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    limit = container["resources"]["limits"]["memory"]
    assert limit.endswith("Mi")
    env = {e["name"]: e["value"] for e in container["env"]}
    env.pop("ATLAS_TRUSTED_PROXIES")
    return {**env, "MEMORY_LIMIT": str(int(limit[:-2]) * MiB)}


@pytest.mark.skipif(_part_paths(GEMMA3) is None, reason="Gemma 3 270M is opt-in (`make gemma`)")
def test_a_replica_with_gemma_installed_stays_within_its_memory_limit(tmp_path):
    """Issue 50.6: the bound assumed the two embedded models. With Gemma installed, its first
    request converted it inside the server and its lens peaked at 3.74 GB, over the 3,072 Mi
    limit. A replica at the manifest's settings (in a cache folder where Gemma is not
    converted yet) now refuses it before any work: the conversion, 3.5 GiB at its peak, and
    the model, 1.3 GiB, are each more than its ATLAS_MODEL_BYTES."""
    env = manifest_env()
    limit = int(env.pop("MEMORY_LIMIT"))
    env |= {"ATLAS_PRELOAD": json.dumps([MINILM_ID]), "ATLAS_CACHE_DIR": str(tmp_path / "cache")}
    server = start_server(tmp_path / "server.log", env)
    try:
        assert post(server.base, "/api/attention", {"model": MINILM_ID, "text": "Warm."})[0] == 200
        body = {"model": GEMMA3_ID, "text": LENS_TEXT * 12, "top_k": 5}  # 254 tokens
        with PeakRss(server.process.pid) as rss:
            status, answer, seconds = post(server.base, "/api/attention/lens", body)
        print(
            f"{status} in {seconds:.1f} s, peak {rss.peak / MiB:.0f} MiB, limit {limit / MiB:.0f}"
        )
    finally:
        server.stop()
    assert rss.peak <= limit, f"peak {rss.peak / MiB:.0f} MiB over the limit {limit / MiB:.0f}"
    assert status == 503 and "ATLAS_MODEL_BYTES" in answer["detail"], answer
    assert "convert gemma3" in answer["detail"]


@pytest.mark.skipif(_part_paths(GEMMA3) is None, reason="Gemma 3 270M is opt-in (`make gemma`)")
def test_gemma_and_smollm2_lenses_stay_under_the_stated_bound_at_default_settings(tmp_path):
    """The default ATLAS_MODEL_BYTES holds Gemma 3 and SmolLM2 at once; a 248-token lens on
    each (Gemma's vocabulary is 262,144 tokens: its head's blocks are sized by it) stays under
    the bound stated for the default settings. Gemma is converted first, outside the server,
    as `make gemma` does."""
    from atlas_engine.models.sources import gguf_folder

    gguf_folder(CACHE_DIR, lambda *_: None, GEMMA3)
    bound = stated_bound(Settings())
    server = start_server(tmp_path / "server.log")
    try:
        peaks = {}
        for model, copies in ((GEMMA3_ID, 12), (SMOLLM2_ID, 11)):  # 254 and 254 tokens
            body = {"model": model, "text": LENS_TEXT * copies, "top_k": 5}
            with PeakRss(server.process.pid) as rss:
                status, answer, seconds = post(server.base, "/api/attention/lens", body)
            assert status == 200, answer
            peaks[model] = rss.peak
            print(
                f"{model}: {len(answer['tokens'])} tokens in {seconds:.0f} s, peak "
                f"{rss.peak / MiB:.0f} MiB against the bound {bound / MiB:.0f} MiB"
            )
        with urllib.request.urlopen(server.base + "/api/models") as listing:
            loaded = {m["id"] for m in json.loads(listing.read())["models"] if m["loaded"]}
    finally:
        server.stop()
    assert max(peaks.values()) <= bound
    assert {GEMMA3_ID, SMOLLM2_ID} <= loaded  # both fit at once: neither was unloaded
