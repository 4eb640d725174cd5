"""CommitLog segments and the message record: the one definition of their layout (docs/FORMAT.md §1).

Every writer and reader of commitlog bytes (kernels, codec, records/query, verify, rangescan,
keylookup, inspect, hosts) takes offsets, sizes, magic codes and pack/parse helpers from here.
This module is a leaf (standard library and numpy only at import time, no function-local imports
either), so ``kernels`` can import its constants: in numba, module-level ints are compile-time
constants. The record walk over a segment buffer is therefore ``codec.record_starts``, not here.

**Segments** (§1.1, §1.7). Directory ``commitlog/``; each file is exactly ``mappedFileSizeCommitLog``
bytes and is named by the absolute offset of its first byte, 20 decimal digits (``file_name``).
Records follow each other with no gap. A message of TOTALSIZE L goes into the current file only
if ``L + MIN_BLANK <= fileSize - pos`` (``fits``); otherwise an 8-byte BLANK record closes the file
(``blank_record``)::

    @pos      int32  fileSize - pos   (the whole remaining length)
    @pos+4    int32  BLANK_MAGIC 0xCBD43194

and the message starts the next file at position 0. The rest of a closed file, and the tail of the
last file, stay zero. A reader stops at a BLANK (next segment), a TOTALSIZE <= 0 or an unknown magic
(end of data): ``codec.record_starts`` (the compiled walk ``kernels.walk_records``).

**Record** (§1.2). B = born host size, S = store host size (``HOST_V4_SIZE`` 8 / ``HOST_V6_SIZE``
20, chosen by SYSFLAG bits ``FLAG_BORNHOST_V6`` 0x10 / ``FLAG_STOREHOST_V6`` 0x20); T = topic
length field size (``TOPIC_LENGTH_SIZE_V1`` 1 for ``MAGIC_V1``, ``TOPIC_LENGTH_SIZE_V2`` 2 for
``MAGIC_V2``)::

    field                      offset constant / helper             at        size constant
    TOTALSIZE                  POS_TOTALSIZE                        0         SIZE_TOTALSIZE 4
    MAGICCODE                  POS_MAGIC                            4         SIZE_MAGIC 4
    BODYCRC                    POS_BODYCRC                          8         SIZE_BODYCRC 4
    QUEUEID                    POS_QUEUEID                          12        SIZE_QUEUEID 4
    FLAG                       POS_FLAG                             16        SIZE_FLAG 4
    QUEUEOFFSET                POS_QUEUEOFFSET                      20        SIZE_QUEUEOFFSET 8
    PHYSICALOFFSET             POS_PHYSICALOFFSET                   28        SIZE_PHYSICALOFFSET 8
    SYSFLAG                    POS_SYSFLAG                          36        SIZE_SYSFLAG 4
    BORNTIMESTAMP              POS_BORNTIMESTAMP                    40        SIZE_BORNTIMESTAMP 8
    BORNHOST                   POS_BORNHOST (= FIXED_SIZE)          48        B = born_host_size(sysflag)
    STORETIMESTAMP             storetimestamp_offset(sysflag)       48+B      SIZE_STORETIMESTAMP 8
    STOREHOST                  storehost_offset(sysflag)            56+B      S = store_host_size(sysflag)
    RECONSUMETIMES             reconsumetimes_offset(sysflag)       56+B+S    SIZE_RECONSUMETIMES 4
    PREPAREDTRANSACTIONOFFSET  prepared_tx_offset_offset(sysflag)   60+B+S    SIZE_PREPARED_TX_OFFSET 8
    BODYLENGTH                 bodylength_offset(sysflag)           68+B+S    SIZE_BODYLENGTH 4
    BODY                       body_offset(sysflag)                 72+B+S    bodyLen
    TOPICLENGTH                                                               T = topic_length_size(magic)
    TOPIC                                                                     topicLen (UTF-8)
    PROPERTIESLENGTH                                                          SIZE_PROPERTIESLENGTH 2
    PROPERTIES                                                                propLen (UTF-8)

Names defined here:

* fixed part: the ``POS_*`` offsets and ``SIZE_*`` sizes above, ``FIXED_SIZE`` 48 (the
  fixed-position part, TOTALSIZE .. BORNTIMESTAMP);
* after the hosts (for kernels, which derive B and S from SYSFLAG themselves): relative to the end
  of BORNHOST ``REL_STORETIMESTAMP`` 0, ``REL_STOREHOST`` 8; relative to the end of STOREHOST
  ``REL_RECONSUMETIMES`` 0, ``REL_PREPARED_TX_OFFSET`` 4, ``REL_BODYLENGTH`` 12, ``REL_BODY`` 16;
* hosts: ``IPV4_ADDR_SIZE`` 4, ``IPV6_ADDR_SIZE`` 16, ``HOST_PORT_SIZE`` 4, ``HOST_V4_SIZE`` 8,
  ``HOST_V6_SIZE`` 20, ``FLAG_BORNHOST_V6`` 0x10, ``FLAG_STOREHOST_V6`` 0x20;
* topic / properties: ``TOPIC_LENGTH_SIZE_V1`` 1, ``TOPIC_LENGTH_SIZE_V2`` 2, ``MAX_TOPIC_LENGTH_V1``
  127, ``MAX_TOPIC_LENGTH_V2`` 32767, ``V2_TOPIC_CHARS`` 127 (a topic of more UTF-16 units is written
  V2), ``SIZE_PROPERTIESLENGTH`` 2, ``MAX_PROPERTIES_LENGTH`` 32767;
* whole record: ``RECORD_OVERHEAD`` 72 (every fixed field but the hosts: TOTALSIZE = 72 + B + S +
  bodyLen + T + topicLen + 2 + propLen), ``MIN_RECORD_SIZE`` 91, ``record_size``;
* magic codes: ``MAGIC_V1``, ``MAGIC_V2``, ``BLANK_MAGIC``; the other SYSFLAG bits: ``FLAG_COMPRESSED``,
  ``FLAG_MULTI_TAGS``, ``TRANSACTION_MASK`` and the transaction types ``TRANSACTION_NOT`` / ``_PREPARED`` /
  ``_COMMIT`` / ``_ROLLBACK``;
* end of segment: ``BLANK_SIZE`` 8 (TOTALSIZE + MAGICCODE, also what a walk reads per record),
  ``MIN_BLANK`` (RocketMQ's ``END_FILE_MIN_BLANK_LENGTH``) 8, ``is_record_start``, ``fits``, ``blank_record``,
  ``parse_blank``;
* per-SYSFLAG / per-magic helpers (ints or numpy arrays): ``host_size``, ``born_host_size``,
  ``store_host_size``, ``topic_length_size``, ``storetimestamp_offset``, ``storehost_offset``,
  ``reconsumetimes_offset``, ``prepared_tx_offset_offset``, ``bodylength_offset``, ``body_offset``;
* pack/parse: ``FixedHeader`` / ``parse_fixed(buf, pos)`` / ``pack_fixed``, ``parse_size_magic``,
  ``parse_i32`` / ``parse_i64`` (one field), ``pack_topic_length``, ``pack_host`` / ``unpack_host``,
  ``Record`` / ``parse_record(buf, pos)`` (Java ``MessageDecoder.decode`` rules) / ``pack_record``,
  ``MSG_ID_V4_HEX_LENGTH``, ``make_msg_id`` / ``parse_msg_id`` (§1.9);
* segments: ``DIR``, ``file_name``, ``rel_path``.
"""
from __future__ import annotations

