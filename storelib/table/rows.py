"""The rows of the two Delta tables as values: a manifest row (one file version) and a batch row
(one committed batch, the checkpoints table), with their JSON columns parsed once.

Both are read-only ``dict`` subclasses: the columns are the tables' own (``manifest.MANIFEST_SCHEMA``,
``manifest.CHECKPOINTS_SCHEMA``), so a row goes back into a Delta commit, a snapshot cache or a
JSON answer exactly as it was read, while code above ``table/`` reads it through typed attributes
(``row.valid_bytes``, ``batch.config``, ``row.index_header``) and never parses its JSON itself.

One convention for the JSON columns: a null or empty ``config`` / ``detail`` reads as ``{}``; JSON
that does not parse raises ``ValueError`` where it is first used (``table.rowcheck`` names such a
row before any reader relies on it).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Mapping, NoReturn, Self, TypedDict

from ..errors import BadInput
from ..format.filekinds import FILE_KINDS, FileKind, json_column as _parsed
from ..format.config import DEFAULT_ROCKETMQ_LINE, FILE_SHAPING_KEYS, StoreConfig
from ..format.consumequeue import UNIT_SIZE
from ..format.indexfile import IndexHeader

__all__ = ["last_queue_files", "FileKind", "FILE_KINDS", "ManifestRow", "BatchRow", "FileDetail", "BatchDetail", "RECORDED_KEYS",
           "manifest_rows", "batch_rows", "recorded_config", "overlay", "queue_ends"]


# What a batch records of its configuration (its row's ``config``): the keys that shape the files,
# read by every later reader, and ``flushDiskType``, read by every later writer (expire, repair)
# that must make its own changes as durable as the batches it changes.
RECORDED_KEYS = FILE_SHAPING_KEYS + ("flushDiskType",)

_HEADER_KEYS = IndexHeader._fields


class FileDetail(TypedDict, total=False):
    """A manifest row's ``detail``, per kind. commitlog: ``zones`` (a zone map), ``patch`` (bytes
    continued in place); consumequeue: ``min_phys`` / ``max_phys`` (commitlog offsets its units
    point at), ``logics_physical_offset``; index: ``header`` (the header the batch committed),
    ``head`` (a paged head); every kind: ``extents`` (object stores), ``blocks`` (block sha256s);
    a removal: ``reason``; the checkpoint: its values (``format.checkpoint.Checkpoint``); a
    compaction's marker: ``through_seq``, ``before_version``, ``legacy_version`` (``manifest.COMPACT``)."""
    zones: dict[str, Any]
    patch: dict[str, Any]
    min_phys: int
    max_phys: int
    logics_physical_offset: int
    header: dict[str, int]
    head: dict[str, Any]
    extents: list[Any]
    blocks: Any
    reason: str
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int
    confirm_phy_offset: int
    through_seq: int
    before_version: int
    legacy_version: int


class BatchDetail(TypedDict, total=False):
    """A batch row's ``detail``: an ingest's ``topics`` (its topic config) and ``round_robin``
    positions, a mirror cycle's ``mirror`` state, a repair's or an expiry's counts; every batch
    since the manifest's compaction: ``manifest_version`` and ``queue_offsets`` ("changed")."""
    topics: dict[str, Any]
    round_robin: dict[str, Any]
    mirror: dict[str, Any]
    manifest_version: int
    queue_offsets: str


