"""The chat request and reply shapes the simulator speaks (pure): a profile's body in, an
OpenAI chat.completion out in that profile's reply format (pagegate.sim.replies), vLLM's
error body for refusals."""

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
from pagegate.sim.pages import CorpusPage, TextLine
from pagegate.sim.records import Finished
from pagegate.sim.replies import (
    apply_stop,
    cut_reply,
    malformed_reply,
    olmocr_reply,
    profile_of,
    write_reply,
)
from pagegate.sim.workload import png_size, prompt_tokens

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
    prompts: tuple[str, ...] = ()
    """The request's text parts and string messages: they tell which profile sent it."""
    stop: tuple[str, ...] = ()

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
    texts: list[str] = []
    images: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            texts.append(content)
            continue
        if not isinstance(content, list):
            raise BadRequest("message content must be a string or a list of parts")
        for part in content:
            kind = part.get("type") if isinstance(part, Mapping) else None
            if kind == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
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
    text_chars = sum(map(len, texts))
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
    stop = body.get("stop", ())
    stop = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, list | tuple) or not all(isinstance(s, str) for s in stop):
        raise BadRequest("stop must be a string or a list of strings")
    return PageRequest(png, width, height, text_chars, float(temperature), max_tokens,
                       tuple(texts), tuple(stop))


def _decode_png_data_url(url: str) -> bytes:
    prefix = "data:image/png;base64,"
    if not url.startswith(prefix):
        raise BadRequest("image_url must be a data:image/png;base64 URL")
    try:
        return base64.b64decode(url[len(prefix):], validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("image_url holds invalid base64") from None


STAND_IN_BOX = (0.1, 0.05, 0.9, 0.1)
"""Where the stand-in line of a page the simulator cannot read is said to be."""


def reply_content(page: PageRequest, done: Finished, config: SimConfig,
                  found: CorpusPage | None = None) -> str:
    """The model's text, in the format of the profile that sent the request.

    A page of the corpus (`found`) is read as its text lines; any other page, and one
    with no text layer, gets the stand-in line `page <sha1(png)[:16]>`, which olmOCR's format pads with filler of ~4
    characters per completion token. A reply the model did not finish is cut short.
    """
    profile = profile_of(page.prompts)
    marker = f"page {page.digest[:16]}"
    # A page without a text layer (a scan) gets the stand-in too: the simulator reads no ink.
    lines = found.lines if found is not None and found.lines else (TextLine(marker, STAND_IN_BOX),)
    number = found.index + 1 if found is not None else 1
    size = (page.width, page.height)
    garbage = page.temperature < config.garbage_below_temperature or (
        found is not None and config.malformed_pages_match(found.text))
    if garbage:
        text = malformed_reply(profile, lines, size, number)
    elif profile.reply_format == "yaml-front-matter":
        rotated = config.rotate_landscape and page.width > page.height
        text = olmocr_reply("\n".join(line.text for line in lines), 90 if rotated else 0)
    else:
        text = write_reply(profile, lines, size, number)
    if found is None and profile.reply_format == "yaml-front-matter":
        room = done.completion_tokens * CHARS_PER_TOKEN - len(text) - 1
        text = text + "\n" + _filler(room) if room > 0 else text
    if done.finish_reason == "length":
        text = cut_reply(text)
    return apply_stop(text, page.stop)


def _filler(chars: int) -> str:
    repeats = chars // len(_FILLER) + 1
    return (_FILLER * repeats)[:chars].rstrip() or "."


def completion_body(req_id: str, model: str, page: PageRequest, done: Finished,
                    config: SimConfig, found: CorpusPage | None = None) -> dict[str, Any]:
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
                    "content": reply_content(page, done, config, found),
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
