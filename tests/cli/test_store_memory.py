"""What a store remembers of its batches: the same input is one batch whatever its path, an empty
input commits nothing, the store's time range is its messages' whatever order batches came in,
and its topics' queue counts hold for every later batch.

Same input (README "What counts as the same input"): a batch's default id comes from the input's
content, never its name, so the same file as ``./x``, by its absolute path, from the parent
directory, through a symlink or as a copy under another name is "already-committed"; a directory
is its files' contents in input order; a Delta table its table id and data files.

Every command runs in this process (``rl``: small inputs never start a JVM).
"""
from __future__ import annotations

import json
import os
import shutil
import time

from support.opshelp import tree_digest
from test_first_hour import DEMO_CONF, SAMPLE, one_line_error, rl

from storelib.ingest import identity, inputs
from storelib.io import storage
from storelib.table import manifest


def _lines(n: int, skip: int = 0) -> str:
    with open(SAMPLE, encoding="utf-8") as fh:
        return "".join(fh.readlines()[skip:skip + n])


def _summary(out: str) -> dict:
    line = [x for x in out.splitlines() if x.startswith("rocketlake: ")][-1]
    return dict(kv.split("=", 1) for kv in line[len("rocketlake: "):].split())


def _batches(store: str) -> list:
    return [(b["batch_id"], b["messages"]) for b in manifest.load_snapshot(storage.Store(store)).batches]


def _identity(path: str, fmt: str = "jsonl", kind: str = identity.IDENTITY) -> str:
    return identity.input_fingerprint(path, fmt, inputs.plan_splits(path, fmt, 3, split_bytes=4096), kind)


def test_same_file_by_any_path_is_one_batch(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "batch1.jsonl").write_text(_lines(300), encoding="utf-8")
    shutil.copy(work / "batch1.jsonl", work / "renamed-copy.jsonl")
    os.symlink("batch1.jsonl", work / "link.jsonl")
    store = str(tmp_path / "store")
    code, out, err = rl("ingest", "--store", store, "--input", "batch1.jsonl", "--config", DEMO_CONF, "--quiet",
                        cwd=work)
    assert code == 0 and _summary(out)["status"] == "committed", err
    first = _summary(out)["batch_id"]
    for spelling, cwd in (("./batch1.jsonl", work), (str(work / "batch1.jsonl"), work),
                          ("work/batch1.jsonl", tmp_path), ("link.jsonl", work), ("renamed-copy.jsonl", work)):
        code, out, err = rl("ingest", "--store", store, "--input", spelling, "--quiet", cwd=cwd)
        assert code == 0, err
        got = _summary(out)
        assert (got["status"], got["batch_id"], got["messages"]) == ("already-committed", first, "300"), spelling
    assert _batches(store) == [(first, 300)]
    # other bytes are another batch, even under the first one's name
    (work / "batch1.jsonl").unlink()
    (work / "batch1.jsonl").write_text(_lines(200, skip=300), encoding="utf-8")
    code, out, err = rl("ingest", "--store", store, "--input", "batch1.jsonl", "--quiet", cwd=work)
    assert code == 0 and _summary(out)["status"] == "committed" and _summary(out)["batch_id"] != first, err
    assert [m for _, m in _batches(store)] == [300, 200]


