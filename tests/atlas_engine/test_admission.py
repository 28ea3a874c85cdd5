"""Admission before work (issue 38): the heavy lane's queue is bounded by count, by the seconds
of work waiting and by one client's share; a short job runs beside a long one at any age of it,
and a flood of short jobs still leaves the long one most of the lane; a queued job whose client
has left is dropped before it runs; at shutdown queued jobs fail and running ones stop."""

import threading
import time

import pytest

from atlas_engine import compute
from atlas_engine.admission import QueueLimits, TooMuchFromOneClient, check_heavy
from atlas_engine.compute import SLICE_SECONDS, EarliestDeadlineFirst
from atlas_engine.errors import RequestCancelled, ServerBusy

LIMITS = QueueLimits(heavy_jobs=4, heavy_seconds=10.0, per_client_jobs=2, quick_jobs=3)


def held_lane():
    """A lane whose one thread is held by a job until the returned event is set."""
    lane = EarliestDeadlineFirst("atlas-test-lane", lambda: None)
    release, started = threading.Event(), threading.Event()
    lane.submit(lambda: (started.set(), release.wait(10)))
    started.wait(10)
    return lane, release


def test_the_queue_is_bounded_by_count_seconds_and_one_clients_share_of_long_jobs():
    lane, release = held_lane()
    try:
        submit = lambda seconds, client: lane.submit(  # noqa: E731
            lambda: None, seconds=seconds, limits=LIMITS, client=client
        )
        submit(30.0, "a")  # nothing waits yet: a job longer than the bound still gets in
        submit(0.1, "b")  # a's 30 s count as its 5 s share: 5.1 s wait, within the 10 s
        with pytest.raises(ServerBusy) as busy:
            submit(8.0, "c")  # 5.1 s waiting and 8 s more: past the 10 s that may wait
        assert "ATLAS_QUEUE_HEAVY_SECONDS" in busy.value.message
        assert int(busy.value.headers["Retry-After"]) == 6
    finally:
        release.set()

    lane, release = held_lane()
    try:
        for client in ("a", "a"):  # two long jobs (too long to run beside another)
            lane.submit(lambda: None, seconds=1.0, limits=LIMITS, client=client)
        with pytest.raises(TooMuchFromOneClient) as mine:
            lane.submit(lambda: None, seconds=1.0, limits=LIMITS, client="a")
        assert mine.value.status == 429 and "Retry-After" in mine.value.headers
        lane.submit(lambda: None, seconds=0.1, limits=LIMITS, client="a")  # a short one: in
        lane.submit(lambda: None, seconds=1.0, limits=LIMITS, client="b")  # others': in
        with pytest.raises(ServerBusy, match="4 jobs are waiting"):
            lane.submit(lambda: None, seconds=0.1, limits=LIMITS, client="c")
    finally:
        release.set()


def test_one_client_may_hold_half_the_waiting_seconds():
    check_heavy(LIMITS, 4.0, 0, 0.0, 0, 0.0)
    with pytest.raises(TooMuchFromOneClient):
        check_heavy(LIMITS, 4.0, 1, 4.0, 1, 4.0)  # 8 s of one client's: over its 5
    check_heavy(LIMITS, 4.0, 1, 4.0, 0, 0.0)  # another client's 4 s: in


def stepping_job(lane: EarliestDeadlineFirst):
    """A long job that lets short ones run beside it (run_beside) every 10 ms until the returned
    event is set; and an event set once it has started."""
    started, release = threading.Event(), threading.Event()

    def job():
        started.set()
        while not release.wait(0.01):
            lane.run_beside()

    return job, started, release


def test_a_clients_running_long_job_is_charged_to_it_and_another_clients_request_answers():
    """Issue 50: one address sent /heads on two 8,192-token texts; one ran, the other waited,
    counted as 237 s against the 120 s bound (the share check never counted a client's first
    waiting job), and 67 of 67 heavy requests of another address got 503. Now the running job
    is its client's: its second is refused with 429, and the other client's request answers
    while the first's job runs."""
    limits = QueueLimits()  # the defaults: 120 s may wait, 60 s a client
    lane = EarliestDeadlineFirst("atlas-test-lane", lambda: None)
    job, started, release = stepping_job(lane)
    first = lane.submit(job, seconds=237.0, model="m", limits=limits, client="a")
    try:
        assert started.wait(10)
        with pytest.raises(TooMuchFromOneClient) as mine:
            lane.submit(lambda: None, seconds=237.0, model="m", limits=limits, client="a")
        assert mine.value.status == 429 and "waiting or running" in mine.value.message
        assert 230 <= int(mine.value.headers["Retry-After"]) <= 237  # what is left of the first
        sentence = lane.submit(
            lambda: "answered", seconds=0.1, model="m", limits=limits, client="b"
        )
        assert sentence.result(5) == "answered" and not first.done()
        lane.submit(lambda: None, seconds=30.0, model="m", limits=limits, client="b")  # its share
    finally:
        release.set()
    first.result(10)