import struct
from typing import Any, NamedTuple, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt

from .paths import COMMITLOG_DIR

__all__ = [
    # segments
    "DIR", "file_name", "rel_path",
    # magic codes and the SYSFLAG bits
    "MAGIC_V1", "MAGIC_V2", "BLANK_MAGIC", "FLAG_BORNHOST_V6", "FLAG_STOREHOST_V6", "FLAG_COMPRESSED",
    "FLAG_MULTI_TAGS", "TRANSACTION_MASK", "TRANSACTION_NOT", "TRANSACTION_PREPARED", "TRANSACTION_COMMIT",
    "TRANSACTION_ROLLBACK",
    # fixed part
    "POS_TOTALSIZE", "POS_MAGIC", "POS_BODYCRC", "POS_QUEUEID", "POS_FLAG", "POS_QUEUEOFFSET", "POS_PHYSICALOFFSET",
    "POS_SYSFLAG", "POS_BORNTIMESTAMP", "POS_BORNHOST", "FIXED_SIZE",
    "SIZE_TOTALSIZE", "SIZE_MAGIC", "SIZE_BODYCRC", "SIZE_QUEUEID", "SIZE_FLAG", "SIZE_QUEUEOFFSET",
    "SIZE_PHYSICALOFFSET", "SIZE_SYSFLAG", "SIZE_BORNTIMESTAMP", "SIZE_STORETIMESTAMP", "SIZE_RECONSUMETIMES",
    "SIZE_PREPARED_TX_OFFSET", "SIZE_BODYLENGTH", "SIZE_PROPERTIESLENGTH",
    # after the hosts
    "REL_STORETIMESTAMP", "REL_STOREHOST", "REL_RECONSUMETIMES", "REL_PREPARED_TX_OFFSET", "REL_BODYLENGTH",
    "REL_BODY",
    # hosts, topic, limits
    "IPV4_ADDR_SIZE", "IPV6_ADDR_SIZE", "HOST_PORT_SIZE", "HOST_V4_SIZE", "HOST_V6_SIZE",
    "TOPIC_LENGTH_SIZE_V1", "TOPIC_LENGTH_SIZE_V2", "MAX_TOPIC_LENGTH_V1", "MAX_TOPIC_LENGTH_V2", "V2_TOPIC_CHARS",
    "MAX_PROPERTIES_LENGTH", "RECORD_OVERHEAD", "MIN_RECORD_SIZE",
    # end of segment
    "BLANK_SIZE", "MIN_BLANK", "is_record_start", "fits", "blank_record", "parse_blank",
    # per-record helpers
    "host_size", "born_host_size", "store_host_size", "topic_length_size", "storetimestamp_offset",
    "storehost_offset", "reconsumetimes_offset", "prepared_tx_offset_offset", "bodylength_offset", "body_offset",
    "record_size",
    # pack / parse
    "FixedHeader", "parse_fixed", "pack_fixed", "parse_size_magic", "parse_i32", "parse_i64", "pack_topic_length",
    "pack_host", "unpack_host", "Record", "parse_record", "pack_record", "MSG_ID_V4_HEX_LENGTH", "make_msg_id",
    "parse_msg_id",
]

