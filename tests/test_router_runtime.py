"""The Router over real Gates and FixedLimits: a fake clock, scripted metrics, no sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from pagegate.admission import FixedLimit, Gate, GateConfig, MetricsError, Outcome, Reading
from pagegate.admission.base import Admission
from pagegate.admission.router import RoutedPermit, Router
from pagegate.clock import FakeClock, settle
from pagegate.errors import CapacityError, ServerUnavailableError

SAFETY_SECONDS = 10.0  # wall-clock guard: a regression fails instead of hanging the suite


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def guarded() -> None:
        async with asyncio.timeout(SAFETY_SECONDS):
            await scenario()

    asyncio.run(guarded())


class Metrics:
    """A server's /metrics as the test steers it: an idle healthy server, or refusing."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.down = False

    async def __call__(self) -> Reading:
        if self.down:
            raise MetricsError("scripted: connection refused")
        return Reading(waiting=0, running=0, kv_usage=0.0, at=self.clock.now())


class Pages:
    """Page workers holding router permits until the test lets them finish."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.server: dict[int, str] = {}
        self.errors: dict[int, BaseException] = {}
        self._release: dict[int, asyncio.Future[Outcome]] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, n: int) -> list[int]:
        ids = []
        for _ in range(n):
            i = len(self.tasks)
            self._release[i] = asyncio.get_running_loop().create_future()
            self.tasks.append(asyncio.create_task(self._work(i)))
            ids.append(i)
        return ids

    async def _work(self, i: int) -> None:
        try:
            async with self.router.slot("g") as permit:
                assert isinstance(permit, RoutedPermit)
                self.server[i] = permit.server_url
                outcome = await self._release[i]
                if outcome is Outcome.CAPACITY:
                    raise CapacityError("scripted: refused")
                permit.finish(outcome)
        except Exception as exc:
            self.errors[i] = exc

    def finish(self, *ids: int, outcome: Outcome = Outcome.OK) -> None:
        for i in ids:
            self._release[i].set_result(outcome)

    def on(self, url: str) -> list[int]:
        return sorted(i for i, s in self.server.items() if s == url)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def assigned(router: Router) -> list[int]:
    return [s["assigned"] for s in router.snapshot()["servers"]]


def test_pages_spread_to_the_least_loaded_server() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        backends: list[tuple[str, Admission]] = [("a", FixedLimit(2)), ("b", FixedLimit(4))]
        async with Router(backends, clock=clock) as router:
            pages = Pages(router)
            pages.start(6)
            await settle()
            # a holds 2 of 2, b 4 of 4: load in proportion to each server's limit
            assert (len(pages.on("a")), len(pages.on("b"))) == (2, 4)
            pages.start(3)
            await settle()
            assert assigned(router) == [3, 6], "waiting pages queue in the same proportion"
            pages.finish(*pages.on("a"))
            await settle()
            assert len(pages.on("a")) == 3 and not pages.errors
            await pages.stop()
            await settle()
            assert assigned(router) == [0, 0], "cancelled pages leave no count behind"

    run(scenario)


def test_refusals_take_a_server_out_until_its_probation_ends() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        backends: list[tuple[str, Admission]] = [("a", FixedLimit(8)), ("b", FixedLimit(8))]
        async with Router(backends, clock=clock, refuse_limit=2, probation_seconds=5.0) as router:
            pages = Pages(router)
            first = pages.start(2)
            await settle()
            assert sorted(pages.server.values()) == ["a", "b"]
            on_a = pages.on("a")
            pages.finish(*on_a, outcome=Outcome.CAPACITY)
            pages.start(1)
            await settle()
            pages.finish(*[i for i in pages.on("a") if i not in first], outcome=Outcome.CAPACITY)
            await settle()
            assert not router.snapshot()["servers"][0]["in_rotation"], "two refusals in a row"
            later = pages.start(4)
            await settle()
            assert all(pages.server[i] == "b" for i in later), "b takes it all, however busy"
            await clock.advance(5.0)
            back = pages.start(1)
            await settle()
            assert router.snapshot()["servers"][0]["in_rotation"]
            assert pages.server[back[0]] == "a", "back after its probation, and least loaded"
            await pages.stop()

    run(scenario)


def test_pages_queued_at_a_server_that_goes_down_are_routed_again() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        config = GateConfig(max_in_flight_pages=1, initial_concurrency=1,
                            stale_after_seconds=3.0, unavailable_after_seconds=600.0)
        metrics = {name: Metrics(clock) for name in ("a", "b")}
        async with (
            Gate(config, metrics["a"], clock) as gate_a,
            Gate(config, metrics["b"], clock) as gate_b,
            Router([("a", gate_a), ("b", gate_b)], clock=clock) as router,
        ):
            await clock.advance(1.0)  # first scrapes: both in rotation
            pages = Pages(router)
            held = pages.start(2)
            await clock.advance(1.0)
            assert sorted(pages.server[i] for i in held) == ["a", "b"]
            queued = pages.start(2)
            await clock.advance(0.5)
            assert assigned(router) == [2, 2] and not set(queued) & set(pages.server)
            metrics["a"].down = True
            [on_b] = pages.on("b")
            pages.finish(on_b)  # b's one slot goes to the page queued there; a stays full
            await clock.advance(5.0)  # a's readings go stale: its gate pauses
            snapshot = router.snapshot()
            assert not snapshot["servers"][0]["in_rotation"]
            assert snapshot["servers"][0]["rerouted"] == 1, "the page waiting at a moved on"
            [now_on_b] = [i for i in queued if pages.server.get(i) == "b"]
            pages.finish(now_on_b)
            for _ in range(4):
                await clock.advance(1.0)
            assert {pages.server.get(i) for i in queued} == {"b"}, "both served by b"
            assert assigned(router) == [1, 1], "a keeps only the page in flight on it"
            assert not pages.errors
            await pages.stop()

    run(scenario)


def test_no_server_in_rotation_fails_waiting_pages_after_the_deadline() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        metrics = Metrics(clock)
        metrics.down = True
        config = GateConfig(stale_after_seconds=3.0, unavailable_after_seconds=None)
        async with (
            Gate(config, metrics, clock) as gate,
            Router([("a", gate)], clock=clock, unavailable_after_seconds=30.0) as router,
        ):
            pages = Pages(router)
            pages.start(1)
            await clock.advance(29.0)
            assert not pages.errors, "waits while the deadline has not passed"
            metrics.down = False
            await clock.advance(2.0)
            assert pages.server == {0: "a"}, "a server back in time gets the page"
            metrics.down = True
            pages.finish(0)
            await clock.advance(4.0)  # stale: out of rotation again
            late = pages.start(1)
            await clock.advance(29.0)
            assert late[0] not in pages.errors
            for _ in range(3):
                await clock.advance(1.0)
            assert isinstance(pages.errors.get(late[0]), ServerUnavailableError)
            await pages.stop()

    run(scenario)


def test_a_router_needs_servers() -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError):
            Router([])

    run(scenario)
