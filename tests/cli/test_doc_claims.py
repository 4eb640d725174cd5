"""What README.md and docs/OPERATIONS.md say a command does, where no other test holds it: each
option a lookup takes changes its answer, and one it does not take is refused (exit 2, one line),
never silently ignored.

Commands run in this process through ``storelib.cli.main.main`` (``rl`` of test_first_hour: small
stores never start a JVM).
"""
from __future__ import annotations

import json
import os

import pytest

from support.opshelp import tree_digest
from test_first_hour import one_line_error, rl
from test_second_hour import _small_store, _write_jsonl

MSG_ID = "0A00000200002A9F0000000000000000"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Three messages of topic t, key k, at one store time (the key lookup pages over them)."""
    return _small_store(tmp_path_factory.mktemp("claims"), 3)


@pytest.mark.parametrize("argv, named", [
    (("key", "--topic", "t", "--key", "k", "--max-num", "1"), "--max-num"),
    (("key", "--topic", "t", "--key", "k", "--rocketmq-compat", "--after", "1:0"), "--after"),
    (("unique-key", "--topic", "t", "--key", "k", "--rocketmq-compat", "--limit", "1"), "--limit"),
    (("offset", "--topic", "t", "--queue", "0", "--offset", "0", "--limit", "1"), "--count"),
    (("id", MSG_ID, "--after", "1:0"), "--after"),
    (("time", "--topic", "t", "--queue", "0", "--timestamp", "0", "--limit", "1"), "--limit"),
    (("range", "--begin", "0", "--end", "2030-01-01", "--rocketmq-compat"), "--rocketmq-compat"),
])
def test_an_option_the_lookup_does_not_take_is_refused(store, argv, named):
    code, out, err = rl("query", "--store", store, *argv)
    assert code == 2 and out == "" and named in one_line_error(err), (argv, err)


def test_the_options_a_lookup_takes_change_its_answer(store):
    code, out, err = rl("query", "--store", store, "key", "--topic", "t", "--key", "k")
    assert code == 0 and len(out.splitlines()) == 3, err
    code, out, err = rl("query", "--store", store, "key", "--topic", "t", "--key", "k", "--rocketmq-compat",
                        "--max-num", "2")
    assert code == 0 and len(out.splitlines()) == 2, err
    code, out, err = rl("query", "--store", store, "key", "--topic", "t", "--key", "k", "--limit", "2")
    assert code == 0 and len(out.splitlines()) == 2
    cursor = err.split("rerun with --after ")[1].split()[0]
    code, out2, err = rl("query", "--store", store, "key", "--topic", "t", "--key", "k", "--limit", "2",
                         "--after", cursor)
    assert code == 0 and len(out2.splitlines()) == 1 and "more results" not in err
    offsets = [json.loads(x)["commitlog_offset"] for x in out.splitlines() + out2.splitlines()]
    assert offsets == sorted(set(offsets))


def test_a_file_of_queries_takes_no_command(store, tmp_path):
    queries = _write_jsonl(tmp_path / "q.jsonl", [{"qid": 1, "type": "getMinPhyOffset"}])
    code, out, err = rl("query", "--store", store, "--queries", queries, "--output", tmp_path / "a.jsonl",
                        "key", "--topic", "t", "--key", "k")
    assert code == 2 and out == "" and "--queries" in one_line_error(err)
    assert not (tmp_path / "a.jsonl").exists()


def test_every_command_a_help_text_shows_exists():
    """Each `rocketlake COMMAND --option` / `[...]` a --help shows names a command the console script has."""
    import re
    from storelib.cli.main import COMMANDS
    shown = set()
    for cmd in ("", *COMMANDS):
        code, out, err = rl(*([cmd] if cmd else []), "--help")
        assert code in (0, 2), (cmd, err)
        shown |= set(re.findall(r"rocketlake ([a-z_][\w-]*)(?= --| \[|`)", out + err))
    assert shown - set(COMMANDS) == set() and len(shown) >= 8, shown


def test_every_option_of_every_command_says_what_it_does(monkeypatch):
    """`rocketlake COMMAND --help` describes each option it lists (a bare flag reads as undocumented)."""
    import argparse
    from storelib.cli.main import COMMANDS
    parsers = []

    def capture(self, args=None, namespace=None):
        parsers.append(self)
        raise SystemExit(0)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    for cmd in COMMANDS:
        n = len(parsers)
        rl(cmd, "--store", "nowhere")
        assert len(parsers) > n, cmd
    bare = []
    while parsers:
        p = parsers.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                parsers.extend(a.choices.values())
            elif a.option_strings and a.help is None:
                bare.append(f"{p.prog} {a.option_strings[0]}")
    assert bare == []


def test_a_negative_vacuum_retention_is_refused_before_any_work(tmp_path):
    """Delta's vacuum refuses it, and housekeeping never fails an expiry: it would exit 0 with the
    vacuum skipped, said only in the JSON summary."""
    store = _small_store(tmp_path)
    log = tmp_path / "store" / "_rocketlake" / "checkpoints" / "_delta_log"
    before = sorted(p.name for p in log.iterdir())
    code, out, err = rl("expire", "--store", store, "--reserved-hours", "1000000", "--vacuum-retention-hours", "-1",
                        "--json-summary", tmp_path / "s.json")
    assert code == 2 and out == "" and "--vacuum-retention-hours" in err and "Traceback" not in err
    assert sorted(p.name for p in log.iterdir()) == before and not (tmp_path / "s.json").exists()
    code, out, err = rl("expire", "--store", store, "--reserved-hours", "1000000", "--vacuum-retention-hours", "0",
                        "--json-summary", tmp_path / "s.json")
    assert code == 0, err
    kept = json.load(open(tmp_path / "s.json"))["housekeeping"]
    assert all(isinstance(kept[t]["vacuumed_files"], int) for t in ("manifest", "checkpoints")), kept


@pytest.mark.parametrize("host", [None, "127.0.0.2"])
def test_the_ui_listens_on_this_machine_unless_host_says_otherwise(store, host):
    """README: `rocketlake ui` is bound to 127.0.0.1 unless --host, and says where, read only."""
    import os
    import socket
    import subprocess
    import sys
    from conftest import ROOT
    argv = [sys.executable, "-m", "storelib.cli.main", "ui", "--store", store, "--port", "0"]
    proc = subprocess.Popen(argv + (["--host", host] if host else []), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        line = next((x for x in proc.stderr if x.startswith("rocketlake ui: ")), "")
        bound = host or "127.0.0.1"
        prefix = f"rocketlake ui: {store} at http://{bound}:"
        assert line.startswith(prefix) and line.rstrip().endswith("/ (read only; Ctrl-C stops)"), line
        port = int(line[len(prefix):].split("/")[0])
        socket.create_connection((bound, port), timeout=5).close()
        other = "127.0.0.1" if host else "127.0.0.2"
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((other, port), timeout=5).close()
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stderr.close()


def test_inputs_up_to_the_readmes_size_run_in_the_process(tmp_path):
    """README: without --master, local inputs up to 32 MB are ingested in the `rocketlake` process
    (--local auto), larger ones (a file or a directory's files together) start Spark."""
    import argparse
    import os
    import re
    from conftest import ROOT
    from storelib.cli.preflight import LOCAL_INPUT_BYTES, small_local_input
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert int(re.search(r"small local inputs \(up to (\d+) MB\)", readme).group(1)) << 20 == LOCAL_INPUT_BYTES

    def sparse(path, size):
        with open(path, "wb") as fh:
            fh.truncate(size)
        return str(path)

    def here(inp, fmt="jsonl", store=str(tmp_path / "store")):
        return small_local_input(argparse.Namespace(format=fmt, input=inp, store=store))
    assert here(sparse(tmp_path / "at.jsonl", LOCAL_INPUT_BYTES))
    assert not here(sparse(tmp_path / "over.jsonl", LOCAL_INPUT_BYTES + 1))
    assert here(str(tmp_path / "at.jsonl"), "parquet")
    assert not here(str(tmp_path / "at.jsonl"), "delta")
    assert not here(str(tmp_path / "at.jsonl"), store="s3://bucket/store")
    d = tmp_path / "dir"
    d.mkdir()
    sparse(d / "a.jsonl", LOCAL_INPUT_BYTES // 2)
    sparse(d / "b.jsonl", LOCAL_INPUT_BYTES // 2)
    assert here(str(d))
    sparse(d / "c.jsonl", 1)
    assert not here(str(d))


BAD_NUMBERS = [
    (("ingest", "--store", "{new}", "--input", "{input}", "--partitions", "-3"), "--partitions",
     "must be an integer, 0 or more (got '-3')"),
    (("ingest", "--store", "{new}", "--input", "{input}", "--partitions", "many"), "--partitions",
     "must be an integer, 0 or more (got 'many')"),
    (("verify", "--store", "{store}", "--threads", "0"), "--threads", "must be a positive integer (got '0')"),
    (("repair", "--store", "{store}", "--apply", "--threads", "-2"), "--threads",
     "must be a positive integer (got '-2')"),
    (("mirror", "--from", "{broker}", "--store", "{new}", "--max-batch-mb", "0"), "--max-batch-mb",
     "must be a positive integer (got '0')"),
    (("mirror", "--from", "{broker}", "--store", "{new}", "--every", "0"), "--every",
     "must be a positive number of seconds (got '0')"),
    (("mirror", "--from", "{broker}", "--store", "{new}", "--every", "nan"), "--every",
     "must be a positive number of seconds (got 'nan')"),
    (("mirror", "--from", "{broker}", "--store", "{new}", "--every", "inf"), "--every",
     "must be a positive number of seconds (got 'inf')"),
    (("query", "--store", "{store}", "key", "--topic", "t", "--key", "k", "--limit", "0"), "--limit",
     "must be a positive integer (got '0')"),
    (("query", "--store", "{store}", "key", "--topic", "t", "--key", "k", "--rocketmq-compat", "--max-num", "-1"),
     "--max-num", "must be a positive integer (got '-1')"),
    (("query", "--store", "{store}", "offset", "--topic", "t", "--queue", "0", "--offset", "0", "--count", "0"),
     "--count", "must be a positive integer (got '0')"),
]


@pytest.mark.parametrize("argv, option, says", BAD_NUMBERS, ids=[f"{a[0]} {o} {a[-1]}" for a, o, _ in BAD_NUMBERS])
def test_a_bad_number_is_refused_by_the_parser_and_nothing_is_written(store, tmp_path, argv, option, says):
    """A numeric option out of its range (a negative --partitions, --threads 0, --every nan: a
    mirror that would never wait) is refused in argparse's words, exit 2, naming the option and
    what it takes, before anything is read or written (a --every nan mirror used to run forever)."""
    new, broker = tmp_path / "new", tmp_path / "broker"
    broker.mkdir()
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"topic": "t", "body": "b"}])
    before = sorted(os.listdir(store)), sorted(os.listdir(broker))
    code, out, err = rl(*[a.format(new=new, input=inp, store=store, broker=broker) for a in argv])
    last = err.strip().splitlines()[-1]
    assert code == 2 and out == "" and last.endswith(f"error: argument {option}: {says}"), err
    assert not new.exists() and (sorted(os.listdir(store)), sorted(os.listdir(broker))) == before


