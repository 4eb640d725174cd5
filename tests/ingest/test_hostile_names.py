"""Hostile names: topics that are not directory names, and store paths leading out of the store.

Writer: a topic must be a valid RocketMQ topic (TopicValidator's ``[%|a-zA-Z0-9_-]``, at most 255
bytes here: the store format holds V2 topics longer than RocketMQ's 127); anything else is bad
input (exit 2, file/line/field named, nothing written). Readers: every store path goes through
``storage.Store.path``, which refuses absolute paths, ``..``, backslashes, NUL and symlinks
resolving outside the store; manifest rows are checked when a snapshot is loaded.

The full hostile-topic list runs through the in-process encode stage; two hostile topics go
through one ``spark-submit jobs/ingest.py`` per store state (fresh store, committed store).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from unittest import mock

import pyarrow as pa
import pytest

from conftest import golden_set, ROOT
from support.opshelp import run, small_config, small_properties

from storelib.ops import adopt, expire as retention
from storelib.codec import messages as codec
from storelib.format import consumequeue, names, paths
from storelib.ingest import driver as ingest, encode as encode_stage, inputs, topics
from storelib.ingest.context import EncodeContext
from storelib.table import manifest
from storelib.read import query
from storelib.verify import driver as verify
from storelib.io.storage import Store
from storelib.errors import AdoptError, InputError, StorePathError, TopicsError

HOSTILE_TOPICS = [
    "../../escape2", "a/b", "/abs", ".", "..", "x\\y", "..\\..\\evil", "a\x00b", "", " ", "a b", "t\n",
    "tab\t", "日本", "é", "%RETRY%/x", "~root", "a:b", "$HOME", "*", "a;b", "a.b", "L" * 256,
]
GOOD_TOPICS = ["TopicTest", "%RETRY%cg_payments", "%DLQ%cg", "SCHEDULE_TOPIC_XXXX", "a|b", "x-y_z",
               "T" * 127, "T" * 128, "LongTopic_" + "a" * 200, "L" * 255]
BAD_RELS = ["../x", "/abs", "a/../../b", "commitlog/../../x", "..", ".", "./x", "a//b", "a\\b",
            "..\\x", "a\x00b", "consumequeue/T/0/\x00"]


def golden_lines(n: int) -> list[str]:
    with open(os.path.join(golden_set("small-roll"), "messages.jsonl"), encoding="utf-8") as fh:
        return [next(fh).rstrip("\n") for _ in range(n)]


def with_topics(lines: list[str], bad: dict) -> list[str]:
    """``lines`` with the topic of line k (1-based) replaced by ``bad[k]``."""
    out = list(lines)
    for k, topic in bad.items():
        m = json.loads(out[k - 1])
        m["topic"] = topic
        out[k - 1] = json.dumps(m, ensure_ascii=False)
    return out


def write_lines(path, lines) -> str:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return str(path)


def tree(path: str) -> dict:
    """Every entry under ``path``: files with their bytes, directories and symlinks by name."""
    out = {}
    for d, dirs, files in os.walk(path):
        for x in dirs:
            p = os.path.join(d, x)
            out[os.path.relpath(p, path) + "/"] = os.readlink(p) if os.path.islink(p) else None
        for f in files:
            p = os.path.join(d, f)
            if os.path.islink(p):
                out[os.path.relpath(p, path)] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, path)] = fh.read()
    return out


# ============================================================================ (a) topic validator
@pytest.mark.parametrize("topic", HOSTILE_TOPICS, ids=repr)
def test_hostile_topic_rejected(topic):
    problem = names.topic_problem(topic)
    assert problem
    assert names.topic_problems(pa.array(["ok", topic, "ok2"])) == {1: problem}
    if topic and any(c in topic for c in "/\\\x00") or topic in (".", ".."):
        assert "directory name" in problem


@pytest.mark.parametrize("topic", GOOD_TOPICS, ids=lambda t: t[:20])
def test_valid_topics_accepted(topic):
    assert names.topic_problem(topic) is None
    assert names.topic_problems(pa.array([topic])) == {}


def test_golden_topics_are_valid():
    """Every topic of the golden sets (210-character LongTopic_..., %RETRY%..., T127/T128) passes."""
    for name in ("small-roll", "expire-small"):
        table = inputs.jsonl_to_table(os.path.join(golden_set(name), "messages.jsonl"))
        distinct = pa.compute.unique(table.column("topic"))
        assert names.topic_problems(distinct) == {}
        assert max(len(t) for t in distinct.to_pylist()) == 210
        codec.prepare(table, small_config(), topic_names=True)


def _ctx(store: str) -> EncodeContext:
    return EncodeContext(store=store, config=small_config(), topics=topics.Topics.default(),
                         staging="_rocketlake/staging/t/a", default_store_ts=1)


@pytest.mark.parametrize("topic", HOSTILE_TOPICS, ids=repr)
@pytest.mark.parametrize("queue_id", [True, False], ids=["queue_id", "round-robin"])
def test_hostile_topic_in_encode_stage(tmp_path, topic, queue_id):
    """The executors' encode stage (what spark-submit runs per split) reports the row by file, line
    and field and stages nothing; a second bad row in the same input is reported too."""
    lines = with_topics(golden_lines(12), {4: topic, 9: "../../escape2"})
    if not queue_id:
        lines = [json.dumps({k: v for k, v in json.loads(x).items() if k != "queue_id"}) for x in lines]
    src = write_lines(tmp_path / "in.jsonl", lines)
    store = str(tmp_path / "store")
    (split,) = inputs.plan_splits(src, "jsonl", 1)
    r = encode_stage.encode_split(_ctx(store), split.to_dict())
    assert "errors" in r, r
    errs = r["errors"]
    assert any(e.startswith(f"{src} line 4: field 'topic': ") for e in errs), errs
    assert any(e.startswith(f"{src} line 9: field 'topic': ") and "'../../escape2'" in e for e in errs), errs
    assert not os.path.exists(store)
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_hostile_topic_in_prepare_names_row_and_keeps_other_checks():
    """One line per bad row: the name problem and the record-format one (V1 length) together."""
    table = inputs.jsonl_to_table(os.path.join(golden_set("small-roll"), "messages.jsonl")).slice(0, 5)
    t = table.set_column(0, "topic", pa.array(["ok", "t" * 40 + "é" * 60, "ok", "a/b", "ok"], pa.string()))
    with pytest.raises(InputError) as e:
        codec.prepare(t, small_config(), lambda i: f"in.jsonl line {i + 1}")
    probs = e.value.problems
    assert len(probs) == 2, probs
    assert probs[0].startswith("in.jsonl line 2: field 'topic': ") and "V1" in probs[0] and "'é'" in probs[0]
    assert probs[1].startswith("in.jsonl line 4: field 'topic': ") and "contains '/'" in probs[1]


@pytest.mark.parametrize("key", ["../../escape2", "a/b", "é", ".."])
def test_topics_json_names_checked(tmp_path, key):
    p = tmp_path / "topics.json"
    p.write_text(json.dumps({"topicConfigTable": {"ok": {"writeQueueNums": 2},
                                                  key: {"topicName": key, "writeQueueNums": 4}}}))
    with pytest.raises(TopicsError) as e:
        topics.Topics.load(str(p))
    assert str(p) in str(e.value) and repr(key) in str(e.value)
    p.write_text(json.dumps({"topicConfigTable": {"ok": {"topicName": key, "writeQueueNums": 2}}}))
    with pytest.raises(TopicsError, match="topicName"):
        topics.Topics.load(str(p))


@pytest.mark.parametrize("topic,queue", [("../../x", 0), ("a/b", 1), ("..", 0), ("ok", -1)])
def test_queue_key_paths_checked(topic, queue):
    with pytest.raises(StorePathError):
        consumequeue.rel_path(topic, queue, 0)
    assert consumequeue.rel_path("ok", 3, 2) == "consumequeue/ok/3/00000000000000000040"


# ============================================================================ (a) Store containment
@pytest.fixture
def boxed(tmp_path):
    """tmp/store (a small store: one file, one subdirectory) and tmp/store-evil/sentinel: a
    sibling whose path starts with the store's (a containment check by plain prefix lets it in)."""
    store = tmp_path / "store"
    (store / "commitlog").mkdir(parents=True)
    (store / "commitlog" / "00000000000000000000").write_bytes(b"inside")
    outside = tmp_path / "store-evil"
    outside.mkdir()
    (outside / "sentinel").write_bytes(b"SENTINEL-BYTES")
    (outside / "dir").mkdir()
    (outside / "dir" / "f").write_bytes(b"SENTINEL-IN-DIR")
    return str(store), str(outside)


