"""The chat request and reply shapes the simulator speaks (pure): olmOCR's body in, an
OpenAI chat.completion out, vLLM's error body for refusals."""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from pagegate.sim.config import SimConfig
from pagegate.sim.records import Finished
from pagegate.sim.workload import png_size, prompt_tokens
from pagegate.vlm.reply import PageReply, format_reply_text

CHARS_PER_TOKEN = 4
_FILLER = (
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
    "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
    "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.\n"
)


class BadRequest(ValueError):
    """The request body is not something vLLM would accept (-> 400)."""


@dataclass(frozen=True)
class PageRequest:
    """What the simulator needs from one chat completion body."""

    png: bytes
    width: int
    height: int
    text_chars: int
    temperature: float
    max_tokens: int | None

    @property
    def digest(self) -> str:
        return hashlib.sha1(self.png).hexdigest()


def parse_chat_body(body: object) -> PageRequest:
    """Read an olmOCR-style request: text part(s) and one data:image/png;base64 image."""
    if not isinstance(body, Mapping):
        raise BadRequest("body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    text_chars = 0
    images: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            text_chars += len(content)
            continue
        if not isinstance(content, list):
            raise BadRequest("message content must be a string or a list of parts")
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text" and isinstance(part.get("text"), str):
                text_chars += len(part["text"])
            elif kind == "image_url" and isinstance(part.get("image_url"), Mapping):
                url = part["image_url"].get("url")
                if not isinstance(url, str):
                    raise BadRequest("image_url.url must be a string")
                images.append(url)
            else:
                raise BadRequest(f"unsupported content part: {kind!r}")
    if len(images) != 1:
        raise BadRequest(f"expected exactly one image, got {len(images)}")
    png = _decode_png_data_url(images[0])
    try:
        width, height = png_size(png)
        prompt_tokens(width, height, text_chars)  # validates the size like the processor
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    temperature = body.get("temperature", 1.0)  # vLLM's default sampling temperature
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise BadRequest("temperature must be a number >= 0")
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise BadRequest("max_tokens must be an integer >= 1")
    return PageRequest(png, width, height, text_chars, float(temperature), max_tokens)


def _decode_png_data_url(url: str) -> bytes:
    prefix = "data:image/png;base64,"
    if not url.startswith(prefix):
        raise BadRequest("image_url must be a data:image/png;base64 URL")
    try:
        return base64.b64decode(url[len(prefix):], validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("image_url holds invalid base64") from None


def reply_content(page: PageRequest, completion_tokens: int, config: SimConfig) -> str:
    """The model's text: front matter (unless garbage is injected), page line, filler."""
    marker = f"page {page.digest[:16]}"
    garbage = page.temperature < config.garbage_below_temperature
    rotated = config.rotate_landscape and page.width > page.height
    reply = PageReply(
        primary_language="en",
        is_rotation_valid=not rotated,
        rotation_correction=90 if rotated else 0,
        is_table=False,
        is_diagram=False,
        text=marker,
    )
    head = marker if garbage else format_reply_text(reply)
    room = completion_tokens * CHARS_PER_TOKEN - len(head) - 1
    return head + "\n" + _filler(room) if room > 0 else head


def _filler(chars: int) -> str:
    repeats = chars // len(_FILLER) + 1
    return (_FILLER * repeats)[:chars].rstrip() or "."


def completion_body(req_id: str, model: str, page: PageRequest, done: Finished, config: SimConfig) -> dict[str, Any]:
    """An OpenAI chat.completion object, as vLLM returns it."""
    return {
        "id": req_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": reply_content(page, done.completion_tokens, config),
                },
                "logprobs": None,
                "finish_reason": done.finish_reason,
                "stop_reason": None,
            }
        ],
        "usage": {
            "prompt_tokens": done.prompt_tokens,
            "completion_tokens": done.completion_tokens,
            "total_tokens": done.prompt_tokens + done.completion_tokens,
        },
    }


def error_response(status: int, message: str, kind: str) -> JSONResponse:
    """vLLM's ErrorResponse shape."""
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return JSONResponse(body, status_code=status)
