"""Ingest: one batch of messages -> RocketMQ store files + one Delta commit.

This module is the driver's sequence of stages (``run_ingest``); each stage lives in its own
module. Stages (Spark only schedules; executors read the input and write the files themselves):

0. lease     driver: ``_rocketlake/writer.lock`` (writerlease.WriterLease): one writer per store; a
             second ingest fails at once with ConcurrentWriteError (exit 3) and touches nothing.
             Then: finish the publish of a committed batch a dead run left unfinished. The
             lease renews itself on a thread; each commit checks it is still this writer's.
1. encode    storelib.ingest.encode: a task per two input splits; each split: read, fill broker defaults
             (storelib.ingest.topics: queue ids by round robin / sharding key, store time), validate,
             encode every record once (with placeholder placement), stage the records and the
             split's per-message facts (sizes, queues, tags codes, store times, index key
             hashes), return a small summary. Bad input stops here, before any store file is
             written.
2. plan      driver: ``sequencer.plan_batch`` places every message (commitlog offsets, rolls,
             queue offsets, index positions) from the split summaries (per-message sizes are
             read back only for splits that straddle a segment boundary).
3. write     storelib.ingest.write: one Spark stage, no shuffle, every task reading only what
             stage 1 staged:
             - segment tasks (a run of consecutive segments each): read the pieces' staged
               records, patch the three placement fields (QUEUEID of round-robin rows,
               QUEUEOFFSET, PHYSICALOFFSET: ``kernels.patch_placement``), write the segment's
               new bytes;
             - file tasks: the new bytes of consume-queue and index files from the placed facts
               of the splits each file draws on (``place_split`` applies the plan to a split).
             Each file version goes where ``storelib.ingest.file_versions`` says: a new file
             whole, a continued one as a patch (local stores) or as new objects (object stores).
4. commit    storelib.ingest.commit (driver): checkpoint file, manifest rows (built by
             storelib.table.manifest), conditional Delta commits (the switch), then publish
             (patches applied in place, new local files renamed to their names) and remove the
             staging directory.

The input is read once; the records are written twice (staging, then their segment), which
costs less than reading and validating the input a second time (see bench/ and the README).

Every task attempt writes to its own staging path (``_rocketlake/staging/<batch>/<attempt>/files/
<stage-partition-attempt-uuid>/``) and returns it; only the driver's commit makes a file part of
the store, so task retries and speculative attempts cannot corrupt a file. A rerun of the same
batch id after a crash starts over from the committed state (or, if the commit happened, finishes
publishing), so the bytes are the same as an uninterrupted run.

Batches and readers. A batch appends: it continues the last commitlog segment, the last consume
queue file of every queue it touches and the last index file (storelib.ingest.file_versions: in place
through patches on local stores, as extents of new objects on object stores) and creates the files
it rolls into. Nothing of a store file changes before the switch; committed bytes never change
after it (only bytes past a committed end, and the index slot heads and header, which readers of
an earlier snapshot take from their own manifest rows). A reader trusts only what its snapshot's
manifest rows say: ``valid_bytes`` of a segment / consume queue file, the header of an index file.
Batch ids are idempotency keys: a committed id with the same input fingerprint is a no-op
("already-committed", exit 0), with other input an
error. The default id is derived from the input's fingerprint (``auto-<sha256 prefix>``). An
input without a message commits nothing (status "nothing-to-commit", exit 0).

Inputs: ``run_ingest`` takes files (``FileInput``: fingerprint of the files, known before the
lease); ``storelib.ingest.frame`` a DataFrame, whose fingerprint is the digest of what its encode
tasks encoded (storelib.ingest.record_digest), so ``ingest_batch`` names its split staging
``PENDING_BATCH_ID`` until then and runs the already-committed check after stage 1.
"""
from __future__ import annotations

import itertools
import os
import shutil
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence, cast
from urllib.parse import urlparse

