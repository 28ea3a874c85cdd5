"""The server's tensor work runs on one thread (app.compute): once a second thread has run
PyTorch's kernels, OpenMP keeps a team of threads for each, and every kernel in the process is
slower for it. Every kind of route is checked: answers built whole, streamed pieces, NDJSON
streams, lab routes and model loading."""

import asyncio
import threading

import pytest
import torch

import app.api.routes.lab as lab_routes
import app.serialize as serialize
from app.compute import iterate_on_compute, on_compute_thread, run_on_compute
from app.models.registry import MINILM_ID
from tests.support.ndjson import checked_lines

TEXT = "Every tensor of this request is computed on the one compute thread. " * 14


@pytest.fixture
def where_tensors_ran(monkeypatch):
    """The threads that ran a module's forward, a u8 encoding or a lab computation."""
    threads: list[tuple[str, bool]] = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: threads.append((type(module).__name__, on_compute_thread()))
    )
    real_quantize = serialize.quantize
    monkeypatch.setattr(
        serialize,
        "quantize",
        lambda *a: threads.append(("quantize", on_compute_thread())) or real_quantize(*a),
    )
    real_masks = lab_routes.all_masks
    monkeypatch.setattr(
        lab_routes,
        "all_masks",
        lambda *a: threads.append(("masks", on_compute_thread())) or real_masks(*a),
    )
    yield threads
    handle.remove()


def test_every_kind_of_route_computes_on_the_compute_thread(client, where_tensors_ran):
    maps = client.post("/api/attention", json={"model": MINILM_ID, "text": TEXT, "format": "u8"})
    assert maps.status_code == 200 and len(maps.content) > 2 * serialize.PIECE_BYTES  # pieces
    answers = [
        client.post(
            "/api/attention/detail", json={"model": MINILM_ID, "text": TEXT, "layer": 1, "head": 0}
        ),
        client.post("/api/lab/masks", json={"n": 12}),
        client.get("/api/models/local/gpt2-tiny/induction-text?length=6"),
    ]
    assert [a.status_code for a in answers] == [200] * 3
    streams = {
        "/api/attention/generate": {
            "model": "local/gpt2-tiny",
            "text": "one two",
            "max_new_tokens": 3,
        },
        # its first use: the model loads on the compute thread too
        "/api/attention/forward": {"model": "local/bert-tiny", "text": "a short text"},
    }
    for path, body in streams.items():
        response = client.post(path, json=body)
        assert checked_lines(client, path, response)[-1]["event"] == "done"
    kinds = {kind for kind, _ in where_tensors_ran}
    assert {"BertModel", "GPT2Model", "quantize", "masks"} <= kinds
    assert [kind for kind, on_it in where_tensors_ran if not on_it] == []


def test_a_job_runs_on_the_one_thread_in_order_and_a_stream_is_read_there():
    async def scenario():
        order = []
        jobs = [
            run_on_compute(lambda i=i: order.append((i, threading.get_ident()))) for i in range(5)
        ]
        await asyncio.gather(*jobs)
        pieces = [piece async for piece in iterate_on_compute(iter(range(3)))]
        return order, pieces

    order, pieces = asyncio.run(scenario())
    assert [i for i, _ in order] == list(range(5))
    assert len({thread for _, thread in order}) == 1 and order[0][1] != threading.get_ident()
    assert pieces == [0, 1, 2]
    assert not on_compute_thread()
