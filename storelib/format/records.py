"""One commitlog record at a time, as RocketMQ's ``MessageDecoder`` reads it (docs/FORMAT.md §1, §6).

The in-process readers (``storelib.read.query`` and its parts, ``storelib.table.storefiles``' recovery walk)
read a record's bytes with one range read and turn them into answers here: the header fields a
broker peeks at (TOTALSIZE, MAGICCODE, PHYSICALOFFSET, the store timestamp), the whole record as a
dict (``decode_message``), offset message ids, and the golden answers' form of a message. The
record layout and its pack/parse helpers are ``storelib.format.commitlog``'s; the column-at-a-time decoder
the Spark readers use is ``codec.decode_records``.
"""
from __future__ import annotations

import hashlib
from typing import Any

from . import commitlog as cl
from .commitlog import Buffer
# Plain-Python text forms: hosts/properties load numba and pyarrow, which the shell lookup avoids.
from .textforms import format_host, parse_properties_string

__all__ = ["STORE_TIMESTAMP_POSITION", "PHYS_END", "record_head", "total_size_at", "record_phys_offset",
           "pickup_store_timestamp", "earliest_probe_size", "decode_message", "decode_msg_id", "answer_message",
           "message_keys", "is_queued", "is_rollback", "MESSAGE_FIELDS", "MESSAGE_COLUMNS", "message_row"]

# The public message columns, in order, with their Spark SQL types: the single lookups print them as
# JSON without building an Arrow table; ``read.rangescan`` derives its Arrow schema and Spark DDL from them.
MESSAGE_FIELDS = (
    ("commitlog_offset", "bigint"), ("store_size", "int"), ("msg_id", "string"), ("topic", "string"),
    ("queue_id", "int"), ("queue_offset", "bigint"), ("flag", "int"), ("sys_flag", "int"), ("body_crc", "int"),
    ("born_timestamp", "bigint"), ("born_host", "string"), ("store_timestamp", "bigint"), ("store_host", "string"),
    ("reconsume_times", "int"), ("prepared_transaction_offset", "bigint"), ("body", "binary"),
    ("properties", "map<string,string>"), ("tags", "string"), ("keys", "string"), ("uniq_key", "string"))
MESSAGE_COLUMNS = tuple(name for name, _ in MESSAGE_FIELDS)

# MessageDecoder.MESSAGE_STORE_TIMESTAMP_POSITION: where the store timestamp is after an IPv4 born host.
STORE_TIMESTAMP_POSITION = cl.storetimestamp_offset(0)
PHYS_END = cl.POS_PHYSICALOFFSET + cl.SIZE_PHYSICALOFFSET     # the header up to the end of PHYSICALOFFSET


# ----------------------------------------------------------------------------- header peeks
def record_head(buf: Buffer, pos: int = 0) -> tuple[int, int] | None:
    """(TOTALSIZE, MAGICCODE) of the record at ``pos``; None if ``buf`` ends before them."""
    if pos < 0 or pos + cl.BLANK_SIZE > len(buf):
        return None
    return cl.parse_size_magic(buf, pos)


def total_size_at(buf: Buffer, pos: int = 0) -> int | None:
    """TOTALSIZE of the record at ``pos`` (Java's ``getInt(0)``); None if ``buf`` is too short."""
    if pos + cl.POS_TOTALSIZE + cl.SIZE_TOTALSIZE > len(buf):
        return None
    return cl.parse_i32(buf, pos + cl.POS_TOTALSIZE)


def record_phys_offset(buf: Buffer, pos: int = 0) -> int | None:
    """PHYSICALOFFSET of the record at ``pos``; None if ``buf`` is too short."""
    if pos + PHYS_END > len(buf):
        return None
    return cl.parse_i64(buf, pos + cl.POS_PHYSICALOFFSET)


def pickup_store_timestamp(raw: Buffer) -> int | None:
    """The store timestamp in a record's bytes (CommitLog.pickupStoreTimestamp's reads: SYSFLAG,
    then the timestamp after the born host); None where Java throws (too few bytes)."""
    if cl.POS_SYSFLAG + cl.SIZE_SYSFLAG > len(raw):
        return None
    pos = cl.storetimestamp_offset(cl.parse_i32(raw, cl.POS_SYSFLAG))
    if pos + cl.SIZE_STORETIMESTAMP > len(raw):
        return None
    return cl.parse_i64(raw, pos)


def earliest_probe_size(store_host_v6: bool) -> int:
    """Bytes ``getEarliestMessageTime`` picks up: STORE_TIMESTAMP_POSITION + the broker's host size."""
    return STORE_TIMESTAMP_POSITION + cl.host_size(store_host_v6)


