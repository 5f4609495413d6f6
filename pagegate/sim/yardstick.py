"""The yardstick: the best an admission could do on this engine, computed, never tuned.

For one engine, one workload and one seed it is the best of:
- a closed-loop sweep: keep `c` pages in flight, a new page the moment one comes back,
  for `c` on a doubling grid within slots/16 ... 64 x slots, then refined around the
  best (ratios 2^(1/4), then 2^(1/8)). The grid is walked up from the slot count, then
  down from it; each way stops once two points in a row crash or gain less than `GAIN`
  over the best so far (past the best, more in flight only queues; fewer only idles);
- the deep queue: every page at once.
A run that kills the server is not a candidate, nor one that collapses under the
client's request timeout (`COLLAPSE_SHARE`), nor one the server refuses (the queue cap's
503): such a loop holds more than the server takes, and what it gains over the loops
below it comes from which pages the refusals put back in line, not from its size (on
family-0-24, x92 +2.0 %, x100 +2.5 %, x109 -0.3 % over x77, the last loop refused
nothing). "Best" is the shortest time to the last
page. The gate's utilization is its pages/s over the yardstick's, on the same pages.

The loops run on the pure `NodeModel` (no asyncio, no HTTP), fed each page's exact costs:
the prompt tokens, output tokens, body size and pixels that the simulator's app derives
from the request `PageOcr` sends for that page (`page_costs`). The virtual HTTP world
adds no time of its own, so a closed loop here and `FixedLimit(c)` through run_virtual
finish together (tests/test_sim_virtual.py holds them to it). What a client does on a
capacity error is copied too: a request older than the client's timeout is aborted and
sent again; a refused one (the queue cap's 503) goes again when the next page returns.
So is olmOCR's retry of a reply cut off at max_tokens: the page goes again as a fresh
sample, behind the pages already waiting (its next attempt waits for a permit like them),
up to `MAX_ATTEMPTS` times; only then does it count as done.
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pagegate.config import RunConfig
from pagegate.ocr.attempts import AttemptPlan
from pagegate.sim.chat import parse_chat_body
from pagegate.sim.node import NodeModel
from pagegate.sim.profiles import ServerProfile
from pagegate.sim.synthetic import SyntheticRenderer, blank_page_png
from pagegate.sim.virtual import Workload
from pagegate.sim.workload import output_tokens, prompt_tokens
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile

GRID_LOW, GRID_HIGH = 1 / 16, 64.0
"""The sweep's span, as multiples of the engine's slots (data-parallel engines x max_num_seqs)."""
GRID_STEP = 2.0
REFINE_STEP = 2 ** 0.25
FINE_STEP = 2 ** 0.125
GAIN = 1.01
COLLAPSE_SHARE = 0.25
"""A loop whose requests time out more often than this share of its pages has collapsed:
each one aborted goes back behind a queue that outlasts the client's timeout, and a page
longer than the load allows never finishes. It is no candidate and is not run to its end
(left to run, the 749-slot family-0-60 at 749 in flight ran for minutes of CPU)."""
MAX_ATTEMPTS = RunConfig.max_page_retries
"""Attempts per page, as the page path makes them: a reply cut off at max_tokens is sent
again, and after this many the page falls back to its text layer."""


@dataclass(frozen=True)
class PageCost:
    """What one page costs the server, as the simulator's app prices its request."""

    prompt_tokens: int
    max_tokens: int
    body_bytes: int
    pixels: int
    seed: int
    digest: str
    output_scale: float

    def output_tokens(self, sample: int = 0) -> int:
        """What the page writes after `sample` replies cut off at max_tokens (app.py)."""
        return output_tokens(self.seed, self.digest, self.output_scale, sample)