from . import encode as encode_stage, inputs, sequencer, split_staging, topics as topics_mod, write as write_stage
from ..format import paths
from ..table import rowcheck, writerlease
from ..table.snapshots import StoreSnapshot, open_snapshot
from ..io import objstore, storage
from ..io.brokerlock import remove_made_dir
from ..io.condput import refuse_gs_store
from ..runtime import warmup
from .commit import (StagedBatch, commit_batch, drop_staging, finish_pending_publish, is_committed, outcome_unknown,
                     undo_attempt)
from ..format.config import DEFAULT_ROCKETMQ_LINE, StoreConfig
from ..format.times import time_range_problem
from ..errors import BadInput, ConfigError, IngestError, StorePathError
from .context import EncodeContext, IngestOptions, WriteContext, empty_bodies_allowed
from .encode import SPLITS_PER_TASK, default_store_timestamp, encode_splits
from .identity import IDENTITY, earlier_fingerprints, input_fingerprint
from ..runtime.faults import fault
from ..runtime.progress import Progress
from .write import run_write_task
from ..table.rows import FileKind, check_batch_id, queue_ends, recorded_config

__all__ = ["run_ingest", "ingest_batch", "FileInput", "PENDING_BATCH_ID", "store_state", "check_store_root", "check_config",
           "resolve_topics"]


# ---------------------------------------------------------------------------- the store as found
def store_state(snap: StoreSnapshot) -> sequencer.StoreState:
    if snap.batch is None:
        return sequencer.StoreState()
    b = snap.batch
    queue_next = queue_ends(snap.files.values())    # (batch rows list only the queues they changed)
    idx = snap.of_kind(FileKind.INDEX)
    tail = None
    if idx:
        last = idx[-1]
        header = last.index_header
        tail = sequencer.IndexTail(last.path, header.to_dict(), header.index_count >= recorded_config(b).maxIndexNum)
    return sequencer.StoreState(next_phys=b.max_phy_offset, queue_next=queue_next, index_tail=tail,
                                index_files=len(idx), messages=b.total_messages)


def check_store_root(store: storage.Store, snap: StoreSnapshot) -> None:
    """A store without our tables must not already hold RocketMQ files (import those instead),
    nor lie inside another store (``enclosing_store``)."""
    if snap.batch is not None:
        return
    for d in paths.BROKER_DIRS:
        if store.list_files(d):
            raise BadInput(f"{store.uri} already holds RocketMQ files ({d}/) but no rocketlake manifest: a new store "
                           "(an ingest's, a mirror's) starts in an empty or absent directory; to keep those files as "
                           f"a store, import them: `rocketlake ingest --store {store.uri} --from-store {store.uri}` "
                           "(nothing was written)")
    outer = enclosing_store(store)
    if outer is not None:
        raise BadInput(f"{store.uri} lies inside {outer}: its files would be files of that store no manifest names "
                       "(a broker on it would take them for its own; that store's writers clean up their own "
                       "directories); put the new store beside it (nothing was written)")


def enclosing_store(store: storage.Store) -> str | None:
    """The rocketlake store (a ``_rocketlake/checkpoints`` directory), or the broker directory
    under whose ``commitlog/``, ``consumequeue/`` or ``index/`` it lies (a ``commitlog/``
    directory), that holds ``store``'s root below its own; None: none does. Local roots by their
    real paths; remote ones by their parent prefixes (one look-up each, made before a store's
    first batch only)."""
    if store.os_paths:
        parts = os.path.realpath(store.root).strip("/").split("/")
        def parent(k: int) -> storage.Store:
            return storage.Store("/" + "/".join(parts[:k]))
    else:
        u = urlparse(store.uri)
        parts = u.path.strip("/").split("/")
        def parent(k: int) -> storage.Store:
            return storage.Store(f"{u.scheme}://{u.netloc}/" + "/".join(parts[:k]))
    for k in range(len(parts) - 1, -1, -1):
        p = parent(k)
        try:
            if p.exists(paths.CHECKPOINTS_DIR) or parts[k] in paths.BROKER_DIRS and p.exists(paths.COMMITLOG_DIR):
                return p.uri
        except (OSError, StorePathError):    # a parent this writer may not list (a bucket policy on its prefix)
            continue
    return None


