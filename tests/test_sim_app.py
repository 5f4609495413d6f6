"""The simulator over real HTTP (a subprocess per test) and in-process with a fake clock."""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from PIL import Image
from prometheus_client.parser import text_string_to_metric_families

from pagegate.clock import FakeClock, settle
from pagegate.errors import ReplyParseError
from pagegate.server.metrics import named_metrics_url, parse_vllm_metrics
from pagegate.sim.app import build_app
from pagegate.sim.config import SimConfig
from pagegate.sim.workload import output_tokens, prompt_tokens
from pagegate.vlm.chat import build_chat_request, parse_chat_response
from pagegate.vlm.profiles import OLMOCR_2
from tests.fixtures.sim import SimServer

StartSim = Callable[..., SimServer]
PORTRAIT = (996, 1288)
LANDSCAPE = (1288, 996)


def page_png(shade: int, size: tuple[int, int] = PORTRAIT) -> bytes:
    """A blank page image: realistic size (so realistic prompt tokens), a few KB of PNG."""
    buffer = io.BytesIO()
    Image.new("L", size, shade).save(buffer, "PNG")
    return buffer.getvalue()


def chat(png: bytes, temperature: float = 0.1, **extra: Any) -> dict[str, Any]:
    body = build_chat_request(OLMOCR_2, model="olmocr", image_png=png, temperature=temperature)
    body.update(extra)
    return body


