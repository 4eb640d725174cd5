"""Message codec: RocketMQ commitlog message records <-> Arrow batches (docs/FORMAT.md §1).

Record layout (all integers big-endian). B = born host size (8 IPv4 / 20 IPv6), S = store host size:

    @0        TOTALSIZE             int32   whole record length
    @4        MAGICCODE             int32   V1 0xDAA320A7 / V2 0xDAA320AB
    @8        BODYCRC               int32   crc32(body) & 0x7FFFFFFF
    @12       QUEUEID               int32
    @16       FLAG                  int32
    @20       QUEUEOFFSET           int64   0 for PREPARED / ROLLBACK
    @28       PHYSICALOFFSET        int64   absolute commitlog offset of this record
    @36       SYSFLAG               int32
    @40       BORNTIMESTAMP         int64
    @48       BORNHOST              B       address bytes, then port as int32
    @48+B     STORETIMESTAMP        int64
    @56+B     STOREHOST             S
    @56+B+S   RECONSUMETIMES        int32
    @60+B+S   PREPARED_TX_OFFSET    int64
    @68+B+S   BODYLENGTH            int32
    @72+B+S   BODY                  bodyLen bytes
              TOPICLENGTH           V1: int8 / V2: int16 (UTF-8 byte count)
              TOPIC                 UTF-8
              PROPERTIESLENGTH      int16
              PROPERTIES            UTF-8, verbatim

Everything works on whole columns: hosts and topics are parsed once per distinct value,
hashes and CRCs are computed over Arrow buffers (``kernels``), and records are assembled with
one ``binary_join_element_wise`` over per-part binary columns.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import allocator, kernels
from .config import StoreConfig
from .names import topic_problems

allocator.tune()

# ---------------------------------------------------------------------------- constants
MAGIC_V1 = -626843481          # 0xDAA320A7
MAGIC_V2 = -626843477          # 0xDAA320AB
BLANK_MAGIC = -875286124       # 0xCBD43194, the end-of-file record (commitlog.py writes it)

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

FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TRANSACTION_MASK = 0xC
TRANSACTION_NOT = 0x0
TRANSACTION_PREPARED = 0x4
TRANSACTION_COMMIT = 0x8
TRANSACTION_ROLLBACK = 0xC
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20

PROPERTY_NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"
MAX_PROPERTIES_LENGTH = 32767        # Short.MAX_VALUE
MESSAGE_SIZE_SLACK = 64 * 1024       # total record may exceed maxMessageSize by 64 KiB
CRC32_PROPERTY_NAME = "__CRC32#"
CRC32_RESERVED_LEN = len(CRC32_PROPERTY_NAME) + 1 + 10 + 1   # name, 0x01, 10 digits, 0x02

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"

# Canonical message columns: what every input format is normalized to before encoding.
MESSAGE_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("queue_id", pa.int32()),
    ("flag", pa.int32()),
    ("sys_flag", pa.int32()),
    ("born_timestamp", pa.int64()),
    ("store_timestamp", pa.int64()),
    ("born_host", pa.string()),
    ("store_host", pa.string()),
    ("reconsume_times", pa.int32()),
    ("prepared_transaction_offset", pa.int64()),
    ("body", pa.large_binary()),
    ("properties_string", pa.large_string()),
])


class InputError(ValueError):
    """Bad input: each problem names the row (source and row number) and the field."""

    def __init__(self, problems: list[str], total: int | None = None):
        self.problems = problems
        self.total = total if total is not None else len(problems)
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... {self.total - 20} more" if self.total > 20 else ""
        super().__init__(f"{self.total} bad input row problem(s):\n  {shown}{more}")


# ---------------------------------------------------------------------------- java hash
def _utf16_hash_and_length(arr):
    arr = _as_large_string(arr)
    data, offsets = _string_buffers(arr)
    return kernels.java_hash_utf8(data, offsets)


def utf16_lengths(arr) -> np.ndarray:
    """Java ``String.length()`` of every string (UTF-16 code units)."""
    return _utf16_hash_and_length(arr)[1]


def java_hash(arr) -> np.ndarray:
    """``java.lang.String.hashCode()`` of every string, as int32 (nulls hash as empty strings).

    h = 31*h + c over the UTF-16 code units, in wrapping 32-bit arithmetic; the UTF-8 values are
    decoded to UTF-16 on the fly by a compiled kernel (kernels.java_hash_utf8).
    """
    return _utf16_hash_and_length(arr)[0].view(np.int32)


def index_key_hash(h: np.ndarray) -> np.ndarray:
    """IndexFile.indexKeyHashMethod: abs(hash), with Integer.MIN_VALUE mapped to 0."""
    h = h.astype(np.int64)
    out = np.abs(h)
    out[out == 2**31] = 0
    return out.astype(np.int32)


# ---------------------------------------------------------------------------- arrow helpers
def sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique by sorting (numpy 2.3's hash-based np.unique is many times slower on millions of
    distinct int64 values)."""
    a = np.sort(np.asarray(a).reshape(-1))
    if len(a) > 1:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    return a


