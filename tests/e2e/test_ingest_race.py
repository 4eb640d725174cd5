"""Racing ingests: two spark-submit ingests of one batch at the same instant, on local disk and on
S3 (moto server on 127.0.0.1, conditional puts), while a reader queries the store in a loop.

The contract: of two writers racing for one position of the store exactly one commits; the other
exits 3 (``ConcurrentWriteError``; or 0 "already committed" when it only came after the winner
with the same batch id) and leaves no trace: no manifest row, no staging, no lease, no store file
change. A reader never sees anything but whole committed batches.

Two guards stand between concurrent writers (storelib.table.manifest):

* the writer lease ``_rocketlake/writer.lock``: the second writer fails at once with exit 3. On a
  local file system it is an exclusive create; on object stores it is best effort (write, read
  back), so both writers may pass it;
* the conditional Delta commits (manifest, then checkpoints: the switch): the real guard when
  both writers pass the lease. The tests make them pass it on purpose by making every lease stale
  at once (``ROCKETLAKE_LEASE_TTL=0``: leases off, the second writer takes the lease over), so that both
  plan on the same snapshot and really contend on the Delta commit.

Both writers are started back to back (each spark-submit costs ~10-15 s, so they reach the store
within a second or so of each other) and synchronised with ``ROCKETLAKE_HOLD`` gates:

* ``lease``: each writer stops right after taking the lease (``after-lease``) until the other one
  has either exited or taken it too; on local disk the loser exits 3 at the lease;
* ``commit``: both take the (stale) lease, stop after it and again just before the Delta commit
  (``before-delta-commit``, every file staged) and are released together: the Delta commit
  decides;
* ``ordered``: as ``commit``, but the first writer is released alone and stops again right after
  its commit, before publishing (``after-commit-before-publish``); then the second one, which
  planned on the same position, is released and must lose, and clean up without touching the
  first one's staged files; the reader is given time to see the committed, not yet published
  batch (read from its staged copies); then the first writer publishes. (Different content in a
  fixed order, so that the final store can be checked against RocketMQ's.)

small-roll is cut into three batches p0, p1, p2; every batch is contested. The loser of the
``ordered`` round (p2) is retried in the next round, contested again, so each store runs 3 rounds
(6 spark-submits) and all of small-roll gets in. (The loser of a twin round, another id for the
same content, is not retried: a different batch id is a different batch, its messages would be
appended a second time.) To keep the runtime modest the cases alternate between the stores:

* local (cuts 468 and 1513: index-file boundaries): p0 same id ``lease``; p1 vs p2 ``ordered``
  (p2 loses); p2 (the retry) vs a twin id with the same content, ``commit``;
* S3 (cuts 1000 and 2000): p0 vs a twin id with the same content, ``lease`` (the S3 lease is best
  effort: whichever guard stops the loser, it must exit 3); p1 vs p2 ``ordered``; p2 (the retry)
  vs p2 same id, ``commit``.

After every round: exactly one commit, the loser's outcome, the checkpoint table lists the
expected batches once each, every manifest row belongs to a committed batch's committing attempt,
every live file's valid bytes match its manifest checksum and no other file exists in the store,
no staging, no lease. At the end the store is byte-identical to RocketMQ's small-roll store
(``goldenlib.compare``; the S3 store is downloaded first).

A reader process (``python tests/e2e/test_ingest_race.py reader ...``) runs during all rounds of a
store: it opens the latest committed snapshot (``storelib.read.query.open_store``) in a loop and checks
that what it sees is exactly a whole prefix of batches (p0..pj): the batch row's message count,
the commitlog end, the max offset of every queue, and lookups of a few messages of every batch
(by message id, by queue offset, by UNIQ_KEY through the index files) present exactly when their
batch is in the prefix. The prefix never shrinks. (On S3 it queries every second and looks up only
the last message of each batch: every lookup is range reads from the moto server the writers use.)

What these tests found (fixed in storelib): a writer that lost the Delta commit removed all of
``_rocketlake/staging/``, including the staged files of the writer that had just won and was
still publishing them (both had passed S3's best-effort lease): the winner's publish then failed,
or skipped the files and exited 0, leaving a committed batch whose files were gone
(``ordered`` reproduces it every time); and a reader that opened a snapshot while its batch was
being published read staged copies that the publish then moved away ("missing file"; now
``Store.moved`` sends such reads to the final name).

Runtime: ~55 s local, ~150 s on S3 (moto is slow: ~100 objects staged and published per batch)
on the shared 2-core test machine. ``make test`` runs the local store's three rounds, and on S3
the ``ordered`` round on S3Proxy (tests/e2e/test_s3proxy.py: the Delta commit decides on a real
server's conditional put, the loser removes its objects while the winner's batch is committed and
not yet published, the reader reads it meanwhile); the three S3 rounds here, on moto, run in
``make faults`` (and on S3Proxy in ``make backends``).
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import traceback

import pytest

# also run as a script (the reader process): it imports conftest and the helpers as pytest does, through
# the PYTHONPATH tests/conftest.py gives every child process
from support import goldenlib
from support import s3server
from support.longrun import faults_test
from conftest import ROOT, golden_set

PY = sys.executable
BIN = os.path.dirname(PY)
HERE = os.path.abspath(__file__)
SMALL = goldenlib.SMALL_ROLL_CONFIG
BUCKET = "rocketlake-race"
WAIT_S = 300                      # any single wait of a round (a hang fails the test, not the suite)

# (batch ids of the two writers, the parts p0..p2 they ingest, mode)
LOCAL_ROUNDS = [
    (("b0", "b0"), (0, 0), "lease"),
    (("b1", "b2"), (1, 2), "ordered"),
    (("b2", "b2-twin"), (2, 2), "commit"),
]
S3_ROUNDS = [
    (("b0", "b0-twin"), (0, 0), "lease"),
    (("b1", "b2"), (1, 2), "ordered"),
    (("b2", "b2"), (2, 2), "commit"),
]


# ----------------------------------------------------------------------------- golden model
def _messages(g: str) -> list:
    return open(os.path.join(g, "messages.jsonl"), encoding="utf-8").readlines()


def build_model(cuts: tuple) -> dict:
    """What a reader must see after each whole prefix of batches (p0..pj), from the golden set."""
    g = golden_set("small-roll")
    lines = _messages(g)
    rows = [json.loads(x) for x in lines]
    puts = [json.loads(x) for x in open(os.path.join(g, "put_results.jsonl"), encoding="utf-8")]
    assert len(puts) == len(rows) and all(p["status"] == "PUT_OK" for p in puts)
    bounds = [0, *cuts, len(rows)]
    queues = sorted({(r["topic"], r["queue_id"]) for r in rows})
    cq_ok = [(r["sys_flag"] & 0xC) in (0x0, 0x8) for r in rows]     # NOT / COMMIT get a CQ unit
    prefixes = []
    for n in bounds:
        counts: dict = {}
        for r, ok in zip(rows[:n], cq_ok[:n]):
            if ok:
                counts[(r["topic"], r["queue_id"])] = counts.get((r["topic"], r["queue_id"]), 0) + 1
        prefixes.append({"messages": n,
                         "max_phy": puts[n - 1]["wrote_offset"] + puts[n - 1]["wrote_bytes"] if n else 0,
                         "queues": [counts.get(q, 0) for q in queues]})
    probes = []
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        for i in sorted({lo, (lo + hi) // 2, hi - 1}):
            r, p = rows[i], puts[i]
            uniq = dict((a, b) for a, b in r["properties"]).get("UNIQ_KEY")
            probes.append({"i": i, "topic": r["topic"], "queue_id": r["queue_id"], "msg_id": p["msg_id"],
                           "phy": p["wrote_offset"], "queue_offset": p["queue_offset"] if cq_ok[i] else None,
                           "uniq": uniq if (r["sys_flag"] & 0xC) != 0xC else None,
                           "body_sha": hashlib.sha256(base64.b64decode(r["body_b64"])).hexdigest()})
    return {"bounds": bounds, "queues": queues, "prefixes": prefixes, "probes": probes}


# ----------------------------------------------------------------------------- reader / state
def observe(uri: str, model: dict, light: bool = False) -> int:
    """Open the latest committed snapshot; return j (it shows batches p0..p(j-1)) or raise
    AssertionError naming what is not a whole committed prefix. ``light``: look up only the last
    message of every batch (each key lookup walks every index file: ~100 range reads)."""
    from storelib.read.query import open_store
    from storelib.errors import StoreNotFound
    try:
        r = open_store(uri)
    except StoreNotFound:
        return 0                                     # nothing committed yet
    assert r.snapshot.source == "manifest", f"no manifest snapshot: {r.snapshot.source}"
    total = r.snapshot.batch["total_messages"]
    assert total in model["bounds"], f"batch row: {total} messages, not a whole prefix {model['bounds']}"
    j = model["bounds"].index(total)
    want = model["prefixes"][j]
    assert r.get_max_phy_offset() == want["max_phy"], (j, r.get_max_phy_offset(), want["max_phy"])
    got_q = [r.get_max_offset_in_queue(t, q) for t, q in model["queues"]]
    assert got_q == want["queues"], (j, [(q, a, b) for q, a, b in zip(model["queues"], got_q, want["queues"])
                                         if a != b])
    for p in model["probes"]:
        if light and p["i"] + 1 not in model["bounds"]:
            continue
        present = p["i"] < total
        m = r.get_by_msg_id(p["msg_id"])
        assert (m is not None) == present, (j, "msg id", p)
        if m is not None:
            assert m["topic"] == p["topic"] and hashlib.sha256(m["body"]).hexdigest() == p["body_sha"], (j, p)
        if p["queue_offset"] is not None:
            got = r.get_by_queue_offset(p["topic"], p["queue_id"], p["queue_offset"])
            assert [x["commitlog_offset"] for x in got] == ([p["phy"]] if present else []), (j, "queue", p)
        if p["uniq"] is not None:
            got = r.find_by_unique_key(p["topic"], p["uniq"])
            assert [x["commitlog_offset"] for x in got] == ([p["phy"]] if present else []), (j, "key", p)
    return j


def reader_main(uri: str, model_path: str, stop: str, out: str, interval: str = "0.2", light: str = "") -> int:
    """Query the store in a loop (every ``interval`` s) until ``stop`` exists; write what was
    seen to ``out`` (and the latest prefix to ``out``.progress as it goes)."""
    model = json.load(open(model_path))
    model["queues"] = [tuple(q) for q in model["queues"]]
    seen, problems, n, busy = [], [], 0, 0.0
    last = -1
    t0 = time.time()
    try:
        while not os.path.exists(stop) and time.time() - t0 < 900:
            n += 1
            try:
                t1 = time.time()
                j = observe(uri, model, bool(light))
                busy += time.time() - t1
                if j != last:
                    seen.append([round(time.time() - t0, 2), j])
                    if j < last:
                        problems.append(f"prefix went back from {last} to {j}")
                    last = j
                    with open(out + ".progress.tmp", "w") as fh:
                        fh.write(str(j))
                    os.replace(out + ".progress.tmp", out + ".progress")
            except Exception as e:  # noqa: BLE001 - every failure is a finding
                problems.append(f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}")
                if len(problems) > 20:
                    break
            time.sleep(float(interval))
        try:
            observe(uri, model)                      # once more at the end
        except Exception as e:  # noqa: BLE001
            problems.append(f"final: {type(e).__name__}: {e}")
    finally:
        with open(out, "w") as fh:
            json.dump({"observations": n, "seen": seen, "problems": problems,
                       "seconds_per_observation": round(busy / max(n, 1), 3)}, fh)
    return 0


def state_main(uri: str, out: str) -> int:
    """Committed batches, manifest rows, live files vs their checksums, leftovers: as JSON."""
    from storelib.io import checksum
    from storelib.io import headpages
    from storelib.table import manifest
    from storelib.format import paths
    from storelib.io import storage
    st = storage.Store(uri)
    snap = manifest.load_snapshot(st)
    rows = manifest.read_rows(manifest.open_table(st, paths.MANIFEST_DIR))
    batches = [{"id": b["batch_id"], "seq": b["batch_seq"], "messages": b["messages"],
                "total": b["total_messages"], "attempt": b["attempt_id"]} for b in snap.batches]
    attempts = {b["batch_id"]: b["attempt_id"] for b in snap.batches}
    stray_rows = sorted({f"{r['batch_id']}/{r['attempt_id']}" for r in rows
                         if attempts.get(r["batch_id"], "-") != r["attempt_id"]})
    # one listing (sizes included), then a read of each live file's valid bytes
    listing = st.fs.get_file_info(storage.FileSelector(st.root, recursive=True))
    infos = {i.path[len(st.root):].lstrip("/"): i for i in listing if i.type == storage.FileType.File}
    # object stores: files are assembled from objects (storelib.io.fragments); every object must be
    # listed by a row of a committed attempt (a loser leaves none behind)
    referenced = set()
    for r in rows:
        if r["action"] == "add" and attempts.get(r["batch_id"], "-") == r["attempt_id"] and "extents" in (r["detail"] or ""):
            d = json.loads(r["detail"])
            referenced.update(e[2] for e in d["extents"])
            referenced.update(d.get("head", {}).get("layers", []))       # paged index heads (io.headpages)
    objects = {p for p in infos if p.startswith(paths.OBJECTS_DIR + "/")}
    bad, missing = [], []
    for path, r in sorted(snap.files.items()):
        extents = json.loads(r["detail"] or "{}").get("extents")
        if extents is not None:
            if any(e[2] not in objects for e in extents):
                missing.append(path)
                continue
            detail = json.loads(r["detail"])
            if any(o not in objects for o in detail.get("head", {}).get("layers", [])):
                missing.append(path)
                continue
            st.map_file(path, r["file_size"], headpages.version_extents(detail))
        else:
            info = infos.get(path)
            if info is None:
                missing.append(path)
                continue
            if info.size != r["file_size"]:
                bad.append(f"{path}: size {info.size}, manifest {r['file_size']}")
                continue
        data = st.read(path, 0, r["valid_bytes"])
        head = json.loads(r["detail"] or "{}").get("head")
        sha = headpages.checksum_of(lambda p, n, data=data: data[p:p + n], head["len"], len(data))[0] if head \
            else checksum.checksum_of_bytes(data)
        if sha != r["checksum"]:
            bad.append(f"{path}: checksum differs from the manifest's")
    # (the broker lock every writer of a local store holds stays, empty: io.brokerlock)
    on_disk = [p for p in infos if not p.startswith(paths.META_DIR + "/")
               and not (p == paths.LOCK_FILE and infos[p].size == 0)]
    meta = [p for p in infos if p.startswith(paths.META_DIR + "/")
            and not p.startswith((paths.MANIFEST_DIR + "/", paths.CHECKPOINTS_DIR + "/",
                                  paths.OBJECTS_DIR + "/")) and p not in (paths.SNAPSHOT_CACHE, paths.SNAPSHOT_CACHE_DELTA)]
    res = {"batches": batches, "stray_rows": stray_rows, "bad_files": bad,
           "extra_files": sorted(set(on_disk) - set(snap.files)) + sorted(objects - referenced),
           "missing_files": missing,
           "meta_leftovers": meta, "staging": st.exists(paths.STAGING_DIR),
           "lease": st.exists(paths.LEASE_PATH)}
    with open(out, "w") as fh:
        json.dump(res, fh)
    return 0


# ----------------------------------------------------------------------------- the writers
@dataclasses.dataclass
class Writer:
    tag: str
    batch_id: str
    part: int
    proc: subprocess.Popen
    gates: dict                     # point -> gate file
    out: str
    err: str
    summary: str
    rc: int | None = None

    def exited(self) -> bool:
        if self.rc is None:
            self.rc = self.proc.poll()
        return self.rc is not None

    def reached(self, point: str) -> bool:
        return os.path.exists(self.gates[point] + ".reached")

    def release(self, point: str) -> None:
        if point in self.gates:
            open(self.gates[point], "w").close()

    def stderr(self) -> str:
        return open(self.err, encoding="utf-8", errors="replace").read()

    def stdout(self) -> str:
        return open(self.out, encoding="utf-8", errors="replace").read()

    def output(self) -> str:
        """stdout and stderr (spark-submit passes the Python driver's stderr to its stdout)."""
        return self.stdout() + self.stderr()

    def result(self) -> dict | None:
        return json.load(open(self.summary)) if os.path.exists(self.summary) else None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


class Race:
    """The writers of one store, their inputs and the reader."""

    def __init__(self, work, uri: str, env: dict, cuts: tuple):
        self.work, self.uri, self.env = work, uri, env
        lines = _messages(golden_set("small-roll"))
        bounds = [0, *cuts, len(lines)]
        self.parts = []
        for k in range(3):
            p = work / f"p{k}.jsonl"
            p.write_text("".join(lines[bounds[k]:bounds[k + 1]]), encoding="utf-8")
            self.parts.append(str(p))
        self.props = work / "small.properties"
        self.props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
        self.model = build_model(cuts)
        (work / "model.json").write_text(json.dumps(self.model))
        self.n = 0
        self.log: list = []
        self.reader = None

    def _env(self, extra: dict) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETLAKE_")
               or k in ("ROCKETLAKE_SHARED", "ROCKETLAKE_ALLOW_EMPTY_BODY")}
        env.update(PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, **self.env, **extra)
        return env

    def start(self, batch_id: str, part: int, points: tuple, extra_env: dict) -> Writer:
        self.n += 1
        tag = f"w{self.n}-{batch_id}"
        gates = {p: str(self.work / f"{tag}.{p}") for p in points}
        env = self._env(dict(extra_env, ROCKETLAKE_HOLD=",".join(f"{p}:{g}" for p, g in gates.items())))
        out, err, summary = (str(self.work / f"{tag}.{x}") for x in ("out", "err", "json"))
        cmd = [os.path.join(BIN, "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.ui.showConsoleProgress=false",
               "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
               os.path.join(ROOT, "jobs", "ingest.py"), "--store", self.uri, "--input", self.parts[part],
               "--config", str(self.props), "--batch-id", batch_id, "--partitions", "2",
               "--json-summary", summary]
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=o, stderr=e, start_new_session=True)
        return Writer(tag, batch_id, part, proc, gates, out, err, summary)

    def race(self, ids: tuple, parts: tuple, mode: str, prefix: int) -> list:
        """Start both writers back to back; hold and release them as ``mode`` says; wait.
        ``prefix``: the batches p0..p(prefix-1) the store holds once the round's winner committed.

        ``ordered``: the first writer commits and stops before publishing; then the second one
        fails its commit and cleans up (it must not touch the first one's staged files); the
        reader is given time to see the committed batch while its files are still staged; then
        the first writer publishes."""
        points = ("after-lease",) if mode == "lease" else ("after-lease", "before-delta-commit")
        extra = {} if mode == "lease" else {"ROCKETLAKE_LEASE_TTL": "0"}   # leases off: the Delta commits decide
        publish = "after-commit-before-publish"
        ws = [self.start(b, p, points + ((publish,) if mode == "ordered" and n == 0 else ()), extra)
              for n, (b, p) in enumerate(zip(ids, parts))]
        try:
            for point in points:
                self._wait(ws, lambda w, point=point: w.exited() or w.reached(point), f"{point} or exit")
                if mode == "ordered" and point == "before-delta-commit" and not any(w.exited() for w in ws):
                    first, second = ws
                    first.release(point)
                    self._wait([first], lambda w: w.exited() or w.reached(publish), "the first writer's commit")
                    second.release(point)
                    self._wait([second], Writer.exited, "exit of the second writer")
                    if not first.exited():
                        self._wait_reader(prefix)
                    first.release(publish)
                else:
                    for w in ws:
                        w.release(point)
            self._wait(ws, Writer.exited, "exit")
        finally:
            for w in ws:
                w.kill()
        return ws

    def _wait_reader(self, prefix: int) -> None:
        progress = str(self.reader_out) + ".progress"
        deadline = time.time() + WAIT_S
        while not (os.path.exists(progress) and open(progress).read() == str(prefix)):
            assert self.reader.poll() is None, "the reader died"
            assert time.time() < deadline, f"the reader never saw batches p0..p{prefix - 1}"
            time.sleep(0.1)

    def _wait(self, ws: list, cond, what: str) -> None:
        deadline = time.time() + WAIT_S
        while not all(cond(w) for w in ws):
            if time.time() > deadline:
                raise AssertionError(f"writers hang waiting for {what}: "
                                     + "; ".join(f"{w.tag}: {w.output()[-1500:]}" for w in ws))
            time.sleep(0.1)

    def state(self) -> dict:
        """In this process (no interpreter's start-up, ~3 s), with the store's settings (S3's
        endpoint and keys) in the environment while it reads."""
        out = self.work / f"state-{self.n}.json"
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            state_main(self.uri, str(out))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return json.loads(out.read_text())

    # -- the reader process
    def start_reader(self) -> None:
        self.reader_stop = self.work / "reader.stop"
        self.reader_out = self.work / "reader.json"
        # every 0.2 s locally; on S3 every 1 s and fewer lookups: each is a few to ~100 range
        # reads from the moto server the writers need too
        s3 = self.uri.startswith("s3://")
        self.reader = subprocess.Popen([PY, HERE, "reader", self.uri, str(self.work / "model.json"),
                                        str(self.reader_stop), str(self.reader_out), "1.0" if s3 else "0.2",
                                        "light" if s3 else ""],
                                       cwd=ROOT, env=self._env({}), stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)

    def stop_reader(self) -> dict:
        self.reader_stop.write_text("stop")
        try:
            _, err = self.reader.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.reader.pid, signal.SIGKILL)
            self.reader.wait()
            raise AssertionError("the reader hangs") from None
        assert self.reader.returncode == 0 and self.reader_out.exists(), err[-3000:]
        return json.loads(self.reader_out.read_text())

    def kill_reader(self) -> None:
        if self.reader is not None and self.reader.poll() is None:
            os.killpg(self.reader.pid, signal.SIGKILL)
            self.reader.wait()