DIR = COMMITLOG_DIR

# ---------------------------------------------------------------------------- magic codes, SYSFLAG bits
MAGIC_V1 = -626843481          # 0xDAA320A7: 1-byte TOPICLENGTH
MAGIC_V2 = -626843477          # 0xDAA320AB: 2-byte TOPICLENGTH
BLANK_MAGIC = -875286124       # 0xCBD43194: the end-of-segment record
FLAG_BORNHOST_V6 = 0x10        # BORNHOST is HOST_V6_SIZE bytes
FLAG_STOREHOST_V6 = 0x20       # STOREHOST is HOST_V6_SIZE bytes
FLAG_COMPRESSED = 0x1          # MessageSysFlag.COMPRESSED_FLAG
FLAG_MULTI_TAGS = 0x2          # MessageSysFlag.MULTI_TAGS_FLAG
TRANSACTION_MASK = 0xC         # MessageSysFlag's transaction type bits
TRANSACTION_NOT = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC

# ---------------------------------------------------------------------------- fixed-position part
POS_TOTALSIZE = 0
POS_MAGIC = 4
POS_BODYCRC = 8
POS_QUEUEID = 12
POS_FLAG = 16
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_BORNTIMESTAMP = 40
POS_BORNHOST = 48
FIXED_SIZE = POS_BORNHOST      # bytes before the first variable-size field

