"""The server's tensor work runs on the compute lanes (atlas_engine.compute): once a second thread has run
PyTorch's kernels with a team of its own, OpenMP keeps a team for each, and every kernel in the
process is slower for it. The heavy lane is one thread with PyTorch's threads, the quick lane's
threads run PyTorch on themselves alone. Every kind of route is checked: answers built whole,
streamed pieces, NDJSON streams, lab routes and model loading."""

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
import torch

import app.api.routes.lab as lab_routes
import atlas_engine.serialize as serialize
from app.api.running import FIRST_LOAD_SECONDS, run_with_room, where_to_run
from app.main import _preload
from atlas_engine.compute import (
    HEAVY_LANE_NICE,
    NESTED_MOST_SECONDS,
    EarliestDeadlineFirst,
    Lane,
    call_on_compute,
    cpu_quota_cores,
    depth,
    iterate_on_compute,
    on_compute_thread,
    run_on_compute,
)
from atlas_engine.config import get_settings
from atlas_engine.errors import ServerBusy
from atlas_engine.inference.cache import ForwardCache
from atlas_engine.inference.forward import run_forward
from atlas_engine.inference.inflight import AnswerBudget
from atlas_engine.models.manager import ModelManager
from atlas_engine.models.registry import MINILM_ID, SMOLLM2_ID, build_registry
from atlas_engine.schemas.attention import AttentionRequest
from atlas_engine.schemas.compare import CompareRequest
from atlas_engine.services.passes import Passes
from tests.support.ndjson import checked_lines

TEXT = "Every tensor of this request is computed on the one compute thread. " * 14