def run_rounds(race: Race, rounds: list) -> None:
    """Every round: both writers of one position; exactly one commits, the other leaves no trace."""
    committed: list = []                  # (batch id, part) in commit order
    race.start_reader()
    try:
        for ids, parts, mode in rounds:
            t0 = time.time()
            ws = race.race(ids, parts, mode, len(committed) + 1)
            outcome = [(w.batch_id, w.rc, (w.result() or {}).get("status")) for w in ws]
            race.log.append(f"{mode:7s} {ids[0]}|{ids[1]}: {outcome} in {time.time() - t0:.0f}s")
            print(race.log[-1], flush=True)
            detail = "\n".join(f"--- {w.tag} rc={w.rc}\n{w.stdout()[-3000:]}\n{w.stderr()[-3000:]}" for w in ws)
            won = [w for w in ws if w.rc == 0 and (w.result() or {}).get("status") == "committed"]
            if len(won) != 1:                 # what the tables say, beside what the writers said
                try:
                    detail += f"\n--- store state: {race.state()}"
                except Exception as e:  # noqa: BLE001 - a diagnosis only
                    detail += f"\n--- store state unreadable: {e}"
            assert len(won) == 1, f"{len(won)} writers committed\n{detail}"
            winner = won[0]
            loser = next(w for w in ws if w is not winner)
            if loser.batch_id == winner.batch_id:
                ok = loser.rc == 3 or (loser.rc == 0 and loser.result()["status"] == "already-committed")
            else:
                ok = loser.rc == 3
            assert ok, f"loser {loser.tag}: exit {loser.rc}\n{detail}"
            if loser.rc == 3:
                assert "concurrent writer" in loser.output() and "left nothing behind" in loser.output(), detail
            if mode == "ordered":
                assert winner is ws[0], detail           # released first, planned on the same snapshot
            if mode == "lease" and not race.uri.startswith("s3://"):
                assert "being written by batch" in loser.output(), detail   # stopped by the lease
            committed.append((winner.batch_id, winner.part))
            st = race.state()
            assert [b["id"] for b in st["batches"]] == [b for b, _ in committed], (st, detail)
            assert [b["seq"] for b in st["batches"]] == list(range(1, len(committed) + 1)), st
            assert [b["total"] for b in st["batches"]] == [race.model["bounds"][p + 1] for _, p in committed], st
            assert st["stray_rows"] == [], (st, detail)               # no row of the loser
            assert st["bad_files"] == [] and st["missing_files"] == [] and st["extra_files"] == [], (st, detail)
            assert st["meta_leftovers"] == [] and not st["staging"] and not st["lease"], (st, detail)
    except BaseException:
        race.kill_reader()
        raise
    seen = race.stop_reader()
    race.log.append(f"reader: {seen['observations']} snapshots ({seen['seconds_per_observation']} s each), "
                    f"prefixes seen (s, j): {seen['seen']}")
    print(race.log[-1], flush=True)
    assert seen["problems"] == [], "\n".join(seen["problems"])
    js = [j for _, j in seen["seen"]]
    assert js == sorted(js) and js[-1] == len(committed), seen
    assert len(js) >= min(3, len(committed) + 1), f"the reader saw too few committed prefixes: {seen}"
    assert [p for _, p in committed] == list(range(len(committed)))