def single_array(arr) -> pa.Array:
    """One contiguous Array; a ChunkedArray of one chunk is returned without a copy
    (``combine_chunks`` copies even then)."""
    if isinstance(arr, pa.ChunkedArray):
        return arr.chunk(0) if arr.num_chunks == 1 else arr.combine_chunks()
    return arr


def _as_large_string(arr) -> pa.Array:
    arr = single_array(arr)
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    return arr


def _as_large_binary(arr) -> pa.Array:
    arr = single_array(arr)
    if arr.type != pa.large_binary():
        arr = arr.cast(pa.large_binary())
    return arr


def _string_buffers(arr: pa.Array):
    """(values uint8, offsets int64) of a large_string/large_binary array, honouring slicing."""
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    if bufs[2] is None:
        data = np.zeros(0, np.uint8)
    else:
        data = np.frombuffer(bufs[2], dtype=np.uint8)
    return data, offsets


def binary_from_numpy(values: np.ndarray, offsets: np.ndarray) -> pa.Array:
    """A large_binary array over a numpy value buffer and int64 offsets (zero copy)."""
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1,
                                 [None, pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(values)])


def fixed_width_binary(rows: np.ndarray) -> pa.Array:
    """(n, k) uint8 matrix -> large_binary array of n values of k bytes each."""
    n, k = rows.shape
    return binary_from_numpy(np.ascontiguousarray(rows).reshape(-1), np.arange(n + 1, dtype=np.int64) * k)


def binary_lengths(arr) -> np.ndarray:
    arr = _as_large_binary(arr) if not pa.types.is_large_string(arr.type) else arr
    _, offsets = _string_buffers(single_array(arr))
    return np.diff(offsets)


def concat_binary(columns: list) -> pa.Array:
    """Element-wise concatenation of large_binary columns (record assembly)."""
    cols = [_as_large_binary(c) for c in columns]
    return pc.binary_join_element_wise(*cols, pa.scalar(b"", pa.large_binary()))


# ---------------------------------------------------------------------------- hosts
def parse_host(text: str) -> tuple[bytes, bool]:
    """'a.b.c.d:port' or '[v6]:port' -> (address bytes + int32 port, is_ipv6)."""
    if text.startswith("["):
        close = text.find("]")
        if close < 0 or text[close + 1:close + 2] != ":":
            raise ValueError(f"cannot parse host {text!r}: expected '[ipv6]:port'")
        addr, port = text[1:close], text[close + 2:]
        try:
            ip = ipaddress.IPv6Address(addr)
        except ValueError as e:
            raise ValueError(f"cannot parse host {text!r}: {e}") from None
    else:
        addr, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"cannot parse host {text!r}: expected 'a.b.c.d:port'")
        try:
            ip = ipaddress.IPv4Address(addr)
        except ValueError as e:
            raise ValueError(f"cannot parse host {text!r}: {e}") from None
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"cannot parse host {text!r}: port must be 0..65535")
    return ip.packed + struct.pack(">i", int(port)), ip.version == 6


def format_host(raw: bytes) -> str:
    """Java InetAddress.getHostAddress() form: IPv6 uncompressed, e.g. [0:0:0:0:0:0:0:1]:5000."""
    port = struct.unpack(">i", raw[-4:])[0]
    addr = raw[:-4]
    if len(addr) == 4:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    groups = struct.unpack(">8H", addr)
    return "[" + ":".join(f"{g:x}" for g in groups) + f"]:{port}"


@dataclass
class HostColumn:
    """A host column as its distinct hosts' bytes and a per-row index (a batch has few hosts)."""
    raw: np.ndarray          # (k, 20) uint8: address bytes then the int32 port, zero padded
    length: np.ndarray       # (k,) int64: 8 (IPv4) or 20 (IPv6)
    index: np.ndarray        # (n,) int64 row -> distinct host

    @property
    def is_v6(self) -> np.ndarray:
        return self.length[self.index] == 20


def _hosts_column(arr, field: str, problems: list, label) -> HostColumn:
    """Parse a host column once per distinct value."""
    enc = single_array(pc.dictionary_encode(arr))
    uniq = enc.dictionary.to_pylist()
    raw = np.zeros((max(1, len(uniq)), 20), np.uint8)
    length = np.full(max(1, len(uniq)), 8, np.int64)
    for k, text in enumerate(uniq):
        try:
            b, _ = parse_host(text)
        except ValueError as e:
            rows = np.flatnonzero(np.asarray(enc.indices.fill_null(-1)) == k)
            for r in rows[:5]:
                problems.append(f"{label(r)}: field '{field}': {e}")
            continue
        raw[k, :len(b)] = np.frombuffer(b, np.uint8)
        length[k] = len(b)
    return HostColumn(raw, length, enc.indices.to_numpy(zero_copy_only=False).astype(np.int64))


