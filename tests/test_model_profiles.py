"""Every model profile: the request it builds, the image it asks for, the flags it serves with.

Each row pins what the profile's cited file says (pagegate/vlm/profiles.py names the
files; docs/models.md has the table), so a drifting prompt, size or field fails here.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from pagegate.pdf.reader import plan_render
from pagegate.server.launcher import VllmLauncher
from pagegate.server.settings import VllmSettings, vllm_argv, with_profile_args
from pagegate.vlm.chat import build_chat_request
from pagegate.vlm.profiles import (
    PROFILES,
    ImageRule,
    ModelProfile,
    choose_profile,
    get_profile,
    infer_profile,
)

PNG = b"\x89PNG fake"
LETTER = (612.0, 792.0)

# name -> (first words of the prompt, image first, system message, max_tokens, first
#          temperature, first top_p, extra fields)
REQUESTS: dict[str, tuple[str, bool, str | None, int, float, float | None, dict[str, Any]]] = {
    "olmocr-2": ("Attached is one page of a document", False, None, 8000, 0.1, None, {}),
    "chandra-2": ("OCR this image to HTML, arranged as layout blocks.", True, None, 12384, 0.0,
                  0.1, {}),
    "dots-mocr": ("<|img|><|imgpad|><|endofimg|>Please output the layout information", True,
                  None, 16384, 0.1, 1.0, {}),
    "deepseek-ocr": ("<|grounding|>Convert the document to markdown.", True, None, 8192, 0.0,
                     None, {"skip_special_tokens": False, "vllm_xargs": {
                         "ngram_size": 30, "window_size": 90,
                         "whitelist_token_ids": [128821, 128822]}}),
    "nanonets-ocr2": ("Extract the text from the above document as if you were reading it", True,
                      "You are a helpful assistant.", 15000, 0.0, None, {}),
    "granite-docling": ("Convert this page to docling.", True, None, 4096, 0.0, None,
                        {"skip_special_tokens": False,
                         "stop": ["</doctag>", "<|end_of_text|>"]}),
    "qwen3-vl": ("Convert this page to markdown. Do not miss any text", True, None, 8000, 0.0,
                 None, {}),
}

# name -> the rendered size of a US-letter page (612 x 792 pt), by the profile's image rule
LETTER_PIXELS = {
    "olmocr-2": (996, 1288),       # longest side 1288 (olmocr pipeline)
    "chandra-2": (1632, 2112),     # 192 dpi; 3.45 Mpx is under 3072 x 2048 = 6.3 Mpx
    "dots-mocr": (1700, 2200),     # 200 dpi; 3.74 Mpx is under 11,289,600
    "deepseek-ocr": (1224, 1584),  # 144 dpi (run_dpsk_ocr_pdf.py)
    "nanonets-ocr2": (1280, 1657),  # shortest side 1280 (olmocr's runner)
    "granite-docling": (1224, 1584),  # docling scale 2.0 = 144 dpi
    "qwen3-vl": (1224, 1584),
}

SERVE_FLAGS = {
    "olmocr-2": [],
    "chandra-2": ["--max-num-seqs", "32", "--max-model-len", "32768",
                  "--max-num-batched-tokens", "65536"],
    "dots-mocr": ["--trust-remote-code", "--chat-template-content-format", "string"],
    "deepseek-ocr": ["--trust-remote-code", "--logits-processors",
                     "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor",
                     "--mm-processor-cache-gb", "0"],
    "nanonets-ocr2": [],
    "granite-docling": [],
    "qwen3-vl": ["--mm-encoder-tp-mode", "data", "--async-scheduling",
                 "--mm-processor-cache-gb", "0"],
}


def test_every_profile_has_a_row_in_each_table() -> None:
    assert set(PROFILES) == set(REQUESTS) == set(LETTER_PIXELS) == set(SERVE_FLAGS)


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_request_has_the_documented_shape(name: str) -> None:
    profile = get_profile(name)
    opening, image_first, system, max_tokens, temperature, top_p, extra = REQUESTS[name]
    body = build_chat_request(profile, model="served", image_png=PNG,
                              temperature=profile.temperatures[0])
    messages = body["messages"]
    assert [m["role"] for m in messages] == (["system"] if system else []) + ["user"]
    if system:
        assert messages[0]["content"] == system
    parts = messages[-1]["content"]
    kinds = [p["type"] for p in parts]
    assert kinds == (["image_url", "text"] if image_first else ["text", "image_url"])
    text = next(p["text"] for p in parts if p["type"] == "text")
    assert text == profile.prompt and text.startswith(opening)
    url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
    assert base64.b64decode(url.removeprefix("data:image/png;base64,")) == PNG
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("served", max_tokens,
                                                                         temperature)
    assert body.get("top_p") == top_p
    assert {k: v for k, v in body.items()
            if k not in ("model", "messages", "max_tokens", "temperature", "top_p")} == extra


def test_a_request_cannot_change_the_profile_it_came_from() -> None:
    profile = get_profile("deepseek-ocr")
    body = build_chat_request(profile, model="m", image_png=PNG, temperature=0.0)
    body["vllm_xargs"]["ngram_size"] = 1
    again = build_chat_request(profile, model="m", image_png=PNG, temperature=0.0)
    assert again["vllm_xargs"]["ngram_size"] == 30


def test_chandra_retries_hotter_with_its_own_top_p() -> None:
    profile = get_profile("chandra-2")
    retry = build_chat_request(profile, model="m", image_png=PNG,
                               temperature=profile.temperatures[1], attempt=1)
    later = build_chat_request(profile, model="m", image_png=PNG,
                               temperature=profile.temperatures[-1], attempt=5)
    assert (retry["temperature"], retry["top_p"]) == (0.3, 0.95)
    assert later["top_p"] == 0.95


@pytest.mark.parametrize("name", sorted(LETTER_PIXELS))
def test_image_rule_gives_the_documented_size_for_a_letter_page(name: str) -> None:
    rule = get_profile(name).image
    plan = plan_render(*LETTER, target_longest_dim=rule.longest_side or rule.max_side,
                       max_pixels=rule.max_pixels, dpi=rule.dpi,
                       target_shortest_dim=rule.shortest_side)
    assert (plan.width, plan.height) == LETTER_PIXELS[name]


@pytest.mark.parametrize(("rule", "page", "expected"), [
    # a big page at 192 dpi is shrunk to Chandra's pixel bound, keeping its shape
    (ImageRule(dpi=192, max_pixels=3072 * 2048), (1224.0, 1584.0), (2205, 2853)),
    # shortest side on a landscape page
    (ImageRule(shortest_side=1280), (792.0, 612.0), (1657, 1280)),
    # the longest-side bound still holds under a dpi rule
    (ImageRule(dpi=200, max_side=1000), LETTER, (773, 1000)),
])
def test_image_rule_bounds(rule: ImageRule, page: tuple[float, float],
                           expected: tuple[int, int]) -> None:
    plan = plan_render(*page, target_longest_dim=rule.longest_side or rule.max_side,
                       max_pixels=rule.max_pixels, dpi=rule.dpi,
                       target_shortest_dim=rule.shortest_side)
    assert (plan.width, plan.height) == expected
    assert plan.width * plan.height <= rule.max_pixels


@pytest.mark.parametrize("kwargs", [{}, {"dpi": 72, "longest_side": 10}, {"dpi": 0}])
def test_an_image_rule_has_exactly_one_positive_base(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ImageRule(**kwargs)


@pytest.mark.parametrize("name", sorted(SERVE_FLAGS))
def test_launcher_command_carries_the_profile_serve_flags(name: str) -> None:
    settings = with_profile_args(VllmSettings(model=get_profile(name).default_model),
                                 get_profile(name).serve_args)
    argv = vllm_argv(settings, interpreter="python")
    flags = SERVE_FLAGS[name]
    assert argv[-len(flags):] == flags if flags else argv == vllm_argv(
        VllmSettings(model=get_profile(name).default_model), interpreter="python")


def test_the_users_own_flag_wins_over_the_profile() -> None:
    settings = VllmSettings(model="datalab-to/chandra-ocr-2",
                            extra_args=("--max-num-seqs=8", "--max_model_len", "8192"))
    argv = vllm_argv(with_profile_args(settings, get_profile("chandra-2").serve_args))
    assert argv.count("--max-num-seqs") == 0 and "--max-num-seqs=8" in argv
    assert "32768" not in argv and argv[-2:] == ["--max_model_len", "8192"]
    assert argv[argv.index("--max-num-batched-tokens") + 1] == "65536"
    # the queue cap follows the user's 8 slots, not the profile's 32
    assert argv[argv.index("--max-num-queued-reqs") + 1] == "16"


def test_a_stand_in_server_gets_no_model_flags() -> None:
    sim = VllmSettings(model="x", command="python -m pagegate.sim")
    assert with_profile_args(sim, get_profile("deepseek-ocr").serve_args) == sim


@pytest.mark.parametrize(("model", "expected"), [
    ("allenai/olmOCR-2-7B-1025-FP8", "olmocr-2"),
    ("datalab-to/chandra-ocr-2", "chandra-2"),
    ("rednote-hilab/dots.mocr", "dots-mocr"),
    ("deepseek-ai/DeepSeek-OCR", "deepseek-ocr"),
    ("nanonets/Nanonets-OCR2-3B", "nanonets-ocr2"),
    ("ibm-granite/granite-docling-258M", "granite-docling"),
    ("Qwen/Qwen3-VL-8B-Instruct", "qwen3-vl"),
    ("Qwen/Qwen2.5-VL-7B-Instruct", None),
    ("model", None),
])
def test_profile_inferred_from_the_model_name(model: str, expected: str | None) -> None:
    assert infer_profile(model) == expected


def test_every_default_model_names_its_own_profile() -> None:
    assert {n: infer_profile(p.default_model) for n, p in PROFILES.items()} == {
        n: n for n in PROFILES}


def test_choosing_a_profile() -> None:
    assert choose_profile(None, None) == "olmocr-2"
    assert choose_profile(None, "olmocr") == "olmocr-2"  # the default served name
    assert choose_profile("qwen3-vl", "datalab-to/chandra-ocr-2") == "qwen3-vl"
    with pytest.raises(ValueError, match="several profiles"):
        choose_profile(None, "my-chandra-vs-nanonets-merge")
    with pytest.raises(ValueError, match="unknown model profile"):
        choose_profile("chandra", None)


def test_a_profile_checks_its_own_data() -> None:
    base = get_profile("chandra-2")
    fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
    with pytest.raises(ValueError, match="reply format"):
        ModelProfile(**{**fields, "reply_format": "xml"})
    with pytest.raises(ValueError, match="box_scale"):
        ModelProfile(**{**fields, "box_scale": 0})
    with pytest.raises(TypeError):
        base.extra_fields["stop"] = []  # type: ignore[index]


@pytest.mark.parametrize(("args", "says"), [
    (["--profile", "nope"], "unknown model profile 'nope'"),
    (["--model", "my-chandra-vs-nanonets"], "matches several profiles"),
])
def test_a_profile_the_cli_cannot_choose_is_a_usage_error(tmp_path: Path, args: list[str],
                                                         says: str) -> None:
    from typer.testing import CliRunner

    from pagegate.cli.app import app

    result = CliRunner().invoke(app, ["run", str(tmp_path / "a.pdf"), "--workspace",
                                      str(tmp_path / "ws"), *args])
    assert result.exit_code == 2
    assert says in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "ws").exists()  # refused before anything ran


@pytest.mark.parametrize("name", sorted(SERVE_FLAGS))
def test_the_launcher_adds_its_profiles_flags_to_the_command_it_starts(name: str) -> None:
    async def argv() -> list[str]:
        async with httpx.AsyncClient() as http:
            launcher = VllmLauncher(VllmSettings(model=get_profile(name).default_model),
                                    http=http, profile=name)
            return vllm_argv(launcher.settings, interpreter="python")

    words = asyncio.run(argv())
    flags = SERVE_FLAGS[name]
    assert words[len(words) - len(flags):] == flags
    assert words[:3] == ["vllm", "serve", get_profile(name).default_model]
