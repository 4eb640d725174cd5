"""Object storage: ingest into s3:// on a local S3-compatible server (moto_server), Delta tables
included; the downloaded store is byte-identical to the golden set."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from support import goldenlib
from support import s3server
from conftest import ROOT, golden_set

pytestmark = pytest.mark.slow

PY = sys.executable
BIN = os.path.dirname(PY)
SMALL = goldenlib.SMALL_ROLL_CONFIG
BUCKET = "rocketlake-test"


@pytest.fixture(scope="module")
def s3_env():
    with s3server.moto(BUCKET) as env_s3:
        yield env_s3


def submit(args, env_extra):
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY, **env_extra)
    cmd = [os.path.join(BIN, "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.ui.showConsoleProgress=false",
           "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
           os.path.join(ROOT, "jobs", "ingest.py"), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def export(uri: str, to, env):
    """jobs/export.py of the store at ``uri`` into ``to`` (a fresh process)."""
    return subprocess.run([PY, os.path.join(ROOT, "jobs", "export.py"), "--store", uri, "--to", str(to)],
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)


def test_ingest_to_s3_is_golden(s3_env, tmp_path):
    golden_two_batches(s3_env, tmp_path)


def small_roll_parts(tmp_path, cut: int = 1700) -> tuple:
    """(properties file of SMALL, [messages before ``cut``, the rest]) of small-roll, in ``tmp_path``."""
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    lines = open(os.path.join(golden_set("small-roll"), "messages.jsonl"), encoding="utf-8").readlines()
    parts = []
    for k, (lo, hi) in enumerate(((0, cut), (cut, len(lines)))):
        p = tmp_path / f"part{k}.jsonl"
        p.write_text("".join(lines[lo:hi]), encoding="utf-8")
        parts.append(str(p))
    return props, parts


def golden_two_batches(s3_env, tmp_path, bucket: str = BUCKET):
    """small-roll in two spark-submit batches into ``s3://<bucket>/stores/small`` on the server of
    ``s3_env`` (moto here, S3Proxy in test_s3proxy.py): byte-identical export, verify, rerun."""
    env, s3 = s3_env
    g = golden_set("small-roll")
    props, parts = small_roll_parts(tmp_path)
    uri = f"s3://{bucket}/stores/small"
    for k, part in enumerate(parts):
        r = submit(["--store", uri, "--input", part, "--config", str(props), "--batch-id", f"s3-{k}",
                    "--json-summary", str(tmp_path / f"s{k}.json")], env)
        assert r.returncode == 0, r.stderr[-4000:]
        assert json.loads((tmp_path / f"s{k}.json").read_text())["status"] == "committed"
    # Objects are written once at keys unique to their attempt and never moved: nothing but the
    # Delta tables and _rocketlake/objects/ is in the bucket. jobs/export.py materializes the
    # broker's directory, which is byte-identical to the golden set.
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="stores/small/"):
        keys += [o["Key"] for o in page.get("Contents", [])]
    assert any(k.startswith("stores/small/_rocketlake/checkpoints/_delta_log/") for k in keys)
    assert not [k for k in keys if "/_rocketlake/staging/" in k or k.endswith("writer.lock")]
    assert not [k for k in keys if not k.startswith("stores/small/_rocketlake/") or k.endswith("/")]   # (no marker)
    local = tmp_path / "export"
    r = export(uri, local, env)
    assert r.returncode == 0, r.stderr[-3000:]
    diffs = goldenlib.compare(g, str(local))
    assert diffs == [], diffs[:20]
    r = export(uri, local, env)
    assert r.returncode == 2 and "not empty" in r.stderr, (r.returncode, r.stderr[-2000:])   # a bad argument
    # verify reads each file through the objects its manifest row lists
    r = subprocess.run([PY, os.path.join(ROOT, "jobs", "inspect.py"), "--store", uri, "verify", "--no-spark"],
                       env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "status=ok problems=0 files=230" in r.stdout + r.stderr, r.stderr[-2000:]
    # The manifest reads over s3:// (deltalake + pyarrow.fs), in a clean process.
    code = ("import json; from storelib.table import manifest; from storelib.io import storage; "
            "s = manifest.load_snapshot(storage.Store(%r)); "
            "print(json.dumps({'batches': [b['batch_id'] for b in s.batches], 'files': len(s.files), "
            "'max': s.batch['max_phy_offset']}))") % (uri,)
    out = subprocess.run([PY, "-c", code], env=dict(os.environ, **env), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"batches": ["s3-0", "s3-1"], "files": 231, "max": 4113502}
    # Rerunning a committed batch over s3 changes nothing and says so.
    r = submit(["--store", uri, "--input", parts[1], "--config", str(props), "--batch-id", "s3-1"], env)
    assert r.returncode == 0 and "status=already-committed" in r.stdout, (r.stdout, r.stderr[-3000:])


def test_a_failed_first_batch_leaves_nothing_in_the_bucket(s3_env, tmp_path):
    """A first batch that fails after taking the writer lease (a bad row) removes what it wrote,
    the directory markers of the store root and its new parents included (run without Spark)."""
    env, s3 = s3_env
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"topic": "T", "body": "x"}\n{"topic": "T"\n')
    props = tmp_path / "small.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    r = subprocess.run([PY, os.path.join(ROOT, "tests", "local_ingest.py"), "ingest", f"s3://{BUCKET}/failed/first/store",
                        str(bad), str(props), "bad"], env=dict(os.environ, **env), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    left = s3.list_objects_v2(Bucket=BUCKET, Prefix="failed/").get("Contents", [])
    assert left == [], [o["Key"] for o in left]


def test_object_store_files_are_written_as_bounded_objects(s3_env, monkeypatch):
    """One large file version is written as consecutive objects of at most ``part_size`` bytes,
    each completed on its own (a single 1 GiB upload fails on the moto server), and reads back
    whole through its extents, with zeros where no extent is."""
    env, _ = s3_env
    for k, v in env.items():
        monkeypatch.setenv(k, v)          # this process reaches the module's moto server (and only this test)
    from storelib.io import storage
    st = storage.Store(f"s3://{BUCKET}/stores/parts")
    data = os.urandom(5000)
    write_mapped(st, "commitlog/x", data, 100, 8000)
    assert st.read("commitlog/x", 0, 8000) == bytes(100) + data + bytes(2900)
    assert bytes(st.read_array("commitlog/x", 1000, 3000)) == data[900:3900]
    with st.open_reader("commitlog/x") as fh:
        assert fh.read_at(10, 95) == bytes(5) + data[:5] and fh.size() == 8000


def write_mapped(st, rel: str, data: bytes, start: int, file_size: int) -> list:
    """``data`` written as objects of at most 2048 bytes (in 700-byte chunks), then ``rel`` mapped
    as a ``file_size``-byte file holding it at ``start``; the objects written."""
    from storelib.io import fragments
    objs = st.write_objects(lambda k: f"_rocketlake/objects/b/a/t/{rel}.records.{k}",
                            (data[i:i + 700] for i in range(0, len(data), 700)), 2048)
    assert [n for _, n in objs] == [2048, 2048, len(data) - 4096]
    ext, pos = [], start
    for r, n in objs:
        ext.append([pos, n, r, 0])
        pos += n
    st.map_file(rel, file_size, fragments.extents_from_detail(ext))
    return objs


def test_default_sizes_on_s3_take_several_batches(s3_env, tmp_path):
    """A default-size store (1 GiB segments, 420 MB index files, 6 MB consume queues) on the moto
    server: two batches upload only what they add (no object holds a zero tail or a copy), a key
    lookup answers over s3://, and the exported directory is byte-identical to RocketMQ's."""
    env, s3 = s3_env
    from storelib.ingest import file_versions
    from storelib.ingest import inputs
    g = golden_set("default-size")
    table = inputs.jsonl_to_table(os.path.join(g, "messages.jsonl.gz"))
    import pyarrow.parquet as pq
    uri = f"s3://{BUCKET}/stores/default"
    props = tmp_path / "default.properties"
    cfg = json.load(open(os.path.join(g, "config.json")))["messageStoreConfig"]
    props.write_text("".join(f"{k}={v}\n" for k, v in cfg.items() if k != "flushDiskType"))
    for k, (lo, hi) in enumerate(((0, 12000), (12000, table.num_rows))):
        src = tmp_path / f"in{k}"
        src.mkdir()
        pq.write_table(inputs.canonical_to_parquet_input(table.slice(lo, hi - lo)), src / "part-0.parquet")
        r = submit(["--store", uri, "--input", str(src), "--format", "parquet", "--config", str(props),
                    "--batch-id", f"d{k}"], env)
        assert r.returncode == 0, r.stderr[-4000:]
    sizes = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="stores/default/"):
        sizes.update({o["Key"]: o["Size"] for o in page.get("Contents", [])})
    data = {k: n for k, n in sizes.items() if "/_rocketlake/objects/" in k}
    assert data and max(data.values()) <= file_versions.OBJECT_PART_SIZE
    # what the batches added (9.5 MB of records, units, entries) plus one index head (header and
    # 5M slots, 20 MB) per batch: no 1 GiB or 420 MB zero tails, nothing written twice
    assert sum(data.values()) < 2 * (40 + 4 * 5_000_000) + (20 << 20)
    r = subprocess.run([PY, os.path.join(ROOT, "jobs", "query.py"), "--store", uri, "key", "--topic", "refund",
                        "--key", "\u652f\u4ed894"], env=dict(os.environ, **env), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "13306721" in r.stdout, (r.stdout[-2000:], r.stderr[-2000:])
    local = tmp_path / "export"
    r = export(uri, local, env)
    assert r.returncode == 0, r.stderr[-3000:]
    diffs = goldenlib.compare(g, str(local))
    assert diffs == [], diffs[:20]


def test_object_input_identity_is_its_content(s3_env, tmp_path, monkeypatch):
    """An s3:// input is the same input as a local copy of its bytes, under any key (its bytes are
    streamed through the hash once, on the driver); other bytes are another input."""
    from storelib.ingest import identity, inputs
    env, s3 = s3_env
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    data = open(os.path.join(golden_set("small-roll"), "messages.jsonl"), "rb").read()
    local = tmp_path / "local.jsonl"
    local.write_bytes(data)
    s3.put_object(Bucket=BUCKET, Key="in/a.jsonl", Body=data)
    s3.put_object(Bucket=BUCKET, Key="in/dir/renamed.jsonl", Body=data)
    s3.put_object(Bucket=BUCKET, Key="in/other.jsonl", Body=data[:-200])

    def ident(p):
        return identity.input_fingerprint(p, "jsonl", inputs.plan_splits(p, "jsonl", 2))
    want = ident(str(local))
    assert ident(f"s3://{BUCKET}/in/a.jsonl") == want
    assert ident(f"s3://{BUCKET}/in/dir/") == want
    assert ident(f"s3://{BUCKET}/in/other.jsonl") != want
