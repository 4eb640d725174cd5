"""docs/CLUSTERS.md: ``gs://`` is an input only; a store there is refused (exit 2). Every command and
API that writes a store refuses a ``gs://`` target at once, with ingest's line, before it reads
anything there or of its source, before GCS is even asked; the commands that only
read (verify, inspect, query, export from gs://, expire --dry-run, repair's dry run, ingest of a
gs:// input) go to GCS, and end with an error when it does not answer within
``ROCKETLAKE_GCS_TIMEOUT`` seconds (storelib.io.gcsreach). A command blocked in GCS's client (a GCS
that answered once, then stopped) ends promptly on SIGTERM (storelib.runtime.stuck).

GCS is played by a socket that accepts and never answers (``STORAGE_EMULATOR_HOST``): a command
that reaches it hangs there, and the socket counts it. Each command runs as its own process under a
timeout, so a hang fails the test instead of hanging it.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from test_first_hour import one_line_error, rl
from test_second_hour import _small_store, _write_jsonl

TIMEOUT = 60
GS = "gs://b/s"


def _refusal(uri: str) -> str:
    """The line ingest ends with for a store on ``uri`` (gs://)."""
    from storelib.cli.failures import CHECK, line
    from storelib.io.condput import refuse_gs_store
    try:
        refuse_gs_store(uri)
    except Exception as e:  # noqa: BLE001 - the refusal is what is looked at
        return line(e, CHECK)[1]
    raise AssertionError(f"{uri} was not refused")


class SilentGcs:
    """A listening socket that accepts connections and answers none; ``reached`` counts them.
    ``answer_probe``: it answers the one request of storelib.io.gcsreach (the bucket's metadata) or
    storelib.io.s3reach (``HEAD /<bucket>``) and no other (``held`` counts those): the store
    reachable, then silent."""

    def __init__(self, answer_probe: bool = False):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list = []
        self.held: list = []
        self.answer_probe = answer_probe
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.answer_probe:
                threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn) -> None:
        head = b""
        try:
            while b"\r\n\r\n" not in head:
                got = conn.recv(4096)
                if not got:
                    return
                head += got
        except OSError:
            return
        request = head.split(b"\r\n", 1)[0]
        if b"?fields=name " in request or re.fullmatch(rb"HEAD /[^/?]+ HTTP/1\.1", request):
            body = b'{"name": "b"}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n%s" % (len(body), body))
            conn.close()
        else:
            self.held.append(conn)

    @property
    def reached(self) -> int:
        return len(self.conns)

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture(scope="module")
def gcs():
    g = SilentGcs()
    yield g
    g.close()


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """(a rocketlake store, a broker's directory exported from it), both local."""
    d = tmp_path_factory.mktemp("gs-writers")
    store = _small_store(d, 3)
    broker = str(d / "broker")
    code, _out, err = rl("export", "--store", store, "--to", broker)
    assert code == 0, err
    return store, broker


