"""Message codec: RocketMQ commitlog message records <-> Arrow batches (docs/FORMAT.md §1).

The record layout (field offsets and sizes, V1/V2 topic length, IPv4/IPv6 hosts, magic codes, the
SYSFLAG bits) is defined once, in ``storelib.format.commitlog``; the encoder's input rules live here.

Everything works on whole columns: hosts and topics are parsed once per distinct value,
hashes and CRCs are computed over Arrow buffers (``kernels``), and records are assembled by one
compiled pass (``kernels.assemble_records``). The properties string (``properties``), host addresses
(``hosts``) and the Arrow buffer helpers (``arrays``) have modules of their own.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..compute import allocator, crc32, kernels, tag_index
from ..format import commitlog as cl
from ..format.commitlog import (FLAG_BORNHOST_V6, FLAG_STOREHOST_V6, MAGIC_V1, MAGIC_V2, MAX_PROPERTIES_LENGTH,
                                 TRANSACTION_COMMIT, TRANSACTION_MASK, TRANSACTION_NOT, TRANSACTION_ROLLBACK)
from ..compute.arrays import (as_large_binary, as_large_string, binary_from_numpy, binary_lengths, dictionary_encoded, numeric_values, single_array,
                     string_buffers, valid_mask)
from ..format.config import StoreConfig
from .hosts import host_column, host_strings, HostColumn
from ..format.names import topic_problems
from .properties import delete_property, property_spans
from ..format.textforms import PROPERTY_SEP

__all__ = [
    # encoder limits and names
    "MESSAGE_SIZE_SLACK", "CRC32_PROPERTY_NAME", "CRC32_RESERVED_LEN", "SCHEDULE_TOPIC",
    "MESSAGE_SCHEMA", "DICTIONARY_FIELDS", "TEXT_DICTIONARY", "message_schema", "DECODED_SCHEMA",
    # Java string hashes
    "utf16_lengths", "java_hash", "index_key_hash", "dispatch_of_records",
    # encode
    "PreparedMessages", "prepare", "encode", "fill_crc_property",
    # decode
    "record_starts", "gather_int", "decode_records", "decode_valid_records", "decode_message_id", "decode_one",
]

allocator.tune()

# ---------------------------------------------------------------------------- constants
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

# Columns of few distinct values that a canonical table may also hold dictionary-encoded
# (TEXT_DICTIONARY): a Parquet input's are read so (inputs.read_split), and ``prepare`` and
# ``topics.fill`` take the distinct values from the dictionary instead of hashing every row.
DICTIONARY_FIELDS = ("topic", "born_host", "store_host")
TEXT_DICTIONARY = pa.dictionary(pa.int32(), pa.string())


def message_schema(types: dict) -> pa.Schema:
    """MESSAGE_SCHEMA with the DICTIONARY_FIELDS whose ``types`` entry is TEXT_DICTIONARY so."""
    return pa.schema([f.with_type(TEXT_DICTIONARY) if f.name in DICTIONARY_FIELDS and types.get(f.name) == TEXT_DICTIONARY
                      else f for f in MESSAGE_SCHEMA])


# ---------------------------------------------------------------------------- java hash
def _utf16_hash_and_length(arr):
    arr = as_large_string(arr)
    data, offsets = string_buffers(arr)
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


# ---------------------------------------------------------------------------- prepared batch
@dataclass
class PreparedMessages:
    """Validated messages with everything the encoder and the dispatchers need, per message."""
    n: int
    topic: pa.Array                 # large_string, or TEXT_DICTIONARY
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
    waits: np.ndarray               # bool: the put waits for the flush (Message.isWaitStoreMsgOK)
    parts: dict                     # record parts for the encoder
    topic_dictionary: pa.Array      # the distinct topics (``_Topics.dictionary``)
    topic_index: np.ndarray         # row -> distinct topic (``_Topics.index``)

    @property
    def index_counts(self) -> np.ndarray:
        return np.bincount(self.index_msg, minlength=self.n).astype(np.int64)


class _Problems(list):
    """The problems found in a batch, in the order found; each names the row (``label(i)``) and field."""

    def __init__(self, label):
        super().__init__()
        self.label = label

    def flag_rows(self, mask: np.ndarray, field: str, msg) -> None:
        """One problem for each of the first 5 rows of ``mask`` (``msg``, or ``msg(row)``), then a count."""
        for r in np.flatnonzero(mask)[:5]:
            self.append(f"{self.label(int(r))}: field '{field}': {msg(int(r)) if callable(msg) else msg}")
        extra = int(mask.sum()) - 5
        if extra > 0:
            self.append(f"... field '{field}': {extra} more row(s) with the same problem")

    def raise_if_any(self) -> None:
        if self:
            raise InputError(list(self))


@dataclass
class _Columns:
    """The canonical columns as the encoder reads them: defaults filled in, numpy dtypes fixed."""
    topic: pa.Array                 # large_string, or TEXT_DICTIONARY
    queue_id: np.ndarray            # int32
    flag: np.ndarray                # int32
    sys_flag: np.ndarray            # int32, as given
    store_ts: np.ndarray            # int64
    born_ts: np.ndarray             # int64 (default: the store timestamp)
    reconsume: np.ndarray           # int32
    prep_tx: np.ndarray             # int64
    body: pa.Array                  # large_binary
    props: pa.Array                 # large_string, "" for null


@dataclass
class _Topics:
    """The topic column per distinct topic: the record's length-prefixed topic part and V1/V2."""
    part: pa.Array                  # large_binary per row: int8 (V1) / int16 (V2) length + UTF-8
    is_v2: np.ndarray               # bool per row: more than 127 UTF-16 units
    length: np.ndarray              # int64 per row: bytes of ``part``
    dictionary: pa.Array            # the distinct topics
    index: np.ndarray               # row -> distinct topic


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
    problems = _Problems(label or (lambda i: f"row {i}"))
    _check_required(table, problems)
    c = _read_columns(table, config)
    problems.flag_rows(c.queue_id < 0, "queue_id", lambda r: f"negative queue id {c.queue_id[r]}")
    topics = _topic_parts(c.topic, topic_names, problems, v2_ok=not config.line_4_9)
    born_host, store_host, sys_flag = _host_columns(table, config, c.sys_flag, problems)
    body_len, props_bytes, prop_len, stored_prop_len = _part_lengths(c, config, problems)
    sizes = _record_sizes(body_len, topics.length, stored_prop_len, born_host.is_v6, store_host.is_v6, config,
                          problems)
    tran_type, cq_eligible, tags_code, key_msg, index_hash, waits = _dispatch_fields(c, topics, sys_flag, config,
                                                                                     problems)
    problems.raise_if_any()

    parts = dict(
        flag=c.flag, born_ts=c.born_ts, born_host=born_host, store_host=store_host,
        reconsume=c.reconsume, prep_tx=c.prep_tx, body=c.body, body_len=body_len,
        topic_part=topics.part, props=props_bytes, prop_len=prop_len,
        stored_prop_len=stored_prop_len, is_v2=topics.is_v2, born_v6=born_host.is_v6, store_v6=store_host.is_v6,
    )
    return PreparedMessages(
        n=table.num_rows, topic=c.topic, queue_id=c.queue_id, sys_flag=sys_flag, store_timestamp=c.store_ts,
        sizes=sizes, tran_type=tran_type, cq_eligible=cq_eligible, tags_code=tags_code.astype(np.int64),
        body_crc=_body_crc(c.body), index_msg=key_msg, index_hash=index_hash, waits=waits, parts=parts,
        topic_dictionary=topics.dictionary, topic_index=topics.index,
    )