# ----------------------------------------------------------------------------- tests
def test_reads_follow_a_staged_file_the_publish_moved(tmp_path):
    """A reader given a staged copy (its batch's publish was unfinished when it opened the
    snapshot) still reads it after the publish moved it to its final name (Store.moved)."""
    from storelib.io import storage
    st = storage.Store(str(tmp_path / "store"))
    staged, final = "_rocketlake/staging/b/a/files/t/commitlog/00000000000000000000", "commitlog/00000000000000000000"
    st.write_file(staged, [b"new-version"], 64)
    st.write_file(final, [b"old"], 64)
    st.moved[staged] = final
    assert st.read(staged, 0, 11) == b"new-version"
    st.publish(staged, final)
    assert st.read(staged, 0, 11) == b"new-version"
    assert bytes(st.read_array(staged, 4, 7)) == b"version"
    with st.open_reader(staged) as fh:
        assert fh.read_at(3, 0) == b"new"
    with pytest.raises(FileNotFoundError):
        st.read("commitlog/00000000000000065536")          # not a moved file: still an error


@pytest.mark.slow
def test_racing_ingests_on_local_disk(tmp_path):
    race = Race(tmp_path, str(tmp_path / "store"), {}, (468, 1513))
    run_rounds(race, LOCAL_ROUNDS)
    assert goldenlib.compare(golden_set("small-roll"), race.uri) == []


@pytest.fixture(scope="module")
def s3_env():
    with s3server.moto(BUCKET) as env_s3:
        yield env_s3


@pytest.mark.slow
@faults_test("the three race rounds on S3 (moto, ~90 s; make test: the ordered round on S3Proxy)")
def test_racing_ingests_on_s3(s3_env, tmp_path):
    env, s3 = s3_env
    prefix = "stores/race/"
    race = Race(tmp_path, f"s3://{BUCKET}/{prefix.rstrip('/')}", env, (1000, 2000))
    run_rounds(race, S3_ROUNDS)
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents", [])]
    assert not [k for k in keys if "/_rocketlake/staging/" in k or k.endswith("writer.lock")]
    local = tmp_path / "export"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "jobs", "export.py"), "--store", race.uri, "--to", str(local)],
                       env=dict(os.environ, **env), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert goldenlib.compare(golden_set("small-roll"), str(local)) == []


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "reader":
        sys.exit(reader_main(*sys.argv[2:8]))
    sys.exit(f"unknown mode {mode!r}")
