"""The simulated API front end (pagegate.sim.frontend), pure: hand-computed event tables.

The test profile makes the arithmetic checkable: reading a request takes the loop 1 s,
its image takes the executor 2 s, a scrape takes the loop 0.5 s, and while the loop and
the executor both have work each runs at half speed (they share one GIL).
"""

from __future__ import annotations

import pytest

from pagegate.sim.frontend import NAMED_SCRAPE_SHARE, FrontEnd, FrontEndEvent, FrontEndProfile, Kind

PROFILE = FrontEndProfile(loop_base_s=1.0, loop_s_per_mb=0.0, mm_base_s=2.0, mm_s_per_mpx=0.0,
                          scrape_s=0.5, busy_share=0.5)


def run(fe: FrontEnd) -> list[tuple[float, str, str]]:
    """Every event until the front end is idle, as (time, kind, id)."""
    events: list[tuple[float, str, str]] = []
    while fe.next_event_at() is not None:
        event = fe.complete_next()
        if event is not None:
            events.append((event.at, event.kind.value, event.item_id))
    return events


def burst(n: int, profile: FrontEndProfile = PROFILE, *, scrape: bool = False) -> FrontEnd:
    fe = FrontEnd(profile)
    for i in range(n):
        fe.arrive(f"r{i + 1}", body_bytes=0, pixels=0, now=0.0)
    if scrape:
        fe.probe("scrape", now=0.0)
    return fe


def test_one_request_is_read_then_preprocessed_then_handed_over() -> None:
    assert run(burst(1)) == [(1.0, "parsed", "r1"), (3.0, "ready", "r1")]


def test_the_loop_and_the_executor_share_the_process() -> None:
    # r2 is read while r1's image is processed: both at half speed over [1, 3]; then r1's
    # last second alone, r2's image after it.
    assert run(burst(2)) == [
        (1.0, "parsed", "r1"), (3.0, "parsed", "r2"), (4.0, "ready", "r1"), (6.0, "ready", "r2"),
    ]


def test_a_scrape_waits_behind_the_bodies_the_loop_has_to_read_first() -> None:
    # The scrape is queued after r1..r3: it starts at 5 s and takes 1 s (half speed); r1's
    # handover, queued behind it, comes right after.
    assert run(burst(3, scrape=True)) == [
        (1.0, "parsed", "r1"), (3.0, "parsed", "r2"), (5.0, "parsed", "r3"),
        (6.0, "answered", "scrape"), (6.0, "ready", "r1"), (7.5, "ready", "r2"),
        (9.5, "ready", "r3"),
    ]


def test_a_scrape_of_named_samples_costs_the_loop_a_share_of_a_whole_page() -> None:
    fe = FrontEnd(PROFILE)
    fe.probe("named", now=0.0, named=True)
    fe.probe("whole", now=0.0)
    cut = 0.5 * NAMED_SCRAPE_SHARE
    assert run(fe) == [(cut, "answered", "named"), (cut + 0.5, "answered", "whole")]


@pytest.mark.parametrize(("requests_ahead", "answered_at"), [(0, 0.5), (1, 2.0), (2, 4.0), (3, 6.0)])
def test_scrape_latency_grows_with_the_burst_in_front_of_it(requests_ahead: int,
                                                            answered_at: float) -> None:
    answered = [t for t, kind, _ in run(burst(requests_ahead, scrape=True)) if kind == "answered"]
    assert answered == [answered_at]


@pytest.mark.parametrize("n", [2, 3, 10, 50])
def test_a_burst_leaves_at_the_saturated_rate(n: int) -> None:
    # Every request costs 1 s / 0.5 of loop (shared) + the rest of its 2 s image alone:
    # 3 s a request, which is what pages_per_s says; the first starts 1 s in at full speed.
    assert PROFILE.pages_per_s(0, 0) == pytest.approx(1 / 3)
    ready = [t for t, kind, _ in run(burst(n)) if kind == "ready"]
    assert ready[-1] == pytest.approx(3.0 * n)


def test_pages_per_s_of_the_gpu_front_end_matches_its_source() -> None:
    from pagegate.sim.profiles import GPU_FRONT_END

    # vLLM #58266: 14.0 pages/s of 1275x1650 PNGs (218 KB, ~0.29 MB of body) per API server.
    assert GPU_FRONT_END.pages_per_s(290_000, 1275 * 1650) == pytest.approx(14.0, abs=0.1)