# ---------------------------------------------------------------------------- properties
def property_values(props, names: tuple[str, ...]) -> dict[str, pa.Array]:
    """Values of the named properties, parsed the way the broker's dispatch parses them.

    MessageDecoder.string2messageProperties: split on U+0002; a segment counts only when its
    first U+0001 leaves a non-empty name and a non-empty value; later duplicates win.
    Returns one string column per name, null where absent.
    """
    props = _as_large_string(props)
    n = len(props)
    segs = pc.split_pattern(props, PROPERTY_SEP)
    parent = pc.list_parent_indices(segs).to_numpy()
    flat = pc.list_flatten(segs)
    kv = pc.split_pattern(flat, PROPERTY_NAME_VALUE_SEP, max_splits=1)
    has_sep = pc.equal(pc.list_value_length(kv), 2).to_numpy(zero_copy_only=False)
    name = pc.list_element(kv, 0)
    value = _second_or_empty(kv)
    out = {}
    nonempty = has_sep & (pc.binary_length(name).to_numpy(zero_copy_only=False) > 0) \
        & (pc.binary_length(value).to_numpy(zero_copy_only=False) > 0)
    for nm in names:
        hit = np.flatnonzero(nonempty & pc.equal(name, nm).to_numpy(zero_copy_only=False))
        result = np.full(n, -1, dtype=np.int64)
        # Later duplicates win: assigning in ascending order leaves the last one.
        result[parent[hit]] = hit
        mask = result < 0
        taken = value.take(pa.array(np.where(mask, 0, result))) if len(value) else \
            pa.nulls(n, pa.large_string())
        out[nm] = pc.if_else(pa.array(mask), pa.scalar(None, pa.large_string()), taken) if n else taken
    return out


def _delete_property(props: str, name: str) -> str:
    """MessageUtils.deleteProperty: drop every ``name`` U+0001 ... entry (through its U+0002)."""
    out, idx0 = [], 0
    while True:
        start = idx0
        while True:
            idx1 = props.find(name, start)
            if idx1 < 0:
                break
            start = idx1 + len(name)
            if (idx1 == 0 or props[idx1 - 1] == PROPERTY_SEP) and props[start:start + 1] == PROPERTY_NAME_VALUE_SEP:
                break
        if idx1 < 0:
            out.append(props[idx0:])
            break
        out.append(props[idx0:idx1])
        idx2 = props.find(PROPERTY_SEP, idx1 + len(name) + 1)
        if idx2 < 0:
            break
        idx0 = idx2 + 1
    return "".join(out)


def _second_or_empty(kv: pa.Array) -> pa.Array:
    """Element 1 of each [name, value] list, "" for lists of length 1."""
    padded = pc.list_slice(kv, 0, 2)
    lengths = pc.list_value_length(padded).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(padded)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    idx = np.where(lengths >= 2, starts + 1, -1)
    vals = flat.take(pa.array(np.where(idx < 0, 0, idx))) if len(flat) else pa.nulls(len(kv), pa.large_string())
    return pc.if_else(pa.array(idx < 0), pa.scalar("", pa.large_string()), vals.cast(pa.large_string()))


def properties_from_pairs(names: pa.Array, values: pa.Array, list_offsets: np.ndarray) -> pa.Array:
    """messageProperties2String over ordered (name, value) pairs: name U+0001 value U+0002 ..."""
    names = _as_large_string(names)
    values = _as_large_string(values)
    elems = pc.binary_join_element_wise(names, pa.scalar(PROPERTY_NAME_VALUE_SEP, pa.large_string()),
                                        values, pa.scalar(PROPERTY_SEP, pa.large_string()),
                                        pa.scalar("", pa.large_string())) \
        if len(names) else pa.array([], pa.large_string())
    lists = pa.LargeListArray.from_arrays(pa.array(list_offsets, pa.int64()), elems)
    return pc.binary_join(lists, pa.scalar("", pa.large_string())).cast(pa.large_string())


# ---------------------------------------------------------------------------- prepared batch
@dataclass
class PreparedMessages:
    """Validated messages with everything the encoder and the dispatchers need, per message."""
    n: int
    topic: pa.Array                 # large_string
    queue_id: np.ndarray            # int32
    sys_flag: np.ndarray            # int32, with the IPv6 bits the store ORs in
    store_timestamp: np.ndarray     # int64
    sizes: np.ndarray               # int64 TOTALSIZE
    tran_type: np.ndarray           # int32 sys_flag & 0xC
    cq_eligible: np.ndarray         # bool: NOT / COMMIT messages get a queue offset and a CQ unit
    tags_code: np.ndarray           # int64 (CQ unit), before delay adjustment is already applied
    body_crc: np.ndarray            # int32 (31-bit)
    index_msg: np.ndarray           # int64 message index of every index entry, in dispatch order
    index_hash: np.ndarray          # int32 abs(java hash of topic#key) per index entry
    parts: dict                     # record parts for the encoder

    @property
    def index_counts(self) -> np.ndarray:
        return np.bincount(self.index_msg, minlength=self.n).astype(np.int64)