SIZE_TOTALSIZE = 4
SIZE_MAGIC = 4
SIZE_BODYCRC = 4
SIZE_QUEUEID = 4
SIZE_FLAG = 4
SIZE_QUEUEOFFSET = 8
SIZE_PHYSICALOFFSET = 8
SIZE_SYSFLAG = 4
SIZE_BORNTIMESTAMP = 8
SIZE_STORETIMESTAMP = 8
SIZE_RECONSUMETIMES = 4
SIZE_PREPARED_TX_OFFSET = 8
SIZE_BODYLENGTH = 4
SIZE_PROPERTIESLENGTH = 2

# ---------------------------------------------------------------------------- hosts, topic
IPV4_ADDR_SIZE = 4
IPV6_ADDR_SIZE = 16
HOST_PORT_SIZE = 4                                  # int32 after the address bytes
HOST_V4_SIZE = IPV4_ADDR_SIZE + HOST_PORT_SIZE      # 8
HOST_V6_SIZE = IPV6_ADDR_SIZE + HOST_PORT_SIZE      # 20
TOPIC_LENGTH_SIZE_V1 = 1       # signed byte
TOPIC_LENGTH_SIZE_V2 = 2       # signed short
MAX_TOPIC_LENGTH_V1 = 127
MAX_TOPIC_LENGTH_V2 = 32767
V2_TOPIC_CHARS = 127           # autoMessageVersionOnTopicLen: V2 when the topic has more UTF-16 units
MAX_PROPERTIES_LENGTH = 32767  # Short.MAX_VALUE

# ---------------------------------------------------------------------------- after the hosts
# Relative to the end of BORNHOST (POS_BORNHOST + B).
REL_STORETIMESTAMP = 0
REL_STOREHOST = REL_STORETIMESTAMP + SIZE_STORETIMESTAMP                # 8
# Relative to the end of STOREHOST (POS_BORNHOST + B + REL_STOREHOST + S).
REL_RECONSUMETIMES = 0
REL_PREPARED_TX_OFFSET = REL_RECONSUMETIMES + SIZE_RECONSUMETIMES      # 4
REL_BODYLENGTH = REL_PREPARED_TX_OFFSET + SIZE_PREPARED_TX_OFFSET      # 12
REL_BODY = REL_BODYLENGTH + SIZE_BODYLENGTH                           # 16

# TOTALSIZE = RECORD_OVERHEAD + B + S + bodyLen + T + topicLen + SIZE_PROPERTIESLENGTH + propLen
# (MessageExtEncoder.calMsgLength): every fixed field except the two hosts.
RECORD_OVERHEAD = FIXED_SIZE + REL_STOREHOST + REL_BODY               # 72
MIN_RECORD_SIZE = RECORD_OVERHEAD + 2 * HOST_V4_SIZE + TOPIC_LENGTH_SIZE_V1 + SIZE_PROPERTIESLENGTH   # 91

# ---------------------------------------------------------------------------- end of a segment
BLANK_SIZE = SIZE_TOTALSIZE + SIZE_MAGIC    # 8: what a BLANK record writes (and a walk reads per record)
MIN_BLANK = 8                  # RocketMQ's END_FILE_MIN_BLANK_LENGTH: room a record must leave behind it

# The field helpers take one value or a numpy array of them (a batch of records) and answer in kind.
Array = npt.NDArray[Any]
# What the parsers read: bytes, or a numpy uint8 array (both hold the buffer protocol; numpy's stubs do
# not say so to struct, hence the ignores on its unpack_from calls).
Buffer = bytes | bytearray | memoryview | Array
IntOrArray = TypeVar("IntOrArray", int, Array)

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_SIZE_MAGIC = struct.Struct(">ii")
_FIXED = struct.Struct(">iiiiiqqiq")            # TOTALSIZE .. BORNTIMESTAMP
_AFTER_STOREHOST = struct.Struct(">iqi")        # RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODYLENGTH
_I16 = struct.Struct(">h")
_I8 = struct.Struct(">b")
assert _FIXED.size == FIXED_SIZE and _AFTER_STOREHOST.size == REL_BODY


def file_name(offset: int) -> str:
    """UtilAll.offset2FileName: the offset in 20 decimal digits."""
    return f"{offset:020d}"