def test_requests_go_to_the_least_loaded_process() -> None:
    fe = FrontEnd(FrontEndProfile(loop_base_s=1.0, loop_s_per_mb=0.0, mm_base_s=2.0,
                                  mm_s_per_mpx=0.0, scrape_s=0.5, api_server_count=2))
    taken = [fe.arrive(f"r{i}", body_bytes=0, pixels=0, now=0.0) for i in range(3)]
    assert taken == [0, 1, 0]
    fe.answered("r1")  # process 1's request got its answer: it is the least loaded now
    assert fe.probe("scrape", now=0.0) == 1
    assert fe.open_requests() == [2, 1]


def test_two_processes_work_in_parallel() -> None:
    fe = FrontEnd(FrontEndProfile(loop_base_s=1.0, loop_s_per_mb=0.0, mm_base_s=2.0,
                                  mm_s_per_mpx=0.0, scrape_s=0.5, api_server_count=2))
    for i in (1, 2):
        fe.arrive(f"r{i}", body_bytes=0, pixels=0, now=0.0)
    assert run(fe) == [(1.0, "parsed", "r1"), (1.0, "parsed", "r2"),
                       (3.0, "ready", "r1"), (3.0, "ready", "r2")]


def test_costs_grow_with_the_body_and_the_pixels() -> None:
    profile = FrontEndProfile(loop_base_s=0.005, loop_s_per_mb=0.02, mm_base_s=0.002,
                              mm_s_per_mpx=0.03, scrape_s=0.006)
    assert profile.parse_s(500_000) == pytest.approx(0.015)
    assert profile.mm_s(2_000_000) == pytest.approx(0.062)
    fe = FrontEnd(profile)
    fe.arrive("r", body_bytes=500_000, pixels=2_000_000, now=0.0)
    [(parsed, _, _), (ready, _, _)] = run(fe)
    assert (parsed, ready) == pytest.approx((0.015, 0.077))


def test_a_dropped_request_leaves_no_event_but_its_running_work_finishes() -> None:
    # r1's image has been processed since 1 s when it is dropped at 1.5 s: the thread runs it
    # to its end (5 s, r2 and r3 being read meanwhile), so r2 is ready at 7 s as if r1 had
    # stayed. r2 dropped while queued for the executor costs nothing: r3's image goes
    # right after r1's.
    fe = burst(3)
    events: list[FrontEndEvent] = []
    while (at := fe.next_event_at()) is not None and at <= 1.5:
        event = fe.complete_next()
        assert event is not None
        events.append(event)
    fe.drop("r1", 1.5)
    rest = run(fe)
    assert [(e.at, e.kind) for e in events] == [(1.0, Kind.PARSED)]
    assert ("ready", "r1") not in [(k, i) for _, k, i in rest]
    assert (7.0, "ready", "r2") in rest

    fe = burst(3)
    while (at := fe.next_event_at()) is not None and at <= 3.0:
        fe.complete_next()
    fe.drop("r2", 3.0)  # read, queued behind r1's image
    assert [(t, i) for t, k, i in run(fe) if k == "ready"] == [(5.0, "r1"), (7.0, "r3")]


def test_in_front_end_counts_requests_until_they_are_handed_over() -> None:
    fe = burst(2)
    assert fe.in_front_end() == 2
    seen = []
    while fe.next_event_at() is not None:
        event = fe.complete_next()
        if event is not None:
            seen.append((event.kind, fe.in_front_end()))
    assert seen == [(Kind.PARSED, 2), (Kind.PARSED, 2), (Kind.READY, 1), (Kind.READY, 0)]


def test_time_cannot_pass_an_event_or_go_back() -> None:
    fe = burst(1)
    fe.advance(0.5)
    with pytest.raises(ValueError, match="due"):
        fe.advance(2.0)
    with pytest.raises(ValueError, match="back"):
        fe.advance(0.1)
    with pytest.raises(ValueError, match="already"):
        fe.arrive("r1", body_bytes=0, pixels=0, now=0.5)


@pytest.mark.parametrize("bad", [{"loop_base_s": -1.0}, {"busy_share": 0.0}, {"busy_share": 1.5},
                                 {"api_server_count": 0}, {"mm_s_per_mpx": float("nan")}])
def test_profile_validation(bad: dict[str, float]) -> None:
    values: dict[str, float] = {"loop_base_s": 1.0, "loop_s_per_mb": 0.0, "mm_base_s": 1.0,
                                "mm_s_per_mpx": 0.0, "scrape_s": 0.1, **bad}
    with pytest.raises(ValueError):
        FrontEndProfile(**values)  # type: ignore[arg-type]