def check_config(snap: StoreSnapshot, config: StoreConfig) -> None:
    if snap.batch is None:
        return
    # a store written before rocketmqVersion was recorded is a "5" store
    stored = {"rocketmqVersion": DEFAULT_ROCKETMQ_LINE, **snap.batch.config}
    mine = config.file_shaping()
    diff = {k: (stored.get(k), v) for k, v in mine.items() if stored.get(k) != v}
    if diff:
        raise ConfigError("configuration differs from the one this store was written with: "
                          + ", ".join(f"{k} store={a!r} given={b!r}" for k, (a, b) in diff.items()))


def _load_topics(topics, config: StoreConfig) -> "topics_mod.Topics | None":
    """The topic config given (a topics.json path or ``Topics``), None if none was."""
    if isinstance(topics, topics_mod.Topics):
        return topics
    return topics_mod.Topics.load(topics, config.defaultTopicQueueNums) if topics else None


def resolve_topics(snap: StoreSnapshot, given, config: StoreConfig, update: bool = False) -> tuple:
    """(the batch's topic config, {topic: [recorded, given]} it changes): the store's recorded one
    (``Topics.to_dict``), updated by ``given`` where it agrees (``Topics.agree``: TopicsError
    naming each topic that disagrees, unless ``update``); a store that recorded none takes the
    given one, else conf/topics.json, else the default for every topic."""
    rec = snap.last_detail("topics")
    if given is not None:
        return given.agree(rec, update)
    if rec:
        return topics_mod.Topics.from_dict(rec, config.defaultTopicQueueNums, "recorded by the store"), {}
    return topics_mod.Topics.default(config.defaultTopicQueueNums), {}


# ---------------------------------------------------------------------------- run_ingest
@dataclass(frozen=True)
class _Run:
    """What the steps of one ``run_ingest`` attempt share. Immutable: a step that learns more (the
    attempt's staging, the batch id an input's encoded records identify) returns a new value
    (``dataclasses.replace``), which the driver holds from then on."""
    sc: Any                       # SparkContext
    store: storage.Store
    config: StoreConfig
    prog: Progress
    splits: list                  # inputs.Split
    tcfg: topics_mod.Topics | None       # the topics given (resolved once the snapshot is read)
    batch_id: str
    fingerprint: str
    t0: float
    attempt: str | None = None    # once this attempt starts staging files (``_start_attempt``)
    staging: str | None = None
    snap: StoreSnapshot | None = None   # the committed snapshot this attempt continues
    local_staging: str | None = None        # host-local split staging (storelib.ingest.split_staging)
    # (kinds) -> the identities earlier versions gave the input (``identity.earlier_fingerprints``)
    earlier: Callable[[list], list] | None = None
    # what the "same id, other input" error advises, where the input knows better than
    # "another --batch-id" (the streaming sink: a reset checkpoint)
    other_input: str | None = None


def run_ingest(spark, store: str, input_path: str, fmt: str, config: StoreConfig,
               batch_id: str | None = None, target_splits: int = 0, quiet: bool = False,
               split_bytes: int = 128 << 20, topics=None, queue_by: str | None = None,
               store_timestamp: int | None = None, progress_interval: float = 5.0,
               update_topics: bool = False, allow_empty_body: bool | None = None) -> dict:
    """Ingest one batch; returns the summary dict.

    Raises InputError/ConfigError/IngestError, ``ConcurrentWriteError`` when another
    writer holds the store (or committed first). ``topics``: a topics.json path or ``Topics``
    (default: the one the store recorded, else conf/topics.json if present; ``resolve_topics``);
    ``update_topics``: ``topics`` may change the queue counts the store recorded;
    ``queue_by`` / ``store_timestamp``: see storelib.ingest.topics.
    """
    t0 = time.time()
    refuse_gs_store(store)                  # before the input (or anything of the store) is read
    splits = inputs.plan_splits(input_path, fmt, target_splits or spark.sparkContext.defaultParallelism, split_bytes)
    source = FileInput(input_path, fmt, splits, store_timestamp)
    return ingest_batch(spark, store, source, config, IngestOptions(
        batch_id=batch_id, topics=topics, update_topics=update_topics, queue_by=queue_by,
        allow_empty_body=allow_empty_body, quiet=quiet, progress_interval=progress_interval, t0=t0))