def test_every_make_target_the_docs_name_exists():
    import glob
    import os
    import re
    from conftest import ROOT
    targets = set(re.findall(r"^([a-z0-9-]+):", open(os.path.join(ROOT, "Makefile"), encoding="utf-8").read(), re.M))
    named = {}
    for doc in [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "*.md"))]:
        text = open(doc, encoding="utf-8").read()
        for t in re.findall(r"(?:`|^|\$ )make ([a-z0-9-]+)", text, re.M):
            named.setdefault(t, os.path.basename(doc))
    assert {"demo", "test", "check", "mirror", "long"} <= set(named)
    assert {t: d for t, d in named.items() if t not in targets} == {}


@pytest.mark.timeout(60, method="thread")
def test_a_store_on_gs_is_refused_before_anything_there_is_read(tmp_path, monkeypatch):
    """docs/CLUSTERS.md: gs:// is an input only; a store there is refused (exit 2), before the
    ingest reads the store (an unreachable GCS would hang it first)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")      # nothing listens: nothing leaves
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "none")
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"topic": "t", "body": "b"}])
    code, out, err = rl("ingest", "--store", "gs://bucket/store", "--input", inp)
    line = one_line_error(err)
    assert code == 2 and out == "" and "gs://" in line and "input only" in line, err


def test_export_no_fsync_calls_no_fsync_and_writes_the_same_bytes(store, tmp_path, monkeypatch):
    """`export --no-fsync` ("do not fsync the exported files"): not one fsync (of a file or a
    directory) where the default export makes them, and the same files, byte for byte. Counted in
    this process (os.fsync, os.fdatasync) and, with strace, as system calls of a child process."""
    import shutil
    import subprocess
    import sys
    from conftest import ROOT
    calls = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda fd, _real=real, _name=name: (calls.append(_name), _real(fd))[1])
    target = tmp_path / "broker"
    trees = {}
    for flag in ((), ("--no-fsync",)):
        calls.clear()
        code, _out, err = rl("export", "--store", store, "--to", target, *flag)
        assert code == 0, err
        trees[flag], trees[flag, "calls"] = tree_digest(target), len(calls)
        shutil.rmtree(target)
    assert trees[()] == trees[("--no-fsync",)] and len(trees[()]) > 5
    assert trees[(), "calls"] > len(trees[()]) and trees[("--no-fsync",), "calls"] == 0
    strace = shutil.which("strace")
    if strace is None:
        return
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for flag, some in (((), True), (("--no-fsync",), False)):
        log = tmp_path / "strace.txt"
        r = subprocess.run([strace, "-f", "-qq", "-o", str(log), "-e", "trace=fsync,fdatasync,syncfs,sync,sync_file_range",
                            sys.executable, "-m", "storelib.cli.main", "export", "--store", store, "--to", str(target),
                            *flag], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        synced = [x for x in log.read_text().splitlines() if "sync" in x]
        assert bool(synced) == some and tree_digest(target) == trees[()], (flag, synced[:5])
        shutil.rmtree(target)


def _java_queue(value: str, queues: int) -> int:
    """RocketMQ's SelectMessageQueueByHash: abs(value.hashCode() % queues), Java's String hash (an
    ASCII value: one UTF-16 unit per character) and remainder (the dividend's sign)."""
    h = 0
    for c in value:
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return abs(h) % queues


def test_ingest_queue_by_places_each_message_by_its_sharding_key(tmp_path):
    """docs/DESIGN.md: `ingest --queue-by NAME` puts a row without queue_id in queue
    abs(javaHash(value) % writeQueueNums) of its property NAME (a topic not in topics.json: 4
    queues), where without it the k-th message of the topic goes to queue k % 4; a row without the
    property is refused, nothing written."""
    orders = [f"order-{i % 7}" for i in range(28)]
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"topic": "qb", "body": f"m{i}", "properties": {"ORDER_ID": o}}
                                               for i, o in enumerate(orders)])

    def queues(*extra):
        store = tmp_path / f"store{len(extra)}"
        code, _out, err = rl("ingest", "--store", store, "--input", inp, "--quiet", *extra)
        assert code == 0, err
        code, out, err = rl("query", "--store", store, "range", "--begin", "0", "--end", "2100-01-01", "--topic", "qb")
        assert code == 0, err
        rows = sorted((json.loads(x) for x in out.splitlines()), key=lambda r: r["commitlog_offset"])
        assert [r["properties"]["ORDER_ID"] for r in rows] == orders
        return [r["queue_id"] for r in rows]
    by_key = queues("--queue-by", "ORDER_ID")
    assert by_key == [_java_queue(o, 4) for o in orders] and len(set(by_key)) > 1
    assert queues() == [i % 4 for i in range(len(orders))] != by_key
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"topic": "qb", "body": "m", "properties": {"OTHER": "x"}}])
    code, out, err = rl("ingest", "--store", tmp_path / "bad", "--input", bad, "--queue-by", "ORDER_ID", "--quiet")
    assert code == 2 and out == "" and "--queue-by ORDER_ID" in err and not (tmp_path / "bad").exists(), err