def _check_required(table: pa.Table, problems: _Problems) -> None:
    """topic, queue_id, body and store_timestamp must be present in every row (raises at once)."""
    for name in ("topic", "queue_id", "body", "store_timestamp"):
        nulls = ~valid_mask(_col(table, name))
        problems.flag_rows(nulls, name, "missing (required)")
    problems.raise_if_any()


def _read_columns(table: pa.Table, config: StoreConfig) -> _Columns:
    """The columns with the store's defaults: 0 for absent flags and counts, born time = store time."""
    def ints(name, dtype, fill=None):
        col = _col(table, name)
        return numeric_values(col if fill is None or not col.null_count else col.fill_null(fill)).astype(dtype)

    born_ts = pc.coalesce(_col(table, "born_timestamp"), _col(table, "store_timestamp"))
    props = as_large_string(_col(table, "properties_string").fill_null(""))
    if config.enabledAppendPropCRC:
        props = _without_crc_property(props)
    return _Columns(
        topic=_text(_col(table, "topic")),
        queue_id=ints("queue_id", np.int32), flag=ints("flag", np.int32, 0), sys_flag=ints("sys_flag", np.int32, 0),
        store_ts=ints("store_timestamp", np.int64),
        born_ts=numeric_values(born_ts).astype(np.int64),
        reconsume=ints("reconsume_times", np.int32, 0), prep_tx=ints("prepared_transaction_offset", np.int64, 0),
        body=as_large_binary(_col(table, "body")), props=props)