def _col(table: pa.Table, name: str):
    return single_array(table.column(name))


def prepare(table: pa.Table, config: StoreConfig, label=None, topic_names: bool = True) -> PreparedMessages:
    """Validate canonical messages (MESSAGE_SCHEMA) and compute sizes, flags, keys and CRCs.

    ``label(i)`` names row i in error messages (e.g. "input.jsonl line 17").
    Raises InputError listing every problem found (before anything is written).
    ``topic_names``: topics must be valid topic directory names (``names.topic_problem``:
    RocketMQ's TopicValidator characters, at most 255 bytes); False checks only what the record
    format needs (codec tests of arbitrary topics).
    """
    label = label or (lambda i: f"row {i}")
    n = table.num_rows
    problems: list[str] = []

    def flag_rows(mask: np.ndarray, field: str, msg):
        for r in np.flatnonzero(mask)[:5]:
            problems.append(f"{label(int(r))}: field '{field}': {msg(int(r)) if callable(msg) else msg}")
        extra = int(mask.sum()) - 5
        if extra > 0:
            problems.append(f"... field '{field}': {extra} more row(s) with the same problem")

    # Required fields.
    for name in ("topic", "queue_id", "body", "store_timestamp"):
        nulls = np.asarray(_col(table, name).is_null().to_numpy(zero_copy_only=False), bool)
        flag_rows(nulls, name, "missing (required)")
    if problems:
        raise InputError(problems)

    topic = _as_large_string(_col(table, "topic"))
    queue_id = _col(table, "queue_id").to_numpy(zero_copy_only=False).astype(np.int32)
    flag = _col(table, "flag").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int32)
    sys_flag = _col(table, "sys_flag").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int32)
    store_ts = _col(table, "store_timestamp").to_numpy(zero_copy_only=False).astype(np.int64)
    born_ts_col = _col(table, "born_timestamp")
    born_ts = pc.coalesce(born_ts_col, _col(table, "store_timestamp")).to_numpy(zero_copy_only=False).astype(np.int64)
    reconsume = _col(table, "reconsume_times").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int32)
    prep_tx = _col(table, "prepared_transaction_offset").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    body = _as_large_binary(_col(table, "body"))
    props = _as_large_string(_col(table, "properties_string").fill_null(""))
    if config.enabledAppendPropCRC:
        # CommitLog deletes an incoming CRC32 property before encoding (MessageExtBrokerInner.deleteProperty).
        has_crc = np.flatnonzero(pc.match_substring(props, CRC32_PROPERTY_NAME).to_numpy(zero_copy_only=False))
        if len(has_crc):
            vals = props.to_pylist()
            for r in has_crc:
                vals[r] = _delete_property(vals[r], CRC32_PROPERTY_NAME)
            props = pa.array(vals, pa.large_string())

    flag_rows(queue_id < 0, "queue_id", lambda r: f"negative queue id {queue_id[r]}")

    # Topics: per distinct value (V1/V2 by UTF-16 length, length limits; the name rules).
    tenc = pc.dictionary_encode(topic)
    tidx = tenc.indices.to_numpy(zero_copy_only=False)
    tparts, t16, tbad = [], [], []
    name_bad = topic_problems(tenc.dictionary) if topic_names else {}
    for k, t in enumerate(tenc.dictionary.to_pylist()):
        raw = t.encode("utf-8")
        units = len(t.encode("utf-16-le")) // 2
        v2 = units > 127
        err = None
        if not raw:
            err = "empty topic"
        elif not v2 and len(raw) > 127:
            err = (f"topic of {units} characters is {len(raw)} UTF-8 bytes: a V1 record (<= 127 "
                   f"characters) stores the length in one signed byte, so at most 127 bytes fit")
        elif len(raw) > 32767:
            err = f"topic is {len(raw)} UTF-8 bytes, more than 32767"
        if raw and k in name_bad:
            err = name_bad[k] + (f"; also: {err}" if err else "")
        tbad.append(err)
        tparts.append((struct.pack(">h", len(raw) if len(raw) <= 32767 else 0) if v2
                       else struct.pack(">b", len(raw) if len(raw) <= 127 else 0)) + raw)
        t16.append(v2)
    for k, err in enumerate(tbad):
        if err:
            flag_rows(tidx == k, "topic", err)
    topic_part = pa.array(tparts, pa.large_binary()).take(tenc.indices)
    is_v2 = np.asarray(t16, bool)[tidx] if n else np.zeros(0, bool)
    topic_len = np.diff(_string_buffers(topic_part)[1]) if n else np.zeros(0, np.int64)

    # Hosts: default born host = store host, default store host = the broker's own address.
    default_store = pa.scalar(config.store_host, pa.string())
    store_host_s = pc.coalesce(_col(table, "store_host"), default_store)
    born_host_s = pc.coalesce(_col(table, "born_host"), store_host_s)
    born_host = _hosts_column(born_host_s, "born_host", problems, label)
    store_host = _hosts_column(store_host_s, "store_host", problems, label)
    born_v6, store_v6 = born_host.is_v6, store_host.is_v6
    flag_rows(((sys_flag & FLAG_BORNHOST_V6) != 0) & ~born_v6, "sys_flag",
              "bit 0x10 (born host IPv6) is set but born_host is IPv4")
    flag_rows(((sys_flag & FLAG_STOREHOST_V6) != 0) & ~store_v6, "sys_flag",
              "bit 0x20 (store host IPv6) is set but store_host is IPv4")
    # The store ORs the IPv6 bits in itself (CommitLog), it never clears them.
    sys_flag = sys_flag | np.where(born_v6, FLAG_BORNHOST_V6, 0).astype(np.int32) \
        | np.where(store_v6, FLAG_STOREHOST_V6, 0).astype(np.int32)

    # Body and properties sizes.
    body_len = binary_lengths(body)
    flag_rows(body_len > config.maxMessageSize, "body",
              lambda r: f"body of {body_len[r]} bytes exceeds maxMessageSize {config.maxMessageSize}")
    props_bytes = props.cast(pa.large_binary())
    prop_len = binary_lengths(props_bytes)
    crc_extra = 0
    if config.enabledAppendPropCRC:
        ends_with_sep = pc.ends_with(props, PROPERTY_SEP).to_numpy(zero_copy_only=False)
        need_sep = (prop_len > 0) & ~ends_with_sep
        crc_extra = need_sep.astype(np.int64) + CRC32_RESERVED_LEN
    stored_prop_len = prop_len + crc_extra
    flag_rows(stored_prop_len > MAX_PROPERTIES_LENGTH, "properties",
              lambda r: f"properties string is {stored_prop_len[r]} UTF-8 bytes, more than 32767")

    bh = np.where(born_v6, 20, 8)
    sh = np.where(store_v6, 20, 8)
    # 72 + B + S + bodyLen + T + topicLen + 2 + propLen; topic_part holds the T length bytes too.
    sizes = (72 + bh + sh + body_len + topic_len + 2 + stored_prop_len).astype(np.int64)
    limit = config.maxMessageSize + MESSAGE_SIZE_SLACK if config.maxMessageSize <= 2**31 - 1 - MESSAGE_SIZE_SLACK \
        else 2**31 - 1
    flag_rows(sizes > limit, "body", lambda r: f"record of {sizes[r]} bytes exceeds {limit}")
    flag_rows(sizes + 8 > config.mappedFileSizeCommitLog, "body",
              lambda r: f"record of {sizes[r]} bytes cannot fit a commitlog file of "
                        f"{config.mappedFileSizeCommitLog} bytes (needs size + 8)")

    # Properties the dispatch reads (one compiled pass over the properties strings).
    pdata, poff = _string_buffers(props)
    vs, ve = kernels.parse_properties(pdata, poff, ["TAGS", "KEYS", "UNIQ_KEY", "DELAY"])
    tran_type = sys_flag & TRANSACTION_MASK
    cq_eligible = (tran_type == TRANSACTION_NOT) | (tran_type == TRANSACTION_COMMIT)

    # tagsCode: the TAGS hash sign-extended to 64 bits (a long holding an int).
    tags_code = np.where(vs[0] >= 0, kernels.java_hash_slices(pdata, vs[0], ve[0]).view(np.int32).astype(np.int64), 0)

    # Delay messages: tagsCode = deliver time (DefaultMessageStore.computeDeliverTimestamp).
    is_sched = pc.equal(topic, SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)
    delay_rows = is_sched & (vs[3] >= 0)
    if delay_rows.any():
        rows = np.flatnonzero(delay_rows)
        dvals, doff = kernels.gather_slices(pdata, vs[3][rows], ve[3][rows] - vs[3][rows])
        delay = binary_from_numpy(dvals, doff).cast(pa.large_string())
        # Integer.parseInt accepts a leading '+' and any number of leading zeros.
        ok_r = pc.match_substring_regex(delay, r"^[+-]?0*[0-9]{1,10}$").to_numpy(zero_copy_only=False)
        ok = np.zeros(n, bool)
        ok[rows] = ok_r
        level = np.zeros(n, np.int64)
        good = delay_rows & ok
        if good.any():
            level[rows[ok_r]] = pc.cast(pc.replace_substring_regex(delay.filter(pa.array(ok_r)), r"^\+", ""),
                                        pa.int64()).to_numpy()
        out_of_int = good & ((level > 2**31 - 1) | (level < -2**31))
        flag_rows(delay_rows & ~ok | out_of_int, "properties",
                  "DELAY on SCHEDULE_TOPIC_XXXX must be an integer (Integer.parseInt)")
        delays = config.delay_level_millis
        max_level = len(delays)
        level = np.minimum(level, max_level)
        table_ms = np.asarray([0] + delays, dtype=np.int64)
        apply = good & ~out_of_int & (level > 0)
        tags_code = np.where(apply, store_ts + table_ms[np.clip(level, 0, max_level)], tags_code)

    # Index keys in dispatch order: UNIQ_KEY, then every non-empty KEYS token; ROLLBACK skipped.
    indexed = tran_type != TRANSACTION_ROLLBACK
    topic_hash = java_hash(tenc.dictionary).view(np.uint32).astype(np.int64)[tidx] if n else np.zeros(0, np.int64)
    key_msg, key_hash = kernels.index_keys(pdata, vs[2], ve[2], vs[1], ve[1], indexed, topic_hash,
                                           with_hash=True)
    index_hash = index_key_hash(key_hash.view(np.int32))

    if problems:
        raise InputError(problems)

    body_data, body_off = _string_buffers(body)
    body_crc = (kernels.crc32_slices(body_data, body_off[:-1], body_off[1:]) & 0x7FFFFFFF).astype(np.int32)

    parts = dict(
        flag=flag, born_ts=born_ts, born_host=born_host, store_host=store_host,
        reconsume=reconsume, prep_tx=prep_tx, body=body, body_len=body_len,
        topic_part=topic_part, props=props_bytes, prop_len=prop_len,
        stored_prop_len=stored_prop_len, is_v2=is_v2, born_v6=born_v6, store_v6=store_v6,
    )
    return PreparedMessages(
        n=n, topic=topic, queue_id=queue_id, sys_flag=sys_flag, store_timestamp=store_ts,
        sizes=sizes, tran_type=tran_type, cq_eligible=cq_eligible, tags_code=tags_code.astype(np.int64),
        body_crc=body_crc, index_msg=key_msg, index_hash=index_hash, parts=parts,
    )


