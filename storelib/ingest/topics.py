"""Topic configuration and the broker-side defaults an input may leave out.

Input rows carry what a producer sent; fields a broker would fill in may be missing. Before a
split is validated and encoded (``codec.prepare``), ``fill`` completes it, identically in the scan
and in the segment writers, so every task sees the same messages:

* ``queue_id`` missing (null / column absent): the message is put on one of its topic's
  **write queues** (``writeQueueNums`` from ``topics.json``; topics not listed there get the
  config's ``defaultTopicQueueNums``, default 4, as a broker auto-creating a topic would):

  - default, **round robin in input order**: the k-th message without a queue id of topic T
    (counted over the whole store history, across batches: the position per topic is kept in the
    checkpoint row's ``detail.round_robin``) goes to queue ``(k) % writeQueueNums(T)``. RocketMQ's
    producer (``MQFaultStrategy``/``TopicPublishInfo.selectOneMessageQueue``) does the same from a
    random start; we start at 0 so the placement is reproducible. Because the position is
    batch-global and carried over, any split of the input into batches (and into Spark splits)
    gives the same queues, hence the same bytes.
  - ``--queue-by NAME``: a **sharding key**, as ``SelectMessageQueueByHash`` does:
    ``queue = abs(javaHash(value) % writeQueueNums)`` (Java remainder: sign of the dividend, then
    ``Math.abs``). NAME is a message property (e.g. ``KEYS``, ``UNIQ_KEY`` or an application
    property such as ``ORDER_ID``) or a message field (``born_host``, ``flag``...; numbers hash as
    their decimal string). A row without a value for NAME is an input error.

  Rows that carry a ``queue_id`` keep it (the input is the authority, as for replicated data).
* ``store_timestamp`` missing: the row's ``born_timestamp`` if present, else the batch's default
  store time: ``--store-timestamp MS`` if given, otherwise the newest modification time (ms) of the
  input files. Both are fixed for a given input, so a rerun of a batch writes the same bytes.
* ``born_timestamp`` missing: the store timestamp (in ``codec.prepare``).
* ``store_host`` missing: the broker's address ``brokerIP1:listenPort`` (config); ``born_host``
  missing: the store host (both in ``codec.prepare``).

``topics.json`` has RocketMQ's shape (``config/topics.json`` of a broker)::

    {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4,
                                "perm": 6, ...}}, "dataVersion": {...}}

A topic with ``readQueueNums < writeQueueNums`` gets a warning: consumers would never read the
queues above ``readQueueNums``. Rows that carry a queue id at or above their topic's
``readQueueNums`` (replicated data from a broker with more queues) are stored as given, and the
topic config the batch records has ``readQueueNums`` raised to cover them (``Topics.grown``: a
broker serves no queue above it), ``writeQueueNums`` unchanged.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError, TopicsError
from ..format.paths import PROJECT_ROOT
from ..codec import messages as codec
from ..compute.arrays import as_large_string, dictionary_encoded, numeric_values, single_array, valid_mask
from ..format.names import topic_problem
from ..codec.properties import property_values

__all__ = ["DEFAULT_TOPICS_FILE", "TopicConfig", "Topics", "Filled", "fill", "rr_queue_counts",
           "residue_counts"]

ROOT = PROJECT_ROOT
DEFAULT_TOPICS_FILE = os.path.join(ROOT, "conf", "topics.json")


@dataclass(frozen=True)
class TopicConfig:
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = 6


@dataclass
class Topics:
    table: dict = field(default_factory=dict)       # name -> TopicConfig
    default_queue_nums: int = 4
    source: str | None = None

    @classmethod
    def load(cls, path: str | None, default_queue_nums: int = 4) -> "Topics":
        """Read a RocketMQ topics.json (``None``: no file, every topic gets the default)."""
        if not path:
            return cls({}, default_queue_nums, None)
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, ValueError) as e:
            raise TopicsError(f"{path}: cannot read topics config ({e})") from None
        return cls.parse(text, path, default_queue_nums)

    @classmethod
    def parse(cls, text, path: str, default_queue_nums: int = 4) -> "Topics":
        """A topics.json's text (``path`` names it in errors)."""
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise TopicsError(f"{path}: cannot read topics config ({e})") from None
        tct = doc.get("topicConfigTable") if isinstance(doc, dict) else None
        if not isinstance(tct, dict):
            raise TopicsError(f"{path}: expected an object with a 'topicConfigTable' object")
        table = {}
        for key, t in tct.items():
            if not isinstance(t, dict):
                raise TopicsError(f"{path}: topic {key!r}: expected an object")
            name = t.get("topicName", key)
            for what, value in (("key", key), ("topicName", name)):
                problem = topic_problem(value)
                if problem:
                    raise TopicsError(f"{path}: topicConfigTable {what} {value!r}: {problem}")
            try:
                w = int(t.get("writeQueueNums", default_queue_nums))
                r = int(t.get("readQueueNums", w))
                perm = int(t.get("perm", 6))
            except (TypeError, ValueError):
                raise TopicsError(f"{path}: topic {name!r}: queue numbers must be integers") from None
            if w < 1 or r < 0:
                raise TopicsError(f"{path}: topic {name!r}: writeQueueNums must be >= 1 (got {w})")
            table[name] = TopicConfig(name, r, w, perm)
        return cls(table, default_queue_nums, path)

    @classmethod
    def default(cls, default_queue_nums: int = 4) -> "Topics":
        """conf/topics.json if it exists, else no topic config."""
        path = DEFAULT_TOPICS_FILE if os.path.exists(DEFAULT_TOPICS_FILE) else None
        return cls.load(path, default_queue_nums)

    def write_queue_nums(self, topic: str) -> int:
        t = self.table.get(topic)
        return t.write_queue_nums if t else self.default_queue_nums

    def warnings(self) -> list:
        return [f"topic {t.name!r}: readQueueNums {t.read_queue_nums} < writeQueueNums {t.write_queue_nums}: "
                f"queues {t.read_queue_nums}..{t.write_queue_nums - 1} get messages no consumer reads"
                for t in self.table.values() if t.read_queue_nums < t.write_queue_nums]

    def grown(self, highest: dict) -> "Topics":
        """This config with each topic's ``readQueueNums`` raised to cover ``highest`` (topic ->
        the highest queue id the store holds of it). Rows that carry their queue id keep it (the
        input is the authority), and a broker serves only queues below ``readQueueNums``: a pull
        of queue N >= readQueueNums is "queueId is illegal" (PullMessageProcessor), consumers are
        given readQueueNums queues (the topic route), and a send is refused at N >= max(read,
        write) (msgCheck). So the recorded config is the one a broker needs to serve every
        stored message; ``writeQueueNums`` (where producers and round robin put messages) stays."""
        table = dict(self.table)
        for name, q in highest.items():
            t = table.get(name) or TopicConfig(name, self.default_queue_nums, self.default_queue_nums)
            if q >= t.read_queue_nums:
                table[name] = TopicConfig(name, int(q) + 1, t.write_queue_nums, t.perm)
        return Topics(table, self.default_queue_nums, self.source)

    def to_dict(self, placed=()) -> dict:
        """What a batch records of the topic config it used (its checkpoint row's
        ``detail.topics``): each topic's [read, write, perm] queue numbers and ``placed``, the
        topics whose messages got their queue from it (round robin or ``--queue-by``) in this
        batch or an earlier one; those of them not listed get the default they were placed with,
        as a broker persists the topics it auto-creates."""
        table = dict(self.table)
        for name in placed:
            table.setdefault(name, TopicConfig(name, self.default_queue_nums, self.default_queue_nums))
        return {"default": self.default_queue_nums, "placed": sorted(set(placed)),
                "topics": {k: [t.read_queue_nums, t.write_queue_nums, t.perm] for k, t in sorted(table.items())}}

    @classmethod
    def from_dict(cls, d: dict, default_queue_nums: int | None = None, source: str | None = None) -> "Topics":
        table = {k: TopicConfig(k, r, w, perm) for k, (r, w, perm) in d["topics"].items()}
        return cls(table, d["default"] if default_queue_nums is None else default_queue_nums, source)

    def agree(self, recorded: dict | None, update: bool = False) -> tuple["Topics", dict]:
        """This (given) topic config over the one a store recorded (``to_dict``): (the recorded
        topics updated by these, {topic: [recorded, given] writeQueueNums} changed). A topic whose
        messages were placed by its recorded writeQueueNums and that is given another is a
        TopicsError naming every such topic, unless ``update`` (mqadmin updateTopic: the batch
        records the change). Topics without placed messages take the given numbers."""
        if not recorded:
            return self, {}
        old = Topics.from_dict(recorded)
        placed = set(recorded.get("placed", ()))
        changes = {k: [old.table[k].write_queue_nums, t.write_queue_nums] for k, t in sorted(self.table.items())
                   if k in placed and k in old.table and old.table[k].write_queue_nums != t.write_queue_nums}
        if changes and not update:
            where = f" ({self.source})" if self.source else ""
            raise TopicsError(f"--topics{where} disagrees with the queue counts this store's messages were placed "
                              "by: " + ", ".join(f"topic {k!r} writeQueueNums store={a} given={b}"
                                                 for k, (a, b) in changes.items())
                              + "; give --update-topics (ingest_dataframe: update_topics=True; the sink: option "
                                "updateTopics) to change them, recorded with the batch")
        return Topics({**old.table, **self.table}, self.default_queue_nums, self.source), changes