# ----------------------------------------------------------------------------- whole record
def decode_message(buf: bytes | bytearray | memoryview) -> dict[str, Any] | None:
    """MessageDecoder.decode(buffer, readBody=true, deCompressBody=false) of one record, as a dict.

    ``buf`` is exactly the record's bytes (the SelectMappedBufferResult). None where Java's
    decoder throws (unknown magic, buffer underflow, negative lengths): ``commitlog.parse_record``.
    """
    r = cl.parse_record(buf)
    if r is None:
        return None
    return {
        "commitlog_offset": r.physical_offset, "store_size": r.total_size,
        "msg_id": cl.make_msg_id(r.store_host, r.physical_offset),
        "topic": r.topic.decode("utf-8", "replace"), "queue_id": r.queue_id, "queue_offset": r.queue_offset,
        "flag": r.flag, "sys_flag": r.sys_flag, "body_crc": r.body_crc, "born_timestamp": r.born_timestamp,
        "born_host": format_host(r.born_host), "store_timestamp": r.store_timestamp,
        "store_host": format_host(r.store_host), "reconsume_times": r.reconsume_times,
        "prepared_transaction_offset": r.prepared_transaction_offset, "body": r.body,
        "properties_string": r.properties.decode("utf-8", "replace"),
    }


# ----------------------------------------------------------------------------- message ids
def decode_msg_id(msg_id: str) -> tuple[bytes, int]:
    """MessageDecoder.decodeMessageId -> (store host bytes, commitlog offset): 32 hex characters =
    an IPv4 store host, anything else IPv6. ``ValueError`` when the id is too short for its host
    kind or its host part is not hex (``commitlog.parse_msg_id`` is the unchecked form)."""
    host_hex = 2 * (cl.HOST_V4_SIZE if len(msg_id) == cl.MSG_ID_V4_HEX_LENGTH else cl.HOST_V6_SIZE)
    off_len = 2 * cl.SIZE_PHYSICALOFFSET
    raw_host = bytes.fromhex(msg_id[:host_hex])
    off_hex = msg_id[host_hex:host_hex + off_len]
    if len(raw_host) * 2 != host_hex or len(off_hex) != off_len:
        raise ValueError(f"malformed message id {msg_id!r}")
    return raw_host, cl.parse_i64(bytes.fromhex(off_hex))


# ----------------------------------------------------------------------------- answers
def answer_message(msg: dict[str, Any], with_properties_string: bool) -> dict[str, Any]:
    """A decoded message in the golden answers' form (docs/FORMAT.md §7.2)."""
    out = {k: msg[k] for k in ("commitlog_offset", "store_size", "msg_id", "topic", "queue_id",
                               "queue_offset", "flag", "sys_flag", "body_crc", "born_timestamp",
                               "born_host", "store_timestamp", "store_host", "reconsume_times",
                               "prepared_transaction_offset")}
    body = msg["body"]
    out["body_len"] = len(body)
    out["body_sha256"] = hashlib.sha256(body).hexdigest()
    out["properties_sorted"] = [[k, v] for k, v in sorted(parse_properties_string(msg["properties_string"]).items())]
    if with_properties_string:
        out["properties_string"] = msg["properties_string"]
    return out


def message_keys(msg: dict[str, Any]) -> tuple[str | None, list[str]]:
    """(UNIQ_KEY, non-empty KEYS tokens) as the index dispatch reads them."""
    props = parse_properties_string(msg["properties_string"])
    keys = props.get("KEYS")
    return props.get("UNIQ_KEY"), [t for t in keys.split(" ") if t] if keys else []


def is_queued(sys_flag: int) -> bool:
    """A NOT or COMMIT record (one with a consume-queue unit; PREPARED and ROLLBACK have none)."""
    return (sys_flag & cl.TRANSACTION_MASK) in (cl.TRANSACTION_NOT, cl.TRANSACTION_COMMIT)


def is_rollback(sys_flag: int) -> bool:
    """A ROLLBACK record (never indexed, never in a consume queue)."""
    return (sys_flag & cl.TRANSACTION_MASK) == cl.TRANSACTION_ROLLBACK


def message_row(msg: dict[str, Any]) -> dict[str, Any]:
    """A ``decode_message`` dict as a row of the public message columns (``MESSAGE_COLUMNS``):
    properties as a dict, TAGS/KEYS/UNIQ_KEY pulled out, fields it lacks None."""
    p = parse_properties_string(msg["properties_string"])
    row = {k: msg.get(k) for k in MESSAGE_COLUMNS}
    row["properties"] = p
    row["tags"], row["keys"], row["uniq_key"] = p.get("TAGS"), p.get("KEYS"), p.get("UNIQ_KEY")
    return row