class FileInput:
    """Input files cut into splits (storelib.ingest.inputs): identified before anything is encoded, by
    the files' identity; encoded by ``encode_stage.encode_splits`` tasks of consecutive splits.

    The other kind of input, a DataFrame (storelib.ingest.frame), has the same members; its
    ``fingerprint`` is None until its encode tasks report what they encoded (``fingerprint_of``)."""

    def __init__(self, input_path: str, fmt: str, splits: list, store_timestamp: int | None):
        self.input_path, self.fmt, self.splits = input_path, fmt, splits
        self.fingerprint = input_fingerprint(input_path, fmt, splits)
        self.default_store_ts = store_timestamp if store_timestamp is not None else default_store_timestamp(splits)

    def encode(self, run: "_Run", ctx: EncodeContext) -> list:
        return _encode(run, ctx, self.input_path, self.fmt)

    def fingerprint_of(self, scans: list) -> str:
        return self.fingerprint

    def earlier_fingerprints(self, kinds: list) -> list:
        """The identities earlier versions gave this input (``identity.earlier_fingerprints``)."""
        return earlier_fingerprints(self.input_path, self.fmt, self.splits, kinds)


def _check_store_time(ms: int | None) -> None:
    """The default store time of a batch (``store_timestamp``, the sink's ``storeTimestamp``) must
    be one a store holds: BadInput before anything is made or written otherwise."""
    problem = time_range_problem(int(ms)) if ms is not None else None
    if problem is not None:
        raise BadInput(f"store timestamp {problem} (nothing was written)")


# The staging name of a batch whose id is derived from what its encode stage produced: its
# split records are staged here; its files are staged under the real id once it is known.
PENDING_BATCH_ID = "pending-id"