@pytest.fixture
def where_tensors_ran(monkeypatch):
    """The threads that ran a module's forward, a u8 encoding or a lab computation."""
    threads: list[tuple[str, bool]] = []
    handle = torch.nn.modules.module.register_module_forward_pre_hook(
        lambda module, args: threads.append((type(module).__name__, on_compute_thread()))
    )
    real_quantize = serialize.quantize_into
    monkeypatch.setattr(
        serialize,
        "quantize_into",
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


def test_a_preloaded_model_is_run_once_on_the_heavy_lane(app, where_tensors_ran):
    """Preloading ends with a thrown-away pass where requests run theirs, so a user's first
    request pays no first-use costs; it is not cached as if someone had asked for it."""
    cached = len(app.state.forward_cache)
    _preload(app.state.manager, ["local/bert-tiny"])
    ran = [on_lane for name, on_lane in where_tensors_ran if name.startswith("Bert")]
    assert ran and all(ran)
    assert len(app.state.forward_cache) == cached


def test_the_heavy_lane_runs_the_earliest_deadline_first_on_one_thread():
    async def scenario():
        release = threading.Event()
        blocker = run_on_compute(release.wait, 10)  # holds the heavy lane while jobs queue
        await asyncio.sleep(0.05)
        order = []

        def job(name):
            order.append((name, threading.get_ident(), torch.get_num_threads()))

        queued = [
            run_on_compute(job, name, seconds=seconds)
            for name, seconds in (("long", 5.0), ("short", 0.001), ("middle", 1.0))
        ]
        release.set()
        await asyncio.gather(blocker, *queued)
        pieces = [piece async for piece in iterate_on_compute(iter(range(3)))]
        made = []  # the thread each item was made on

        def counted(n):
            for i in range(n):
                made.append(threading.get_ident())
                yield i

        in_threes = []  # (item, items made by the time it is handed on)
        async for piece in iterate_on_compute(counted(7), per_trip=3):
            in_threes.append((piece, len(made)))
        return order, pieces, in_threes, made

    order, pieces, in_threes, made = asyncio.run(scenario())
    # three items a trip to the lane, the next three made only once those are handed on
    assert in_threes == [(0, 3), (1, 3), (2, 3), (3, 6), (4, 6), (5, 6), (6, 7)]
    assert len(made) == 7 and threading.get_ident() not in made
    assert [name for name, _, _ in order] == ["short", "middle", "long"]
    assert len({thread for _, thread, _ in order}) == 1 != order[0][1] != threading.get_ident()
    assert order[0][2] == torch.get_num_threads()  # the heavy lane keeps PyTorch's own threads
    assert pieces == [0, 1, 2]
    assert not on_compute_thread()


def test_the_quick_lane_runs_pytorch_on_itself_alone_and_leaves_the_default_alone():
    async def counts():
        return await asyncio.gather(
            *[run_on_compute(torch.get_num_threads, lane=Lane.QUICK) for _ in range(4)]
        )

    assert set(asyncio.run(counts())) == {1}
    assert call_on_compute(torch.get_num_threads) == torch.get_num_threads()
    seen = []
    fresh = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    fresh.start()
    fresh.join()
    assert seen == [torch.get_num_threads()]  # a new thread still starts from the default


def test_both_lanes_compute_the_same_bits_whatever_their_thread_counts():
    """A replay on the quick lane (one thread) equals the model's own pass on the heavy lane
    (one thread a core) only if a matrix product's sums do not depend on the thread count:
    MKL splits them by it on some CPUs unless MKL_CBWR is strict (atlas_engine/__init__.py). These
    shapes are SmolLM2's and MiniLM's projections of a 13-token text; on an AVX-512 Xeon the
    first differed by 5e-5 between one and two threads without it."""
    generator = torch.Generator().manual_seed(0)
    shapes = [(13, 576, 1536), (13, 1536, 576), (13, 576, 192), (13, 384, 1536), (13, 384, 384)]
    products = [
        (torch.randn(m, k, generator=generator), torch.randn(n, k, generator=generator))
        for m, k, n in shapes
    ]

    def multiply():
        return [torch.nn.functional.linear(a, w) for a, w in products]

    async def on_quick():
        return await run_on_compute(multiply, lane=Lane.QUICK)

    assert os.environ.get("MKL_CBWR", "").startswith("AUTO,STRICT")
    quick, heavy = asyncio.run(on_quick()), call_on_compute(multiply)
    for shape, one, every in zip(shapes, quick, heavy, strict=True):
        assert torch.equal(one, every), shape


def _nice_of_threads() -> dict[int, int]:
    """Each thread of this process: its nice value (field 19 of /proc/self/task/*/stat)."""
    values = {}
    for task in Path("/proc/self/task").iterdir():
        stat = (task / "stat").read_text()
        values[int(task.name)] = int(stat[stat.rindex(")") + 2 :].split()[16])
    return values


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread priorities: Linux only")
def test_the_heavy_lane_and_its_openmp_helpers_run_below_the_rest_of_the_server():
    def heavy_job():
        torch.ones(512, 512) @ torch.ones(512, 512)  # a parallel region: the team is started
        return threading.get_native_id(), os.getpriority(os.PRIO_PROCESS, 0)

    base = os.getpriority(os.PRIO_PROCESS, 0)
    expected = min(19, base + get_settings().heavy_lane_nice)
    heavy_thread, heavy_nice = call_on_compute(heavy_job)
    quick_nice = asyncio.run(
        run_on_compute(lambda: os.getpriority(os.PRIO_PROCESS, 0), lane=Lane.QUICK)
    )
    assert get_settings().heavy_lane_nice == HEAVY_LANE_NICE > 0  # the default
    assert (heavy_nice, quick_nice) == (expected, base)
    nice = _nice_of_threads()
    assert nice[heavy_thread] == expected and nice[threading.get_native_id()] == base
    lowered = [tid for tid, value in nice.items() if value == expected]
    # the lane's thread and the OpenMP helpers it started (one a core beyond its own)
    assert len(lowered) >= call_on_compute(torch.get_num_threads)


def test_an_answer_from_a_cached_pass_does_not_wait_behind_a_forward_pass(client):
    text = "A cached sentence is answered on the quick lane while the heavy one is busy."
    body = {"model": MINILM_ID, "text": text, "format": "u8"}
    assert client.post("/api/attention", json=body).status_code == 200  # the pass is cached
    release = threading.Event()
    blocking = threading.Thread(target=call_on_compute, args=(release.wait, 30))
    blocking.start()
    try:
        time.sleep(0.05)  # the heavy lane is busy from here on
        start = time.monotonic()
        again = client.post("/api/attention", json=body)
        answered_in = time.monotonic() - start
        assert again.status_code == 200 and release.is_set() is False
        assert answered_in < 10  # not the 30 s the heavy lane is held for
    finally:
        release.set()
        blocking.join()


@pytest.mark.parametrize(
    ("files", "cores"),
    [
        ({"cpu.max": "max 100000\n"}, None),  # cgroup v2, no limit
        ({"cpu.max": "150000 100000\n"}, 1),  # 1.5 cores: one whole core
        ({"cpu.max": "400000 100000\n"}, 4),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1
        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2),
        ({}, None),  # no cgroup files: not in a container
    ],
)
def test_a_containers_cpu_limit_bounds_the_heavy_lanes_threads(tmp_path, files, cores):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cpu_quota_cores(tmp_path) == cores