def test_one_clients_long_job_waiting_counts_as_its_share_not_against_everyone():
    """The same lock-out with the lane busy with someone else's job: one client's one waiting
    job, however long, was counted whole against the bound, so every other client got 503."""
    limits = QueueLimits()
    lane = EarliestDeadlineFirst("atlas-test-lane", lambda: None)
    job, started, release = stepping_job(lane)
    running = lane.submit(job, seconds=20.0, model="m", limits=limits, client="z")
    try:
        assert started.wait(10)
        waiting = lane.submit(lambda: None, seconds=237.0, model="m", limits=limits, client="a")
        for seconds in (0.1, 30.0):  # a sentence, and a long job within the other's share
            lane.submit(lambda: None, seconds=seconds, model="m", limits=limits, client="b")
        with pytest.raises(ServerBusy, match="ATLAS_QUEUE_HEAVY_SECONDS"):  # 60 + 30.1 + 40
            lane.submit(lambda: None, seconds=40.0, model="m", limits=limits, client="c")
    finally:
        release.set()
    running.result(10), waiting.result(10)


def test_a_short_job_runs_beside_a_long_one_at_any_age_of_it(monkeypatch):
    """The running job's deadline was once a bound on who may go beside it: a sentence sent a
    minute into a long head finder then waited for all of it. Now only the slice bounds it."""
    monkeypatch.setattr(compute, "MOST_PASSED_SECONDS", 0.0)  # every deadline long past
    lane = EarliestDeadlineFirst("atlas-test-lane", lambda: None)
    started, queued = threading.Event(), threading.Event()
    order = []

    def long_job():
        started.set()
        queued.wait(10)
        time.sleep(0.05)  # the short job's deadline is now later than the long job's
        for step in range(3):
            order.append(f"long {step}")
            lane.run_beside()

    outer = lane.submit(long_job, seconds=100.0, model="a")
    started.wait(10)
    short = lane.submit(lambda: order.append("short"), seconds=0.01, model="b")
    queued.set()
    outer.result(10), short.result(10)
    assert order == ["long 0", "short", "long 1", "long 2"]


def test_a_flood_of_short_jobs_leaves_the_long_one_most_of_the_lane():
    lane = EarliestDeadlineFirst("atlas-test-lane", lambda: None)
    started, queued = threading.Event(), threading.Event()
    beside = []  # seconds of short jobs run at each step of the long one

    def long_job():
        started.set()
        queued.wait(10)
        for _ in range(3):
            before = lane.nested_seconds
            lane.run_beside()
            beside.append(lane.nested_seconds - before)

    outer = lane.submit(long_job, seconds=100.0, model="a")
    started.wait(10)
    flood = [lane.submit(time.sleep, 0.05, seconds=0.05, model="b") for _ in range(40)]
    queued.set()
    outer.result(30)
    assert all(s < SLICE_SECONDS + 0.1 for s in beside), beside  # a slice each, not all 2 s
    for future in flood:
        future.result(30)


def test_a_queued_job_whose_client_left_is_dropped_before_it_runs():
    lane, release = held_lane()
    left = threading.Event()
    ran = []
    future = lane.submit(lambda: ran.append(1), seconds=1.0, gone=left.is_set)
    staying = lane.submit(lambda: ran.append(2), seconds=1.0, gone=lambda: False)
    left.set()
    assert lane.drop_gone() == 1 and lane.queued() == (1, 1.0)  # out of the queue at once
    with pytest.raises(RequestCancelled):
        future.result(1)
    release.set()
    staying.result(10)
    assert ran == [2]


def test_a_models_first_load_is_counted_once_not_for_every_request_waiting_for_it():
    roomy = QueueLimits(heavy_jobs=64, heavy_seconds=10.0, per_client_jobs=2)
    lane, release = held_lane()
    try:
        for _ in range(10):  # ten requests wait for a model's first load (30 s ordered each)
            lane.submit(lambda: None, seconds=30.0, counted=0.0, limits=roomy, client="a")
        assert lane.queued() == (10, 0.0)
    finally:
        release.set()