def _every_access(st: Store, rel: str):
    yield "path", lambda: st.path(rel)
    yield "uri_of", lambda: st.uri_of(rel)
    yield "exists", lambda: st.exists(rel)
    yield "size", lambda: st.size(rel)
    yield "read", lambda: st.read(rel)
    yield "read_array", lambda: st.read_array(rel, 0, 4)
    yield "open_reader", lambda: st.open_reader(rel)
    yield "list_files", lambda: st.list_files(rel)
    yield "list_dirs", lambda: st.list_dirs(rel)
    yield "write_file", lambda: st.write_file(rel, [b"evil"], 16)
    yield "publish-from", lambda: st.publish(rel, "commitlog/x")
    yield "publish-to", lambda: st.publish("commitlog/00000000000000000000", rel)
    yield "delete", lambda: st.delete(rel)
    yield "makedirs", lambda: st.makedirs(rel)


@pytest.mark.parametrize("rel", BAD_RELS, ids=repr)
def test_store_refuses_paths_out_of_the_store(boxed, rel):
    store, outside = boxed
    parent = os.path.dirname(store)
    before, before_out = tree(store), tree(parent)
    st = Store(store)
    for what, call in _every_access(st, rel):
        with pytest.raises(StorePathError) as e:
            call()
        assert repr(rel) in str(e.value), (what, str(e.value))
    assert tree(store) == before and tree(parent) == before_out
    assert names.rel_path_problem(rel)