def ingest_batch(spark, store_uri: str, source, config: StoreConfig, options: IngestOptions | None = None) -> dict:
    """Ingest one batch of ``source`` (``FileInput`` or ``storelib.ingest.frame.FrameInput``) as ``options``
    ask (None: the defaults), the stages of the module docstring; returns the summary dict (``run_ingest``)."""
    refuse_gs_store(store_uri)              # before anything there is read
    options = options or IngestOptions()
    t0 = options.t0 or time.time()
    sc = spark.sparkContext
    if isinstance(getattr(sc, "environment", None), dict):
        objstore.ship(sc)       # a caller's own session too (cli.spark_session's already carries them)
    prog = Progress(options.quiet, sc, options.progress_interval)
    store = storage.Store(store_uri)
    given = check_batch_id(options.batch_id) if options.batch_id is not None else None
    _check_store_time(source.default_store_ts)
    fingerprint = source.fingerprint
    batch_id = given or (f"auto-{fingerprint[:16]}" if fingerprint else PENDING_BATCH_ID)
    given_topics = _load_topics(options.topics, config)        # TopicsError before the lease
    run = _Run(sc, store, config, prog, source.splits, given_topics, batch_id, fingerprint, t0,
               earlier=getattr(source, "earlier_fingerprints", None), other_input=getattr(source, "other_input", None))
    lease = writerlease.WriterLease(store, batch_id)
    new_dirs = _new_dirs(store)
    lease.acquire()          # ConcurrentWriteError: another ingest holds the store
    fault("after-lease")
    committed = committing = False
    encoded_in = None        # staging of the split records when the id was derived after encoding
    try:
        # as of the lease: every batch, the tables' versions (queue_offsets: the latest batch's)
        snap = open_snapshot(store, history=True, queue_offsets=False)
        rowcheck.check_snapshot(snap)        # never appends to rows verify rejects
        done = _already_committed(run, snap) if fingerprint else None
        if done is not None:
            committed = True
            return done
        run, state = _start_attempt(run, snap)
        tcfg, topic_changes = resolve_topics(snap, given_topics, config, options.update_topics)
        for w in tcfg.warnings():
            prog.warn(w)
        run = replace(run, tcfg=tcfg)
        ctx = EncodeContext(store=store_uri, config=config, topics=tcfg, staging=cast(str, run.staging),
                            local_staging=run.local_staging, splits=tuple(s.to_dict() for s in source.splits),
                            queue_by=options.queue_by, default_store_ts=source.default_store_ts,
                            allow_empty_body=empty_bodies_allowed(options.allow_empty_body))
        # 1. encode
        scans = source.encode(run, ctx)
        fault("after-scan")
        if not any(s.get("count") for s in scans):
            drop_staging(store, cast(str, run.staging))
            return _nothing_to_commit(run, given)
        if fingerprint is None:
            encoded_in = run.staging
            run, done = _identify(run, snap, lease, source.fingerprint_of(scans), given)
            if done is not None:
                drop_staging(store, cast(str, run.staging))      # what this attempt staged under a given id
                committed = True
                return done
        rr_starts, rr_after = encode_stage.round_robin_starts(scans, snap.last_detail("round_robin") or {})
        summaries = encode_stage.split_summaries(scans, tcfg, rr_starts)
        prog.say(f"encode done: {sum(s.count for s in summaries)} messages, "
                 f"{sum(s.total_bytes for s in summaries)} record bytes")
        # 2. plan, 3. write
        plan = _plan(run, state, scans, summaries, rr_starts)
        results = _write(run, ctx, plan, scans, summaries, rr_starts)
        fault("after-files-staged")
        # 4. commit
        staged = StagedBatch(snap, state, plan, summaries, results, run.batch_id, run.fingerprint, cast(str, run.staging),
                             attempt=run.attempt,
                             detail_extra=_topic_detail(snap, tcfg, topic_changes, scans, rr_after))
        committing = True
        summary = commit_batch(store, staged, config, t0, prog, lease=lease)
        committed = True
    except BaseException as e:
        _abandon(run, e, committing)
        raise
    finally:
        _drop_encoded(store, encoded_in, run.staging)
        if run.local_staging:
            shutil.rmtree(run.local_staging, ignore_errors=True)
        lease.release()
        if not committed:
            _remove_empty_meta(store, new_dirs)
    return summary


def _earlier_kinds(batches: Sequence) -> list:
    """The identities earlier versions gave inputs that these ingest batches may carry: a batch of
    this version records its ``identity``, one of the version before recorded its topic config
    only, and older ones neither."""
    details = [b.detail for b in batches if b.operation == "ingest"]
    kinds = ["sha256"] if any("topics" in d and "identity" not in d for d in details) else []
    return kinds + (["path"] if any("topics" not in d for d in details) else [])


def _topic_detail(snap: StoreSnapshot, tcfg: "topics_mod.Topics", changes: dict, scans: list,
                  rr_after: dict) -> dict:
    """What the batch records of its topics (round-robin positions after it, the topic config with
    every topic the config placed messages of so far, and the queue counts it changed), and the
    identity this version gives inputs."""
    placed = set((snap.last_detail("topics") or {}).get("placed", ()))
    placed.update(t for s in scans for t in s.get("placed_topics", ()))
    out = {"round_robin": rr_after, "topics": tcfg.grown(_highest_queues(snap, scans)).to_dict(placed),
           "identity": IDENTITY}
    if changes:
        out["topic_changes"] = changes
    return out


def _highest_queues(snap: StoreSnapshot, scans: list) -> dict[str, int]:
    """topic -> the highest queue id the store holds of it after the batch: its live consume
    queues and the batch's (per queue, not per message)."""
    out: dict[str, int] = {}
    pairs = [(r.topic, r.queue_id) for r in snap.of_kind(FileKind.CONSUMEQUEUE)]
    pairs += [(t, q) for s in scans for t, q, _ in s.get("queue_counts", ())]
    for t, q in pairs:
        if t is not None and q is not None and int(q) > out.get(t, -1):
            out[t] = int(q)
    return out


