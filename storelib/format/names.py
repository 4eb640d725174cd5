"""Names that become paths: topics and store-relative paths.

A topic is a directory name (``consumequeue/<topic>/<queueId>/...``), so a writer accepts only
what RocketMQ's ``TopicValidator`` accepts as a topic: the characters ``[%|a-zA-Z0-9_-]``.
That excludes ``/``, ``\\``, NUL, ``.`` and ``..`` (names that would not be one directory
entry), which are reported as such. The length limit is not RocketMQ's 127 characters: the
store format holds longer topics (V2 records, 2-byte topic length; a broker writes them, the
golden sets have one of 210 characters), so the limit is what a directory entry allows on
common file systems: 255 bytes (``NAME_MAX``; RocketMQ's own limit for retry and DLQ topics).

A store-relative path (a manifest row, a file found in a broker's directory, a name built from
a topic) must stay under the store root: not absolute, no ``.`` / ``..`` / empty components,
no backslash, no NUL (``rel_path_problem``); ``storage.Store`` also resolves symlinks of local
stores (``Store.path``).
"""
from __future__ import annotations

from collections.abc import Iterable

import re

__all__ = ["OFFSET_FILE_NAME", "INDEX_FILE_NAME", "TOPIC_CHARS", "TOPIC_PATTERN", "TOPIC_MAX_BYTES", "topic_problem", "topic_problems", "check_topic",
           "rel_path_problem"]

# Commitlog segments and consume queue files are named by their first offset in 20 digits
# (UtilAll.offset2FileName); index files by their creation time, yyyyMMddHHmmssSSS.
OFFSET_FILE_NAME = re.compile(r"^\d{20}$")
INDEX_FILE_NAME = re.compile(r"^\d{17}$")

TOPIC_CHARS = "%|a-zA-Z0-9_-"
TOPIC_PATTERN = f"^[{TOPIC_CHARS}]+$"          # RocketMQ TopicValidator (VALID_CHAR_BIT_MAP)
TOPIC_MAX_BYTES = 255                          # one directory entry (NAME_MAX)
_ALLOWED = frozenset("%|_-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _short(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def topic_problem(topic: object) -> str | None:
    """Why ``topic`` cannot name a topic directory, or None if it can."""
    if topic is None:
        return "missing (required)"
    if not isinstance(topic, str):
        return f"expected a string, got {type(topic).__name__}"
    if topic == "":
        return "empty topic"
    unsafe = [label for ch, label in (("/", "contains '/'"), ("\\", "contains a backslash"),
                                      ("\x00", "contains a NUL character")) if ch in topic]
    if topic in (".", ".."):
        unsafe.append(f"is {topic!r}")
    if unsafe:
        return (f"topic {_short(topic)} {' and '.join(unsafe)}: a topic is one directory name "
                f"(consumequeue/<topic>/) and RocketMQ's TopicValidator allows only the characters [{TOPIC_CHARS}]")
    bad = sorted(set(topic) - _ALLOWED)
    if bad:
        shown = ", ".join(repr(c) for c in bad[:8]) + (" ..." if len(bad) > 8 else "")
        return (f"topic {_short(topic)} contains {shown}: RocketMQ's TopicValidator allows only the "
                f"characters [{TOPIC_CHARS}]")
    n = len(topic.encode("utf-8"))
    if n > TOPIC_MAX_BYTES:
        return (f"topic {_short(topic)} is {n} characters long, more than {TOPIC_MAX_BYTES} (the longest "
                f"directory name file systems allow)")
    return None


def topic_problems(values: Iterable[str | None]) -> dict[int, str]:
    """{position: problem} for the invalid entries of ``values`` (an Arrow string array, meant
    for the distinct topics of a column; nulls are skipped: the caller reports missing values).
    Vectorized: only the entries that fail the pattern or the length are looked at one by one.
    pyarrow is imported here, not at module level: this module is part of the cheap format layer."""
    import pyarrow as pa
    import pyarrow.compute as pc
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(list(values), pa.string())
    if len(arr) == 0:
        return {}
    ok = pc.and_(pc.match_substring_regex(arr, TOPIC_PATTERN),
                 pc.less_equal(pc.binary_length(arr), TOPIC_MAX_BYTES))
    bad = pc.and_(pc.invert(pc.fill_null(ok, True)), arr.is_valid())
    idx = pc.indices_nonzero(bad).to_pylist() if pc.any(bad).as_py() else []
    out: dict[int, str] = {}
    for i in idx:
        p = topic_problem(arr[i].as_py())
        if p:
            out[i] = p
    return out


def check_topic(topic: object, where: str = "") -> str:
    """``topic`` if it is a valid topic directory name, else ValueError naming ``where``."""
    p = topic_problem(topic)
    if p:
        raise ValueError(f"{where}: {p}" if where else p)
    assert isinstance(topic, str)          # topic_problem said so
    return topic


def rel_path_problem(rel: object) -> str | None:
    """Why ``rel`` is not a path inside a store root, lexically (symlinks: ``Store.path``)."""
    if not isinstance(rel, str):
        return f"is not a string ({type(rel).__name__})"
    if "\x00" in rel:
        return "contains a NUL character"
    if "\\" in rel:
        return "contains a backslash"
    if rel.startswith("/"):
        return "is absolute"
    if len(rel) > 1 and rel[1] == ":" and rel[0].isalpha():
        return "has a drive letter"
    parts = rel.rstrip("/").split("/")
    if ".." in parts:
        return "contains a '..' component"
    if "." in parts or "" in parts:
        return "contains an empty or '.' component"
    return None