def _be(values: np.ndarray, dtype: str) -> np.ndarray:
    """Per-message big-endian bytes of a numeric column, as an (n, width) uint8 matrix."""
    a = np.ascontiguousarray(values.astype(dtype))
    return a.view(np.uint8).reshape(len(values), a.itemsize)     # (also for n = 0)


def encode(pm: PreparedMessages, phys_offsets: np.ndarray, queue_offsets: np.ndarray,
           crc_property: bool = False, rows: tuple | None = None, fill_crc: bool = True) -> np.ndarray:
    """Encode messages into one contiguous buffer of records (in order, no gaps).

    ``phys_offsets`` are the absolute commitlog offsets, ``queue_offsets`` the logical queue
    offsets (callers pass 0 for PREPARED/ROLLBACK), one per message of ``pm``. ``rows=(r0, r1)``
    encodes only those messages. With ``crc_property`` the records get enabledAppendPropCRC's
    reserved bytes; ``fill_crc=False`` leaves its digits to the caller (ingest fills them once
    the offsets are final: the CRC covers the whole record). Returns a uint8 array of the
    records' total size, written by one compiled pass (kernels._assemble).
    """
    p = pm.parts
    r0, r1 = rows if rows is not None else (0, pm.n)
    if r1 <= r0:
        return np.zeros(0, np.uint8)
    sl = slice(r0, r1)
    osl = slice(r0, r1 + 1)          # offsets of the Arrow buffers: one more
    magic = np.where(p["is_v2"][sl], MAGIC_V2, MAGIC_V1).astype(np.int32)
    born, store = p["born_host"], p["store_host"]
    body, body_off = _string_buffers(p["body"])
    topic, topic_off = _string_buffers(p["topic_part"])
    props, props_off = _string_buffers(p["props"])
    if crc_property:
        need_sep = (p["stored_prop_len"][sl] - p["prop_len"][sl]) > CRC32_RESERVED_LEN
    else:
        need_sep = np.zeros(r1 - r0, np.bool_)
    sizes = pm.sizes[sl].astype(np.int64)
    # The kernel writes every byte but the CRC property's reserved ones.
    out = (np.zeros if crc_property else np.empty)(int(sizes.sum()), np.uint8)
    end = kernels._assemble(
        out, sizes, magic, pm.body_crc[sl], pm.queue_id[sl], p["flag"][sl],
        np.asarray(queue_offsets, np.int64)[sl], np.asarray(phys_offsets, np.int64)[sl], pm.sys_flag[sl],
        p["born_ts"][sl], born.raw, born.length, born.index[sl], pm.store_timestamp[sl], store.raw, store.length,
        store.index[sl], p["reconsume"][sl], p["prep_tx"][sl], body, body_off[osl].astype(np.int64), topic,
        topic_off[osl].astype(np.int64), p["stored_prop_len"][sl].astype(np.int64), props,
        props_off[osl].astype(np.int64), need_sep)
    assert end == len(out)
    if crc_property and fill_crc:
        fill_crc_property(out, sizes)
    return out