def page_costs(
    workload: Workload, server: ServerProfile, served_model_name: str = "olmocr"
) -> list[PageCost]:
    """Every page's request, in hand-over order, priced as app.py prices it on `server`
    (its output scale; a page cut off at max_tokens is sampled anew)."""
    profile = get_profile(DEFAULT_PROFILE)
    temperature = AttemptPlan.start(profile, RunConfig.max_page_retries).current.temperature
    renderer = SyntheticRenderer(blank_page_png(*workload.page_px))
    costs: list[PageCost] = []
    for group in workload.groups():
        data = group.document.source.data or b""
        for index in range(group.document.page_count):
            body = build_chat_request(profile, model=served_model_name,
                                      image_png=renderer.page_png(data, index),
                                      temperature=temperature)
            raw = json.dumps(body, separators=(",", ":")).encode()
            page = parse_chat_body(body)
            prompt = prompt_tokens(page.width, page.height, page.text_chars)
            costs.append(PageCost(prompt, page.max_tokens or 1, len(raw), page.width * page.height,
                                  workload.seed, page.digest, server.output_scale))
    return costs


@dataclass(frozen=True)
class ClosedLoop:
    """One closed loop's result; `concurrency` None is the deep queue."""

    concurrency: int | None
    elapsed_s: float
    pages: int
    crashed: bool
    preemptions: int
    peak_waiting: int
    collapsed: bool = False
    """Stopped because its timeouts passed `COLLAPSE_SHARE` of the pages."""
    refused: int = 0
    """Requests the server refused (the queue cap's 503)."""

    @property
    def pages_per_s(self) -> float:
        """Pages/s, or 0 for a run that is no candidate (module docstring)."""
        if self.crashed or self.collapsed or self.refused or self.elapsed_s <= 0:
            return 0.0
        return self.pages / self.elapsed_s

    @property
    def label(self) -> str:
        return "deep queue" if self.concurrency is None else f"closed loop x{self.concurrency}"


def closed_loop(
    profile: ServerProfile,
    costs: Sequence[PageCost],
    concurrency: int | None,
    *,
    request_timeout_s: float | None = RunConfig.request_timeout_seconds,
    stop_after_s: float | None = None,
) -> ClosedLoop:
    """Keep `concurrency` pages in flight (None: all of them) until every page is done.

    `stop_after_s`: give up at that virtual time (the best loop so far had finished by
    then, so this one cannot be the best); the result then counts only the pages done."""
    model = NodeModel(profile, start=0.0)
    limit = len(costs) if concurrency is None else concurrency
    pending: deque[int] = deque(range(len(costs)))
    open_requests: dict[str, int] = {}
    cut_off: set[str] = set()  # requests whose sample reaches max_tokens: a "length" stop
    length_stops = [0] * len(costs)  # per page: its next request's sample number
    deadlines: list[tuple[float, str]] = []
    done = 0
    last_done = 0.0
    serial = 0

    def send(now: float) -> None:
        nonlocal serial
        while pending and len(open_requests) < limit and not model.crashed:
            page = pending.popleft()
            cost = costs[page]
            req_id = f"r{serial}"
            serial += 1
            output = cost.output_tokens(length_stops[page])
            if output >= cost.max_tokens:
                cut_off.add(req_id)
            model.submit(req_id, cost.prompt_tokens, output, cost.max_tokens, now,
                         body_bytes=cost.body_bytes, pixels=cost.pixels)
            open_requests[req_id] = page
            if request_timeout_s is not None:
                heapq.heappush(deadlines, (now + request_timeout_s, req_id))

    send(0.0)
    timeouts = refusals = 0
    # A refusal ends the loop: it is no candidate (module docstring).
    while (not model.crashed and done < len(costs) and not refusals
           and timeouts <= COLLAPSE_SHARE * len(costs)):
        while deadlines and deadlines[0][1] not in open_requests:
            heapq.heappop(deadlines)
        at = model.next_wake_at()
        timed_out = bool(deadlines) and (at is None or deadlines[0][0] < at)
        next_at = deadlines[0][0] if timed_out else at
        if next_at is None:
            break
        if stop_after_s is not None and next_at > stop_after_s:
            # Nothing happens before next_at: rate the loop over the whole span.
            model.advance(max(stop_after_s, model.now))
            break
        if timed_out:
            give_up_at, req_id = heapq.heappop(deadlines)
            model.advance(give_up_at)
            model.abort(req_id, give_up_at)
            pending.appendleft(open_requests.pop(req_id))
            timeouts += 1
            send(give_up_at)
            continue
        returned = False
        for finished in model.advance(next_at):
            page = open_requests.pop(finished.req_id, None)
            if page is None:
                continue
            returned = True
            if finished.req_id in cut_off and length_stops[page] + 1 < MAX_ATTEMPTS:
                length_stops[page] += 1  # the next attempt queues behind the waiting pages
                pending.append(page)
                continue
            done += 1
            last_done = finished.finished_at
        for refused in model.take_refused():
            pending.appendleft(open_requests.pop(refused.req_id))
            refusals += 1
        if returned or not open_requests:  # a refused page goes again when one returns
            send(next_at)
    snapshot = model.snapshot()
    collapsed = timeouts > COLLAPSE_SHARE * len(costs)
    crashed = model.crashed or (done < len(costs) and stop_after_s is None and not collapsed
                          and not refusals)
    # Each engine's high-water mark: exact for one engine, an upper bound for several.
    return ClosedLoop(concurrency, max(last_done, model.now), done, crashed, snapshot.preemptions_total,
                      sum(e.peak_waiting for e in snapshot.engines), collapsed, refusals)


