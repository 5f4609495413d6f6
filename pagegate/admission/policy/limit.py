"""The adaptive concurrency limit C: how many credited pages may be in flight.

C is steered on engine signals, not end-to-end latency (which scales with output length).
It keeps the server's queue (`signals.Signals.queue`) near a small positive target, the
*band*, so the GPU always has the next request at hand and never a pile:

- a preemption cuts C to a share of what is in flight and ends slow start;
- a queue above the band cuts a share of the excess off what is in flight (cuts are
  taken from what is in flight, so repeated readings of one overload compute the same
  target instead of compounding; a share, because other tenants of the server cut too);
  it ends slow start unless the batch is still filling up (cache under a share of the
  ceiling and running still growing): such a queue is the engine's prefill rate;
- KV usage above the ceiling sets the band to zero and stops growth (vLLM admits
  by prompt size and preempts as the batch grows, so a queue only feeds preemptions);
- a queue below the band grows C: doubling in slow start or far below the recent peak, bounded
  by the KV room, otherwise additively;
- growth is clocked by completions, as TCP grows its window only on ACKs: a reading
  grows C only if a page came back since the previous one, so a server that holds our
  pages and finishes none (a hung engine whose gauges stay calm) gets no more of them.
  Additively it grows by at most one page per page back. In slow start the step is
  bounded by the KV room the engine's own usage projects; only where there is no such
  projection yet (usage under `kv_signal_floor`) is it at most `slow_start_per_completion`
  pages per page back (RFC 3465's limit L = 2 per ACK, a burst bound for a network that
  gives no other feedback). Clocking the doubling itself by pages back would double C
  once per page latency, which is minutes on a large GPU (the l40s profile: ~110 s);
- a CAPACITY outcome (503/429/refused/timeout) cuts C multiplicatively, once per poll;
- while the recent pages' mean time in flight is above `page_latency_limit_seconds` (a
  quarter of the page client's request timeout), C does not grow and is held at drain x
  that limit: past the server's saturation more pages in flight only lengthen each one,
  until the longest time out and are sent again.

The band is the largest of a floor, a share of the peak, and the pages the engine
takes in while a refill is on its way (drain x (poll interval + the front end's transit
time), at most `refill_peak_cap` batches): the gate sees the queue shrink only at its
next reading, and what it sends then spends the front end's transit time before the
engine counts it, so the queue must cover that much for the slots never to run empty.

C starts at `initial_concurrency` and, at the first usable reading of a server that
exports `vllm:cache_config_info`, at least at the requests of full context the KV cache
holds (`kv_max_concurrency` x the KV ceiling): a count the engine runs without
preemption whatever the pages are. Tokens per page are not known before the first
prefills; from there on the KV room projected from the live usage bounds slow start.

C always stays within [concurrency_floor, max_in_flight_pages].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagegate.admission.policy.config import GateConfig
from pagegate.server.metrics import Reading

FLOAT_SLACK = 1e-9
"""Float arithmetic may leave 7.9999999 where 8 is meant; count it as the whole number."""


@dataclass(frozen=True, slots=True)
class Concurrency:
    limit: int                               # C
    slow_start: bool = True
    cut_running: int = 0                     # running at the last queue cut
    last_backoff_at: float | None = None
    acked: int = 0                           # completions since the last usable reading
    estimated: bool = False                  # the first reading's KV estimate was applied


def start(config: GateConfig) -> Concurrency:
    return Concurrency(limit=config.concurrency_start)


def waiting_band(
    peak: float, config: GateConfig, drain: float = 0.0, transit: float = 0.0
) -> float:
    """The server queue C aims for: max(floor, share x peak, refill), where the refill
    is what the engine takes in at `drain` pages/s while a refill is on its way (a poll
    interval plus the front end's `transit` seconds), at most `refill_peak_cap` peaks.

    It grows with the demonstrated batch (the peak), staying below the peak ratio by
    default (0.05 vs 0.1) on a large server (module docstring).
    """
    tuning = config.tuning
    refill = min(tuning.refill_peak_cap * peak,
                 drain * (config.poll_interval_seconds + transit))
    return max(tuning.waiting_band_min, tuning.waiting_band_fraction * peak, refill)


def completed(concurrency: Concurrency) -> Concurrency:
    """A page came back finished: one more completion to clock growth by."""
    return replace(concurrency, acked=concurrency.acked + 1)


def first_estimate(concurrency: Concurrency, reading: Reading, config: GateConfig) -> Concurrency:
    """Start C at least at the full-context requests the KV cache holds (module docstring)."""
    if concurrency.estimated:
        return concurrency
    concurrency = replace(concurrency, estimated=True)
    if reading.kv_max_concurrency is None:
        return concurrency
    held = math.floor(reading.kv_max_concurrency * config.kv_cache_ceiling + FLOAT_SLACK)
    if held <= concurrency.limit:
        return concurrency
    return _clamped(concurrency, held, config, slow_start=concurrency.slow_start)


def room(concurrency: Concurrency, in_flight: int, config: GateConfig) -> int:
    """Pages C and the hard cap still let in flight (negative after a cut)."""
    return min(concurrency.limit, config.max_in_flight_pages) - in_flight


def filling(reading: Reading, config: GateConfig) -> bool:
    """The cache is far below the ceiling: a queue is a batch still filling up."""
    return reading.kv_usage < config.kv_cache_ceiling * config.tuning.filling_kv_share


def within_latency(
    before: Concurrency, steered: Concurrency, *, latency: float | None, drain: float,
    config: GateConfig,
) -> Concurrency:
    """`steered` (C after `steer`) under the latency limit (see the module docstring).

    `latency`: the recent pages' mean time in flight. Above `page_latency_limit_seconds`,
    C may not grow past `before` and is held at the pages in flight that the drain carries
    within that time (Little's law): more in flight only lengthens every page until the
    slowest time out and go again, while the server's rate no longer rises.
    """
    bound = config.page_latency_limit_seconds
    if latency is None or bound is None or latency <= bound or drain <= 0.0:
        return steered
    ceiling = min(before.limit, math.ceil(drain * bound))
    if steered.limit <= ceiling:
        return steered
    return _clamped(steered, ceiling, config, slow_start=False)


def steer(
    concurrency: Concurrency,
    reading: Reading,
    *,
    queue: float,
    peak: float,
    in_flight: int,
    preempted: bool,
    config: GateConfig,
    drain: float = 0.0,
    transit: float = 0.0,
) -> Concurrency:
    """One control step of C on the engine's signals (see the module docstring).

    Every step uses up the completions counted since the previous one, whether it grows
    C or not.
    """
    acked = concurrency.acked
    tuning = config.tuning
    limit = concurrency.limit
    concurrency = replace(concurrency, acked=0)
    high = waiting_band(peak, config, drain, transit)
    pressured = reading.kv_usage > config.kv_cache_ceiling
    if pressured:
        high = 0.0  # vLLM admits as blocks free: a queue would only feed preemptions
    if preempted:
        limit = min(limit, math.floor(in_flight * tuning.preemption_backoff))
        return _clamped(concurrency, limit, config, slow_start=False, backoff_at=reading.at)
    if queue > high:
        excess = math.ceil((queue - high) * tuning.excess_cut_share)
        ramping = (
            concurrency.slow_start
            and filling(reading, config)
            and reading.running > concurrency.cut_running
        )
        concurrency = replace(concurrency, cut_running=reading.running)
        return _clamped(concurrency, min(limit, in_flight - excess), config, slow_start=ramping)
    if queue < high and not pressured and acked > 0:
        if concurrency.slow_start or limit < peak * tuning.regrow_peak_share:
            bound = _kv_room(reading, config)
            if bound is None:  # no engine-side bound: at most L pages per page back
                step = min(limit, math.floor(acked * tuning.slow_start_per_completion + FLOAT_SLACK))
            else:  # the pages back prove the engine live; its KV room bounds the step
                step = min(limit, bound)
        else:
            step = min(acked, max(1, math.ceil(limit * tuning.additive_growth_fraction)))
        return _clamped(concurrency, limit + step, config, slow_start=concurrency.slow_start)
    return concurrency


def _kv_room(reading: Reading, config: GateConfig) -> int | None:
    """Requests the cache could still take at the current KV per request (at least 1).

    None (no bound) below a few percent usage, where KV per request is too noisy to
    project, and with nothing running.
    """
    kv, running = reading.kv_usage, reading.running
    if kv <= config.tuning.kv_signal_floor or running <= 0:
        return None
    free = running * (config.kv_cache_ceiling - kv)
    return max(1, math.floor(free / kv + FLOAT_SLACK))


def back_off(concurrency: Concurrency, in_flight: int, now: float, config: GateConfig) -> Concurrency:
    """A page came back CAPACITY; `in_flight` counts it. One cut per poll interval: a wave
    of timeouts is one signal."""
    last = concurrency.last_backoff_at
    if last is not None and now - last < config.poll_interval_seconds:
        return concurrency
    limit = min(concurrency.limit, math.floor(in_flight * config.tuning.capacity_backoff))
    return _clamped(concurrency, limit, config, slow_start=False, backoff_at=now)


def _clamped(
    concurrency: Concurrency,
    limit: int,
    config: GateConfig,
    *,
    slow_start: bool,
    backoff_at: float | None = None,
) -> Concurrency:
    limit = min(config.max_in_flight_pages, max(config.concurrency_floor, limit))
    last_backoff_at = concurrency.last_backoff_at if backoff_at is None else backoff_at
    return replace(concurrency, limit=limit, slow_start=slow_start, last_backoff_at=last_backoff_at)