def test_store_refuses_symlinks_out(boxed):
    store, outside = boxed
    parent = os.path.dirname(store)
    os.symlink(os.path.join(outside, "sentinel"), os.path.join(store, "commitlog", "00000000000001048576"))
    os.symlink(os.path.join(outside, "dir"), os.path.join(store, "consumequeue"))
    os.symlink("../../store-evil/sentinel", os.path.join(store, "commitlog", "rel-link"))
    before = tree(parent)
    st = Store(store)
    for rel in ("commitlog/00000000000001048576", "commitlog/rel-link", "consumequeue", "consumequeue/f",
                "consumequeue/new/0/00000000000000000000"):
        for what, call in _every_access(st, rel):
            if what == "publish-to" and rel == "consumequeue":
                continue
            with pytest.raises(StorePathError, match="outside the store root") as e:
                call()
            assert repr(rel) in str(e.value), (what, rel)
    # listing the store meets the links: a clear error naming one, not the outside files
    with pytest.raises(StorePathError, match="outside the store root"):
        st.list_files("")
    with pytest.raises(StorePathError, match="outside the store root"):
        st.list_files("commitlog")
    assert tree(parent) == before
    assert open(os.path.join(outside, "sentinel"), "rb").read() == b"SENTINEL-BYTES"


def test_store_symlinks_inside_and_linked_root_are_fine(tmp_path):
    real = tmp_path / "real"
    (real / "commitlog").mkdir(parents=True)
    (real / "commitlog" / "a").write_bytes(b"A")
    os.symlink("commitlog", real / "cl2")              # a link inside the store
    os.symlink(".", real / "commitlog" / "loop")       # a loop: listed once, no recursion
    os.symlink(str(real), tmp_path / "link-root")      # the store root itself is a link
    for root in (str(real), str(tmp_path / "link-root")):
        st = Store(root)
        assert st.read("cl2/a") == b"A" and st.read("commitlog/a") == b"A"
        assert st.list_files("commitlog") == ["commitlog/a"]
        assert "cl2/a" in st.list_files("") and "commitlog/a" in st.list_files("")
        assert st.list_dirs("") == ["cl2", "commitlog"]
        st.write_file("consumequeue/T/0/00000000000000000000", [b"x"], 20)
        assert st.size("consumequeue/T/0/00000000000000000000") == 20
        st.delete("consumequeue")