def rel_path(base_offset: int) -> str:
    return f"{DIR}/{file_name(base_offset)}"


def is_record_start(size: IntOrArray, magic: IntOrArray, pos: IntOrArray, limit: int) -> Any:
    """A record starts at ``pos`` as a broker's recovery walk reads it: a message magic and a TOTALSIZE
    > 0 that ends by ``limit`` (a BLANK record, zeros or garbage end the data). Ints or numpy arrays;
    the compiled walk (``compute.kernels.walk_records``) applies the same rule."""
    return ((magic == MAGIC_V1) | (magic == MAGIC_V2)) & (size > 0) & (pos + size <= limit)


def fits(pos: IntOrArray, size: IntOrArray, file_size: int) -> Any:
    """A record of ``size`` bytes may be appended at ``pos``: ``size + MIN_BLANK <= file_size - pos``."""
    return size + MIN_BLANK <= file_size - pos


def blank_record(pos: int, file_size: int) -> bytes:
    """The BLANK record closing a segment at ``pos``: the remaining length, then BLANK_MAGIC."""
    return _SIZE_MAGIC.pack(file_size - pos, BLANK_MAGIC)


def parse_blank(buf: Buffer, pos: int = 0) -> int | None:
    """The length field of the BLANK record at ``pos``, or None if there is none."""
    size, magic = parse_size_magic(buf, pos)
    return size if magic == BLANK_MAGIC else None


# ---------------------------------------------------------------------------- variable parts
@overload
def host_size(is_v6: bool) -> int: ...
@overload
def host_size(is_v6: Array) -> Array: ...
def host_size(is_v6: bool | Array) -> int | Array:
    """HOST_V6_SIZE where ``is_v6`` else HOST_V4_SIZE (bool or bool array)."""
    return cast(Array, np.where(is_v6, HOST_V6_SIZE, HOST_V4_SIZE)) if isinstance(is_v6, np.ndarray) \
        else (HOST_V6_SIZE if is_v6 else HOST_V4_SIZE)


def born_host_size(sysflag: IntOrArray) -> IntOrArray:
    """Size of BORNHOST for a SYSFLAG value (int or int array)."""
    if isinstance(sysflag, np.ndarray):
        return host_size(cast(Array, (sysflag & FLAG_BORNHOST_V6) != 0))
    return host_size(bool(sysflag & FLAG_BORNHOST_V6))


def store_host_size(sysflag: IntOrArray) -> IntOrArray:
    """Size of STOREHOST for a SYSFLAG value (int or int array)."""
    if isinstance(sysflag, np.ndarray):
        return host_size(cast(Array, (sysflag & FLAG_STOREHOST_V6) != 0))
    return host_size(bool(sysflag & FLAG_STOREHOST_V6))


def topic_length_size(magic: IntOrArray) -> IntOrArray:
    """Size of TOPICLENGTH for a MAGICCODE: 2 for MAGIC_V2, else 1 (int or int array)."""
    if isinstance(magic, np.ndarray):
        return np.where(magic == MAGIC_V2, TOPIC_LENGTH_SIZE_V2, TOPIC_LENGTH_SIZE_V1)
    return TOPIC_LENGTH_SIZE_V2 if magic == MAGIC_V2 else TOPIC_LENGTH_SIZE_V1


def storetimestamp_offset(sysflag: IntOrArray) -> IntOrArray:
    """Offset of STORETIMESTAMP in a record with this SYSFLAG (MessageDecoder's constant 56 is the IPv4 case)."""
    return POS_BORNHOST + born_host_size(sysflag) + REL_STORETIMESTAMP


def storehost_offset(sysflag: IntOrArray) -> IntOrArray:
    return POS_BORNHOST + born_host_size(sysflag) + REL_STOREHOST


def _after_storehost(sysflag: IntOrArray) -> IntOrArray:
    return storehost_offset(sysflag) + store_host_size(sysflag)


def reconsumetimes_offset(sysflag: IntOrArray) -> IntOrArray:
    return _after_storehost(sysflag) + REL_RECONSUMETIMES