def test_identity_is_content_for_directories_and_delta(tmp_path, monkeypatch):
    a = tmp_path / "a"
    a.mkdir()
    (a / "1.jsonl").write_text(_lines(40), encoding="utf-8")
    (a / "2.jsonl").write_text(_lines(40, skip=40), encoding="utf-8")
    b = tmp_path / "b"
    b.mkdir()
    shutil.copy(a / "1.jsonl", b / "x-first.jsonl")           # other names, same contents in the same order
    shutil.copy(a / "2.jsonl", b / "y-second.jsonl")
    os.symlink(a, tmp_path / "link")
    ident = _identity(str(a))
    assert _identity(str(b)) == ident and _identity(str(tmp_path / "link")) == ident
    monkeypatch.chdir(tmp_path)
    assert _identity("a") == ident and _identity("./a/") == ident
    # the same files in the other order, or one byte changed, are other input
    shutil.copy(a / "2.jsonl", tmp_path / "c-1.jsonl")
    c = tmp_path / "c"
    c.mkdir()
    shutil.copy(a / "2.jsonl", c / "1.jsonl")
    shutil.copy(a / "1.jsonl", c / "2.jsonl")
    assert _identity(str(c)) != ident
    (b / "y-second.jsonl").write_text(_lines(40, skip=41), encoding="utf-8")
    assert _identity(str(b)) != ident
    # large files are hashed whole, in blocks: a change past the first block is seen
    monkeypatch.setattr(identity, "IDENTITY_BLOCK", 1000)
    big = tmp_path / "big.jsonl"
    big.write_text(_lines(100), encoding="utf-8")
    before = _identity(str(big))
    data = bytearray(big.read_bytes())
    data[-10] ^= 1
    big.write_bytes(bytes(data))
    assert _identity(str(big)) != before
    # Delta: a copy of the table is the same input; another version with other files is not
    import deltalake
    dt = str(tmp_path / "dt")
    rows = inputs.canonical_to_parquet_input(inputs.jsonl_to_table(str(a / "1.jsonl")))
    deltalake.write_deltalake(dt, rows)
    shutil.copytree(dt, tmp_path / "dt-copy")
    assert _identity(dt, "delta") == _identity(str(tmp_path / "dt-copy"), "delta")
    deltalake.write_deltalake(dt, rows, mode="append")
    assert _identity(dt, "delta") != _identity(str(tmp_path / "dt-copy"), "delta")


def test_identity_hashed_while_spark_starts_is_used_once(tmp_path, monkeypatch):
    """``rocketlake ingest`` hashes the input while its JVM starts (``identity.prefetch``); the
    ingest takes that digest unless the file changed since (then it hashes it again)."""
    f = tmp_path / "x.jsonl"
    f.write_text(_lines(50), encoding="utf-8")
    want = _identity(str(f))
    calls = []
    real = identity.file_digests
    monkeypatch.setattr(identity, "file_digests", lambda files: calls.append(list(files)) or real(files))
    identity.prefetch(str(f), "jsonl")
    assert _identity(str(f)) == want and calls == [[str(f)]]
    identity.prefetch(str(f), "jsonl")
    while len(calls) < 2:
        time.sleep(0.01)
    f.write_text(_lines(50, skip=1), encoding="utf-8")
    assert _identity(str(f)) != want and len(calls) == 3


# --------------------------------------------------------------------------- an empty input