def fill_crc_property(buf: np.ndarray, sizes: np.ndarray) -> None:
    """enabledAppendPropCRC: "__CRC32#" 0x01 ten digits (least significant first) 0x02, in the
    reserved last 20 bytes of every record of ``buf`` (CRC-32 of the record before them)."""
    ends = np.cumsum(sizes)
    starts = ends - sizes
    crc = kernels.crc32_slices(buf, starts, ends - CRC32_RESERVED_LEN).astype(np.int64) & 0x7FFFFFFF
    base = ends - CRC32_RESERVED_LEN
    name = np.frombuffer(CRC32_PROPERTY_NAME.encode() + b"\x01", np.uint8)
    for k, byte in enumerate(name):
        buf[base + k] = byte
    digits = crc.copy()
    for k in range(10):
        buf[base + 9 + k] = (ord("0") + digits % 10).astype(np.uint8)
        digits //= 10
    buf[base + 19] = 0x02


# ---------------------------------------------------------------------------- decode
DECODED_SCHEMA = pa.schema([
    ("commitlog_offset", pa.int64()), ("store_size", pa.int32()), ("msg_id", pa.string()),
    ("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
    ("flag", pa.int32()), ("sys_flag", pa.int32()), ("body_crc", pa.int32()),
    ("born_timestamp", pa.int64()), ("born_host", pa.string()),
    ("store_timestamp", pa.int64()), ("store_host", pa.string()),
    ("reconsume_times", pa.int32()), ("prepared_transaction_offset", pa.int64()),
    ("body", pa.large_binary()), ("properties_string", pa.large_string()),
])


def _gather_int(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of ``width`` bytes at every position (int64 for 8, else int32)."""
    v = kernels.read_be(buf, pos, width)
    return v if width == 8 else v.astype(np.int32)


def _host_strings(buf: np.ndarray, pos: np.ndarray, widths: np.ndarray, keys: np.ndarray) -> pa.Array:
    """Host columns as 'a.b.c.d:port' / '[v6]:port', formatted once per distinct host.

    IPv4 hosts are grouped by their 8 bytes read as one int64 (``keys``); IPv6 hosts by their
    gathered bytes."""
    n = len(pos)
    if n and (widths == 8).all():
        enc = pa.array(keys, pa.int64()).dictionary_encode()
        names = [format_host(int(k).to_bytes(8, "big", signed=True)) for k in enc.dictionary.to_numpy()]
    else:
        vals, off = kernels.gather_slices(buf, pos, widths)
        enc = pc.dictionary_encode(binary_from_numpy(vals, off))
        names = [format_host(h) for h in enc.dictionary.to_pylist()]
    return pa.array(names, pa.string()).take(enc.indices)


def decode_records(buf: np.ndarray, base_offset: int, starts: np.ndarray, body: bool = True,
                   origin: tuple[str, int] | None = None) -> pa.Table:
    """Decode the records starting at ``starts`` (positions in ``buf``) into DECODED_SCHEMA.

    One compiled pass reads every fixed field and the positions of the variable parts
    (kernels.record_fields); bodies, topics and properties are then gathered into Arrow
    buffers, and msgIds are hex-encoded by a second compiled pass. ``base_offset`` is the
    commitlog offset of buf[0]; the records themselves carry their PHYSICALOFFSET.
    ``body=False`` leaves the body column null (checks that never look at bodies skip the copy).
    A record whose parts do not fit inside its TOTALSIZE (a damaged store) raises
    ``errors.CorruptStore`` naming ``origin`` = (file buf was read from, position of buf[0] in
    it) and the record's position; ``decode_valid_records`` leaves such records out instead.
    """
    buf = np.asarray(buf, dtype=np.uint8)
    s = np.asarray(starts, dtype=np.int64)
    f = kernels.record_fields(buf, s, MAGIC_V2)
    bad = np.flatnonzero(f[kernels.F_OK] == 0)
    if len(bad):
        from .errors import CorruptStore
        rel, at = origin if origin is not None else ("commitlog", base_offset)
        i = int(bad[0])
        raise CorruptStore(rel, at + int(s[i]), f"damaged record (TOTALSIZE {int(f[kernels.F_SIZE, i])}): its "
                                                f"fields do not fit inside it ({len(bad)} such record(s) here)")
    return _decoded_table(buf, s, f, body)


def decode_valid_records(buf: np.ndarray, base_offset: int, starts: np.ndarray,
                         body: bool = True) -> tuple[pa.Table, np.ndarray]:
    """``decode_records`` of the records whose parts fit inside their TOTALSIZE: (table of those,
    mask over ``starts`` of the ones decoded). For readers that treat a damaged record as absent."""
    buf = np.asarray(buf, dtype=np.uint8)
    s = np.asarray(starts, dtype=np.int64)
    f = kernels.record_fields(buf, s, MAGIC_V2)
    ok = f[kernels.F_OK] != 0
    if not ok.all():
        s, f = s[ok], f[:, ok]
    return _decoded_table(buf, s, f, body), ok


def _decoded_table(buf: np.ndarray, s: np.ndarray, f: np.ndarray, body: bool) -> pa.Table:
    def i32(row):
        return pa.array(f[row].astype(np.int32), pa.int32())

    def i64(row):
        return pa.array(f[row], pa.int64())

    # Body, topic and properties lie next to each other: one pass copies them together.
    n = len(s)
    parts = kernels.gather_many(buf, f, [kernels.F_TOPIC_POS, kernels.F_PROPS_POS] + ([kernels.F_BODY_POS] if body else []),
                                [kernels.F_TOPIC_LEN, kernels.F_PROPS_LEN] + ([kernels.F_BODY_LEN] if body else []))
    (topic_v, topic_o), (props_v, props_o) = parts[:2]
    body_col = binary_from_numpy(*parts[2]) if body else pa.nulls(n, pa.large_binary())
    if (f[kernels.F_STOREHOST_LEN] == 8).all():
        id_vals = kernels.hex_ids_v4(f[kernels.F_STOREHOST_KEY], f[kernels.F_PHYS]).reshape(-1)
        id_off = np.arange(n + 1, dtype=np.int64) * 32
    else:
        id_vals, id_off = kernels.hex_ids(buf, f[kernels.F_STOREHOST_POS], f[kernels.F_STOREHOST_LEN],
                                          f[kernels.F_PHYS])
    msg_id = pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(id_off), pa.py_buffer(id_vals)])
    return pa.table({
        "commitlog_offset": i64(kernels.F_PHYS),
        "store_size": i32(kernels.F_SIZE),
        "msg_id": msg_id.cast(pa.string()),
        "topic": _as_text(binary_from_numpy(topic_v, topic_o)).cast(pa.string()),
        "queue_id": i32(kernels.F_QUEUEID),
        "queue_offset": i64(kernels.F_QUEUEOFFSET),
        "flag": i32(kernels.F_FLAG),
        "sys_flag": i32(kernels.F_SYSFLAG),
        "body_crc": i32(kernels.F_BODYCRC),
        "born_timestamp": i64(kernels.F_BORNTS),
        "born_host": _host_strings(buf, s + POS_BORNHOST, f[kernels.F_BORNHOST_LEN], f[kernels.F_BORNHOST_KEY]),
        "store_timestamp": i64(kernels.F_STORETS),
        "store_host": _host_strings(buf, f[kernels.F_STOREHOST_POS], f[kernels.F_STOREHOST_LEN],
                                    f[kernels.F_STOREHOST_KEY]),
        "reconsume_times": i32(kernels.F_RECONSUME),
        "prepared_transaction_offset": i64(kernels.F_PREPTX),
        "body": body_col,
        "properties_string": _as_text(binary_from_numpy(props_v, props_o)),
    }, schema=DECODED_SCHEMA)


def _as_text(values: pa.Array) -> pa.Array:
    """large_binary -> large_string; bytes that are not UTF-8 (only a damaged record has them) are
    replaced by U+FFFD like Java's ``new String(bytes, UTF_8)`` (per value, on that path only)."""
    try:
        return values.cast(pa.large_string())
    except pa.ArrowInvalid:
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in values.to_pylist()],
                        pa.large_string())