class _Row(dict[str, Any]):
    """A read-only table row whose JSON columns are parsed on first use, once."""
    __slots__ = ("_parsed",)

    def __init__(self, columns: Mapping[str, Any]) -> None:
        super().__init__(columns)
        self._parsed: dict[Any, Any] = {}

    def _json(self, col: str) -> Any:
        if col not in self._parsed:
            self._parsed[col] = _parsed(self.get(col))
        return self._parsed[col]

    def once(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        """``compute()`` the first time ``key`` is asked of this row, then its result: for what
        depends on the row's columns (read-only) and ``key`` alone."""
        if key not in self._parsed:
            self._parsed[key] = compute()
        return self._parsed[key]

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Self:
        """``row`` as this type (itself when it is one already: a row built by a writer, or read
        by a reader of the raw table, becomes one)."""
        return row if isinstance(row, cls) else cls(row)

    def __reduce__(self) -> tuple[Any, ...]:         # pickled (Spark broadcasts) as its columns
        return (type(self), (dict(self),))

    def _read_only(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError(f"a {type(self).__name__} is read-only: build a new row (manifest.file_row, "
                        f"manifest.remove_row, manifest.checkpoint_row_after)")

    __setitem__ = __delitem__ = update = pop = popitem = setdefault = clear = _read_only  # type: ignore[assignment]
    __ior__ = _read_only  # type: ignore[assignment]

    @property
    def batch_id(self) -> str:
        return str(self["batch_id"])

    @property
    def batch_seq(self) -> int:
        return int(self["batch_seq"])

    @property
    def committed_at(self) -> int | None:
        v = self.get("committed_at")
        return None if v is None else int(v)

    @property
    def attempt_id(self) -> str | None:
        return self.get("attempt_id")

    @property
    def min_store_ts(self) -> int | None:
        return self.get("min_store_ts")

    @property
    def max_store_ts(self) -> int | None:
        return self.get("max_store_ts")


class ManifestRow(_Row):
    """One manifest row: a file version a batch added (``action`` add) or removed (remove)."""
    __slots__ = ()

    @property
    def action(self) -> str:
        return str(self["action"])

    @property
    def kind(self) -> str:
        """The row's kind as stored (compare with ``FileKind``; a damaged row may hold another)."""
        return str(self["kind"])

    @property
    def path(self) -> str:
        return str(self["path"])

    @property
    def staged_path(self) -> str | None:
        return self.get("staged_path")

    @property
    def topic(self) -> str | None:
        return self.get("topic")

    @property
    def queue_id(self) -> int | None:
        v = self.get("queue_id")
        return None if v is None else int(v)

    @property
    def base_offset(self) -> int:
        return int(self.get("base_offset") or 0)

    @property
    def file_size(self) -> int:
        return int(self.get("file_size") or 0)

    @property
    def valid_bytes(self) -> int:
        return int(self.get("valid_bytes") or 0)

    @property
    def count(self) -> int | None:       # (the column: a dict has no count method)
        return self.get("count")

    @property
    def min_offset(self) -> int | None:
        return self.get("min_offset")

    @property
    def max_offset(self) -> int | None:
        return self.get("max_offset")

    @property
    def checksum(self) -> str | None:
        return self.get("checksum")

    @property
    def detail_text(self) -> str:
        """The ``detail`` column as stored ("" for null)."""
        return str(self.get("detail") or "")

    @property
    def detail(self) -> FileDetail:
        """The parsed ``detail`` (``{}`` for null/empty; ValueError for JSON that does not parse)."""
        d: FileDetail = self._json("detail")
        return d

    def has_detail(self, key: str) -> bool:
        """Whether ``detail`` names ``key``, without parsing it (a cheap test on every row)."""
        return f'"{key}"' in self.detail_text

    @property
    def index_header(self) -> IndexHeader:
        """The index header the batch committed (index rows); KeyError / TypeError / ValueError
        when the detail holds none (``table.rowcheck`` refuses such a row)."""
        h = self.detail["header"]
        return IndexHeader(**{k: h[k] for k in _HEADER_KEYS})

    @property
    def min_phys(self) -> int | None:
        return self.detail.get("min_phys")

    @property
    def max_phys(self) -> int | None:
        return self.detail.get("max_phys")


class BatchRow(_Row):
    """One checkpoints-table row: a committed batch and the store's state after it."""
    __slots__ = ()

    @property
    def operation(self) -> str:
        return str(self["operation"])

    @property
    def input_fingerprint(self) -> str | None:
        return self.get("input_fingerprint")

    @property
    def messages(self) -> int:
        return int(self.get("messages") or 0)

    @property
    def record_bytes(self) -> int:
        """The ``bytes`` column: the record bytes the batch wrote."""
        return int(self.get("bytes") or 0)

    @property
    def total_messages(self) -> int:
        return int(self.get("total_messages") or 0)

    @property
    def index_entries(self) -> int:
        return int(self.get("index_entries") or 0)

    @property
    def min_phy_offset(self) -> int:
        return int(self.get("min_phy_offset") or 0)

    @property
    def max_phy_offset(self) -> int:
        return int(self.get("max_phy_offset") or 0)

    @property
    def physic_msg_timestamp(self) -> int:
        return int(self.get("physic_msg_timestamp") or 0)

    @property
    def logics_msg_timestamp(self) -> int:
        return int(self.get("logics_msg_timestamp") or 0)

    @property
    def index_msg_timestamp(self) -> int:
        return int(self.get("index_msg_timestamp") or 0)

    @property
    def wall_time_ms(self) -> int | None:
        return self.get("wall_time_ms")

    @property
    def queue_offsets(self) -> list[dict[str, Any]]:
        if "queue_offsets" not in self:       # (a row of manifest.read_tables(queue_offsets=False))
            raise KeyError(f"batch {self.get('batch_id')!r}: its row was read without queue_offsets")
        return list(self["queue_offsets"] or [])

    @property
    def config(self) -> Mapping[str, Any]:
        """The configuration the batch recorded (``RECORDED_KEYS``; a batch of an older version
        recorded the file-shaping keys alone): ``{}`` for null."""
        c: Mapping[str, Any] = self._json("config")
        return c

    @property
    def detail(self) -> BatchDetail:
        d: BatchDetail = self._json("detail")
        return d

    @property
    def durable(self) -> bool:
        """The batch's files were made durable before its commit (``flushDiskType`` SYNC_FLUSH,
        which a batch that recorded none had)."""
        return bool(self.config.get("flushDiskType", "SYNC_FLUSH") != "ASYNC_FLUSH")

    @property
    def rocketmq_line(self) -> str:
        """The RocketMQ line the store's files match (a store written before the key: "5")."""
        return str(self.config.get("rocketmqVersion", DEFAULT_ROCKETMQ_LINE))

    @property
    def changed_queues_only(self) -> bool:
        """``queue_offsets`` lists only the queues this batch changed (the store's whole map is
        ``queue_ends`` of its live consume-queue rows); a batch of an older version listed all."""
        return self.detail.get("queue_offsets") == "changed"

    @property
    def manifest_version(self) -> int | None:
        """The manifest-table version that holds this batch's rows (a batch of an older version
        recorded none): ``--as-of-batch`` reads that version once later compactions dropped them."""
        v = self.detail.get("manifest_version")
        return v if type(v) is int else None

    def matches(self, as_of_batch: str | int) -> bool:
        """Whether ``as_of_batch`` (a batch id, or a sequence number as int or text) names this
        batch: the one rule every ``--as-of-batch`` goes through."""
        return self.batch_id == str(as_of_batch) or str(self.batch_seq) == str(as_of_batch)


def check_batch_id(batch_id: str) -> str:
    """A batch id given to a writer (``--batch-id``), or ``BadInput`` (exit 2) if it could not name
    its batch: ``matches`` reads digits alone as a sequence number (``--as-of-batch 1`` would name
    seq 1 and a batch called "1" alike), and the id names its staging directory (one path
    component of at most 255 bytes)."""
    if not batch_id or any(c in batch_id for c in "/\\\0") or batch_id in (".", ".."):
        raise BadInput(f"invalid batch id {batch_id!r}: no '/', '\\' or empty ids (nothing was written)")
    if batch_id.isascii() and batch_id.isdigit():
        raise BadInput(f"invalid batch id {batch_id!r}: digits alone read as a batch sequence number in "
                       f"--as-of-batch; give it a letter (nothing was written)")
    if len(batch_id.encode("utf-8", "surrogatepass")) > 255:
        raise BadInput(f"invalid batch id {batch_id[:40]!r}...: longer than 255 UTF-8 bytes (it names a "
                       f"directory; nothing was written)")
    return batch_id


def manifest_rows(rows: Iterable[Mapping[str, Any]]) -> list[ManifestRow]:
    return [ManifestRow.of(r) for r in rows]


def batch_rows(rows: Iterable[Mapping[str, Any]]) -> list[BatchRow]:
    return [BatchRow.of(r) for r in rows]


def recorded_config(batch: BatchRow | None, base: StoreConfig | None = None) -> StoreConfig:
    """``base`` (default: RocketMQ's defaults) with the file-shaping keys ``batch`` recorded. Only
    file-shaping keys: what else a batch records (``RECORDED_KEYS``: ``flushDiskType``) is that
    batch's own, read from its row (``BatchRow.durable``)."""
    return overlay(base or StoreConfig(), batch.config if batch is not None else {})


def overlay(base: StoreConfig, recorded: Mapping[str, Any]) -> StoreConfig:
    """``base`` with the file-shaping keys of ``recorded`` (a batch's config, an export's
    properties): the one place a store's own sizes go over a command's configuration."""
    shaping = {k: recorded[k] for k in FILE_SHAPING_KEYS if k in recorded}
    return dataclasses.replace(base, **shaping) if shaping else base


def last_queue_files(files: Iterable[ManifestRow]) -> dict[tuple[str, int], ManifestRow]:
    """``{(topic, queue_id): row}`` of each queue's last file among the consume-queue rows of
    ``files`` (the one a batch continues)."""
    last: dict[tuple[str, int], ManifestRow] = {}
    for r in files:
        if r.kind != FileKind.CONSUMEQUEUE:
            continue
        key = (str(r["topic"]), int(r["queue_id"]))
        cur = last.get(key)
        if cur is None or r.base_offset > cur.base_offset:
            last[key] = r
    return last


def queue_ends(files: Iterable[ManifestRow]) -> dict[tuple[str, int], int]:
    """``{(topic, queue_id): next offset}`` of the queues the live consume-queue rows ``files``
    hold: the end of each queue's last file (what a batch row's ``queue_offsets`` listed whole
    before batches listed only the queues they changed)."""
    last = last_queue_files(files)
    return {k: r.base_offset // UNIT_SIZE + r.valid_bytes // UNIT_SIZE for k, r in last.items()}
