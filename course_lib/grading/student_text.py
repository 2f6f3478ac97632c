"""Text that crossed from a student's processes or files into the grader, made safe to keep and to show.

Verdicts, exception names and texts, file and folder names and notebook JSON all come from places the
student controls. Each is decoded safely (a lone surrogate, "\\ud800", or a file name's undecodable bytes
become U+FFFD, so writing it as UTF-8 never fails), bounded in length, and, where it is quoted beside
the grader's own words, marked as the student's («...»), so it never reads as the grader's.
"""

from __future__ import annotations

import re

SURROGATES = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"
MAX_CHARS = 3000
CUT = " ... ({} more characters cut by the grader)"


def readable(value, limit: int | None = MAX_CHARS) -> str:
    """value as text that encodes as UTF-8: bytes decoded with replacement, surrogates replaced, at most
    ``limit`` characters (None: unbounded)."""
    if isinstance(value, bytes | bytearray):
        text = bytes(value).decode("utf-8", "replace")
    elif isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except Exception as error:  # noqa: BLE001 - a student's object whose __str__ raises is still shown
            text = f"<unprintable {type(value).__name__}: {type(error).__name__}>"
    text = SURROGATES.sub(REPLACEMENT, text)
    if limit is not None and len(text) > limit:
        text = text[:limit] + CUT.format(len(text) - limit)
    return text


def readable_tree(value):
    """value (a notebook, a kernel message: dicts, lists, strings) with every string in it, keys too,
    made ``readable`` without a bound (the output cap bounds a notebook; this only makes it writable)."""
    if isinstance(value, str):
        return readable(value, None) if SURROGATES.search(value) else value
    if isinstance(value, dict):
        return type(value)((readable_tree(k), readable_tree(v)) for k, v in value.items())
    if isinstance(value, list):
        return [readable_tree(item) for item in value]
    return value


def quoted(value, limit: int = 200) -> str:
    """value as the student's words beside the grader's: readable, on one line, in «guillemets»."""
    text = " ".join(readable(value, limit).split())
    return f"«{text}»"


def plain_name(raw: str) -> bool:
    """Whether a file or folder name read from disk (surrogate-escaped where its bytes were not UTF-8) is
    plain text: valid UTF-8, no control characters."""
    return not SURROGATES.search(raw) and not any(ord(ch) < 32 or ord(ch) == 127 for ch in raw)