def test_manifest_row_paths_checked():
    ok = {"batch_id": "b", "batch_seq": 1, "action": "add", "kind": "commitlog",
          "path": "commitlog/00000000000000000000", "staged_path": None}
    manifest.check_row_paths(ok)
    manifest.check_row_paths(dict(ok, staged_path="_rocketlake/staging/b/a/files/t/commitlog/0"))
    for col in ("path", "staged_path"):
        for bad in BAD_RELS:
            with pytest.raises(StorePathError) as e:
                manifest.check_row_paths(dict(ok, **{col: bad}))
            assert "manifest row of batch 'b'" in str(e.value) and repr(bad) in str(e.value)


# ============================================================================ (b) end to end
def spark_submit(*args, timeout=600):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    cmd = [os.path.join(os.path.dirname(sys.executable), "spark-submit"), "--master", "local[2]",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def committed(spark, tmp_path_factory):
    """A rocketlake store with one committed batch (150 golden messages, 64 KiB segments)."""
    d = tmp_path_factory.mktemp("committed")
    src = write_lines(d / "good.jsonl", golden_lines(150))
    store = str(d / "store")
    s = ingest.run_ingest(spark, store, src, "jsonl", small_config(), batch_id="good", target_splits=2, quiet=True)
    assert s["status"] == "committed" and s["segments"] >= 3
    return store


@pytest.mark.slow
@pytest.mark.parametrize("state", ["fresh", "committed"])
def test_ingest_rejects_hostile_topic(tmp_path, committed, state):
    """spark-submit with good rows and `../../escape2` / `a/b` topics: exit 2, each bad row named by
    file, line and field, the store byte for byte as before and nothing written beside it."""
    box = tmp_path / "box"
    box.mkdir()
    store = str(box / "store")
    if state == "committed":
        shutil.copytree(committed, store, symlinks=True)
    bad = write_lines(tmp_path / "bad.jsonl", with_topics(golden_lines(200)[150:], {3: "../../escape2", 41: "a/b"}))
    before = tree(str(box))
    r = spark_submit("jobs/ingest.py", "--store", store, "--input", bad, "--config", small_properties(tmp_path),
                     "--batch-id", "hostile")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out[-3000:]
    lines = [ln.strip() for ln in out.splitlines() if "bad.jsonl line" in ln]
    assert len(lines) == 2, out[-3000:]
    assert lines[0].startswith(f"{bad} line 3: field 'topic': topic '../../escape2' contains '/'"), lines
    assert lines[1].startswith(f"{bad} line 41: field 'topic': topic 'a/b' contains '/'"), lines
    assert tree(str(box)) == before, "a rejected batch changed the store or wrote beside it"
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "box", "small.properties"]
    assert not os.path.exists(os.path.join(ROOT, "escape2"))


# ============================================================================ (c) readers
class Watch:
    """Records every path this process opens, lists, renames or deletes (audit hook) while on;
    ``touched(dir)`` says which of them resolve into ``dir``. Also keeps the sentinel's atime."""
    events = ("open", "os.listdir", "os.scandir", "os.remove", "os.rmdir", "os.rename", "os.truncate",
              "shutil.rmtree", "os.mkdir", "os.symlink")
    on = False
    seen: list = []
    installed = False

    @classmethod
    def install(cls):
        if not cls.installed:
            sys.addaudithook(cls._hook)
            cls.installed = True

    @classmethod
    def _hook(cls, event, args):
        if cls.on and event in cls.events and args and isinstance(args[0], (str, bytes, os.PathLike)):
            cls.seen.append(os.fsdecode(args[0]))

    def __init__(self, outside: str):
        self.install()
        self.outside = os.path.realpath(outside)
        self.sentinel = os.path.join(outside, "sentinel")
        old = time.time() - 3 * 86400
        os.utime(self.sentinel, (old, os.stat(self.sentinel).st_mtime))
        self.atime = os.stat(self.sentinel).st_atime

    def __enter__(self):
        Watch.seen = []
        Watch.on = True
        return self

    def __exit__(self, *exc):
        Watch.on = False

    def touched(self) -> list:
        out = []
        for p in Watch.seen:
            try:
                rp = os.path.realpath(p)
            except (OSError, ValueError):
                continue
            if rp == self.outside or rp.startswith(self.outside + "/"):
                out.append(p)
        return out

    def assert_untouched(self):
        assert self.touched() == [], self.touched()
        assert os.stat(self.sentinel).st_atime == self.atime, "the outside file was read"