def test_a_reservation_waits_for_room_off_the_lanes_and_then_runs_again():
    """A reservation never waits on a compute lane (the lane would hold up every job behind
    it): run_with_room waits for the room off the lane and runs the work again, or gives the
    budget's 503 once its wait is over."""
    budget = AnswerBudget(max_bytes=100, wait_seconds=1.0)
    held = budget.reserve("someone else", 80)
    tries = []

    def work():
        tries.append(on_compute_thread())
        return budget.reserve("mine", 50)

    async def scenario():
        answer = asyncio.create_task(run_with_room(work))
        await asyncio.sleep(0.2)
        assert not answer.done() and tries == [True]  # no room: waiting, off the lane
        held.release()
        return await answer

    mine = asyncio.run(scenario())
    assert tries == [True, True] and budget.held_bytes == 50
    mine.release()
    budget.reserve("someone else", 80)
    with pytest.raises(ServerBusy, match="retry shortly"):
        asyncio.run(run_with_room(work))


def test_a_request_reading_a_cached_short_pass_takes_the_quick_lane(app, client):
    passes = app.state.passes
    text = "Which lane does a request on this sentence take?"
    body = AttentionRequest(model=MINILM_ID, text=text)
    client.post("/api/attention", json={"model": MINILM_ID, "text": "load the model first"})
    # A new sentence (at most QUICK_NEW_TOKENS): its pass runs on the quick lane, beside
    # whatever the heavy lane runs; a longer new text goes to the heavy lane.
    assert where_to_run(passes, body) == (Lane.QUICK, 0.0, None, None, None)
    longer_body = AttentionRequest(model=MINILM_ID, text=text * 3)  # over 64 tokens
    lane, seconds, model, _, text_key = where_to_run(passes, longer_body)
    assert text_key == (MINILM_ID, text * 3, None)  # never run inside the pass of its own text
    assert lane is Lane.HEAVY and 0 < seconds < 1  # a new pass: ordered by its estimate
    assert model == MINILM_ID  # and said to run that model alone (run_beside)
    longest = where_to_run(passes, AttentionRequest(model=MINILM_ID, text=text * 20))
    assert longest[1] > 5 * seconds  # a longer text is estimated to cost more
    assert client.post("/api/attention", json={"model": MINILM_ID, "text": text}).is_success
    assert where_to_run(passes, body) == (Lane.QUICK, 0.0, None, None, None)
    other = CompareRequest(
        model=MINILM_ID,
        text=text,
        layer=0,
        head=0,
        other={"text": "another", "layer": 0, "head": 0},
    )
    assert where_to_run(passes, other)[0] is Lane.HEAVY  # the other text may be new
    assert where_to_run(passes, other).model == MINILM_ID
    two_models = other.model_copy(
        update={"other": other.other.model_copy(update={"model": SMOLLM2_ID})}
    )
    assert where_to_run(passes, two_models).model is None  # two models: none said
    nothing_loaded = ModelManager(
        build_registry([], None), cache_dir=Path("var/cache"), token_limit=512, max_loaded=1
    )
    fresh = Passes(nothing_loaded, ForwardCache(8, 2**20), AnswerBudget(2**20, 1.0))
    first_use = where_to_run(fresh, body)
    assert first_use[:4] == (Lane.HEAVY, FIRST_LOAD_SECONDS, MINILM_ID, 0.0)  # loading first
    assert first_use.counted == 0.0  # paid once: the queue's bound does not count it