def test_a_cancelled_job_leaves_the_queue_at_once():
    lane, release = held_lane()
    try:
        future = lane.submit(lambda: None, seconds=3.0)
        assert lane.queued() == (1, 3.0)
        assert future.cancel()
        assert lane.queued() == (0, 0)
    finally:
        release.set()


def test_at_shutdown_queued_jobs_fail_and_running_ones_stop_at_their_next_step(monkeypatch):
    monkeypatch.setattr(compute, "_shutting_down", threading.Event())  # this test's own flag
    lane, release = held_lane()
    queued = lane.submit(lambda: "never", seconds=1.0)
    monkeypatch.setattr(compute, "_heavy", lane)
    quick = compute.ThreadPoolExecutor(1)
    gate = threading.Event()
    quick.submit(gate.wait, 10)  # its one thread busy: the next job waits in its queue
    waiting = quick.submit(lambda: "never")
    monkeypatch.setattr(compute, "_quick", quick)
    compute.begin_shutdown()
    gate.set()
    assert waiting.cancelled()
    with pytest.raises(compute.ShuttingDown):
        queued.result(1)
    with pytest.raises(ServerBusy, match="shutting down"):
        lane.submit(lambda: None)
    with pytest.raises(compute.ShuttingDown) as stopped:
        compute.between_steps(None, "the blocks")()
    assert stopped.value.status == 503
    release.set()


def test_the_quick_lane_counts_what_waits_for_it(monkeypatch):
    monkeypatch.setattr(compute, "_quick_waiting", 0)
    gate = threading.Event()
    held = [compute._submit_quick(gate.wait, (10,), None, None) for _ in range(2)]  # both threads
    time.sleep(0.1)
    waiting = [compute._submit_quick(lambda: None, (), LIMITS, None) for _ in range(3)]
    with pytest.raises(ServerBusy, match="quick lane"):
        compute._submit_quick(lambda: None, (), LIMITS, None)
    gate.set()
    for future in held + waiting:
        future.result(10)
    assert compute._quick_waiting == 0


def test_waiting_for_a_lane_costs_the_event_loop_nothing_and_a_leaving_client_is_dropped():
    """until_disconnect sleeps in one receive() (the body is read: only a disconnect can come),
    where it once asked is_disconnected() every 50 ms; when the client leaves, its job, still
    queued, is dropped at once and never runs."""
    import asyncio

    from app.api.running import until_disconnect

    class Request:
        def __init__(self):
            self.receives = 0
            self.leave = asyncio.Event()

        async def receive(self):
            self.receives += 1
            await self.leave.wait()
            return {"type": "http.disconnect"}

    async def scenario():
        release = threading.Event()
        blocker = asyncio.create_task(compute.run_on_compute(release.wait, 10))
        await asyncio.sleep(0.05)  # the blocker holds the heavy lane
        request, ran = Request(), []
        waiting = asyncio.create_task(until_disconnect(request, lambda stop: ran.append(1)))
        await asyncio.sleep(1.0)  # a second of waiting for the lane
        receives = request.receives
        request.leave.set()
        with pytest.raises(RequestCancelled):
            await waiting
        release.set()
        await blocker
        return receives, ran

    receives, ran = asyncio.run(scenario())
    assert receives == 1 and ran == []


def test_a_job_on_the_running_jobs_own_text_waits_for_that_pass_instead_of_running_inside():
    """Identical requests share one forward pass: the second waits for the first's. Run inside
    it (between two of its layers) it would find no pass cached yet and compute its own."""
    lane = EarliestDeadlineFirst("atlas-test-lane", lambda: None)
    started, queued = threading.Event(), threading.Event()
    order = []
    same, other = ("m", "the same text", None), ("m", "another text", None)

    def long_job():
        started.set()
        queued.wait(10)
        for step in range(2):
            order.append(f"pass {step}")
            lane.run_beside()

    outer = lane.submit(long_job, seconds=10.0, model="m", text=same)
    started.wait(10)
    twin = lane.submit(lambda: order.append("same text"), seconds=0.01, model="m", text=same)
    short = lane.submit(lambda: order.append("other text"), seconds=0.01, model="m", text=other)
    queued.set()
    outer.result(10), twin.result(10), short.result(10)
    assert order == ["pass 0", "other text", "pass 1", "same text"]