def _poison(committed: str, tmp_path, variant: str):
    """A copy of ``committed`` whose first commitlog segment leads outside the store: a manifest
    row edited (new batch 'evil': remove the segment's row, add one for a hostile path; committed
    past the check a writer's commit makes), or the
    file replaced by a symlink. The outside file holds the real segment's bytes, so a reader that
    followed it would give plausible answers instead of an error."""
    box = tmp_path / "box"
    box.mkdir()
    store = str(box / "store")
    shutil.copytree(committed, store, symlinks=True)
    outside = box / "store-evil"
    outside.mkdir()
    seg_rel = "commitlog/00000000000000000000"
    shutil.copyfile(os.path.join(store, seg_rel), outside / "sentinel")
    st = Store(store)
    if variant == "symlink":
        os.remove(os.path.join(store, seg_rel))
        os.symlink(str(outside / "sentinel"), os.path.join(store, seg_rel))
        return store, str(outside), seg_rel
    bad = {"dotdot": "../store-evil/sentinel", "absolute": str(outside / "sentinel"),
           "dotdot-inner": "commitlog/../../store-evil/sentinel"}[variant]
    snap = manifest.load_snapshot(st)
    seq, now = snap.batch_seq + 1, manifest.now_ms()
    row = dict(snap.files[seg_rel])
    common = dict(batch_id="evil", batch_seq=seq, committed_at=now, attempt_id="evil-attempt", staged_path=None)
    rows = [dict(row, action="remove", **common), dict(row, action="add", path=bad, **common)]
    ck = dict(snap.batch, batch_id="evil", batch_seq=seq, committed_at=now, attempt_id="evil-attempt",
              input_fingerprint="evil")
    with pytest.raises(StorePathError, match="manifest row of batch 'evil'"):
        manifest.commit(st, snap.versions, rows, ck)        # a writer never commits such a row ...
    with mock.patch.object(manifest, "check_row_targets", lambda *a: None):
        manifest.commit(st, snap.versions, rows, ck)        # ... a hand edit of the tables might
    return store, str(outside), bad


VARIANTS = ["dotdot", "absolute", "dotdot-inner", "symlink"]


def _expect(variant: str, bad: str) -> str:
    return "manifest row of batch 'evil'" if variant != "symlink" else repr(bad)


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_readers_never_leave_the_store(committed, tmp_path, variant):
    store, outside, bad = _poison(committed, tmp_path, variant)
    before = tree(os.path.dirname(store))
    watch = Watch(outside)
    with watch:
        # query (single lookups: no Spark)
        with pytest.raises(StorePathError) as e:
            r = query.open_store(store)
            r.get_by_offset(0)
        assert _expect(variant, bad) in str(e.value) and repr(bad) in str(e.value), str(e.value)
        # verify (in process): a manifest row leading out is one of the problems it reports (the Delta
        # tables cannot be used, the files are checked as a broker would see them); a file that is a
        # symlink out is refused outright. Either way the row / file is named.
        try:
            rep = verify.verify_store(store)
            said, ok = "\n".join(rep.problems), rep.ok
        except StorePathError as e:
            said, ok = str(e), False
        assert not ok and _expect(variant, bad) in said and repr(bad) in said, said
        # expire: everything but the last segment is due
        with pytest.raises(StorePathError) as e:
            retention.expire(store, 0, now_ms=2**62, quiet=True, housekeeping=False)
        assert repr(bad) in str(e.value)
    watch.assert_untouched()
    assert tree(os.path.dirname(store)) == before, "a reader changed the store or the outside file"