@dataclass
class Filled:
    table: pa.Table                 # MESSAGE_SCHEMA, queue_id and store_timestamp filled
    rr_topics: list                 # topics with round-robin rows in this split
    rr_topic: np.ndarray            # int32 per row: index into rr_topics, -1 if not round robin
    rr_rank: np.ndarray             # int64 per row: rank among the split's round-robin rows of its topic
    rr_total: dict                  # topic -> round-robin rows in the split
    placed: list = field(default_factory=list)   # topics with rows whose queue the topic config chose


def _col(table: pa.Table, name: str):
    return single_array(table.column(name))


def _sharding_values(table: pa.Table, name: str) -> pa.Array:
    if name in table.column_names and name != "properties_string":
        return pc.cast(_col(table, name), pa.large_string())
    props = as_large_string(_col(table, "properties_string").fill_null(""))
    return property_values(props, (name,))[name]


def fill(table: pa.Table, topics: Topics, queue_by: str | None = None, rr_start: dict | None = None,
         default_store_ts: int | None = None, label=None) -> Filled:
    """Complete queue_id / store_timestamp of one split (see the module docstring).

    ``rr_start``: topic -> round-robin position of the split's first such row (None in the scan,
    which does not know it yet: round-robin rows then get queue 0 and are reported by rank, so the
    driver can place them once it knows every split's counts).
    """
    label = label or (lambda i: f"row {i}")
    n = table.num_rows
    empty = Filled(table, [], np.full(n, -1, np.int32), np.zeros(n, np.int64), {})
    if n == 0:
        return empty
    qcol = _col(table, "queue_id")
    missing_q = ~valid_mask(qcol)
    tcol = _col(table, "store_timestamp")
    missing_ts = ~valid_mask(tcol)
    if not missing_q.any() and not missing_ts.any():
        return empty
    cols = {name: table.column(name) for name in table.column_names}
    rr_topic = np.full(n, -1, np.int32)
    rr_rank = np.zeros(n, np.int64)
    rr_topics: list = []
    rr_total: dict = {}
    placed: list = []
    if missing_ts.any():
        born = _col(table, "born_timestamp")
        filled = pc.coalesce(tcol, born)
        if filled.null_count:
            if default_store_ts is None:
                rows = np.flatnonzero(~valid_mask(filled))
                raise InputError([f"{label(int(r))}: field 'store_timestamp': missing and no default store "
                                  f"time was given" for r in rows[:20]], len(rows))
            filled = pc.coalesce(filled, pa.scalar(int(default_store_ts), pa.int64()))
        cols["store_timestamp"] = filled.cast(pa.int64())
    if missing_q.any():
        topic = _col(table, "topic")
        if topic.null_count:
            rows = np.flatnonzero(~valid_mask(topic))
            raise InputError([f"{label(int(r))}: field 'topic': missing (required)" for r in rows[:20]], len(rows))
        tenc = dictionary_encoded(topic)
        tidx = numeric_values(tenc.indices).astype(np.int64)
        names = tenc.dictionary.to_pylist()
        nq = np.asarray([topics.write_queue_nums(t) for t in names], np.int64)[tidx]
        q = numeric_values(qcol.fill_null(0)).astype(np.int64)
        rows = np.flatnonzero(missing_q)
        placed = [names[i] for i in np.unique(tidx[rows])]
        if queue_by:
            vals = _sharding_values(table, queue_by)
            none = ~valid_mask(vals) & missing_q
            if none.any():
                bad = np.flatnonzero(none)
                raise InputError([f"{label(int(r))}: --queue-by {queue_by}: the message has no queue_id and no "
                                  f"{queue_by!r} value to pick a queue by" for r in bad[:20]], len(bad))
            h = codec.java_hash(vals.fill_null("")).astype(np.int64)
            q[rows] = np.abs(np.fmod(h[rows], nq[rows]))        # SelectMessageQueueByHash
        else:
            # rank of each row among the split's round-robin rows of its topic
            t_rows = tidx[rows]
            order = np.argsort(t_rows, kind="stable")
            st = t_rows[order]
            first = np.searchsorted(st, st, side="left")
            rank = np.empty(len(rows), np.int64)
            rank[order] = np.arange(len(rows)) - first
            present = np.unique(t_rows)
            remap = np.full(len(names), -1, np.int32)
            remap[present] = np.arange(len(present), dtype=np.int32)
            rr_topics = [names[i] for i in present]
            rr_topic[rows] = remap[t_rows]
            rr_rank[rows] = rank
            counts = np.bincount(remap[t_rows], minlength=len(present))
            rr_total = {rr_topics[i]: int(counts[i]) for i in range(len(present))}
            if rr_start is not None:
                start = np.asarray([int(rr_start.get(t, 0)) for t in rr_topics], np.int64)
                q[rows] = (start[rr_topic[rows]] + rank) % nq[rows]
            else:
                q[rows] = 0
        cols["queue_id"] = pa.array(q.astype(np.int32), pa.int32())
    out = pa.table(cols, schema=table.schema)
    return Filled(out, rr_topics, rr_topic, rr_rank, rr_total, placed)


def rr_queue_counts(topics: Topics, rr_topics: list, rr_elig_by_residue: list, start: dict) -> dict:
    """(topic, queue) -> NOT/COMMIT round-robin messages, from per-residue counts of a split."""
    out: dict = {}
    for t, by_res in zip(rr_topics, rr_elig_by_residue):
        n = topics.write_queue_nums(t)
        s = int(start.get(t, 0))
        for r, c in enumerate(by_res):
            if c:
                key = (t, (s + r) % n)
                out[key] = out.get(key, 0) + int(c)
    return out


def residue_counts(topics: Topics, f: Filled, eligible: np.ndarray) -> list:
    """Per round-robin topic of the split: NOT/COMMIT rows by rank % writeQueueNums."""
    out = []
    for i, t in enumerate(f.rr_topics):
        n = topics.write_queue_nums(t)
        sel = (f.rr_topic == i) & eligible
        out.append(np.bincount(f.rr_rank[sel] % n, minlength=n).astype(np.int64).tolist())
    return out