def _start(gcs: SilentGcs, *argv, **env_vars) -> subprocess.Popen:
    """``rocketlake ARGV`` as a process, with GCS at ``gcs`` (and ``env_vars`` set)."""
    env = dict(os.environ, STORAGE_EMULATOR_HOST=gcs.url, GOOGLE_CLOUD_PROJECT="none",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env_vars)
    return subprocess.Popen([sys.executable, "-m", "storelib.cli.main", *map(str, argv)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(gcs: SilentGcs, *argv, **env_vars) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of ``rocketlake ARGV``; status None when it was still running
    after TIMEOUT seconds (then killed: SIGKILL, as one blocked on the network ignores SIGTERM)."""
    p = _start(gcs, *argv, **env_vars)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return None, out, err


WRITERS = {
    "expire": ("expire", "--store", GS, "--reserved-hours", "1"),
    "expire a topic": ("expire", "--store", GS, "--topic", "t", "--reserved-hours", "1"),
    "repair --apply": ("repair", "--store", GS, "--apply"),
    "mirror --once": ("mirror", "--from", "{broker}", "--store", GS, "--once"),
    "mirror --every": ("mirror", "--from", "{broker}", "--store", GS, "--every", "5"),
    "export --to": ("export", "--store", "{store}", "--to", GS),
    "export gs to gs": ("export", "--store", "gs://b/other", "--to", GS),
    "ingest --from-store (adopt)": ("ingest", "--store", GS, "--from-store", "{broker}"),
    "ingest --input": ("ingest", "--store", GS, "--input", "{input}"),
    "demo": ("demo", "--store", GS),
}


@pytest.mark.parametrize("name", list(WRITERS))
def test_a_writer_refuses_a_gs_target_at_once(gcs, dirs, tmp_path, name):
    store, broker = dirs
    inp = _write_jsonl(tmp_path / "in.jsonl", [{"topic": "t", "body": "b"}])
    argv = [a.format(store=store, broker=broker, input=inp) for a in WRITERS[name]]
    before = gcs.reached
    t0 = time.monotonic()
    code, out, err = _run(gcs, *argv)
    assert code is not None, f"{name}: still running after {TIMEOUT}s (it went to GCS): {err[-2000:]}"
    assert gcs.reached == before, f"{name}: connected to GCS before refusing"
    assert code == 2 and out == "", (name, code, out, err[-2000:])
    assert one_line_error(err) == _refusal(GS), name
    assert time.monotonic() - t0 < TIMEOUT


GS_TIMEOUT = "2"          # ROCKETLAKE_GCS_TIMEOUT of these runs (seconds to connect, as many to answer)
BOUND = 25                # what a reader may take then: its start and imports, and those 2 + 2 seconds
PROMPT = 15               # what a SIGTERM'd command may take to end: storelib.runtime.stuck.GRACE (5 s) and some
# The commands that only read a gs:// store or input: (argv, exit status). The status is the one an
# S3 endpoint that never answers ends them with (its client's OSError, in the command's voice).
READERS = {
    "verify": (("verify", "--store", GS), 1),
    "inspect stats": (("inspect", "--store", GS, "stats"), 1),
    "inspect verify": (("inspect", "--store", GS, "verify"), 1),
    "query": (("query", "--store", GS, "key", "--topic", "t", "--key", "k"), 1),
    "export from gs": (("export", "--store", GS, "--to", "{target}"), 1),
    "expire --dry-run": (("expire", "--store", GS, "--reserved-hours", "1", "--dry-run"), 1),
    "repair (dry run)": (("repair", "--store", GS), 2),
    "ingest --input gs://": (("ingest", "--store", "{target}", "--input", "gs://b/in/messages.jsonl"), 1),
}


@pytest.mark.parametrize("name", list(READERS))
def test_a_reader_of_an_unreachable_gcs_ends_with_its_error(gcs, tmp_path, name):
    """It goes to GCS, which does not answer: the error names GCS's endpoint and the timeout, within
    the bound, and nothing was written (the local target of export and ingest is not even made)."""
    argv, status = READERS[name]
    target = tmp_path / "target"
    before = gcs.reached
    t0 = time.monotonic()
    code, out, err = _run(gcs, *[a.format(target=target) for a in argv], ROCKETLAKE_GCS_TIMEOUT=GS_TIMEOUT)
    took = time.monotonic() - t0
    assert code is not None, f"{name}: still running after {TIMEOUT}s (blocked on GCS): {err[-2000:]}"
    assert gcs.reached > before, (name, err[-2000:])
    last = err.strip().splitlines()[-1]
    assert (code, out) == (status, ""), (name, code, out, err[-2000:])
    assert last.startswith("error: ") and "gs://b/" in last and gcs.url in last, last
    assert f"did not answer within {GS_TIMEOUT} s" in last and "ROCKETLAKE_GCS_TIMEOUT" in last, last
    one_line_error(err)
    assert took < BOUND, (name, took)
    assert not target.exists(), name


def _sigterm_when_blocked(p: subprocess.Popen, blocked) -> tuple[int | None, str, float]:
    """SIGTERM ``p`` once ``blocked()`` (it waits on a server): (exit status or None if it did not
    end within PROMPT seconds, stderr, seconds it took to end)."""
    try:
        deadline = time.monotonic() + TIMEOUT
        while not blocked() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert blocked() and p.poll() is None, (p.poll(), p.poll() is not None and p.communicate()[1][-2000:])
        time.sleep(0.5)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        try:
            _out, err = p.communicate(timeout=PROMPT)
            return p.returncode, err, time.monotonic() - t0
        except subprocess.TimeoutExpired:
            return None, "", time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()


@pytest.mark.parametrize("name", list(READERS))
def test_sigterm_ends_a_reader_blocked_in_gcs_promptly(tmp_path, name):
    """GCS answers the reachability request, then nothing: the command blocks inside pyarrow's GCS
    client (native code, where its SIGTERM handler cannot run). SIGTERM ends it within PROMPT
    seconds: exit 143, the interrupted line last."""
    argv, _status = READERS[name]
    g = SilentGcs(answer_probe=True)
    try:
        p = _start(g, *[a.format(target=tmp_path / "target") for a in argv], ROCKETLAKE_GCS_TIMEOUT=GS_TIMEOUT)
        code, err, took = _sigterm_when_blocked(p, lambda: len(g.held) > 0)
    finally:
        g.close()
    assert code == 143, (name, code, took, err[-2000:])
    assert err.strip().splitlines()[-1].startswith("interrupted (SIGTERM): "), err[-2000:]


def test_sigterm_ends_a_reader_blocked_on_s3_promptly(tmp_path):
    """The same for an S3 endpoint that answers the reachability request (storelib.io.s3reach) and
    then nothing (pyarrow's S3 client waits its request timeout, three times, before the handler
    could run)."""
    g = SilentGcs(answer_probe=True)
    try:
        env = dict(os.environ, AWS_ENDPOINT_URL=g.url, AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s",
                   AWS_REGION="us-east-1", AWS_CONFIG_FILE="/nonexistent", AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                   PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        p = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "verify", "--store", "s3://b/s"], env=env,
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        code, err, took = _sigterm_when_blocked(p, lambda: len(g.held) > 0)
    finally:
        g.close()
    assert code == 143, (code, took, err[-2000:])
    assert err.strip().splitlines()[-1].startswith("interrupted (SIGTERM): "), err[-2000:]


def _api_calls(store: str, broker: str, tmp) -> dict:
    from storelib.format.config import default_config
    from storelib.ingest import driver, frame, sink
    from storelib.ops import adopt, expire, mirror, repair
    from storelib.table import export
    cfg = default_config()
    return {
        "expire_store": lambda: expire.expire(GS, 1.0),
        "mirror_broker": lambda: mirror.mirror_broker(broker, GS),
        "repair(apply)": lambda: repair.repair(GS, cfg, apply=True),
        "adopt_store": lambda: adopt.adopt(None, GS, broker, cfg),
        "export_store": lambda: export.export_store(store, GS),
        "export_store from gs": lambda: export.export_store("gs://b/other", GS),
        "run_ingest": lambda: driver.run_ingest(None, GS, str(tmp / "none.jsonl"), "jsonl", cfg),
        "ingest_batch": lambda: driver.ingest_batch(None, GS, None, cfg),
        "ingest_dataframe": lambda: frame.ingest_dataframe(None, GS),
        "format rocketlake (write)": lambda: sink.RocketLakeDataSource({"path": GS}).writer(None, False),
        "format rocketlake (writeStream)": lambda: sink.RocketLakeDataSource({"path": GS}).streamWriter(None, False),
    }


API_NAMES = ("expire_store", "mirror_broker", "repair(apply)", "adopt_store", "export_store", "export_store from gs",
             "run_ingest", "ingest_batch", "ingest_dataframe", "format rocketlake (write)",
             "format rocketlake (writeStream)")


@pytest.mark.parametrize("name", API_NAMES)
def test_an_api_that_writes_refuses_a_gs_store_before_anything(gcs, dirs, monkeypatch, tmp_path, name):
    """storelib's writers called as functions (no command line in front of them) refuse the same
    way, before they look at their other arguments (None here) or reach GCS. (On a thread: one that
    hangs is left behind and fails this case only.)"""
    from storelib.errors import UnsafeObjectStore
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "none")
    call = _api_calls(*dirs, tmp_path)[name]
    before = gcs.reached
    ended: list = []

    def run() -> None:
        try:
            call()
            ended.append(None)
        except BaseException as e:  # noqa: BLE001 - looked at below
            ended.append(e)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(TIMEOUT)
    assert ended, f"{name}: still running after {TIMEOUT}s (it went to GCS)"
    assert isinstance(ended[0], UnsafeObjectStore), (name, ended[0])
    assert ended[0].line() == _refusal(GS).removeprefix("error: configuration: ") and gcs.reached == before
