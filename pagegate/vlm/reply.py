"""The model's reply format: the front matter olmOCR-style models write, and its parser.

Pure functions only.

Reply (olmocr `train/front_matter.FrontMatterParser` + `prompts.PageResponse`):

    ---
    primary_language: en
    is_rotation_valid: True
    rotation_correction: 0
    is_table: False
    is_diagram: False
    ---
    The page text, in markdown.

Parsing rules, and where they differ from olmOCR:
- The reply must open with a `---` line; the front matter ends at the next line that is
  exactly `---` (trailing spaces or `\\r` allowed). olmOCR cuts at the first `\\n---`
  even mid-line; we want the whole line so `---x` cannot end the block.
- The front matter is read as YAML *nodes* (`yaml.compose` with the BaseLoader) and
  each field is interpreted here. `yaml.safe_load` applies YAML 1.1 implicit typing,
  which turns the Norwegian code `no` into `False` (olmOCR then reports no language).
  Here a plain `no` stays the string "no".
- All five fields are required and any other field is an error (as in olmOCR).
- Booleans: True/False in any case, quoted or not, plus the YAML 1.1 words yes/no/on/off
  that safe_load would have accepted. Anything else is an error (olmOCR maps any
  non-"true" string to False silently).
- rotation_correction: a decimal integer, quoted or not, in {0, 90, 180, 270}.
- primary_language: a string, or null/~/empty/""; a plain `false` also means "no
  language" (olmOCR maps a YAML boolean to None), a plain `true` is an error.
- The text after the block is stripped of surrounding whitespace (olmOCR does the same);
  an absent body gives "".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import yaml

from pagegate.errors import ReplyParseError
from pagegate.vlm.layout import LayoutBlock

ROTATIONS = frozenset({0, 90, 180, 270})
FIELDS = ("primary_language", "is_rotation_valid", "rotation_correction", "is_table", "is_diagram")

_OPENING = re.compile(r"---[ \t]*\r?\n")
_CLOSING = re.compile(r"^---[ \t\r]*$", re.MULTILINE)
_TRUE_WORDS = frozenset({"true", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "no", "off"})
_NULL_WORDS = frozenset({"", "~", "null", "Null", "NULL"})
_PLAIN_FALSE = frozenset({"false", "False", "FALSE"})
_PLAIN_TRUE = frozenset({"true", "True", "TRUE"})
_DECIMAL = re.compile(r"\+?[0-9]+")
_PLAIN_LANGUAGE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)*")


@dataclass(frozen=True)
class PageReply:
    """What the model said about one page (olmOCR's `PageResponse`, text never None)."""

    primary_language: str | None
    is_rotation_valid: bool
    rotation_correction: int
    is_table: bool
    is_diagram: bool
    text: str
    blocks: tuple[LayoutBlock, ...] = ()
    """Where the model put each block, for models that give layout (pagegate.vlm.layout)."""

    def __post_init__(self) -> None:
        if self.primary_language is not None and (
            not isinstance(self.primary_language, str) or self.primary_language == ""
        ):
            raise ValueError("primary_language must be a non-empty string or None")
        for name in ("is_rotation_valid", "is_table", "is_diagram"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool")
        if isinstance(self.rotation_correction, bool) or self.rotation_correction not in ROTATIONS:
            raise ValueError(f"rotation_correction must be one of 0, 90, 180, 270, "
                             f"not {self.rotation_correction!r}")
        if not isinstance(self.text, str):
            raise TypeError("text must be a str")


def plain_reply(text: str, blocks: tuple[LayoutBlock, ...] = ()) -> PageReply:
    """A reply from a model that says nothing about rotation or content kinds: the values
    olmOCR gives a fallback page (no language, rotation valid, 0, no table, no diagram)."""
    return PageReply(None, True, 0, False, False, text, blocks)


def format_reply_text(reply: PageReply) -> str:
    """Render `reply` the way the model writes it (the shape of olmOCR's guided regex).

    Booleans are written True/False and a missing language as null, as in olmOCR's
    `--guided_decoding` regex. A language that would not read back as itself in plain
    YAML is double-quoted by PyYAML's emitter. The text is written as is; parsing strips
    surrounding whitespace, so a reply round-trips exactly when its text is stripped.
    """
    lines = [
        "---",
        f"primary_language: {_format_language(reply.primary_language)}",
        f"is_rotation_valid: {reply.is_rotation_valid}",
        f"rotation_correction: {reply.rotation_correction}",
        f"is_table: {reply.is_table}",
        f"is_diagram: {reply.is_diagram}",
        "---",
    ]
    head = "\n".join(lines)
    return f"{head}\n{reply.text}" if reply.text else head


def _format_language(language: str | None) -> str:
    if language is None:
        return "null"
    plain_words = _NULL_WORDS | _PLAIN_TRUE | _PLAIN_FALSE
    if _PLAIN_LANGUAGE.fullmatch(language) and language not in plain_words:
        return language
    dumped: str = yaml.dump(
        language, Dumper=yaml.SafeDumper, default_style='"', width=math.inf, allow_unicode=True
    )
    return dumped.rstrip("\n")


def parse_reply_text(text: str) -> PageReply:
    """Parse the model's reply; any deviation raises `ReplyParseError` saying what is wrong."""
    if not isinstance(text, str):
        raise ReplyParseError(f"reply content must be a string, not {type(text).__name__}")
    opening = _OPENING.match(text)
    if opening is None:
        raise ReplyParseError(f"reply does not open with a '---' front matter line: {_peek(text)}")
    closing = _CLOSING.search(text, opening.end())
    if closing is None:
        raise ReplyParseError("front matter is not closed by a '---' line")
    fields = _read_front_matter(text[opening.end() : closing.start()])
    body = text[closing.end() :].strip()
    return PageReply(
        primary_language=_language(fields["primary_language"]),
        is_rotation_valid=_boolean("is_rotation_valid", fields["is_rotation_valid"]),
        rotation_correction=_rotation(fields["rotation_correction"]),
        is_table=_boolean("is_table", fields["is_table"]),
        is_diagram=_boolean("is_diagram", fields["is_diagram"]),
        text=body,
    )


def _read_front_matter(block: str) -> dict[str, yaml.ScalarNode]:
    """The five fields as YAML scalar nodes; structure errors raise ReplyParseError."""
    try:
        root = yaml.compose(block, Loader=yaml.BaseLoader)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ReplyParseError(f"front matter is not valid YAML: {_yaml_problem(exc)}") from None
    if root is None:
        raise ReplyParseError("front matter is empty")
    if not isinstance(root, yaml.MappingNode):
        raise ReplyParseError("front matter must be a mapping of field: value lines")
    found: dict[str, yaml.ScalarNode] = {}
    for key_node, value_node in root.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise ReplyParseError("front matter keys must be plain field names")
        key = key_node.value
        if key in found:
            raise ReplyParseError(f"field {key!r} appears twice in the front matter")
        if not isinstance(value_node, yaml.ScalarNode):
            raise ReplyParseError(f"field {key!r} must be a single value, not a list or mapping")
        found[key] = value_node
    missing = [name for name in FIELDS if name not in found]
    if missing:
        raise ReplyParseError(f"front matter is missing field(s): {', '.join(missing)}")
    extra = sorted(set(found) - set(FIELDS))
    if extra:
        raise ReplyParseError(f"front matter has unexpected field(s): {', '.join(map(repr, extra))}")
    return found


def _yaml_problem(exc: BaseException) -> str:
    """PyYAML's own words for what is wrong and where (line numbers within the block)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if not problem:
        lines = str(exc).splitlines()
        return lines[0] if lines else type(exc).__name__
    if mark is None:
        return str(problem)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"


def _is_plain(node: yaml.ScalarNode) -> bool:
    return node.style is None


def _boolean(name: str, node: yaml.ScalarNode) -> bool:
    word = str(node.value).strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    raise ReplyParseError(f"{name}: expected True or False, got {_peek(node.value)}")


def _rotation(node: yaml.ScalarNode) -> int:
    raw = str(node.value).strip()
    if not _DECIMAL.fullmatch(raw):
        raise ReplyParseError(f"rotation_correction: expected an integer, got {_peek(raw)}")
    value = int(raw)
    if value not in ROTATIONS:
        raise ReplyParseError(f"rotation_correction: expected 0, 90, 180 or 270, got {value}")
    return value


def _language(node: yaml.ScalarNode) -> str | None:
    value = str(node.value)
    if _is_plain(node):
        if value in _NULL_WORDS or value in _PLAIN_FALSE:
            return None
        if value in _PLAIN_TRUE:
            raise ReplyParseError(f"primary_language: expected a language code or null, got {value}")
        return value
    return value or None


def _peek(value: str, limit: int = 40) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")