def test_empty_input_commits_nothing(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    pa_rows = inputs.canonical_to_parquet_input(inputs.jsonl_to_table(SAMPLE)).slice(0, 0)
    import pyarrow.parquet as pq
    pq.write_table(pa_rows, tmp_path / "none.parquet")
    new = str(tmp_path / "new-store")
    for name, fmt in (("empty.jsonl", "jsonl"), ("blank.jsonl", "jsonl"), ("none.parquet", "parquet")):
        code, out, err = rl("ingest", "--store", new, "--input", tmp_path / name, "--format", fmt,
                            "--config", DEMO_CONF, "--quiet")
        assert code == 0, err
        assert _summary(out) == {"status": "nothing-to-commit", "messages": "0"}, out
        assert "no messages: nothing to commit" in err and len(err.strip().splitlines()) == 1, err
        assert not os.path.exists(new), name          # a new store is not even created
    store = str(tmp_path / "store")
    code, out, err = rl("ingest", "--store", store, "--input", SAMPLE, "--config", DEMO_CONF, "--quiet")
    assert code == 0, err
    before = tree_digest(store)
    code, out, err = rl("ingest", "--store", store, "--input", tmp_path / "empty.jsonl", "--batch-id", "E")
    assert code == 0 and _summary(out) == {"batch_id": "E", "status": "nothing-to-commit", "messages": "0"}, out
    assert tree_digest(store) == before and [m for _, m in _batches(store)] == [2000]


# --------------------------------------------------------------------------- the store's times
def _with_times(n: int, skip: int, shift: int) -> str:
    rows = [json.loads(x) for x in _lines(n, skip).splitlines()]
    for r in rows:
        r["store_timestamp"] += shift
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_stats_times_are_the_stores_after_an_older_batch(tmp_path):
    (tmp_path / "new.jsonl").write_text(_with_times(300, 0, 86_400_000), encoding="utf-8")
    (tmp_path / "old.jsonl").write_text(_with_times(300, 300, -86_400_000), encoding="utf-8")
    times = [json.loads(x)["store_timestamp"] for f in ("new.jsonl", "old.jsonl")
             for x in (tmp_path / f).read_text().splitlines()]
    store = str(tmp_path / "store")
    for f in ("new.jsonl", "old.jsonl"):
        code, out, err = rl("ingest", "--store", store, "--input", tmp_path / f, "--config", DEMO_CONF, "--quiet")
        assert code == 0, err
    code, out, err = rl("inspect", "--store", store, "--json", "stats")
    total = json.loads(out)["total"]
    assert (total["min_store_ts"], total["max_store_ts"]) == (min(times), max(times))
    code, out, err = rl("inspect", "--store", store, "stats")
    line = next(x for x in out.splitlines() if x.startswith("store: "))
    assert f"min_store_ts={min(times)}(" in line and f"max_store_ts={max(times)}(" in line


# --------------------------------------------------------------------------- the store's topics
def _topics_json(path, counts: dict) -> str:
    doc = {"topicConfigTable": {t: {"topicName": t, "readQueueNums": n, "writeQueueNums": n, "perm": 6}
                                for t, n in counts.items()}}
    path.write_text(json.dumps(doc), encoding="utf-8")
    return str(path)


def _unplaced(n: int, skip: int) -> str:
    """Sample rows without queue_id: the topic config places them (round robin)."""
    rows = [json.loads(x) for x in _lines(n, skip).splitlines()]
    for r in rows:
        del r["queue_id"]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _store_bytes(store: str) -> dict:
    return {k: v for k, v in tree_digest(store).items() if not k.startswith("_rocketlake")}


CONFIGURED = {"orders": 5, "payments": 6, "refund": 7, "shipping": 8, "unused": 3}


def test_store_keeps_its_topic_config(tmp_path):
    for k in range(3):
        (tmp_path / f"b{k}.jsonl").write_text(_unplaced(250, 250 * k), encoding="utf-8")
    topics = _topics_json(tmp_path / "topics.json", CONFIGURED)
    # the reference: the queues a producer's round robin over a broker configured so gives (the
    # k-th message of topic T on queue k % writeQueueNums(T), tests/ingest/test_ingest_incremental.py),
    # as explicit queue ids, in one batch (any cut into batches gives the same bytes)
    ref, seen = str(tmp_path / "ref"), {}
    rows = [json.loads(x) for k in range(2) for x in (tmp_path / f"b{k}.jsonl").read_text().splitlines()]
    for r in rows:
        n = seen.get(r["topic"], 0)
        r["queue_id"], seen[r["topic"]] = n % CONFIGURED.get(r["topic"], 4), n + 1
    (tmp_path / "explicit.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, out, err = rl("ingest", "--store", ref, "--input", tmp_path / "explicit.jsonl", "--config", DEMO_CONF,
                        "--quiet")
    assert code == 0, err
    store = str(tmp_path / "store")
    code, out, err = rl("ingest", "--store", store, "--input", tmp_path / "b0.jsonl", "--config", DEMO_CONF,
                        "--topics", topics, "--quiet")
    assert code == 0, err
    code, out, err = rl("ingest", "--store", store, "--input", tmp_path / "b1.jsonl", "--quiet")   # no --topics
    assert code == 0, err
    assert _store_bytes(store) == _store_bytes(ref)
    code, out, _ = rl("inspect", "--store", store, "--json", "topics")
    shown = {r["topic"]: r for r in map(json.loads, out.splitlines())}
    assert {t: shown[t]["write_queue_nums"] for t in CONFIGURED} == CONFIGURED
    assert shown["audit_log"]["write_queue_nums"] == 4 and shown["audit_log"]["placed"] == "yes"  # as auto-created
    assert shown["unused"]["placed"] == "no" and shown["*"]["write_queue_nums"] == 4
    # a --topics that disagrees on placed topics: exit 2 naming each, nothing written
    before = tree_digest(store)
    changed = _topics_json(tmp_path / "changed.json", dict(CONFIGURED, orders=4, refund=2, unused=9))
    code, out, err = rl("ingest", "--store", store, "--input", tmp_path / "b2.jsonl", "--topics", changed)
    line = one_line_error(err)
    assert code == 2 and "topic 'orders' writeQueueNums store=5 given=4" in line, err
    assert "topic 'refund' writeQueueNums store=7 given=2" in line and "'unused'" not in line and "--update-topics" in line
    assert tree_digest(store) == before
    code, _, err = rl("ingest", "--store", store, "--input", tmp_path / "b2.jsonl", "--update-topics")
    assert code == 2 and "--update-topics needs --topics" in err
    # an explicit change is recorded with its batch and used by the next
    code, out, err = rl("ingest", "--store", store, "--input", tmp_path / "b2.jsonl", "--topics", changed,
                        "--update-topics", "--quiet")
    assert code == 0, err
    seq = _summary(out)["batch_id"]
    code, out, _ = rl("inspect", "--store", store, "--json", "topics")
    shown = {r["topic"]: r for r in map(json.loads, out.splitlines())}
    assert (shown["orders"]["write_queue_nums"], shown["orders"]["set_by_batch"]) == (4, seq)
    assert (shown["unused"]["write_queue_nums"], shown["unused"]["set_by_batch"]) == (9, seq)
    assert shown["payments"]["set_by_batch"] != seq
    code, out, _ = rl("inspect", "--store", store, "topics")
    assert out.splitlines()[0].split() == ["topic", "read_queue_nums", "write_queue_nums", "perm", "placed",
                                           "set_by_batch"]
    # orders' messages of the last batch went to its 4 queues only
    code, out, _ = rl("inspect", "--store", store, "--json", "stats")
    queues = {(q["topic"], q["queue_id"]) for q in json.loads(out)["queues"]}
    assert {q for t, q in queues if t == "orders"} == set(range(5))


def test_batches_of_earlier_versions_are_recognised(tmp_path, monkeypatch):
    """A batch committed before content identity (its fingerprint: the path as spelled, sizes,
    content hash) is found again by the same command: not a second copy after an upgrade."""
    from storelib.ingest import driver
    (tmp_path / "a.jsonl").write_text(_lines(100), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(_lines(100, skip=100), encoding="utf-8")
    store = str(tmp_path / "store")
    with monkeypatch.context() as m:              # what earlier versions committed
        m.setattr(driver, "input_fingerprint", identity.path_fingerprint)
        m.setattr(driver, "_topic_detail", lambda snap, tcfg, changes, scans, rr: {"round_robin": rr})
        for args in (("--input", "a.jsonl"), ("--input", "b.jsonl", "--batch-id", "B")):
            code, out, err = rl("ingest", "--store", store, *args, "--config", DEMO_CONF, "--quiet", cwd=tmp_path)
            assert code == 0 and _summary(out)["status"] == "committed", err
    first = _batches(store)[0][0]
    for args, want in ((("--input", "a.jsonl"), first), (("--input", "b.jsonl", "--batch-id", "B"), "B")):
        code, out, err = rl("ingest", "--store", store, *args, "--quiet", cwd=tmp_path)
        assert code == 0 and (_summary(out)["status"], _summary(out)["batch_id"]) == ("already-committed", want), \
            out + err
    assert [m for _, m in _batches(store)] == [100, 100]


def _as_the_sha256_version(m) -> None:
    """``m`` (a monkeypatch context) makes ingests commit as the version before BLAKE3 did: a
    SHA-256 input identity, and no ``identity`` in the batch's detail."""
    from storelib.ingest import driver
    real_detail = driver._topic_detail
    m.setattr(driver, "input_fingerprint", lambda p, f, s: identity.input_fingerprint(p, f, s, "sha256"))
    m.setattr(driver, "_topic_detail", lambda *a: {k: v for k, v in real_detail(*a).items() if k != "identity"})


def test_batches_identified_by_sha256_are_recognised(tmp_path, monkeypatch):
    """A batch committed while the identity was SHA-256 (it records its topic config, no
    ``identity``) is found again after the identity became BLAKE3: by its fingerprint under an
    auto id, by its id when given, and the given id with other bytes is still refused."""
    (tmp_path / "a.jsonl").write_text(_lines(100), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(_lines(100, skip=100), encoding="utf-8")
    store = str(tmp_path / "store")
    with monkeypatch.context() as m:              # what the version before committed
        _as_the_sha256_version(m)
        for args in (("--input", "a.jsonl"), ("--input", "b.jsonl", "--batch-id", "B")):
            code, out, err = rl("ingest", "--store", store, *args, "--config", DEMO_CONF, "--quiet", cwd=tmp_path)
            assert code == 0 and _summary(out)["status"] == "committed", err
    first = _batches(store)[0][0]
    assert first == f"auto-{_identity(str(tmp_path / 'a.jsonl'), kind='sha256')[:16]}"
    assert first != f"auto-{_identity(str(tmp_path / 'a.jsonl'))[:16]}"
    for args, want in ((("--input", "a.jsonl"), first), (("--input", "./a.jsonl"), first),
                       (("--input", "b.jsonl", "--batch-id", "B"), "B")):
        code, out, err = rl("ingest", "--store", store, *args, "--quiet", cwd=tmp_path)
        assert code == 0 and (_summary(out)["status"], _summary(out)["batch_id"]) == ("already-committed", want), \
            out + err
    code, out, err = rl("ingest", "--store", store, "--input", "a.jsonl", "--batch-id", "B", "--quiet", cwd=tmp_path)
    assert code != 0 and "already committed with different input" in err, out + err
    assert [m for _, m in _batches(store)] == [100, 100]


def test_an_earlier_identity_is_computed_only_where_it_can_decide(tmp_path, monkeypatch):
    """In a store that holds a batch identified with SHA-256, an input's SHA-256 (a second pass
    over every byte, after the lease) is computed only where it can find such a batch: an input
    under its own id that no batch has. A new --batch-id and the rerun of a batch of this version
    (by its own id or a given one) hash with BLAKE3 only; the earlier batch is still found."""
    for name, skip in (("a", 0), ("b", 100), ("c", 200)):
        (tmp_path / f"{name}.jsonl").write_text(_lines(100, skip=skip), encoding="utf-8")
    store = str(tmp_path / "store")
    with monkeypatch.context() as m:              # what the version before committed
        _as_the_sha256_version(m)
        code, out, err = rl("ingest", "--store", store, "--input", "a.jsonl", "--config", DEMO_CONF, "--quiet",
                            cwd=tmp_path)
        assert code == 0 and _summary(out)["status"] == "committed", err
    kinds: list = []
    real = identity.file_digests
    monkeypatch.setattr(identity, "file_digests", lambda files, kind=identity.IDENTITY: kinds.append(kind)
                        or real(files, kind))
    for args, status, hashed in ((("b.jsonl", "--batch-id", "B"), "committed", ["blake3"]),
                                 (("b.jsonl", "--batch-id", "B"), "already-committed", ["blake3"]),
                                 (("c.jsonl",), "committed", ["blake3", "sha256"]),
                                 (("c.jsonl",), "already-committed", ["blake3"]),
                                 (("a.jsonl",), "already-committed", ["blake3", "sha256"])):
        kinds.clear()
        code, out, err = rl("ingest", "--store", store, "--input", *args, "--quiet", cwd=tmp_path)
        assert code == 0 and _summary(out)["status"] == status, out + err
        assert kinds == hashed, (args, status)
    code, out, err = rl("ingest", "--store", store, "--input", "c.jsonl", "--batch-id", "B", "--quiet", cwd=tmp_path)
    assert code != 0 and "already committed with different input" in err, out + err
    assert [m for _, m in _batches(store)] == [100, 100, 100]


def test_a_store_of_this_version_hashes_its_inputs_once(tmp_path, monkeypatch):
    """Batches that record this version's identity need no earlier one: a new input and a rerun
    hash each file with BLAKE3 only, and the batch records the identity it was given."""
    (tmp_path / "a.jsonl").write_text(_lines(100), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(_lines(100, skip=100), encoding="utf-8")
    store = str(tmp_path / "store")
    kinds = []
    real = identity.file_digests
    monkeypatch.setattr(identity, "file_digests", lambda files, kind=identity.IDENTITY: kinds.append(kind)
                        or real(files, kind))
    for f, status in (("a.jsonl", "committed"), ("b.jsonl", "committed"), ("a.jsonl", "already-committed")):
        code, out, err = rl("ingest", "--store", store, "--input", f, "--config", DEMO_CONF, "--quiet", cwd=tmp_path)
        assert code == 0 and _summary(out)["status"] == status, out + err
    assert kinds == ["blake3"] * 3
    snap = manifest.load_snapshot(storage.Store(store))
    assert [b.detail["identity"] for b in snap.batches] == ["blake3", "blake3"]
    assert [b.input_fingerprint for b in snap.batches] == [_identity(str(tmp_path / f)) for f in ("a.jsonl", "b.jsonl")]


def test_round_robin_continues_after_an_expiry(tmp_path):
    """An expiry records no round-robin positions: the next batch continues from the last ingest's."""
    (tmp_path / "a.jsonl").write_text(_unplaced(1800, 0), encoding="utf-8")    # two segments and more
    (tmp_path / "b.jsonl").write_text(_unplaced(200, 1800), encoding="utf-8")
    store = str(tmp_path / "store")
    assert rl("ingest", "--store", store, "--input", tmp_path / "a.jsonl", "--config", DEMO_CONF, "--quiet")[0] == 0
    code, out, err = rl("expire", "--store", store, "--reserved-hours", "1", "--quiet")
    assert code == 0 and "commitlog_removed=0" not in out, out + err
    assert rl("ingest", "--store", store, "--input", tmp_path / "b.jsonl", "--quiet")[0] == 0
    seen: dict = {}
    for f in ("a.jsonl", "b.jsonl"):
        for x in (tmp_path / f).read_text().splitlines():
            t = json.loads(x)["topic"]
            seen[t] = seen.get(t, 0) + 1
    assert manifest.load_snapshot(storage.Store(store)).last_detail("round_robin") == seen


def test_queue_ids_past_the_topic_config_grow_its_read_queues(tmp_path):
    """Rows whose queue id is at or past their topic's readQueueNums (replicated from a broker with
    more queues) are stored as given, and the topic config the store records (``inspect topics``:
    what a broker is to be given) has readQueueNums raised to cover them, since a broker serves no
    queue at or above it; writeQueueNums (round robin) stays, and a later batch keeps the growth."""
    rows = [{"topic": "orders", "queue_id": q, "body": f"m{q}"} for q in (0, 6, 2)]
    rows += [{"topic": "fresh", "queue_id": 9, "body": "x"}, {"topic": "orders", "body": "placed"}]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "b.jsonl").write_text(json.dumps({"topic": "orders", "queue_id": 1, "body": "n"}) + "\n",
                                      encoding="utf-8")
    topics = _topics_json(tmp_path / "topics.json", {"orders": 5})
    store = str(tmp_path / "store")
    for src in ("a.jsonl", "b.jsonl"):
        code, out, err = rl("ingest", "--store", store, "--input", tmp_path / src, "--config", DEMO_CONF,
                            "--topics", topics, "--quiet")
        assert code == 0, err
        code, out, _ = rl("inspect", "--store", store, "--json", "topics")
        shown = {r["topic"]: r for r in map(json.loads, out.splitlines())}
        assert (shown["orders"]["read_queue_nums"], shown["orders"]["write_queue_nums"]) == (7, 5), shown
        assert (shown["fresh"]["read_queue_nums"], shown["fresh"]["write_queue_nums"]) == (10, 4), shown
    assert os.path.exists(os.path.join(store, "consumequeue", "orders", "6"))