def _nothing_to_commit(run: _Run, given: str | None) -> dict:
    """An input without a message commits nothing: no batch claims files it did not write, and
    the store (a new one too: ``_remove_empty_meta``) stays as it was."""
    run.prog.warn("the input holds no messages: nothing to commit, the store is unchanged")
    return dict({"batch_id": given} if given else {}, status="nothing-to-commit", messages=0)


def _identify(run: _Run, snap: StoreSnapshot, lease: writerlease.WriterLease, fingerprint: str,
              given: str | None) -> tuple[_Run, dict | None]:
    """An input identified by what its encode stage produced: the batch id (``auto-<fingerprint>``
    unless given) and the already-committed check, now that the fingerprint is known. The files
    are then staged under the real id (a publish a crash interrupts is found by it): the write
    stage's context takes ``run.staging``. Returns the run that knows them, and the summary of a
    batch already committed (else None)."""
    run = replace(run, fingerprint=fingerprint)
    if given is None:
        batch_id = lease.batch_id = f"auto-{fingerprint[:16]}"
        run = replace(run, batch_id=batch_id, staging=f"{paths.STAGING_DIR}/{batch_id}/{run.attempt}")
    return run, _already_committed(run, snap)


def _drop_encoded(store: storage.Store, encoded_in: str | None, staging: str | None) -> None:
    """Remove the split records staged under the pending id (never part of a publish); best effort
    (a leftover is removed by the next ingest, as any dead attempt's staging)."""
    if encoded_in is None or encoded_in == staging:
        return
    try:
        drop_staging(store, encoded_in)
    except Exception:  # noqa: BLE001
        pass


def _already_committed(run: _Run, snap: StoreSnapshot) -> dict | None:
    """A rerun of a committed batch id: finish its publish if a crash left it unfinished, and
    return the "already-committed" summary (IngestError if the input differs); else None.

    A batch an earlier version committed carries the identity it gave the input
    (``identity.earlier_fingerprints``): the same id with that identity is this input too, and
    without a given id a batch with it is found by its fingerprint."""
    prior = [b for b in snap.batches if b.batch_id == run.batch_id]
    earlier = _earlier(run, snap, prior)
    if not prior and earlier:
        prior = [b for b in snap.batches if b.operation == "ingest" and b.input_fingerprint in earlier]
    if not prior:
        return None
    finish_pending_publish(run.store, snap)
    if prior[-1].input_fingerprint not in (run.fingerprint, *earlier):
        raise IngestError(f"batch id {run.batch_id!r} is already committed with different input "
                          f"(fingerprint {str(prior[-1].input_fingerprint)[:16]}, this input "
                          f"{run.fingerprint[:16]}); {run.other_input or 'use another --batch-id for new data'}")
    done = prior[-1]
    run.prog.say(f"batch {done.batch_id} is already committed (seq {done.batch_seq}): nothing to do")
    return {"batch_id": done.batch_id, "status": "already-committed", "batch_seq": done.batch_seq,
            "messages": done.messages}


def _earlier(run: _Run, snap: StoreSnapshot, prior: list) -> list:
    """The identities earlier versions gave the input, computed (a second hash of every input
    byte) only where one can decide: the batch of the run's id is an earlier version's and does
    not carry this input's identity, or, the id being the input's own, no batch has it and the
    store holds batches of earlier versions. A new --batch-id, or a batch of this version, needs none.
    The batch of the run's id with another fingerprint asks the input even for no file kind: an
    input may know an earlier identity of its own without reading a byte (the streaming sink's
    micro-batch: the digest of its id)."""
    if run.earlier is None:
        return []
    if prior:
        if prior[-1].input_fingerprint == run.fingerprint:
            return []
        return run.earlier(_earlier_kinds(prior[-1:]))
    if run.batch_id == f"auto-{run.fingerprint[:16]}":
        kinds = _earlier_kinds(snap.batches)
    else:
        kinds = []
    return run.earlier(kinds) if kinds else []


