"""Model profiles: the olmOCR contract as data, and its lookup."""

from __future__ import annotations

import dataclasses

import pytest

from pagegate.vlm.profiles import DEFAULT_PROFILE, PROFILES, ModelProfile, get_profile


def test_default_profile_is_olmocr_2_with_the_pipeline_numbers() -> None:
    profile = get_profile(DEFAULT_PROFILE)
    assert DEFAULT_PROFILE == "olmocr-2"
    assert profile.name == "olmocr-2"
    assert profile.max_tokens == 8000
    assert profile.max_context_tokens == 16384
    assert profile.temperatures == (0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0)
    assert profile.default_model == "allenai/olmOCR-2-7B-1025-FP8"
    assert profile.prompt_version == "olmocr-no-anchoring-v4-yaml"
    assert profile.reply_format == "yaml-front-matter"
    assert "allenai/olmocr" in profile.source
    assert "build_no_anchoring_v4_yaml_prompt" in profile.source


def test_prompt_is_the_v4_yaml_prompt_verbatim() -> None:
    prompt = get_profile("olmocr-2").prompt
    assert prompt.startswith("Attached is one page of a document that you must process. ")
    # The model was trained on this exact spelling; it must not be "corrected".
    assert "Convert equations to LateX and tables to HTML.\n" in prompt
    assert "(page_startx_starty_width_height.png)\n" in prompt
    assert prompt.endswith(
        "specifying values for the primary_language, is_rotation_valid, rotation_correction, "
        "is_table, and is_diagram parameters."
    )
    assert prompt.count("\n") == 2


def test_unknown_profile_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown model profile 'olmocr-9'.*olmocr-2"):
        get_profile("olmocr-9")


def test_profiles_mapping_is_read_only() -> None:
    with pytest.raises(TypeError):
        PROFILES["x"] = get_profile("olmocr-2")  # type: ignore[index]
    assert set(PROFILES) == {"olmocr-2", "chandra-2", "dots-mocr", "deepseek-ocr",
                             "nanonets-ocr2", "granite-docling", "qwen3-vl"}


def test_profile_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_profile("olmocr-2").max_tokens = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"temperatures": ()}, "temperatures must not be empty"),
        ({"temperatures": (0.1, -0.5)}, "finite and >= 0"),
        ({"temperatures": (float("nan"),)}, "finite and >= 0"),
        ({"max_tokens": 0}, "max_tokens <= max_context_tokens"),
        ({"max_tokens": 20000}, "max_tokens <= max_context_tokens"),
        ({"prompt": ""}, "needs a name and a prompt"),
    ],
)
def test_inconsistent_profiles_are_rejected(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(get_profile("olmocr-2"), **change)  # type: ignore[arg-type]


def test_a_new_profile_is_just_data() -> None:
    custom = ModelProfile(
        name="tiny", source="test", prompt="read it", prompt_version="v1",
        reply_format="yaml-front-matter", max_tokens=10, temperatures=(0.0,),
        max_context_tokens=100, default_model="m",
    )
    assert custom.temperatures == (0.0,)
