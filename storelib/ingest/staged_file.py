"""What a write task hands the commit for each file version it staged (``StagedFile``), or for a
continued file it found damaged (``DamagedFile``): plain frozen values, pickled back from the
Spark tasks to the driver.

A ``StagedFile`` carries the facts every kind has (where the version is staged and how: whole
file, in-place patch or object extents; its size, valid bytes, block digests and checksum) and
those of its own kind:

* commitlog: ``base_offset``, the records it adds (``count_new``, ``first_new_offset``,
  ``min_ts`` / ``max_ts``, ``zones``), ``end_offset`` and the committed bytes it keeps
  (``kept_bytes``);
* consumequeue: ``topic``, ``queue_id``, ``base_offset``, ``count``, ``min_offset`` /
  ``max_offset`` and the commitlog offsets its units point at (``min_phys`` / ``max_phys``);
* index: its place in the plan (``ordinal``; ``path`` None until the commit names a new file),
  ``count``, ``header`` and whether the batch rolled to it (``roll``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["StagedFile", "DamagedFile", "staged_files"]

DAMAGED = "damaged"      # what a write task's dict result names a damaged continued file (mirror, bench)


@dataclass(frozen=True)
class StagedFile:
    kind: str
    path: str | None
    file_size: int
    valid_bytes: int
    checksum: str | None = None
    blocks: Any = None                       # block digests (checksum.digests_to_detail)
    staged_path: str | None = None           # a whole new file (local stores), renamed at publish
    patch: Mapping[str, Any] | None = None   # an in-place patch (local stores): {"path", "staged", "extents"}
    extents: list[Any] | None = None         # object stores: the version's extents
    extent_lists: list[Any] | None = None    # object stores: the list objects of its older extents
    tail: Any = None                         # object stores: the running digest state of the last block
    head: Any = None                         # object stores: a paged index head
    base_offset: int = 0
    # commitlog
    count_new: int = 0
    first_new_offset: int | None = None
    end_offset: int | None = None
    min_ts: int | None = None
    max_ts: int | None = None
    kept_bytes: int = 0
    zones: Any = None
    # consumequeue
    topic: str | None = None
    queue_id: int | None = None
    count: int = 0
    min_offset: int | None = None
    max_offset: int | None = None
    min_phys: int | None = None
    max_phys: int | None = None
    # index
    ordinal: int | None = None
    header: Mapping[str, int] | None = None
    roll: bool = False

    @classmethod
    def of(cls, facts: Mapping[str, Any]) -> StagedFile:
        """A write task's facts as one value (unknown keys are a bug: TypeError)."""
        return cls(**facts)

    def named(self, path: str) -> StagedFile:
        """This version under the name the commit gave it (a new index file)."""
        return dataclasses.replace(self, path=path)


@dataclass(frozen=True)
class DamagedFile:
    """A continued file whose committed bytes a write task found damaged (``ContinuedFileDamaged``)."""
    path: str
    offset: int
    what: str


def staged_files(results: list[Any]) -> list[StagedFile | DamagedFile]:
    """The write stage's results as values (a producer that still hands dicts: mirror, bench)."""
    out: list[StagedFile | DamagedFile] = []
    for r in results:
        if isinstance(r, (StagedFile, DamagedFile)):
            out.append(r)
        elif r.get("kind") == DAMAGED:
            out.append(DamagedFile(r["path"], r["offset"], r["what"]))
        else:
            out.append(StagedFile.of(r))
    return out
