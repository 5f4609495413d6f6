"""The whole simulated server (pagegate.sim.node), pure: the front end in front of the
engines, the queue cap checked twice, data-parallel routing, gauges one step late.

The profile makes the arithmetic checkable: the loop reads a request in 1 s, the executor
preprocesses its image in 2 s (half speed while both work), a scrape costs 0.5 s of loop;
an engine step lasts 1 s and prefill is instant.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pagegate.sim.frontend import FrontEndProfile
from pagegate.sim.node import NodeModel
from pagegate.sim.profiles import ServerProfile, get_server_profile
from pagegate.sim.records import EngineDeadError, QueueFullError

FE = FrontEndProfile(loop_base_s=1.0, loop_s_per_mb=0.0, mm_base_s=2.0, mm_s_per_mpx=0.0,
                     scrape_s=0.5)
INSTANT = FrontEndProfile(loop_base_s=0.0, loop_s_per_mb=0.0, mm_base_s=0.0, mm_s_per_mpx=0.0,
                          scrape_s=0.0)


def profile(**changes: object) -> ServerProfile:
    base = ServerProfile(
        name="tiny", gpu="test", num_gpu_blocks=64, block_size=4, max_num_seqs=4,
        max_num_batched_tokens=64, max_model_len=64, step_base_s=1.0, step_per_seq_s=0.0,
        prefill_tokens_per_s=1e12, host_mb_per_request=1.0, host_mem_limit_mb=None,
        crash_waiting=None, frontend=FE,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def drain(node: NodeModel) -> None:
    while (at := node.next_event_at()) is not None:
        node.advance(at)


def test_a_request_in_the_front_end_is_in_no_gauge() -> None:
    # Read [0, 1], preprocessed [1, 3], in the engine from 3: prefill step [3, 4], two
    # decode steps, done at 6. The engine's gauges show it only from the end of its first
    # step (4), and it finishes 6 s after the client sent it.
    node = NodeModel(profile())
    node.submit("r1", 4, 3, 3, 0.0)
    rows = []
    for t in (2.9, 3.5, 4.5, 6.5):
        node.advance(t)
        s = node.snapshot()
        e = s.engines[0]
        rows.append((t, s.in_front_end, e.running, e.reported_running))
    assert rows == [(2.9, 1, 0, 0), (3.5, 0, 1, 0), (4.5, 0, 1, 1), (6.5, 0, 0, 0)]
    node = NodeModel(profile())
    node.submit("r1", 4, 3, 3, 0.0)
    [done] = [d for at in iter(node.next_event_at, None) for d in node.advance(at)]
    assert (done.arrived_at, done.first_token_at, done.finished_at) == pytest.approx((0, 4, 6))
    # vLLM's latency histograms: 3 s of the 6 in the front end, none queued in the engine.
    totals = {name: round(total, 6) for name, (total, _) in node.snapshot().latency_totals.items()}
    assert totals == {"e2e_request_latency": 6.0, "request_queue_time": 0.0,
                      "request_inference_time": 3.0, "request_prefill_time": 1.0,
                      "request_decode_time": 2.0}


def test_the_queue_cap_is_checked_again_after_the_image_work() -> None:
    # Cap 1: r1 and r2 both pass the first check (nothing is in the engine yet); r1 reaches
    # the engine at 4 s, so r2, preprocessed by 6 s, is refused then: 503 after its work.
    node = NodeModel(profile(max_num_queued_reqs=1))
    node.submit("r1", 4, 3, 3, 0.0)
    node.submit("r2", 4, 3, 3, 0.0)
    finished, refused = [], []
    while (at := node.next_event_at()) is not None:
        finished += [(d.req_id, round(d.finished_at, 6)) for d in node.advance(at)]
        refused += [(r.req_id, r.at, r.status) for r in node.take_refused()]
    assert refused == [("r2", 6.0, 503)]
    assert finished == [("r1", 7.0)]
    assert node.snapshot().admission_rejections == {"max_num_queued_reqs": 1,
                                                    "max_num_queued_tokens": 0}


def test_the_first_check_refuses_before_any_image_work() -> None:
    # r1 is in the engine from 3 s to 6 s; r2 arrives at 3.5 and is read by 4.5, when the
    # cap is full: refused at once, its image never processed (r3 is read and preprocessed
    # on an idle front end right after).
    node = NodeModel(profile(max_num_queued_reqs=1))
    node.submit("r1", 4, 3, 3, 0.0)
    node.advance(3.5)
    node.submit("r2", 4, 3, 3, 3.5)
    node.advance(4.6)
    assert [(r.req_id, r.at, r.status) for r in node.take_refused()] == [("r2", 4.5, 503)]
    node.submit("r3", 4, 3, 3, 5.5)
    drain(node)
    assert node.take_refused() == []  # r1 is done (6 s) before r3 is read (6.5 s)


def test_without_a_front_end_the_cap_refuses_at_once() -> None:
    node = NodeModel(profile(frontend=None, max_num_queued_reqs=2))
    node.submit("a", 4, 3, 3, 0.0)
    node.submit("b", 4, 3, 3, 0.0)
    with pytest.raises(QueueFullError):
        node.submit("c", 4, 3, 3, 0.0)
    assert node.unfinished() == 2


def test_data_parallel_engines_take_turns_by_load() -> None:
    node = NodeModel(profile(frontend=INSTANT, data_parallel_size=2))
    for i in range(5):
        node.submit(f"r{i}", 4, 10, 10, 0.0)
    node.advance(0.0)
    assert [len(e.in_flight()) for e in node.engines] == [3, 2]
    # r2..r4 arrived during their engine's first step: in no gauge until the second ends.
    rows = []
    for t in (0.5, 1.5, 2.5):
        node.advance(t)
        s = node.snapshot()
        rows.append([(e.running, e.waiting, e.reported_running) for e in s.engines])
    assert rows == [[(1, 2, 0), (1, 1, 0)], [(3, 0, 1), (2, 0, 1)], [(3, 0, 3), (2, 0, 2)]]


def test_host_memory_counts_requests_still_in_the_front_end() -> None:
    node = NodeModel(profile(host_mb_per_request=10.0, host_mem_limit_mb=25.0))
    node.submit("a", 4, 3, 3, 0.0)
    node.submit("b", 4, 3, 3, 0.0)
    assert not node.crashed and node.snapshot().host_mem_mb == 20.0
    node.submit("c", 4, 3, 3, 0.0)
    assert node.crashed and "host memory 30 MB > 25 MB" in (node.crash_reason or "")
    with pytest.raises(EngineDeadError):
        node.submit("d", 4, 3, 3, 0.0)


def test_one_engine_dying_kills_the_server() -> None:
    node = NodeModel(profile(frontend=INSTANT, data_parallel_size=2, max_num_seqs=1,
                             crash_waiting=1))
    for i in range(5):
        node.submit(f"r{i}", 4, 10, 10, 0.0)
        node.advance(0.0)
    assert node.crashed
    assert all(e.crashed for e in node.engines)
    assert node.next_event_at() is None


@pytest.mark.parametrize(("ahead", "answered_at"), [(0, 0.5), (1, 2.0), (2, 4.0), (3, 6.0)])
def test_a_scrape_answers_after_the_requests_ahead_of_it(ahead: int, answered_at: float) -> None:
    node = NodeModel(profile())
    for i in range(ahead):
        node.submit(f"r{i}", 4, 3, 3, 0.0)
    node.probe("scrape", 0.0)
    answered: list[tuple[str, float]] = []
    while (at := node.next_event_at()) is not None and not answered:
        node.advance(at)
        answered += node.take_answered()
    assert answered == [("scrape", answered_at)]


def test_an_aborted_request_leaves_the_front_end_and_the_engine() -> None:
    node = NodeModel(profile())
    node.submit("a", 4, 30, 30, 0.0)
    node.submit("b", 4, 30, 30, 0.0)
    node.advance(5.0)  # a in the engine (4 s), b's image in progress
    assert node.abort("a", 5.0) and node.abort("b", 5.0)
    assert not node.abort("a", 5.0)
    drain(node)
    s = node.snapshot()
    assert (s.in_front_end, s.running, s.waiting) == (0, 0, 0)
    assert s.engines[0].request_success_total["abort"] == 1  # b never reached the engine
    assert node.frontend is not None and node.frontend.open_requests() == [0]


def test_a_hung_server_still_answers_probes() -> None:
    node = NodeModel(profile())
    node.hang(0.0)
    node.submit("a", 4, 3, 3, 0.0)
    node.probe("health", 0.0, scrape=False)
    drain(node)
    assert node.take_answered() == [("health", 1.0)]  # behind a's body on the loop
    s = node.snapshot()
    assert (s.in_front_end, s.engines[0].waiting, s.engines[0].generation_tokens_total) == (0, 1, 0)


def test_profiles_front_ends_and_the_binding_one() -> None:
    dp8 = get_server_profile("h100-dp8")
    assert dp8.frontend is not None and dp8.frontend.api_server_count == 1
    assert dp8.data_parallel_size == 8
    node = NodeModel(dp8)
    assert len(node.engines) == 8
    # One API server preprocesses ~20 olmOCR pages/s, below the ~45 its 8 engines serve.
    assert 18 < dp8.frontend.pages_per_s(180_000, 996 * 1288) < 23


@pytest.mark.parametrize(("contention", "finished"), [
    ((1.0, 1.0), {"r1": 7.0, "r2": 9.0}),
    # While r2's image is processed (until 8 s, at half speed from 4 s) and r1 decodes, each
    # slows down 2x: r1's steps after its first take 2 s, r2 is ready at 8 s, not 6.
    ((2.0, 2.0), {"r1": 9.0, "r2": 12.0}),
])
def test_a_shared_cpu_slows_the_engine_and_the_front_end_while_both_work(
    contention: tuple[float, float], finished: dict[str, float]
) -> None:
    node = NodeModel(profile(cpu_contention=contention))
    node.submit("r1", 4, 3, 3, 0.0)
    node.submit("r2", 4, 3, 3, 0.0)
    done = {d.req_id: round(d.finished_at, 6) for at in iter(node.next_event_at, None)
            for d in node.advance(at)}
    assert done == finished


def test_a_shared_cpu_does_not_slow_work_that_does_not_overlap() -> None:
    node = NodeModel(profile(cpu_contention=(2.0, 2.0)))
    node.submit("r1", 4, 3, 3, 0.0)
    [done] = [d for at in iter(node.next_event_at, None) for d in node.advance(at)]
    assert done.finished_at == pytest.approx(6.0)  # read, preprocessed, decoded in turn


def test_host_memory_kills_an_engine_only_server_too() -> None:
    node = NodeModel(profile(frontend=None, host_mb_per_request=10.0, host_mem_limit_mb=15.0))
    node.submit("a", 4, 3, 3, 0.0)
    node.submit("b", 4, 3, 3, 0.0)
    assert node.crashed and all(e.crashed for e in node.engines)


@pytest.mark.parametrize(("pause_at", "resume_at", "scrape_at", "finished_at"), [
    # r1 read [0, 1]; the scrape waits behind it on the loop and shares the process with
    # r1's image work: answered at 2. The image is done at 3.5, the engine at 6.5.
    (None, None, 2.0, 6.5),
    (0.5, 5.5, 7.0, 11.5),  # while r1's body is read: everything 5 s later
    (1.2, 6.2, 7.0, 11.5),  # while the scrape and the image share the process: the same
    (3.5, 13.5, 2.0, 6.5),  # r1 already in the engine: the engine does not wait
])
def test_a_stalled_front_end_holds_bodies_images_and_scrapes(
    pause_at: float | None, resume_at: float | None, scrape_at: float, finished_at: float
) -> None:
    node = NodeModel(profile())
    node.submit("r1", 4, 3, 3, 0.0)
    node.probe("scrape", 0.0)
    if pause_at is not None and resume_at is not None:
        node.pause_front_end(pause_at)
        assert node.frontend is not None and not node.frontend.busy
        node.resume_front_end(resume_at)
    done = node.advance(node.now)
    answered = node.take_answered()
    while (at := node.next_event_at()) is not None:
        done += node.advance(at)
        answered += node.take_answered()
    assert [(name, round(at, 6)) for name, at in answered] == [("scrape", scrape_at)]
    assert [d.finished_at for d in done] == [pytest.approx(finished_at)]


def test_paused_engines_behind_a_working_front_end() -> None:
    # r1 reaches the engine at 3 (read [0, 1], image [1, 3]). The engines freeze at 3.5,
    # half-way through its prefill step [3, 4]; the front end still answers scrapes, with
    # the gauges as they were. Resumed at 14: that step ends at 14.5, r1 at 16.5.
    node = NodeModel(profile())
    node.submit("r1", 4, 3, 3, 0.0)
    node.pause_engines(3.5)
    node.probe("scrape", 5.0)
    node.advance(13.0)
    assert [(name, round(at, 6)) for name, at in node.take_answered()] == [("scrape", 5.5)]
    s = node.snapshot()
    assert (s.running, s.engines[0].reported_running, s.engines[0].steps_total) == (1, 0, 0)
    node.resume_engines(14.0)
    done = [d for at in iter(node.next_event_at, None) for d in node.advance(at)]
    assert [d.finished_at for d in done] == [pytest.approx(16.5)]
