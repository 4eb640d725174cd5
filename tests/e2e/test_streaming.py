"""Structured Streaming into a store from a real Kafka broker, killed and restarted, exactly once.

One Kafka broker (KRaft, 127.0.0.1, ephemeral ports; jars from Maven Central through
tests/support/kafkajars.py) holds N messages in one partition. A streaming query (Spark's Kafka
source -> ``format("rocketlake")``, ``maxOffsetsPerTrigger`` so that it takes several
micro-batches, ``availableNow``) is SIGKILLed with its whole process group at points of a
micro-batch's commit and restarted from its checkpoint:

1. after the Delta switch, before the files are published (the commit is in the store, not in
   Spark's checkpoint: Spark runs the micro-batch again, which must be "already committed" and
   finish the publish, never a second batch);
2. (``make streaming``) with every file of the next micro-batch staged, before its Delta commit
   (nothing committed: the rerun writes it; ``make test`` kills ingests there,
   tests/e2e/test_ingest_faults.py).

The last run goes to the end; the store is then byte for byte (every store file) the store a
one-shot ``ingest_dataframe`` of the whole topic makes, and its batches are exactly the query's
micro-batches. ``make test`` runs the first kill (two micro-batches, two spark-submits); ``make
streaming`` both (four micro-batches, three spark-submits), and in the last one's Spark
application a file-source query (one file per trigger) and a one-shot ingest of the same messages
make the same bytes too (a second source of the same property; the file source's replays and
resets: tests/ingest/test_sink.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT

from support import filedigest
from support import kafkajars
from support.longrun import streaming_test
from storelib.format.paths import META_DIR
from storelib.io import storage
from storelib.table import manifest

pytestmark = pytest.mark.slow

PY = sys.executable
SUBMIT = os.path.join(os.path.dirname(PY), "spark-submit")
JOB = os.path.join(ROOT, "tests", "support", "stream_job.py")
N = 1200
PER_TRIGGER = 300
TOPIC = "events"


def _jars() -> str:
    try:
        return kafkajars.spark_jars()
    except kafkajars.Unavailable as e:
        pytest.skip(f"Kafka jars unavailable ({e}); `make kafka` fetches them")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    try:
        kafkajars.broker_classpath()
    except kafkajars.Unavailable as e:
        pytest.skip(f"Kafka jars unavailable ({e}); `make kafka` fetches them")
    from support.kafkabroker import KafkaBroker
    with KafkaBroker(str(tmp_path_factory.mktemp("kafka"))) as k:
        k.produce(TOPIC, [f"key-{i % 97}\tmessage {i} " + "x" * (i % 50) for i in range(N)])
        yield k


def submit(args: list, env: dict | None = None) -> subprocess.Popen:
    cmd = [SUBMIT, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false", "--conf", f"spark.jars={_jars()}",
           "--conf", "spark.sql.shuffle.partitions=2",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
           JOB, *[str(a) for a in args]]
    e = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, **(env or {}))
    return subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def kill_when_held(proc: subprocess.Popen, gate: str, timeout: float = 240) -> None:
    """SIGKILL the job's whole process group (driver JVM, Python driver and workers) once its
    commit reached the held point."""
    deadline = time.time() + timeout
    try:
        while not os.path.exists(gate + ".reached"):
            if proc.poll() is not None:
                pytest.fail(f"the job ended before reaching {gate}:\n{proc.stdout.read()[-4000:]}")
            if time.time() > deadline:
                pytest.fail(f"the job did not reach {gate} in {timeout}s")
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        proc.stdout.close()


def finish(proc: subprocess.Popen, timeout: float = 400) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the job did not finish in {timeout}s:\n{out[-4000:]}")
    assert proc.returncode == 0, out[-6000:]
    return out


def store_files(store: str) -> dict:
    """relative path -> digest of the bytes of every store file (not the Delta tables); the
    default-size files are preallocated, ~1.5 GB per store: only their data is read."""
    out = {}
    for d, dirs, files in os.walk(store):
        dirs[:] = [x for x in dirs if os.path.relpath(os.path.join(d, x), store) != META_DIR]
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, store)] = filedigest.digest(p)
    return out


def batches(store: str) -> list:
    return [(b["batch_id"], b["messages"]) for b in manifest.load_snapshot(storage.Store(store)).batches]


def write_files(base) -> tuple:
    """Three JSON files (oldest first, as a file stream takes them) and their concatenation."""
    src = base / "in"
    src.mkdir()
    lines = [json.dumps({"topic": f"t{i % 3}", "body": f"file message {i}", "born_timestamp": 1718000000000 + i,
                         "keys": f"k{i % 11}"}) for i in range(150)]
    for k in range(3):
        p = src / f"part-{k}.json"
        p.write_text("\n".join(lines[k * 50:(k + 1) * 50]) + "\n")
        os.utime(p, (1718000000 + k * 10, 1718000000 + k * 10))
    whole = base / "all.json"
    whole.write_text("\n".join(lines) + "\n")
    return str(src), str(whole)


def _killed_at_publish(broker, tmp_path, per_trigger: int) -> tuple:
    """The stream killed after micro-batch 0's Delta switch, before its files are published:
    (its arguments, the store's batches then)."""
    store, ck = str(tmp_path / "store"), str(tmp_path / "checkpoint")
    stream = ["kafka-stream", broker.bootstrap, TOPIC, store, ck, per_trigger]
    gate = str(tmp_path / "gate-publish")
    kill_when_held(submit(stream, {"ROCKETLAKE_HOLD": f"after-commit-before-publish:{gate}"}), gate)
    first = batches(store)
    assert len(first) == 1 and first[0][1] == per_trigger, first
    assert first[0][0].startswith("stream-") and first[0][0].endswith("-0"), first[0][0]
    return stream, first


def _to_the_end(stream: list, first: list, tmp_path, per_trigger: int, files: bool) -> None:
    """The last run: the stream to the end, then a one-shot ingest of the whole topic (and with
    ``files`` the file-source pair); every micro-batch once, and the same bytes as the one-shot
    ingests."""
    store, once = stream[3], str(tmp_path / "once")
    steps = stream + ["--", "kafka-once", stream[1], TOPIC, once]
    if files:
        src, whole = write_files(tmp_path)
        steps += ["--", "files-stream", src, str(tmp_path / "fstore"), str(tmp_path / "fck"),
                  "--", "files-once", whole, str(tmp_path / "fonce")]
    out = finish(submit(steps))
    assert out.count("step done") == (4 if files else 2), out[-4000:]

    got = batches(store)
    prefix = first[0][0][:-1]
    assert [b for b, _ in got] == [f"{prefix}{k}" for k in range(N // per_trigger)], got
    assert all(m == per_trigger for _, m in got), got
    a, b = store_files(store), store_files(once)
    assert a and a == b, sorted(set(a.items()) ^ set(b.items()))[:10]
    assert not os.path.exists(os.path.join(store, META_DIR, "incoming")) or \
        not any(files for _, _, files in os.walk(os.path.join(store, META_DIR, "incoming")))

    if not files:
        return
    fs, fo = store_files(str(tmp_path / "fstore")), store_files(str(tmp_path / "fonce"))
    assert fs and fs == fo, sorted(set(fs.items()) ^ set(fo.items()))[:10]
    assert [m for _, m in batches(str(tmp_path / "fstore"))] == [50, 50, 50]


def test_kafka_stream_killed_once_is_exactly_once(broker, tmp_path):
    stream, first = _killed_at_publish(broker, tmp_path, N // 2)
    _to_the_end(stream, first, tmp_path, N // 2, files=False)


@streaming_test("a second kill, with a micro-batch staged before its Delta commit (a third spark-submit, ~40 s), "
                "and the file-source pair")
def test_kafka_stream_killed_twice_is_exactly_once(broker, tmp_path):
    stream, first = _killed_at_publish(broker, tmp_path, PER_TRIGGER)
    # the rerun finds micro-batch 0 committed; killed with micro-batch 1 staged, not committed
    gate = str(tmp_path / "gate-commit")
    kill_when_held(submit(stream, {"ROCKETLAKE_HOLD": f"before-delta-commit:{gate}"}), gate)
    assert batches(stream[3]) == first
    _to_the_end(stream, first, tmp_path, PER_TRIGGER, files=True)
