"""Launch settings (pure, table-driven): the argv, the run target, the flow parameter."""

from __future__ import annotations

import pytest

from pagegate.server.launcher import describe_cap, kv_capacity_tokens
from pagegate.server.managed import managed_server_config
from pagegate.server.settings import VllmSettings, parse_gpus, queue_cap, vllm_argv, vllm_env
from pagegate.server.target import run_target_params
from pagegate.server.watchdog import WatchLimits

BASE = ["--host", "127.0.0.1", "--port", "8000", "--served-model-name", "olmocr",
        "--limit-mm-per-prompt", '{"video": 0}', "--max-num-queued-reqs", "512"]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (VllmSettings("allenai/olmOCR-2-7B-1025-FP8"),
         ["vllm", "serve", "allenai/olmOCR-2-7B-1025-FP8", *BASE]),
        (VllmSettings("m", command="python -m pagegate.sim", limit_mm_per_prompt=None),
         ["/venv/bin/python", "-m", "pagegate.sim", "--host", "127.0.0.1", "--port", "8000",
          "--served-model-name", "olmocr", "--max-num-queued-reqs", "512"]),
        (VllmSettings("m", command="python -m pagegate.sim", limit_mm_per_prompt="",
                      max_num_queued_reqs=0),
         ["/venv/bin/python", "-m", "pagegate.sim", "--host", "127.0.0.1", "--port", "8000",
          "--served-model-name", "olmocr"]),
        (VllmSettings("m", command="python -m other.tool", limit_mm_per_prompt=None,
                      max_num_queued_reqs=0),
         ["python", "-m", "other.tool", "--host", "127.0.0.1", "--port", "8000",
          "--served-model-name", "olmocr"]),
        (VllmSettings("m", command="/opt/venv/bin/vllm serve {model} --trust-remote-code"),
         ["/opt/venv/bin/vllm", "serve", "m", "--trust-remote-code", *BASE]),
        (VllmSettings("m", port=30024, host="0.0.0.0", served_model_name="ocr",
                      gpu_memory_utilization=0.85, max_model_len=16384, tensor_parallel_size=2,
                      data_parallel_size=4, max_num_seqs=256, limit_mm_per_prompt=None,
                      extra_args=("--max-num-batched-tokens", "8192", "--enforce-eager")),
         ["vllm", "serve", "m", "--host", "0.0.0.0", "--port", "30024",
          "--served-model-name", "ocr", "--gpu-memory-utilization", "0.85",
          "--max-model-len", "16384", "--tensor-parallel-size", "2",
          "--data-parallel-size", "4", "--max-num-seqs", "256", "--max-num-queued-reqs", "2048",
          "--max-num-batched-tokens", "8192", "--enforce-eager"]),
        (VllmSettings("my model", command="'my vllm' serve {model}"),
         ["my vllm", "serve", "my model", *BASE]),
    ],
    ids=["olmocr-defaults", "simulator-no-model", "empty-mm-limit-and-no-cap",
         "other-python-module-untouched", "model-mid-command", "every-setting", "quoting"],
)
def test_argv(settings: VllmSettings, expected: list[str]) -> None:
    """`python -m pagegate...` runs under the running interpreter (here a stand-in path)."""
    assert vllm_argv(settings, interpreter="/venv/bin/python") == expected


@pytest.mark.parametrize(
    ("settings", "cap", "why"),
    [
        (VllmSettings("m"), 512, "2 x max_num_seqs 256 (vLLM's default below 70 GiB)"),
        (VllmSettings("m", max_num_seqs=4), 8, "2 x max_num_seqs 4"),
        (VllmSettings("m", max_num_seqs=64, data_parallel_size=8), 1024,
         "2 x max_num_seqs 64 x 8 engines"),
        (VllmSettings("m", max_num_queued_reqs=100), 100, "as set"),
        (VllmSettings("m", max_num_queued_reqs=0), None, "off (max_num_queued_reqs 0)"),
        (VllmSettings("m", extra_args=("--max-num-queued-reqs", "9")), None,
         "--max-num-queued-reqs is on the command line already"),
        (VllmSettings("m", extra_args=("--max-num-queued-reqs=9",)), None,
         "--max-num-queued-reqs is on the command line already"),
        (VllmSettings("m", command="env X=1 python -m vllm.entrypoints.openai.api_server "
                      "--model {model} --max-num-seqs 4"), 8, "2 x max_num_seqs 4"),
        (VllmSettings("m", extra_args=("--max-num-seqs=16", "--data-parallel-size", "2")), 64,
         "2 x max_num_seqs 16 x 2 engines"),
    ],
    ids=["vllm-defaults", "slots", "data-parallel", "set", "off", "extra-arg", "extra-arg-equals",
         "seqs-in-command", "seqs-in-extra-args"],
)
def test_queue_cap_rule(settings: VllmSettings, cap: int | None, why: str) -> None:
    assert queue_cap(settings) == (cap, why)