def _text(arr) -> pa.Array:
    """A text column as large_string; a dictionary column as it is (its values are decoded only
    where needed: per distinct value)."""
    return arr if pa.types.is_dictionary(arr.type) else as_large_string(arr)


def _without_crc_property(props: pa.Array) -> pa.Array:
    """CommitLog deletes an incoming CRC32 property before encoding (MessageExtBrokerInner.deleteProperty);
    only the rows that hold one are rewritten."""
    has_crc = np.flatnonzero(pc.match_substring(props, CRC32_PROPERTY_NAME).to_numpy(zero_copy_only=False))
    if not len(has_crc):
        return props
    vals = props.to_pylist()
    for r in has_crc:
        vals[r] = delete_property(vals[r], CRC32_PROPERTY_NAME)
    return pa.array(vals, pa.large_string())


def _topic_parts(topic: pa.Array, topic_names: bool, problems: _Problems, v2_ok: bool = True) -> _Topics:
    """Per distinct topic: V1/V2 by UTF-16 length, the length limits of each, and (``topic_names``)
    the topic directory name rules; the record's topic part with its length prefix. Without
    ``v2_ok`` (RocketMQ 4.9, which has no V2 records) a V2 topic is a problem."""
    n = len(topic)
    tenc = dictionary_encoded(topic)
    tidx = numeric_values(tenc.indices)
    tdict = as_large_string(tenc.dictionary)
    tparts, t16, tbad = [], [], []
    name_bad = topic_problems(tdict) if topic_names else {}
    for k, t in enumerate(tdict.to_pylist()):
        raw = t.encode("utf-8")
        units = len(t.encode("utf-16-le")) // 2
        v2 = units > cl.V2_TOPIC_CHARS
        limit = cl.MAX_TOPIC_LENGTH_V2 if v2 else cl.MAX_TOPIC_LENGTH_V1
        err = None
        if not raw:
            err = "empty topic"
        elif not v2 and len(raw) > limit:
            err = (f"topic of {units} characters is {len(raw)} UTF-8 bytes: a V1 record (<= {cl.V2_TOPIC_CHARS} "
                   f"characters) stores the length in one signed byte, so at most {limit} bytes fit")
        elif len(raw) > limit:
            err = f"topic is {len(raw)} UTF-8 bytes, more than {limit}"
        elif v2 and not v2_ok:
            err = (f"topic of {units} characters: rocketmqVersion=4.9 allows at most {cl.V2_TOPIC_CHARS} "
                   f"(RocketMQ 4.9 has no V2 records)")
        if raw and k in name_bad:
            err = name_bad[k] + (f"; also: {err}" if err else "")
        tbad.append(err)
        tparts.append(cl.pack_topic_length(len(raw) if len(raw) <= limit else 0, v2) + raw)
        t16.append(v2)
    for k, err in enumerate(tbad):
        if err:
            problems.flag_rows(tidx == k, "topic", err)
    topic_part = pa.array(tparts, pa.large_binary()).take(tenc.indices)
    is_v2 = np.asarray(t16, bool)[tidx] if n else np.zeros(0, bool)
    topic_len = np.diff(string_buffers(topic_part)[1]) if n else np.zeros(0, np.int64)
    return _Topics(topic_part, is_v2, topic_len, tdict, tidx)