def prepared_tx_offset_offset(sysflag: IntOrArray) -> IntOrArray:
    return _after_storehost(sysflag) + REL_PREPARED_TX_OFFSET


def bodylength_offset(sysflag: IntOrArray) -> IntOrArray:
    return _after_storehost(sysflag) + REL_BODYLENGTH


def body_offset(sysflag: IntOrArray) -> IntOrArray:
    return _after_storehost(sysflag) + REL_BODY


def record_size(body_len: IntOrArray, topic_len: IntOrArray, props_len: IntOrArray, born_v6: bool | Array = False,
                store_v6: bool | Array = False, v2: bool | Array = False) -> IntOrArray:
    """TOTALSIZE (MessageExtEncoder.calMsgLength); ``topic_len`` without the TOPICLENGTH field.
    Works on ints and numpy arrays alike."""
    t = np.where(v2, TOPIC_LENGTH_SIZE_V2, TOPIC_LENGTH_SIZE_V1) if isinstance(v2, np.ndarray) \
        else (TOPIC_LENGTH_SIZE_V2 if v2 else TOPIC_LENGTH_SIZE_V1)
    return cast(IntOrArray, RECORD_OVERHEAD + host_size(born_v6) + host_size(store_v6) + body_len + t + topic_len
                + SIZE_PROPERTIESLENGTH + props_len)


# ---------------------------------------------------------------------------- pack / parse
class FixedHeader(NamedTuple):
    """The fixed-position part of a record, TOTALSIZE .. BORNTIMESTAMP (FIXED_SIZE bytes)."""
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int


def parse_fixed(buf: Buffer, pos: int = 0) -> FixedHeader:
    """The fixed part of the record at ``pos`` (struct.error if fewer than FIXED_SIZE bytes)."""
    return FixedHeader(*_FIXED.unpack_from(buf, pos))  # type: ignore[arg-type]


def pack_fixed(h: FixedHeader) -> bytes:
    return _FIXED.pack(*h)


def parse_size_magic(buf: Buffer, pos: int = 0) -> tuple[int, int]:
    """(TOTALSIZE, MAGICCODE) at ``pos``: what a segment walk reads (BLANK_SIZE bytes)."""
    size, magic = _SIZE_MAGIC.unpack_from(buf, pos)  # type: ignore[arg-type]
    return size, magic


def parse_i32(buf: Buffer, pos: int = 0) -> int:
    """A big-endian int32 field of a record (e.g. at ``POS_SYSFLAG``)."""
    value: int = _I32.unpack_from(buf, pos)[0]  # type: ignore[arg-type]
    return value


def parse_i64(buf: Buffer, pos: int = 0) -> int:
    """A big-endian int64 field of a record (e.g. at ``POS_PHYSICALOFFSET`` or ``storetimestamp_offset``)."""
    value: int = _I64.unpack_from(buf, pos)[0]  # type: ignore[arg-type]
    return value


def pack_topic_length(length: int, v2: bool) -> bytes:
    """The TOPICLENGTH field: int16 for V2, int8 for V1."""
    return _I16.pack(length) if v2 else _I8.pack(length)


def pack_host(addr: bytes, port: int) -> bytes:
    """BORNHOST / STOREHOST bytes: address (4 or 16 bytes), then the port as int32."""
    return bytes(addr) + _I32.pack(int(port))


def unpack_host(raw: bytes) -> tuple[bytes, int]:
    """(address bytes, port) of a packed host (HOST_V4_SIZE or HOST_V6_SIZE bytes)."""
    return bytes(raw[:-HOST_PORT_SIZE]), _I32.unpack_from(raw, len(raw) - HOST_PORT_SIZE)[0]


# One record's fields as stored (hosts packed, topic and properties as raw UTF-8): the fixed
# header's fields, then the rest in record order.
class Record(NamedTuple):
    """One record's fields: FixedHeader's (the same names, in the same order), then the rest."""
    total_size: int
    magic: int
    body_crc: int
    queue_id: int
    flag: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int
    body: bytes
    topic: bytes
    properties: bytes