VLLM_CPU_CACHE_INFO = (
    'vllm:cache_config_info{block_size="128",engine="0",kv_cache_max_concurrency="1.125",'
    'kv_cache_size_tokens="9216",num_gpu_blocks="72"} 1.0\n'
)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [(VLLM_CPU_CACHE_INFO, 9216),
     ('vllm:cache_config_info{block_size="16",num_gpu_blocks="2048",engine="0"} 1.0\n', 32768),
     ('vllm:cache_config_info{block_size="16",kv_cache_size_tokens="None"} 1.0\n', None),
     ("vllm:num_requests_waiting 0\n", None), ("not metrics {{{", None)],
    ids=["vllm-cpu", "blocks-only", "unknown", "absent", "garbage"],
)
def test_kv_capacity_from_cache_config_info(text: str, tokens: int | None) -> None:
    assert kv_capacity_tokens(text) == tokens


@pytest.mark.parametrize(
    ("cap", "kv_tokens", "engines", "start", "warn"),
    [(8, 9216, 1, "the KV cache holds ~3 pages of 2500 tokens; queue cap 8 leaves 5", False),
     (512, 1_000_000, 1, "the KV cache holds ~400 pages of 2500 tokens; queue cap 512", False),
     (512, 1_000_000, 8, "the KV cache holds ~3200 pages of 2500 tokens, more than the queue cap",
      True),
     (None, 9216, 1, "the KV cache holds ~3 pages of 2500 tokens; no queue cap", False),
     (8, None, 1, "the server does not report its KV cache size", False)],
)
def test_the_log_puts_the_cap_next_to_the_kv_room(cap: int | None, kv_tokens: int | None,
                                                  engines: int, start: str, warn: bool) -> None:
    line, warning = describe_cap(cap, kv_tokens, engines)
    assert line.startswith(start) and warning is warn


@pytest.mark.parametrize(
    ("host", "base_url"),
    [("127.0.0.1", "http://127.0.0.1:9000/v1"), ("0.0.0.0", "http://127.0.0.1:9000/v1"),
     ("gpu-7", "http://gpu-7:9000/v1")],
)
def test_base_url_is_reachable_from_this_host(host: str, base_url: str) -> None:
    assert VllmSettings("m", host=host, port=9000).base_url == base_url