def _host_columns(table: pa.Table, config: StoreConfig, sys_flag: np.ndarray, problems: _Problems):
    """(born hosts, store hosts, sys_flag with the IPv6 bits): the born host defaults to the store
    host, the store host to the broker's own address; the store ORs the IPv6 bits in itself
    (CommitLog), it never clears them, so a bit set for an IPv4 host is a problem."""
    store_host_s = _or_default(_col(table, "store_host"), pa.scalar(config.store_host, pa.string()))
    born_host_s = _or_default(_col(table, "born_host"), store_host_s)
    born_host = _hosts_column(born_host_s, "born_host", problems)
    store_host = _hosts_column(store_host_s, "store_host", problems)
    born_v6, store_v6 = born_host.is_v6, store_host.is_v6
    problems.flag_rows(((sys_flag & FLAG_BORNHOST_V6) != 0) & ~born_v6, "sys_flag",
                       "bit 0x10 (born host IPv6) is set but born_host is IPv4")
    problems.flag_rows(((sys_flag & FLAG_STOREHOST_V6) != 0) & ~store_v6, "sys_flag",
                       "bit 0x20 (store host IPv6) is set but store_host is IPv4")
    sys_flag = sys_flag | np.where(born_v6, FLAG_BORNHOST_V6, 0).astype(np.int32) \
        | np.where(store_v6, FLAG_STOREHOST_V6, 0).astype(np.int32)
    return born_host, store_host, sys_flag


def _or_default(arr: pa.Array, default) -> pa.Array:
    """``arr`` with its nulls replaced by ``default`` (a scalar or a column); a column without
    nulls is kept as it is, a dictionary one too."""
    if not arr.null_count:
        return arr
    def text(a):
        return a.cast(pa.string()) if isinstance(a, pa.Array) and pa.types.is_dictionary(a.type) else a
    return pc.coalesce(text(arr), text(default))


def _hosts_column(arr, field: str, problems: _Problems) -> HostColumn:
    """Parse a host column once per distinct value; a host that does not parse is a problem."""
    col, bad = host_column(arr)
    for rows, err in bad:
        for r in rows[:5]:
            problems.append(f"{problems.label(r)}: field '{field}': {err}")
    return col


def _part_lengths(c: _Columns, config: StoreConfig, problems: _Problems):
    """(body lengths, properties as bytes, their lengths, stored properties lengths): the stored
    length adds enabledAppendPropCRC's reserved bytes (and a U+0002 the string does not end with)."""
    body_len = binary_lengths(c.body)
    problems.flag_rows(body_len > config.maxMessageSize, "body",
                       lambda r: f"body of {body_len[r]} bytes exceeds maxMessageSize {config.maxMessageSize}")
    props_bytes = c.props.cast(pa.large_binary())
    prop_len = binary_lengths(props_bytes)
    crc_extra = 0
    if config.enabledAppendPropCRC:
        ends_with_sep = pc.ends_with(c.props, PROPERTY_SEP).to_numpy(zero_copy_only=False)
        need_sep = (prop_len > 0) & ~ends_with_sep
        crc_extra = need_sep.astype(np.int64) + CRC32_RESERVED_LEN
    stored_prop_len = prop_len + crc_extra
    problems.flag_rows(stored_prop_len > MAX_PROPERTIES_LENGTH, "properties",
                       lambda r: f"properties string is {stored_prop_len[r]} UTF-8 bytes, more than "
                                 f"{MAX_PROPERTIES_LENGTH}")
    return body_len, props_bytes, prop_len, stored_prop_len