@dataclass(frozen=True)
class Yardstick:
    """The best closed loop or deep queue, and every candidate tried."""

    best: ClosedLoop
    candidates: tuple[ClosedLoop, ...]

    @property
    def pages_per_s(self) -> float:
        return self.best.pages_per_s


def grid(slots: int, pages: int) -> list[int]:
    """The sweep's concurrencies: slots/16 ... 64 x slots, doubling, within 1 ... pages."""
    points: set[int] = set()
    k = 0
    while (factor := GRID_LOW * GRID_STEP ** k) <= GRID_HIGH * (1 + 1e-9):
        points.add(min(pages, max(1, round(slots * factor))))
        k += 1
    return sorted(points)


def yardstick(profile: ServerProfile, costs: Sequence[PageCost]) -> Yardstick:
    """Sweep, refine around the best, and compare with the deep queue (module docstring)."""
    slots = profile.max_num_seqs * profile.data_parallel_size
    tried: dict[int | None, ClosedLoop] = {}

    def run(c: int | None) -> ClosedLoop:
        if c not in tried:
            finished = [r.elapsed_s for r in tried.values() if r.pages_per_s > 0]
            tried[c] = closed_loop(profile, costs, c, stop_after_s=min(finished, default=None))
        return tried[c]

    points = grid(slots, len(costs))
    start = bisect.bisect_left(points, min(slots, len(costs)))
    # Up from the slots, then down: each way stops after two points that gain < GAIN. Down
    # costs little, as a loop below the best is stopped once it runs past the best's time.
    for way in (points[start:], points[:start][::-1]):
        behind = 0
        for c in way:
            best_before = max((r.pages_per_s for r in tried.values()), default=0.0)
            rate = run(c).pages_per_s
            behind = behind + 1 if rate <= 0 or rate < GAIN * best_before else 0
            if behind == 2:
                break
    for step, ks in ((REFINE_STEP, (-2, -1, 1, 2)), (FINE_STEP, (-1, 1))):
        best = max(tried.values(), key=lambda r: r.pages_per_s)
        if best.concurrency is not None:
            for k in ks:
                run(min(len(costs), max(1, round(best.concurrency * step ** k))))
    run(None)
    best = max(tried.values(), key=lambda r: r.pages_per_s)
    if best.pages_per_s <= 0 or math.isnan(best.pages_per_s):
        raise RuntimeError(f"{profile.name}: every closed loop crashed the server or collapsed")
    ordered = sorted(tried.values(), key=lambda r: (r.concurrency is None, r.concurrency or 0))
    return Yardstick(best, tuple(ordered))