def _start_attempt(run: _Run, snap: StoreSnapshot) -> tuple[_Run, sequencer.StoreState]:
    """Finish a dead run's publish, check the store and the configuration, and name this attempt's
    staging directory: the run of this attempt, and the state the batch continues. (What dead attempts staged is never read;
    it is removed once this batch has committed: storelib.ingest.commit.)"""
    finish_pending_publish(run.store, snap, run.config)
    check_store_root(run.store, snap)
    check_config(snap, run.config)
    state = store_state(snap)
    attempt = uuid.uuid4().hex[:12]
    run = replace(run, snap=snap, attempt=attempt, staging=f"{paths.STAGING_DIR}/{run.batch_id}/{attempt}",
                  local_staging=split_staging.local_staging_dir(run.sc, run.store, attempt))
    return run, state


def _encode(run: _Run, ctx: EncodeContext, input_path: str, fmt: str) -> list:
    """Stage 1: encode tasks of consecutive splits; the splits' summaries in split order (InputError with every
    split's problems if the input is bad)."""
    sc, prog, splits = run.sc, run.prog, run.splits
    prog.say(f"encode: {len(splits)} input split(s) of {input_path} ({fmt})")
    bctx = sc.broadcast(ctx)
    warmup.wait_workers(sc)          # the workers it warmed take the encode tasks
    # Consecutive splits share a task (encode_splits: one split's records reach the disk while the
    # next is read), as long as every slot still gets one.
    tasks = max(1, min(len(splits), max(sc.defaultParallelism, -(-len(splits) // SPLITS_PER_TASK))))
    groups = [[s.to_dict() for s in splits[k * len(splits) // tasks:(k + 1) * len(splits) // tasks]]
              for k in range(tasks)]
    prog.stage("encode", tasks)
    scans = sc.parallelize(groups, tasks).flatMap(lambda g: encode_splits(bctx.value, g)).collect()
    prog.stage(None)
    scans.sort(key=lambda r: r["index"])
    encode_stage.check_scans(scans, splits)
    return scans


def _plan(run: _Run, state: sequencer.StoreState, scans: list, summaries: list,
          rr_starts: dict) -> sequencer.BatchPlan:
    """Stage 2 (driver): place every message of the batch."""
    plan_paths = {r["index"]: r["plan_path"] for r in scans if r.get("count")}
    staged = split_staging.staging_store(run.local_staging, run.store)
    plan = sequencer.plan_batch(
        state, summaries, lambda i: encode_stage.read_detail(staged, plan_paths[i], rr_starts.get(i)),
        run.config)
    fault("after-plan")
    run.prog.say(f"plan: {len(plan.segments)} commitlog segment(s), {len(plan.cq_files)} consume queue "
                 f"file(s), {len(plan.index_files)} index file(s)")
    return plan


def _write(run: _Run, ctx: EncodeContext, plan: sequencer.BatchPlan, scans: list, summaries: list,
           rr_starts: dict) -> list:
    """Stage 3: segment tasks first (the heaviest), then consume-queue/index file tasks; all read
    what stage 1 staged, none waits for another (no shuffle). Returns the staged files' facts."""
    if not plan.segments:
        return []
    sc, prog = run.sc, run.prog
    bctx2 = sc.broadcast(WriteContext.of(
        ctx, staging=run.staging, split_places=write_stage.split_places(scans, plan, rr_starts),
        **write_stage.version_context(run.store, run.snap, plan, run.config, run.batch_id, cast(str, run.attempt))))
    seg_tasks, file_groups = write_stage.write_tasks(plan, summaries, sc.defaultParallelism,
                                                     run.config.mappedFileSizeCommitLog)
    # Segment tasks mostly wait on the disk (read the staged records, write the segment), file
    # tasks mostly compute (place the splits, build the index files): alternate them, so that
    # the tasks running at once are one of each rather than two segment writers sharing the disk.
    seg = [("segments", t) for t in seg_tasks]
    files = [("files", g) for g in file_groups]
    tasks = [t for pair in itertools.zip_longest(seg, files) for t in pair if t is not None]
    prog.say(f"write: {len(plan.segments)} segment(s) in {len(seg_tasks)} task(s), "
             f"{len(plan.cq_files) + len(plan.index_files)} consume queue/index file(s) in "
             f"{len(file_groups)} task(s)")
    prog.stage("write", len(tasks), segments=len(plan.segments), messages=plan.messages)
    results = sc.parallelize(tasks, len(tasks)) \
        .flatMap(lambda t: run_write_task(bctx2.value, t)).collect()
    prog.stage(None)
    return results


def _abandon(run: _Run, error: BaseException, committing: bool) -> None:
    """A failed attempt (``error``; ``committing``: in its commit): nothing of it is visible; its
    staged files are removed (best effort; a SIGKILL leaves them for the next ingest, which deletes
    them before starting). Only this attempt's: a writer that won a race with this one may be
    publishing its own staged files right now (both passed the lease: best effort on object
    stores, or a stale lease taken over), and a staged file it has not moved yet would be lost for
    good. Nothing is removed when the commit's outcome is unknown (``outcome_unknown``: a PUT
    whose answer was lost may still land, and the batch then needs every object staged)."""
    try:
        run.prog.stage(None)
        if run.staging is not None and not outcome_unknown(run.store, error, committing) \
                and not is_committed(run.store, run.batch_id, run.attempt):
            _quiesce(run.sc)     # tasks of a failed job may still be writing their staged files
            undo_attempt(run.store, run.staging, run.batch_id, cast(str, run.attempt))
            # A cancelled task's Python worker can outlive its stage by a moment and stage one
            # more file: drop again until the staging stays gone (bounded; the next writer
            # removes anything left).
            quiet = 0
            for _ in range(40):
                time.sleep(0.25)
                if run.store.exists(run.staging):
                    drop_staging(run.store, run.staging)
                    quiet = 0
                elif (quiet := quiet + 1) >= 4:
                    break
    except Exception:  # noqa: BLE001 - what is left is undone by the next writer (the intent stays)
        pass


def _quiesce(sc, timeout: float = 60.0) -> None:
    """Cancel this application's jobs and wait (bounded) until no task runs any more."""
    try:
        sc.cancelAllJobs()
        deadline = time.time() + timeout
        while sc.statusTracker().getActiveStageIds() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)            # a killed Python worker may still flush a file
    except Exception:  # noqa: BLE001 - best effort; leftovers are removed by the next ingest
        pass


def _new_dirs(store: storage.Store) -> list:
    """Stores without OS paths: the store root and those of its ancestors that do not exist yet,
    deepest first. HDFS makes them directories as the batch writes there, which a failed first
    batch removes again (S3 gets no directories: storelib.io.objkeys)."""
    if store.os_paths:
        return []
    out, path = [], store.root.rstrip("/")
    while "/" in path and store.fs.get_file_info(path).type == storage.FileType.NotFound:
        out.append(path)
        path = path.rsplit("/", 1)[0]
    return out


def _remove_empty_meta(store: storage.Store, new_dirs=()) -> None:
    """Leave no trace: drop ``_rocketlake/`` and the store directory if a failed first batch created
    them (each only if empty, but for the empty ``lock`` its writer held: never another writer's
    file, ``brokerlock.remove_made_dir``); elsewhere also the directories ``new_dirs``
    (``_new_dirs``) left empty."""
    try:
        if storage.remove_dir_if_empty(store, paths.META_DIR) and store.os_paths:
            remove_made_dir(store.root)
        for d in new_dirs:
            sel = storage.FileSelector(d, recursive=True, allow_not_found=True)
            if any(f.type == storage.FileType.File for f in store.fs.get_file_info(sel)):
                return
            storage.delete_tree(store.fs, d)
    except Exception:  # noqa: BLE001 - best effort: a non-empty directory stays, the next ingest reuses it
        pass
