"""One page's `/v1/chat/completions` exchange: the request we send, the response we accept.

Pure functions only; the HTTP client (pagegate.ocr.client) hands us parsed JSON.

Request: one user message with the prompt text and the page image, in the order the
profile's model was trained on. olmOCR (allenai/olmocr `pipeline.build_page_query`) puts
the prompt first, so every request shares the same token prefix and vLLM's prefix cache
can reuse it (olmocr commit 897668d); the other models' clients put the image first.
A profile may add a system message, top_p and vLLM's own fields (`skip_special_tokens`,
`vllm_xargs`, `stop`). The reply text is parsed by its format's parser
(pagegate.vlm.formats).
"""

from __future__ import annotations

import base64
import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pagegate.errors import ReplyParseError
from pagegate.vlm.formats import ImageSize, parse_reply
from pagegate.vlm.profiles import ModelProfile
from pagegate.vlm.reply import PageReply


@dataclass(frozen=True)
class Usage:
    """Tokens the server spent on one request (counted even when the reply is unusable)."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens



def build_chat_request(
    profile: ModelProfile, *, model: str, image_png: bytes, temperature: float, attempt: int = 0
) -> dict[str, Any]:
    """The `/v1/chat/completions` body for one page, shaped as the profile's model expects."""
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be finite and >= 0, not {temperature!r}")
    image_b64 = base64.b64encode(image_png).decode("ascii")
    text = {"type": "text", "text": profile.prompt}
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image_b64}"}}
    messages: list[dict[str, Any]] = []
    if profile.system_prompt is not None:
        messages.append({"role": "system", "content": profile.system_prompt})
    messages.append(
        {"role": "user", "content": [image, text] if profile.image_first else [text, image]}
    )
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": profile.max_tokens,
        "temperature": temperature,
    }
    top_p = profile.top_p_for(attempt)
    if top_p is not None:
        body["top_p"] = top_p
    body.update(copy.deepcopy(dict(profile.extra_fields)))
    return body


def usage_of(body: Mapping[str, Any]) -> Usage:
    """Token counts of a response, never raising: spent tokens count even on bad replies."""
    usage = body.get("usage") if isinstance(body, Mapping) else None
    if not isinstance(usage, Mapping):
        return Usage(0, 0)
    return Usage(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def parse_chat_response(
    profile: ModelProfile, body: Mapping[str, Any], image_size: ImageSize = (1, 1)
) -> tuple[PageReply, Usage]:
    """The page reply and usage of a 200 response, or `ReplyParseError` if unusable.

    `image_size` is the sent image's (width, height): models that give boxes in its
    pixels need it to express them as fractions of the page.

    Unusable, as in olmOCR's `process_page`: finish_reason other than "stop" (a
    "length" stop is a truncated page), or more tokens than the model's context.
    """
    if not isinstance(body, Mapping):
        raise ReplyParseError(f"response body must be a JSON object, not {type(body).__name__}")
    choices = body.get("choices")
    if not isinstance(choices, Sequence) or isinstance(choices, (str, bytes)) or not choices:
        raise ReplyParseError("response has no choices")
    choice = choices[0]
    if not isinstance(choice, Mapping):
        raise ReplyParseError("choices[0] is not an object")
    finish_reason = choice.get("finish_reason")
    if finish_reason == "length":
        raise ReplyParseError(
            f"reply truncated: finish_reason 'length' (max_tokens {profile.max_tokens})"
        )
    if finish_reason != "stop":
        raise ReplyParseError(f"finish_reason is {finish_reason!r}, expected 'stop'")
    usage = usage_of(body)
    total = _declared_total(body, usage)
    if total > profile.max_context_tokens:
        raise ReplyParseError(
            f"request used {total} tokens, more than the model's context of "
            f"{profile.max_context_tokens}"
        )
    message = choice.get("message")
    if not isinstance(message, Mapping):
        raise ReplyParseError("choices[0].message is not an object")
    content = message.get("content")
    if not isinstance(content, str):
        raise ReplyParseError("choices[0].message.content is not a string")
    return parse_reply(profile, content, image_size), usage


def _declared_total(body: Mapping[str, Any], usage: Usage) -> int:
    """The server's total_tokens when it gives one, else prompt + completion."""
    raw = body.get("usage")
    declared = raw.get("total_tokens") if isinstance(raw, Mapping) else None
    if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 0:
        return max(declared, usage.total_tokens)
    return usage.total_tokens