@pytest.mark.slow
def test_reader_clis_give_clear_errors(committed, tmp_path):
    """query, verify and expire as commands: exit 1, the row named (verify: as one of the problems it
    lists on stdout), no traceback, nothing read outside."""
    store, outside, bad = _poison(committed, tmp_path, "dotdot")
    before = tree(os.path.dirname(store))
    watch = Watch(outside)
    for script, args in (("query.py", ["--store", store, "offset", "--topic", "TopicTest", "--queue", "0",
                                       "--offset", "0"]),
                         ("inspect.py", ["--store", store, "verify", "--no-spark"]),
                         ("expire.py", ["--store", store, "--reserved-hours", "0", "--now", str(2**62)])):
        r = run(script, *args)
        assert r.returncode == 1, (script, r.stdout, r.stderr)
        said = r.stdout + r.stderr if script == "inspect.py" else r.stderr
        assert "manifest row of batch 'evil'" in said and repr(bad) in said, (script, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, (script, r.stderr)
        assert "SENTINEL" not in r.stdout
    watch.assert_untouched()
    assert tree(os.path.dirname(store)) == before


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["auto", "python"])
@pytest.mark.parametrize("variant", ["dotdot", "symlink"])
def test_datasource_never_leaves_the_store(spark, committed, tmp_path, variant, engine):
    """Either reader (the JVM one plans in Python, where the paths are checked)."""
    from storelib.read.datasource import register
    store, outside, bad = _poison(committed, tmp_path, variant)
    watch = Watch(outside)
    register(spark)
    with pytest.raises(Exception) as e:
        spark.read.format("rocketmq").option("engine", engine).load(store).count()
    said = f"{e.type.__name__}: {e.value}"
    assert "StorePathError" in said and repr(bad) in said, said[-2000:]
    assert os.stat(watch.sentinel).st_atime == watch.atime


@pytest.fixture
def broker_copy(restored_golden, tmp_path):
    """A broker's store (small-roll, no manifest) in tmp/box/broker, with tmp/box/broker-evil/sentinel."""
    box = tmp_path / "box"
    box.mkdir()
    broker = str(box / "broker")
    shutil.copytree(restored_golden("small-roll"), broker, symlinks=True)
    outside = box / "broker-evil"
    outside.mkdir()
    shutil.copyfile(os.path.join(broker, "commitlog", "00000000000000000000"), outside / "sentinel")
    (outside / "T").mkdir()
    return broker, str(outside)


@pytest.mark.parametrize("case", ["file-link", "dir-link", "odd-topic", "backslash-topic"])
@pytest.mark.parametrize("in_place", [True, False], ids=["in-place", "copy"])
def test_adopt_refuses_links_out_and_odd_names(broker_copy, tmp_path, case, in_place):
    broker, outside = broker_copy
    if case == "file-link":
        rel = "commitlog/00000000000000000000"
        os.remove(os.path.join(broker, rel))
        os.symlink(os.path.join(outside, "sentinel"), os.path.join(broker, rel))
        needle = repr(rel)
    elif case == "dir-link":
        os.symlink(os.path.join(outside, "T"), os.path.join(broker, "consumequeue", "Linked"))
        shutil.copyfile(os.path.join(outside, "sentinel"), os.path.join(outside, "T", "x"))
        needle = "'consumequeue/Linked'"
    else:
        topic = "a b" if case == "odd-topic" else "x\\y"
        os.makedirs(os.path.join(broker, "consumequeue", topic, "0"))
        needle = "consumequeue/" + repr(topic)
    dst = broker if in_place else str(tmp_path / "box" / "copy")
    before = tree(str(tmp_path / "box"))
    watch = Watch(outside)
    with watch, pytest.raises(AdoptError) as e:
        adopt.adopt(None, dst, broker, small_config(), quiet=True)
    assert needle in str(e.value) and "nothing was imported" in str(e.value), str(e.value)
    watch.assert_untouched()
    assert tree(str(tmp_path / "box")) == before


@pytest.mark.parametrize("what", ["data-file", "log-file", "table-dir"])
def test_delta_tables_never_read_outside(tmp_path, what):
    """The _rocketlake Delta tables: a data file, a log file or the table directory linking out."""
    import glob
    from deltalake import write_deltalake
    store = tmp_path / "store"
    table = store / "_rocketlake" / "manifest"
    # beside what the check guards (a path that starts with the table's, or the store's)
    outside = store / "_rocketlake" / "manifest-evil" if what == "data-file" else tmp_path / "store-evil"
    outside.mkdir(parents=True)
    write_deltalake(str(table), pa.table({"a": [1]}))
    victim = {"data-file": glob.glob(str(table / "*.parquet"))[0],
              "log-file": glob.glob(str(table / "_delta_log" / "*.json"))[0], "table-dir": str(table)}[what]
    moved = outside / os.path.basename(victim)
    shutil.move(victim, moved)
    os.symlink(str(moved), victim)
    with pytest.raises(StorePathError, match="outside"):
        manifest.read_rows(manifest.open_table(Store(str(store)), paths.MANIFEST_DIR))