def metric(text: str, name: str, **labels: str) -> float:
    """The value of the one sample called `name` whose labels include `labels`."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    raise KeyError(f"{name} {labels} not in metrics")


def poll(check: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until `check()` holds; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)


# --- replies ----------------------------------------------------------------------------


def test_reply_is_an_olmocr_page_reply_matched_to_its_image(start_sim: StartSim) -> None:
    sim = start_sim(profile="ci")
    png = page_png(10)
    digest = hashlib.sha1(png).hexdigest()
    with httpx.Client(base_url=sim.base_url, timeout=30) as client:
        models = client.get("/models").json()
        assert [m["id"] for m in models["data"]] == ["olmocr"]
        assert models["data"][0]["max_model_len"] == 16384

        response = client.post("/chat/completions", json=chat(png))
        assert response.status_code == 200
        body = response.json()
        reply, usage = parse_chat_response(OLMOCR_2, body)
        assert reply.text.splitlines()[0] == f"page {digest[:16]}"
        assert (reply.is_rotation_valid, reply.rotation_correction) == (True, 0)
        expected_prompt = prompt_tokens(*PORTRAIT, len(OLMOCR_2.prompt))
        assert usage.prompt_tokens == expected_prompt == 1817
        assert usage.completion_tokens == output_tokens(0, digest)
        assert body["usage"]["total_tokens"] == usage.prompt_tokens + usage.completion_tokens
        assert body["object"] == "chat.completion" and body["model"] == "olmocr"
        assert body["id"].startswith("chatcmpl-")
        assert body["choices"][0]["message"]["role"] == "assistant"
        content = body["choices"][0]["message"]["content"]
        assert 4 * usage.completion_tokens - 5 <= len(content) <= 4 * usage.completion_tokens

        # The same page costs the same at any temperature; another page costs its own.
        again = client.post("/chat/completions", json=chat(png, temperature=0.8)).json()
        assert again["usage"]["completion_tokens"] == usage.completion_tokens
        other = page_png(11)
        other_body = client.post("/chat/completions", json=chat(other)).json()
        assert other_body["usage"]["completion_tokens"] == output_tokens(0, hashlib.sha1(other).hexdigest())

        # max_tokens cuts the reply: finish_reason "length", which pagegate rejects.
        short = client.post("/chat/completions", json=chat(png, max_tokens=50)).json()
        assert short["choices"][0]["finish_reason"] == "length"
        assert short["usage"]["completion_tokens"] == 50
        with pytest.raises(ReplyParseError, match="length"):
            parse_chat_response(OLMOCR_2, short)
        # After a reply cut off at max_tokens (a sample that ran on), the page is sampled
        # anew: its next request writes the page's second draw (olmOCR's retry).
        retry = client.post("/chat/completions", json=chat(png)).json()
        assert retry["usage"]["completion_tokens"] == output_tokens(0, digest, sample=1)
        assert output_tokens(0, digest, sample=1) != usage.completion_tokens


def test_requests_vllm_would_refuse_get_400(start_sim: StartSim) -> None:
    sim = start_sim()
    with httpx.Client(base_url=sim.base_url, timeout=30) as client:
        too_long = client.post("/chat/completions", json=chat(page_png(1), max_tokens=20_000))
        assert too_long.status_code == 400
        assert "max_model_len" in too_long.json()["message"]
        text_only = {"model": "olmocr", "messages": [{"role": "user", "content": "hello"}]}
        assert client.post("/chat/completions", json=text_only).status_code == 400
        jpeg = chat(page_png(1))
        jpeg["messages"][0]["content"][1]["image_url"]["url"] = "data:image/jpeg;base64,AAAA"
        assert client.post("/chat/completions", json=jpeg).status_code == 400
        assert client.post("/chat/completions", content=b"{not json").status_code == 400
        assert client.get(f"{sim.root_url}/health").status_code == 200


# --- metrics ----------------------------------------------------------------------------


def test_metrics_show_a_burst_queue_and_drain(start_sim: StartSim) -> None:
    sim = start_sim(profile="ci")
    burst, most = 40, 40 * 10
    seen: list[tuple[float, float]] = []

    async def burst_until_seen() -> list[httpx.Response]:
        # More requests than the 8 slots stay outstanding until a scrape has seen the slots
        # full and a queue behind them: how fast the burst drains against how often a
        # loaded machine lets this loop scrape decides nothing.
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=120,
                                     limits=httpx.Limits(max_connections=None)) as client:
            sends: list[asyncio.Task[httpx.Response]] = []
            async with httpx.AsyncClient(timeout=10) as scraper:
                while not any(running == 8 and waiting > 0 for running, waiting in seen):
                    if sum(not task.done() for task in sends) < burst // 2:
                        assert len(sends) < most, f"{len(sends)} sent, never a full queue"
                        sends += [asyncio.create_task(client.post(
                            "/chat/completions", json=chat(page_png(len(sends) + i))))
                            for i in range(burst)]
                    text = (await scraper.get(sim.metrics_url)).text
                    seen.append((metric(text, "vllm:num_requests_running"),
                                 metric(text, "vllm:num_requests_waiting")))
            return await asyncio.gather(*sends)

    responses = asyncio.run(burst_until_seen())
    sent = len(responses)
    assert max(r for r, _ in seen) == 8  # never more running than max_num_seqs
    assert [r.status_code for r in responses] == [200] * sent
    usages = [r.json()["usage"] for r in responses]

    text = httpx.get(sim.metrics_url).text
    labels = {"model_name": "olmocr", "engine": "0"}
    assert metric(text, "vllm:num_requests_running", **labels) == 0
    assert metric(text, "vllm:num_requests_waiting", **labels) == 0
    assert metric(text, "vllm:kv_cache_usage_perc", **labels) == 0
    assert metric(text, "vllm:request_success_total", finished_reason="stop", **labels) == sent
    assert metric(text, "vllm:prompt_tokens_total", **labels) == sum(u["prompt_tokens"] for u in usages)
    assert metric(text, "vllm:generation_tokens_total", **labels) == sum(
        u["completion_tokens"] for u in usages
    )
    assert metric(text, "vllm:num_preemptions_total", **labels) == 0
    assert metric(text, "vllm:cache_config_info", block_size="16", num_gpu_blocks="2048", engine="0") == 1
    assert metric(text, "vllm:cache_config_info", kv_cache_size_tokens="32768",
                  kv_cache_max_concurrency="2.0") == 1
    assert metric(text, "vllm:num_requests_waiting_by_reason", reason="capacity", **labels) == 0
    assert metric(text, "vllm:admission_rejections_total", reason="max_num_queued_reqs") == 0

    # /metrics/ with name[] is cut to those samples, as vLLM's mounted exposition cuts it;
    # an exact /metrics ignores the filter, as vLLM's instrumentator does.
    named = httpx.get(named_metrics_url(sim.metrics_url)).text
    assert {s.name for f in text_string_to_metric_families(named) for s in f.samples} == {
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total", "vllm:generation_tokens_total",
        "vllm:num_requests_waiting_by_reason", "vllm:cache_config_info",
    }
    assert parse_vllm_metrics(named, at=0.0) == parse_vllm_metrics(text, at=0.0)
    unfiltered = httpx.get(sim.metrics_url, params={"name[]": "vllm:num_requests_waiting"}).text
    assert metric(unfiltered, "vllm:request_success_total", finished_reason="stop", **labels) == sent


# --- faults -----------------------------------------------------------------------------


def test_fault_options_rotate_garble_and_reject(start_sim: StartSim) -> None:
    sim = start_sim(rotate_landscape=True, garbage_below_temperature=0.5, reject_status_every=4)
    with httpx.Client(base_url=sim.base_url, timeout=30) as client:

        def post(png: bytes, temperature: float) -> httpx.Response:
            return client.post("/chat/completions", json=chat(png, temperature))

        portrait = post(page_png(1), 0.8)
        reply, _ = parse_chat_response(OLMOCR_2, portrait.json())
        assert (reply.is_rotation_valid, reply.rotation_correction) == (True, 0)

        landscape = post(page_png(1, LANDSCAPE), 0.8)
        reply, _ = parse_chat_response(OLMOCR_2, landscape.json())
        assert (reply.is_rotation_valid, reply.rotation_correction) == (False, 90)

        garbled = post(page_png(2), 0.1)
        assert garbled.status_code == 200
        content = garbled.json()["choices"][0]["message"]["content"]
        assert content.startswith("page ")
        with pytest.raises(ReplyParseError, match="front matter"):
            parse_chat_response(OLMOCR_2, garbled.json())

        rejected = post(page_png(3), 0.8)  # the 4th request
        assert rejected.status_code == 503

        at_threshold = post(page_png(2), 0.5)  # not below 0.5: a proper reply again
        parse_chat_response(OLMOCR_2, at_threshold.json())


def test_client_disconnect_aborts_the_request(start_sim: StartSim) -> None:
    sim = start_sim(time_scale=0.01)  # a page now takes ~15 s of wall time

    async def leave_once_running() -> None:
        # The client goes away once the engine runs the request (an abort before that
        # would be the front end's, which the engine never counts), however long it
        # took to get there.
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=120) as client:
            sent = asyncio.create_task(client.post("/chat/completions", json=chat(page_png(5))))
            deadline = time.monotonic() + 60
            while metric((await client.get(sim.metrics_url)).text,
                         "vllm:num_requests_running") != 1:
                assert not sent.done(), "the request was answered before it could be left"
                assert time.monotonic() < deadline, "the request never ran within 60 s"
                await asyncio.sleep(0.02)  # polling the engine for the running request
            sent.cancel()
            with pytest.raises(asyncio.CancelledError):
                await sent

    asyncio.run(leave_once_running())

    def aborted() -> bool:
        text = httpx.get(sim.metrics_url).text
        return (
            metric(text, "vllm:request_success_total", finished_reason="abort") == 1
            and metric(text, "vllm:num_requests_running") == 0
            and metric(text, "vllm:kv_cache_usage_perc") == 0
        )

    poll(aborted)


# --- death ------------------------------------------------------------------------------


def test_an_ungated_burst_kills_the_ci_server_and_it_stops_answering(start_sim: StartSim) -> None:
    sim = start_sim(profile="ci", time_scale=0.2)

    async def burst() -> list[int | str]:
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=30,
                                     limits=httpx.Limits(max_connections=None)) as client:

            async def one(i: int) -> int | str:
                try:
                    return (await client.post("/chat/completions", json=chat(page_png(i)))).status_code
                except httpx.TransportError as exc:
                    return type(exc).__name__

            return await asyncio.gather(*(one(i) for i in range(200)))

    outcomes = asyncio.run(burst())
    assert 500 in outcomes
    assert set(outcomes) <= {200, 500, "ConnectError", "RemoteProtocolError", "ReadError"}
    assert sim.process.wait(timeout=15) == 3
    # The queue past 64 or, with requests still in the front end, host memory past 4 GB.
    assert re.search(r"waiting queue reached 65 \(> 64\)|host memory \d+ MB > 4096 MB",
                     sim.stderr_text())
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{sim.root_url}/health", timeout=5)


# --- in-process, on a fake clock --------------------------------------------------------


def test_in_process_app_runs_on_the_injected_clock() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        app = build_app(SimConfig(profile="ci"), clock)
        transport = httpx.ASGITransport(app=app)
        png = page_png(7)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            pending = asyncio.create_task(client.post("/v1/chat/completions", json=chat(png)))
            await settle()
            assert not pending.done()  # simulated time has not moved
            # /metrics is answered by the simulated API server's loop, behind the page's body.
            scrape = asyncio.create_task(client.get("/metrics"))
            await settle()
            assert not scrape.done()
            await clock.advance(0.003)
            early = (await scrape).text
            # ~2 ms in, the page is still being preprocessed: no engine gauge counts it.
            assert metric(early, "pagegate_sim:num_requests_in_front_end") == 1
            assert metric(early, "vllm:num_requests_running") == 0
            await clock.advance(0.02)
            scrape = asyncio.create_task(client.get("/metrics"))
            await settle()  # the scrape is queued on the simulated loop before time moves
            await clock.advance(0.003)
            later = (await scrape).text
            assert metric(later, "vllm:num_requests_running") == 1
            assert metric(later, "pagegate_sim:num_requests_in_front_end") == 0
            for _ in range(200):
                if pending.done():
                    break
                await clock.advance(0.01)
            response = await pending
            assert response.status_code == 200
            tokens = output_tokens(0, hashlib.sha1(png).hexdigest())
            assert response.json()["usage"]["completion_tokens"] == tokens
            # ~0.3 ms per decode step on ci: the reply needs simulated, not wall, time.
            assert 0.0002 * tokens < clock.now() < 0.001 * tokens + 0.1
            await app.state.engine.stop()

    asyncio.run(scenario())


def test_in_process_crash_fails_requests_and_health() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        app = build_app(SimConfig(profile="ci", max_num_seqs=1, crash_waiting=2), clock)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            health = asyncio.create_task(client.get("/health"))
            await settle()
            await clock.advance(0.003)
            assert (await health).status_code == 200
            sends = [asyncio.create_task(client.post("/v1/chat/completions", json=chat(page_png(i))))
                     for i in range(4)]
            while not all(s.done() for s in sends):
                await clock.advance(0.002)
            responses = [s.result() for s in sends]
            assert [r.status_code for r in responses] == [500] * 4
            assert responses[0].json()["type"] == "EngineDeadError"
            assert (await client.get("/health")).status_code == 503  # answered at once
            late = await client.post("/v1/chat/completions", json=chat(page_png(9)))
            assert late.status_code == 500
            frozen = (await client.get("/metrics")).text  # a dead server answers at once
            await clock.advance(1.0)
            assert (await client.get("/metrics")).text == frozen  # nothing moves any more
            assert metric(frozen, "pagegate_sim:host_memory_mb") == 4 * 24.0

    asyncio.run(scenario())


def test_sim_config_overrides_and_switches() -> None:
    assert SimConfig().server_profile().crash_waiting == 64
    assert SimConfig(crash_waiting=0).server_profile().crash_waiting is None  # 0 turns it off
    assert SimConfig(host_mem_limit_mb=0).server_profile().host_mem_limit_mb is None
    custom = SimConfig(profile="h100", kv_blocks=5000, max_num_seqs=16, max_num_queued_reqs=7)
    profile = custom.server_profile()
    assert (profile.num_gpu_blocks, profile.max_num_seqs, profile.max_num_queued_reqs) == (5000, 16, 7)
    assert profile.step_per_seq_s == 0.000_135  # everything else is the H100's
    with pytest.raises(ValueError, match="KV cache smaller"):
        SimConfig(kv_blocks=100).server_profile()
    with pytest.raises(ValueError, match="time_scale"):
        SimConfig(time_scale=0)
    with pytest.raises(ValueError, match="unknown simulator profile"):
        SimConfig(profile="a100").server_profile()
    dp = SimConfig(profile="h100", data_parallel_size=4, api_server_count=2).server_profile()
    assert dp.data_parallel_size == 4
    assert dp.frontend is not None and dp.frontend.api_server_count == 2
    with pytest.raises(ValueError, match="max_new_tokens"):
        SimConfig(max_new_tokens=0)


def test_the_server_caps_replies_at_max_new_tokens() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        app = build_app(SimConfig(profile="ci", max_new_tokens=64), clock)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            pending = asyncio.create_task(client.post("/v1/chat/completions", json=chat(page_png(3))))
            while not pending.done():
                await clock.advance(0.01)
            body = (await pending).json()
            assert body["usage"]["completion_tokens"] == 64
            assert body["choices"][0]["finish_reason"] == "length"
            await app.state.engine.stop()

    asyncio.run(scenario())