@pytest.mark.parametrize(
    "bad",
    [{"model": ""}, {"command": "  "}, {"port": 0}, {"port": 70000},
     {"gpu_memory_utilization": 0.0}, {"gpu_memory_utilization": 1.5},
     {"max_model_len": 0}, {"tensor_parallel_size": 0}, {"data_parallel_size": 0},
     {"max_num_seqs": 0}, {"max_num_queued_reqs": -1}],
)
def test_invalid_settings_are_refused(bad: dict[str, object]) -> None:
    values: dict[str, object] = {"model": "m", **bad}
    with pytest.raises(ValueError):
        VllmSettings(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("server", "model", "launch", "expected"),
    [
        ("http://gpu:8000/v1", None, {"port": None},
         {"server_url": "http://gpu:8000/v1", "model": "olmocr", "launch_server": None}),
        ("http://gpu:8000/v1", "ocr", {},
         {"server_url": "http://gpu:8000/v1", "model": "ocr", "launch_server": None}),
        (None, None, {"port": None, "extra_args": ()},
         {"server_url": "http://127.0.0.1:8000/v1", "model": "olmocr", "launch_server": None}),
        (None, "allenai/olmOCR-2-7B-1025-FP8", {"port": 9000, "max_num_seqs": None},
         {"server_url": "http://127.0.0.1:8000/v1", "model": "olmocr",
          "launch_server": {"model": "allenai/olmOCR-2-7B-1025-FP8", "port": 9000}}),
        (None, "m", {"served_model_name": "ocr", "extra_args": ("--enforce-eager",)},
         {"server_url": "http://127.0.0.1:8000/v1", "model": "ocr",
          "launch_server": {"model": "m", "served_model_name": "ocr",
                            "extra_args": ("--enforce-eager",)}}),
        (["http://gpu:8000/v1"], None, {},
         {"server_url": "http://gpu:8000/v1", "model": "olmocr", "launch_server": None}),
        (["http://a:8000/v1", "http://a:8001/v1"], "ocr", {"port": None},
         {"server_url": "http://a:8000/v1", "server_urls": ["http://a:8000/v1", "http://a:8001/v1"],
          "model": "ocr", "launch_server": None}),
    ],
    ids=["external", "external-named", "default", "launch", "launch-named", "one-in-a-list",
         "several"],
)
def test_run_target(server: str | list[str] | None, model: str | None, launch: dict[str, object],
                    expected: dict[str, object]) -> None:
    assert run_target_params(server, model, launch) == expected


@pytest.mark.parametrize(
    ("server", "model", "launch", "message"),
    [("http://gpu:8000/v1", "m", {"command": "vllm serve {model}"}, "drop --server"),
     (["http://a/v1", "http://b/v1"], "m", {"max_num_seqs": 8}, "drop --server"),
     (["http://a/v1", "http://a/v1"], None, {}, "given twice"),
     (None, None, {"max_num_seqs": 8}, "needs --model")],
)
def test_run_target_refuses_launch_settings_without_a_launch(
    server: str | list[str] | None, model: str | None, launch: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run_target_params(server, model, launch)


def test_launch_server_parameter_becomes_settings() -> None:
    config = managed_server_config({
        "model": "m", "port": 9000, "extra_args": ["--enforce-eager"], "hang_after_seconds": 90,
        "restart_budget": 3, "restart_refill_seconds": 60, "unresponsive_after_seconds": 20,
        "ready_timeout_seconds": 30,
    })
    assert config.vllm == VllmSettings("m", port=9000, extra_args=("--enforce-eager",))
    assert config.watchdog.limits == WatchLimits(hang_after=90, unanswered_after=20)
    assert (config.watchdog.restart_capacity, config.watchdog.restart_refill_seconds) == (3, 60)
    assert config.ready_timeout_seconds == 30
    with pytest.raises(ValueError, match="unknown launch_server settings: hang_after"):
        managed_server_config({"model": "m", "hang_after": 5})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("0", ("0",)), ("0,1", ("0", "1")), (" 2, 3 ", ("2", "3")), ("0+1,2+3", ("0,1", "2,3")),
     (["0", 1], ("0", "1"))],
)
def test_gpus_become_one_server_each(spec: str | list[object], expected: tuple[str, ...]) -> None:
    assert parse_gpus(spec) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", ["", ",", "a", "0,0", "0,-1", "0+x", "0+1,1+2"])
def test_bad_gpu_lists_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_gpus(spec)


def test_one_server_per_gpu_on_consecutive_ports() -> None:
    config = managed_server_config({"model": "m", "port": 9000, "gpus": "0,1+2"})
    servers = config.server_settings()
    assert [(s.port, s.gpus) for s in servers] == [(9000, "0"), (9001, "1,2")]
    assert vllm_env(servers[1], {"PATH": "/bin"}) == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "1,2"}
    assert vllm_env(VllmSettings("m"), {"CUDA_VISIBLE_DEVICES": "5"}) == {"CUDA_VISIBLE_DEVICES": "5"}
    single = managed_server_config({"model": "m", "gpus": "3"})
    assert [(s.port, s.gpus) for s in single.server_settings()] == [(8000, "3")]
    assert managed_server_config({"model": "m"}).server_settings() == [VllmSettings("m")]