def test_short_jobs_that_name_their_model_run_inside_a_long_one_between_its_steps():
    lane = EarliestDeadlineFirst("atlas-test-lane", lambda: None)
    started, all_queued = threading.Event(), threading.Event()
    order = []

    def long_job(name):
        started.set()
        all_queued.wait(10)
        for step in range(3):
            order.append(f"{name} {step}")
            lane.run_beside()
        return name

    def short(name):
        order.append(name)
        lane.run_beside()  # a job run inside another lets nothing in
        return name

    outer = lane.submit(long_job, "long a", seconds=10.0, model="a")
    started.wait(10)
    waiting = [
        lane.submit(short, "b, inside", seconds=0.01, model="b"),
        lane.submit(short, "a, inside", seconds=0.01, model="a"),
        lane.submit(short, "unknown, after", seconds=0.01, model=None),
        lane.submit(short, "b, after: too long", seconds=2 * NESTED_MOST_SECONDS, model="b"),
        lane.submit(short, "c, inside", seconds=0.02, model="c"),
        lane.submit(long_job, "long b", seconds=10.0, model="b"),
    ]
    all_queued.set()
    assert [f.result(10) for f in [outer, *waiting]]
    assert order == [
        "long a 0", "b, inside", "a, inside", "c, inside", "long a 1", "long a 2",
        "unknown, after", "b, after: too long",
        "long b 0", "long b 1", "long b 2",
    ]  # fmt: skip
    assert lane.nested_seconds > 0

    unknown = lane.submit(long_job, "long, no model", seconds=10.0)  # nothing goes inside it
    started.clear(), all_queued.clear()
    started.wait(10)
    later = lane.submit(short, "b, after", seconds=0.01, model="b")
    all_queued.set()
    unknown.result(10), later.result(10)
    assert order[-4:] == ["long, no model 0", "long, no model 1", "long, no model 2", "b, after"]


@pytest.mark.parametrize("model_id", [MINILM_ID, SMOLLM2_ID])
def test_a_pass_run_inside_another_on_the_same_model_leaves_both_the_models_own(app, model_id):
    """A short pass run between two layers of a long one on the same model (its lock is
    re-entrant): neither pass's hooks take the other's layers, so both keep exactly what each
    computes alone, hidden states and the maps each hands on as its layers finish."""
    loaded = app.state.manager.get(model_id)
    long_text, short_text = "Attention is all you need. " * 40, "A short one goes in between."

    def alone(text):
        kept = {}
        result = call_on_compute(run_forward, loaded, text, None, None, None, kept.__setitem__)
        return result, kept

    (long_alone, long_kept_alone), (short_alone, short_kept_alone) = map(
        alone, (long_text, short_text)
    )
    at_layer_2, queued = threading.Event(), threading.Event()
    long_kept, short_kept = {}, {}

    def progress(done, _total):
        if done == 2:
            at_layer_2.set()
            queued.wait(10)

    def short_pass():
        return depth(), run_forward(loaded, short_text, None, None, None, short_kept.__setitem__)

    async def scenario():
        outer = asyncio.ensure_future(
            run_on_compute(run_forward, loaded, long_text, None, None, progress, long_kept.__setitem__,
                           seconds=10.0, model=model_id)
        )  # fmt: skip
        await asyncio.to_thread(at_layer_2.wait, 10)
        inner = asyncio.ensure_future(run_on_compute(short_pass, seconds=0.01, model=model_id))
        await asyncio.sleep(0.1)  # on the lane's queue by now
        queued.set()
        return await outer, await inner

    long_nested, (inner_depth, short_nested) = asyncio.run(scenario())
    assert inner_depth == 2  # it ran inside the long pass
    for nested, single in ((long_nested, long_alone), (short_nested, short_alone)):
        assert nested.token_ids == single.token_ids
        assert torch.equal(nested.hidden_inputs, single.hidden_inputs)
    for kept, kept_alone in ((long_kept, long_kept_alone), (short_kept, short_kept_alone)):
        assert kept.keys() == kept_alone.keys()
        assert all(torch.equal(kept[layer], kept_alone[layer]) for layer in kept)
