"""Helpers shared by the store-operations tests (inspect, verify, expire, import)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

from support import goldenlib
from conftest import GOLDEN, ROOT, golden_set

from storelib.format.config import load_config

SMALL = goldenlib.SMALL_ROLL_CONFIG
PY = sys.executable
SUBMIT = os.path.join(os.path.dirname(PY), "spark-submit")


def small_config():
    return load_config(None, SMALL)


def small_properties(tmp_path) -> str:
    p = os.path.join(str(tmp_path), "small.properties")
    with open(p, "w") as fh:
        fh.write("".join(f"{k}={v}\n" for k, v in SMALL.items()))
    return p


def restore(set_name: str, listing: str, out: str) -> str:
    """Rebuild a golden set's store (sparse zero tails) from one of its file listings.

    Reads files_after.json too ("store_root": null, stored_as relative to the set dir) and skips
    the sha256 pass (seconds on default-size); the restored_golden fixture checks it."""
    return goldenlib.restore(golden_set(set_name), out, listing, verify=False)


def copy_store(src: str, dst: str) -> str:
    shutil.copytree(src, dst)
    return dst


def load_jsonl(path):
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def golden_answers(set_name: str):
    qs = load_jsonl(os.path.join(GOLDEN, set_name, "queries.jsonl"))
    ans = {a["qid"]: a for a in load_jsonl(os.path.join(GOLDEN, set_name, "answers.jsonl"))}
    return qs, ans


def mismatches(reader, set_name: str) -> list:
    qs, ans = golden_answers(set_name)
    bad = []
    for q in qs:
        got = json.loads(json.dumps(reader.answer(q)))
        if got != ans[q["qid"]]:
            bad.append(q["qid"])
    return bad


def run(script: str, *args, submit: bool = False, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=PY, PYSPARK_DRIVER_PYTHON=PY)
    if submit:
        cmd = [SUBMIT, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.ui.showConsoleProgress=false",
               "--driver-java-options", f"-Dlog4j.configurationFile={ROOT}/conf/log4j2.properties",
               os.path.join(ROOT, "jobs", script), *args]
    else:
        cmd = [PY, os.path.join(ROOT, "jobs", script), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def write_messages(src_jsonl: str, out: str, start: int, n: int) -> str:
    with open(src_jsonl, encoding="utf-8") as fh, open(out, "w", encoding="utf-8") as o:
        for i, line in enumerate(fh):
            if i >= start + n:
                break
            if i >= start:
                o.write(line)
    return out


def tree_digest(store: str) -> dict:
    """Every file of a local store (the Delta tables too) -> sha256 of its bytes."""
    out = {}
    for d, _, fs in os.walk(store):
        for f in fs:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, store)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def edit_row(uri: str, pick, edit) -> dict:
    """``edit(row)`` on the first live manifest row ``pick`` accepts, in place (a local or an
    object store): the manifest table rewritten with every row it holds (as an edit of its
    Parquet file would leave it), the snapshot cache dropped. Returns the row as it was."""
    import pyarrow as pa
    from deltalake import write_deltalake
    from storelib.format import paths
    from storelib.io import storage
    from storelib.table import manifest, tableread
    st = storage.Store(uri)
    live = manifest.load_snapshot(st).files
    dt = manifest.open_table(st, paths.MANIFEST_DIR)
    rows = manifest.read_rows(dt)
    dt = None
    hit = next(r for r in sorted(rows, key=lambda r: r["path"])
               if r["action"] == "add" and live.get(r["path"]) == r and pick(r))
    before = dict(hit)
    edit(hit)
    write_deltalake(tableread.table_uri(st, paths.MANIFEST_DIR), pa.Table.from_pylist(rows, schema=manifest.MANIFEST_SCHEMA),
                    mode="overwrite", storage_options=storage.delta_storage_options(uri))
    for rel in (paths.SNAPSHOT_CACHE, paths.SNAPSHOT_CACHE_DELTA):
        if st.exists(rel):
            st.delete(rel)
    return before