def _record_sizes(body_len, topic_len, stored_prop_len, born_v6, store_v6, config: StoreConfig,
                  problems: _Problems) -> np.ndarray:
    """TOTALSIZE of every record, checked against maxMessageSize (+ 64 KiB) and the commitlog file size."""
    # RECORD_OVERHEAD + B + S + bodyLen + T + topicLen + 2 + propLen; topic_len (the topic part)
    # holds the T length bytes too.
    sizes = (cl.RECORD_OVERHEAD + cl.host_size(np.asarray(born_v6)) + cl.host_size(np.asarray(store_v6)) + body_len
             + topic_len + cl.SIZE_PROPERTIESLENGTH + stored_prop_len).astype(np.int64)
    limit = config.maxMessageSize + MESSAGE_SIZE_SLACK if config.maxMessageSize <= 2**31 - 1 - MESSAGE_SIZE_SLACK \
        else 2**31 - 1
    # a body over maxMessageSize is reported as such (_part_lengths), not again as its record
    problems.flag_rows((sizes > limit) & (body_len <= config.maxMessageSize), "body",
                       lambda r: f"record of {sizes[r]} bytes exceeds {limit}")
    problems.flag_rows(~cl.fits(0, sizes, config.mappedFileSizeCommitLog), "body",
                       lambda r: f"record of {sizes[r]} bytes cannot fit a commitlog file of "
                                 f"{config.mappedFileSizeCommitLog} bytes (needs size + {cl.MIN_BLANK})")
    return sizes