def message_id(store_host_raw: bytes, phys_offset: int) -> str:
    """The 'offset msgId' of one record (CommitLog / MessageDecoder.createMessageId)."""
    return (store_host_raw + struct.pack(">q", phys_offset)).hex().upper()


def decode_message_id(msg_id: str) -> tuple[bytes, int]:
    """MessageDecoder.decodeMessageId: 32 hex chars = IPv4 store host, anything else IPv6."""
    raw = bytes.fromhex(msg_id)
    host_len = 8 if len(msg_id) == 32 else 20
    return raw[:host_len], struct.unpack(">q", raw[host_len:host_len + 8])[0]


def parse_properties_string(props: str) -> dict:
    """MessageDecoder.string2messageProperties for one string (queries, tests)."""
    out = {}
    i, n = 0, len(props)
    while i < n:
        j = props.find(PROPERTY_SEP, i)
        if j < 0:
            j = n
        if j - i >= 3:
            k = props.find(PROPERTY_NAME_VALUE_SEP, i)
            if i < k < j - 1:
                out[props[i:k]] = props[k + 1:j]
        i = j + 1
    return out


def decode_one(buf, pos: int = 0) -> dict | None:
    """Decode the single record at ``buf[pos:]`` to a dict (None for BLANK/zero/unknown magic, or
    a damaged record whose fields do not fit inside it)."""
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    if pos + 8 > len(arr):
        return None
    size, magic = struct.unpack_from(">ii", arr, pos)
    if size <= 0 or magic not in (MAGIC_V1, MAGIC_V2) or pos + size > len(arr):
        return None
    t, ok = decode_valid_records(arr[pos:pos + size], 0, np.zeros(1, np.int64))
    return t.to_pylist()[0] if ok[0] else None