assert Record._fields[:len(FixedHeader._fields)] == FixedHeader._fields


def parse_record(buf: Buffer, pos: int = 0) -> Record | None:
    """The record at ``buf[pos:]`` decoded the way ``MessageDecoder.decode(buffer, readBody=true,
    deCompressBody=false)`` does; None where Java's decoder throws (unknown magic, buffer underflow,
    negative topic length). ``buf`` should end where the record ends. A BODYLENGTH <= 0 gives an
    empty body, a PROPERTIESLENGTH <= 0 no properties (both read as signed)."""
    n = len(buf)
    try:
        h = parse_fixed(buf, pos)
        if h.magic == MAGIC_V1:
            tl = TOPIC_LENGTH_SIZE_V1
        elif h.magic == MAGIC_V2:
            tl = TOPIC_LENGTH_SIZE_V2
        else:
            return None
        p = pos + POS_BORNHOST
        bl = born_host_size(h.sys_flag)
        if p + bl > n:
            return None
        born = bytes(buf[p:p + bl])
        p += bl
        store_ts = parse_i64(buf, p + REL_STORETIMESTAMP)
        p += REL_STOREHOST
        sl = store_host_size(h.sys_flag)
        if p + sl > n:
            return None
        store_host = bytes(buf[p:p + sl])
        p += sl
        reconsume, prep, body_len = _AFTER_STOREHOST.unpack_from(buf, p)  # type: ignore[arg-type]
        p += REL_BODY
        body = b""
        if body_len > 0:
            if p + body_len > n:
                return None
            body = bytes(buf[p:p + body_len])
            p += body_len
        (tlen,) = (_I16 if tl == TOPIC_LENGTH_SIZE_V2 else _I8).unpack_from(buf, p)  # type: ignore[arg-type]
        p += tl
        if tlen < 0 or p + tlen > n:
            return None
        topic = bytes(buf[p:p + tlen])
        p += tlen
        (plen,) = _I16.unpack_from(buf, p)  # type: ignore[arg-type]
        p += SIZE_PROPERTIESLENGTH
        props = b""
        if plen > 0:
            if p + plen > n:
                return None
            props = bytes(buf[p:p + plen])
    except struct.error:
        return None
    return Record(*h, born, store_ts, store_host, reconsume, prep, body, topic, props)


def pack_record(r: Record) -> bytes:
    """The bytes of one record from its fields (the inverse of ``parse_record`` for a well-formed
    record; TOTALSIZE and MAGICCODE are written as given). One record at a time, in Python: the
    batch encoder is ``kernels.assemble_records``; this is its reference."""
    v2 = r.magic == MAGIC_V2
    return b"".join((
        _FIXED.pack(*r[:len(FixedHeader._fields)]), bytes(r.born_host), _I64.pack(r.store_timestamp),
        bytes(r.store_host), _AFTER_STOREHOST.pack(r.reconsume_times, r.prepared_transaction_offset, len(r.body)),
        bytes(r.body), pack_topic_length(len(r.topic), v2), bytes(r.topic), _I16.pack(len(r.properties)),
        bytes(r.properties)))


MSG_ID_V4_HEX_LENGTH = 2 * (HOST_V4_SIZE + SIZE_PHYSICALOFFSET)     # 32


def make_msg_id(store_host: bytes, physical_offset: int) -> str:
    """The offset msgId (§1.9): upper-case hex of STOREHOST bytes + int64 PHYSICALOFFSET."""
    return (bytes(store_host) + _I64.pack(physical_offset)).hex().upper()


def parse_msg_id(msg_id: str) -> tuple[bytes, int]:
    """MessageDecoder.decodeMessageId: (store host bytes, physical offset); a 32-character id is an
    IPv4 host, any other length IPv6."""
    raw = bytes.fromhex(msg_id)
    host_len = HOST_V4_SIZE if len(msg_id) == MSG_ID_V4_HEX_LENGTH else HOST_V6_SIZE
    return raw[:host_len], _I64.unpack(raw[host_len:host_len + SIZE_PHYSICALOFFSET])[0]