def _dispatch_fields(c: _Columns, topics: _Topics, sys_flag: np.ndarray, config: StoreConfig, problems: _Problems):
    """What the consume queue and index dispatch need, from one compiled pass over the properties
    (TAGS, KEYS, UNIQ_KEY, DELAY, WAIT): (transaction type, CQ eligibility, tagsCode, index entries'
    message indexes, their key hashes, whether each put waits for the flush)."""
    n = len(c.topic)
    pdata, poff = string_buffers(c.props)
    vs, ve = property_spans(pdata, poff, ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT"])
    tran_type = sys_flag & TRANSACTION_MASK
    cq_eligible = (tran_type == TRANSACTION_NOT) | (tran_type == TRANSACTION_COMMIT)

    # tagsCode: the TAGS hash sign-extended to 64 bits (a long holding an int).
    tags_code = np.where(vs[0] >= 0, kernels.java_hash_slices(pdata, vs[0], ve[0]).view(np.int32).astype(np.int64), 0)
    tags_code = _delay_tags_code(c, topics, pdata, vs[3], ve[3], tags_code, config, problems)

    # Index keys in dispatch order: UNIQ_KEY, then every non-empty KEYS token; ROLLBACK skipped.
    indexed = tran_type != TRANSACTION_ROLLBACK
    topic_hash = java_hash(topics.dictionary).view(np.uint32).astype(np.int64)[topics.index] if n \
        else np.zeros(0, np.int64)
    key_msg, key_hash = kernels.index_keys(pdata, vs[2], ve[2], vs[1], ve[1], indexed, topic_hash,
                                           with_hash=True)
    if config.line_5_5:
        key_msg, key_hash = tag_index.with_tag_entries(key_msg, key_hash, pdata, vs[0], ve[0], indexed, topic_hash)
    return tran_type, cq_eligible, tags_code, key_msg, index_key_hash(key_hash.view(np.int32)), \
        _waits(pdata, vs[4], ve[4])


def _waits(pdata, wait_start, wait_end) -> np.ndarray:
    """Message.isWaitStoreMsgOK per message: WAIT absent, or Boolean.parseBoolean of its value
    ("true" in any case). Only a waiting put's group commit sets the checkpoint's physicMsgTimestamp."""
    waits = wait_start < 0
    rows = np.flatnonzero(~waits & (wait_end - wait_start == 4))
    if len(rows):
        # Four UTF-8 bytes equal "true" ignoring case only if all are ASCII: byte by byte, with
        # the case bit (0x20) set, which maps only 'T' and 't' to 't' (and so on).
        first = wait_start[rows]
        true = np.ones(len(rows), bool)
        for t, ch in enumerate(b"true"):
            true &= (pdata[first + t] | 0x20) == ch
        waits[rows] = true
    return waits


def dispatch_of_records(table: pa.Table, config: StoreConfig) -> tuple:
    """What the store's dispatch derives from records read back (``decode_records``' columns
    topic, sys_flag, store_timestamp, properties_string), by the same pass the encoder uses:
    (CQ eligibility, tagsCode, message index of every index entry in dispatch order, its key
    hash, whether the put waited for its flush). A DELAY that is not an int keeps the TAGS rule
    (the broker's parse would fail)."""
    n = table.num_rows
    topic = as_large_string(_col(table, "topic"))
    props = as_large_string(_col(table, "properties_string").fill_null(""))
    if config.enabledAppendPropCRC:
        props = _without_crc_property(props)
    store_ts = numeric_values(_col(table, "store_timestamp")).astype(np.int64)
    c = _Columns(topic=topic, queue_id=np.zeros(n, np.int32), flag=np.zeros(n, np.int32),
                 sys_flag=np.zeros(n, np.int32), store_ts=store_ts, born_ts=store_ts,
                 reconsume=np.zeros(n, np.int32), prep_tx=np.zeros(n, np.int64), body=pa.nulls(n, pa.large_binary()),
                 props=props)
    tenc = pc.dictionary_encode(topic)
    topics = _Topics(part=topic, is_v2=np.zeros(n, bool), length=np.zeros(n, np.int64), dictionary=tenc.dictionary,
                     index=numeric_values(tenc.indices) if n else np.zeros(0, np.int64))
    sys_flag = numeric_values(_col(table, "sys_flag")).astype(np.int32)
    _, cq_eligible, tags_code, key_msg, key_hash, waits = _dispatch_fields(c, topics, sys_flag, config,
                                                                        _Problems(lambda i: f"record {i}"))
    return cq_eligible, tags_code.astype(np.int64), key_msg, key_hash, waits


def _delay_tags_code(c: _Columns, topics: _Topics, pdata, delay_start, delay_end, tags_code, config: StoreConfig,
                     problems: _Problems) -> np.ndarray:
    """Delay messages (DELAY on SCHEDULE_TOPIC_XXXX): tagsCode = deliver time, the store time plus
    the level's delay (DefaultMessageStore.computeDeliverTimestamp); a DELAY that is not an int is a problem."""
    n = len(c.topic)
    sched = np.flatnonzero(numeric_values(pc.fill_null(pc.equal(topics.dictionary, SCHEDULE_TOPIC), False)))
    is_sched = np.isin(topics.index, sched) if len(sched) else np.zeros(n, bool)
    delay_rows = is_sched & (delay_start >= 0)
    if not delay_rows.any():
        return tags_code
    rows = np.flatnonzero(delay_rows)
    dvals, doff = kernels.gather_slices(pdata, delay_start[rows], delay_end[rows] - delay_start[rows])
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
    problems.flag_rows(delay_rows & ~ok | out_of_int, "properties",
                       "DELAY on SCHEDULE_TOPIC_XXXX must be an integer (Integer.parseInt)")
    delays = config.delay_level_millis
    max_level = len(delays)
    level = np.minimum(level, max_level)
    table_ms = np.asarray([0] + delays, dtype=np.int64)
    apply = good & ~out_of_int & (level > 0)
    return np.where(apply, c.store_ts + table_ms[np.clip(level, 0, max_level)], tags_code)


def _body_crc(body: pa.Array) -> np.ndarray:
    """BODYCRC: crc32 of every body, 31 bits (UtilAll.crc32 & 0x7FFFFFFF)."""
    body_data, body_off = string_buffers(body)
    return (crc32.crc32_slices(body_data, body_off[:-1], body_off[1:]) & 0x7FFFFFFF).astype(np.int32)


def encode(pm: PreparedMessages, phys_offsets: np.ndarray, queue_offsets: np.ndarray,
           crc_property: bool = False, rows: tuple | None = None, fill_crc: bool = True,
           out: np.ndarray | None = None) -> np.ndarray:
    """Encode messages into one contiguous buffer of records (in order, no gaps).

    ``phys_offsets`` are the absolute commitlog offsets, ``queue_offsets`` the logical queue
    offsets (callers pass 0 for PREPARED/ROLLBACK), one per message of ``pm``. ``rows=(r0, r1)``
    encodes only those messages. With ``crc_property`` the records get enabledAppendPropCRC's
    reserved bytes; ``fill_crc=False`` leaves its digits to the caller (ingest fills them once
    the offsets are final: the CRC covers the whole record). Returns a uint8 array of the
    records' total size, written by one compiled pass (kernels.assemble_records): ``out`` when
    given (a uint8 array of exactly that size, e.g. where the caller writes it from).
    """
    p = pm.parts
    r0, r1 = rows if rows is not None else (0, pm.n)
    if r1 <= r0:
        return np.zeros(0, np.uint8)
    sl = slice(r0, r1)
    osl = slice(r0, r1 + 1)          # offsets of the Arrow buffers: one more
    magic = np.where(p["is_v2"][sl], MAGIC_V2, MAGIC_V1).astype(np.int32)
    born, store = p["born_host"], p["store_host"]
    body, body_off = string_buffers(p["body"])
    topic, topic_off = string_buffers(p["topic_part"])
    props, props_off = string_buffers(p["props"])
    if crc_property:
        need_sep = (p["stored_prop_len"][sl] - p["prop_len"][sl]) > CRC32_RESERVED_LEN
    else:
        need_sep = np.zeros(r1 - r0, np.bool_)
    sizes = pm.sizes[sl].astype(np.int64)
    # The kernel writes every byte but the CRC property's reserved ones.
    if out is None:
        out = (np.zeros if crc_property else np.empty)(int(sizes.sum()), np.uint8)
    elif out.shape != (int(sizes.sum()),) or out.dtype != np.uint8:
        raise ValueError(f"encode: out holds {out.shape} {out.dtype}, the records need {int(sizes.sum())} bytes")
    elif crc_property:
        out.fill(0)
    end = kernels.assemble_records(
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
    crc = crc32.crc32_slices(buf, starts, ends - CRC32_RESERVED_LEN).astype(np.int64) & 0x7FFFFFFF
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


def record_starts(buf: np.ndarray, start: int = 0, end: int | None = None):
    """Positions of the records in a segment buffer; (starts, stop position, reason).

    reason: 0 = reached ``end``, 1 = BLANK record at stop, 2 = zero size / bad magic at stop.
    The walk is compiled (``kernels.walk_records``) over ``commitlog``'s layout constants.
    """
    end = len(buf) if end is None else end
    return kernels.walk_records(buf, start, end)


def gather_int(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of ``width`` bytes at every position (int64 for 8, else int32)."""
    v = kernels.read_be(buf, pos, width)
    return v if width == 8 else v.astype(np.int32)


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
    f = kernels.record_fields(buf, s)
    bad = np.flatnonzero(f[kernels.F_OK] == 0)
    if len(bad):
        from ..errors import CorruptStore
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
    f = kernels.record_fields(buf, s)
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
    if (f[kernels.F_STOREHOST_LEN] == cl.HOST_V4_SIZE).all():
        id_vals = kernels.hex_ids_v4(f[kernels.F_STOREHOST_KEY], f[kernels.F_PHYS]).reshape(-1)
        id_off = np.arange(n + 1, dtype=np.int64) * cl.MSG_ID_V4_HEX_LENGTH
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
        "born_host": host_strings(buf, s + cl.POS_BORNHOST, f[kernels.F_BORNHOST_LEN], f[kernels.F_BORNHOST_KEY]),
        "store_timestamp": i64(kernels.F_STORETS),
        "store_host": host_strings(buf, f[kernels.F_STOREHOST_POS], f[kernels.F_STOREHOST_LEN],
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


def decode_message_id(msg_id: str) -> tuple[bytes, int]:
    """MessageDecoder.decodeMessageId: 32 hex chars = IPv4 store host, anything else IPv6."""
    return cl.parse_msg_id(msg_id)


def decode_one(buf, pos: int = 0) -> dict | None:
    """Decode the single record at ``buf[pos:]`` to a dict (None for BLANK/zero/unknown magic, or
    a damaged record whose fields do not fit inside it)."""
    arr = np.frombuffer(buf, dtype=np.uint8) if not isinstance(buf, np.ndarray) else buf
    if pos + cl.BLANK_SIZE > len(arr):
        return None
    size, magic = cl.parse_size_magic(arr, pos)
    if not cl.is_record_start(size, magic, pos, len(arr)):
        return None
    t, ok = decode_valid_records(arr[pos:pos + size], 0, np.zeros(1, np.int64))
    return t.to_pylist()[0] if ok[0] else None

