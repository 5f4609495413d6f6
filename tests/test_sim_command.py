"""`python -m pagegate.sim` in vLLM's place: it takes the argv the launcher builds for
`vllm serve`, honours the flags it models and lists the others once."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
import typer

from pagegate.server.settings import VllmSettings, vllm_argv
from pagegate.sim.command import max_new_tokens_of, split_vllm_extras
from pagegate.sim.process import free_port
from tests.helpers import REPO


@pytest.mark.parametrize(
    ("args", "model", "ignored"),
    [
        ([], None, []),
        (["allenai/olmOCR-2-7B-1025-FP8"], "allenai/olmOCR-2-7B-1025-FP8", []),
        (["serve", "m", "--enforce-eager"], "m", ["--enforce-eager"]),
        (["--limit-mm-per-prompt", '{"video": 0}', "--gpu-memory-utilization", "0.9"], None,
         ["--limit-mm-per-prompt", "--gpu-memory-utilization"]),
        (["m", "--dtype=bfloat16", "--trust-remote-code"], "m", ["--dtype", "--trust-remote-code"]),
    ],
    ids=["none", "model", "serve-model-flag", "flags-with-values", "equals-and-bare"],
)
def test_unknown_vllm_arguments_are_split_into_model_and_ignored_flags(
    args: list[str], model: str | None, ignored: list[str]
) -> None:
    assert split_vllm_extras(args) == (model, ignored)


@pytest.mark.parametrize(
    ("text", "expected"),
    [(None, None), ("", None), ('{"max_new_tokens": 64}', 64), ('{"temperature": 0.1}', None)],
)
def test_max_new_tokens_from_the_generation_config_override(text: str | None,
                                                            expected: int | None) -> None:
    assert max_new_tokens_of(text) == expected


@pytest.mark.parametrize("text", ["{not json", '{"max_new_tokens": "64"}', '{"max_new_tokens": true}'])
def test_a_bad_generation_config_override_is_refused(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        max_new_tokens_of(text)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["pagegate.sim", "pagegate.cli sim"], ids=["module", "cli"])
def test_the_simulator_takes_the_argv_the_launcher_builds_for_vllm(entry: str) -> None:
    port = free_port()
    settings = VllmSettings(
        "allenai/olmOCR-2-7B-1025-FP8", command=f"{sys.executable} -m {entry} {{model}}",
        port=port, served_model_name="ocr-under-test", max_num_seqs=4,
        gpu_memory_utilization=0.9, extra_args=("--enforce-eager", "--api-server-count", "1"),
    )
    argv = vllm_argv(settings)
    assert "--limit-mm-per-prompt" in argv and "--max-num-queued-reqs" in argv
    process = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None and process.stderr is not None
        ready = process.stdout.readline()
        assert f"on http://127.0.0.1:{port}/v1" in ready, process.stderr.read()
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()
        assert [m["id"] for m in models["data"]] == ["ocr-under-test"]
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        assert 'model_name="ocr-under-test"' in metrics
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    ignored = [line for line in err.splitlines() if "ignoring vLLM options" in line]
    assert ignored == ["pagegate sim: ignoring vLLM options it does not model: "
                       "--gpu-memory-utilization, --limit-mm-per-prompt, --enforce-eager"]
