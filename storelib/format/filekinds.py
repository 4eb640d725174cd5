"""The kinds of store file a manifest row describes, and the keys of a row's ``detail`` per kind.

Defined here, in ``format/``, so that every wing names a kind the same way: ``io/`` (which sits
below ``table/``) as well as ``table.rows``, which re-exports them beside the typed rows. A
file-kind string literal anywhere else is a house error (tests/house/test_row_floors.py).
"""
from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

__all__ = ["FileKind", "FILE_KINDS", "DETAIL_HEADER", "DETAIL_PATCH", "PATCH_STAGED", "PATCH_PIECES",
           "json_column"]


class FileKind(StrEnum):
    """A manifest row's ``kind``: str-valued, so the value written to and compared with the
    table is the same string as before (``FileKind.INDEX == "index"``)."""
    COMMITLOG = "commitlog"
    CONSUMEQUEUE = "consumequeue"
    INDEX = "index"
    CHECKPOINT = "checkpoint"


# The kinds a batch writes manifest rows for, in the order a store is read (the checkpoint file is
# derived from the batch row, never listed).
FILE_KINDS = (FileKind.COMMITLOG, FileKind.CONSUMEQUEUE, FileKind.INDEX)

# ``detail`` keys read below ``table/`` (io.patches): an index row's committed header, and the
# in-place patch a file version is published with (``{"staged": <rel>, "pieces": [[file_pos,
# length, patch_pos, phase], ...]}``).
DETAIL_HEADER = "header"
DETAIL_PATCH = "patch"
PATCH_STAGED = "staged"
PATCH_PIECES = "pieces"


def json_column(text: str | None) -> Any:
    """A row's JSON column (``config`` / ``detail``) parsed: the one convention, a null or empty
    column reads as ``{}``; JSON that does not parse raises ``ValueError``."""
    return json.loads(text) if text else {}
