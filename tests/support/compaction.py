"""Stores as a version before the manifest table's compaction wrote them (tests of compaction)."""
from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

from storelib.table import manifest


@contextmanager
def written_before_compaction():
    """Commits as a version before compaction made them: full queue maps in the checkpoint rows,
    no manifest version recorded, never compacted."""
    with mock.patch.object(manifest, "_recorded", lambda ck, rows, versions: dict(ck)), \
            mock.patch.object(manifest, "compaction_due", lambda *a: None):
        yield
