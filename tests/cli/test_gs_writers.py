"""docs/CLUSTERS.md: ``gs://`` is an input only; a store there is refused (exit 2). Every command and
API that writes a store refuses a ``gs://`` target at once, with ingest's line, before it reads
anything there or of its source (an unreachable GCS would hang it first); the commands that only
read (verify, expire --dry-run, repair's dry run) still go to GCS.

GCS is played by a socket that accepts and never answers (``STORAGE_EMULATOR_HOST``): a command
that reaches it hangs there, and the socket counts it. Each command runs as its own process under a
timeout, so a hang fails the test instead of hanging it.
"""
from __future__ import annotations

import os
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
    """A listening socket that accepts connections and answers none; ``reached`` counts them."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

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


def _start(gcs: SilentGcs, *argv) -> subprocess.Popen:
    """``rocketlake ARGV`` as a process, with GCS at ``gcs``."""
    env = dict(os.environ, STORAGE_EMULATOR_HOST=gcs.url, GOOGLE_CLOUD_PROJECT="none",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-m", "storelib.cli.main", *map(str, argv)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _run(gcs: SilentGcs, *argv) -> tuple[int | None, str, str]:
    """(exit status, stdout, stderr) of ``rocketlake ARGV``; status None when it was still running
    after TIMEOUT seconds (then killed: SIGKILL, as one blocked on the network ignores SIGTERM)."""
    p = _start(gcs, *argv)
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


@pytest.mark.parametrize("argv", [("verify", "--store", GS),
                                  ("expire", "--store", GS, "--reserved-hours", "1", "--dry-run"),
                                  ("repair", "--store", GS)])
def test_a_command_that_only_reads_still_goes_to_gcs(gcs, argv):
    """Not refused: it reads the store on gs:// (here it reaches the silent GCS and waits there)."""
    before = gcs.reached
    p = _start(gcs, *argv)
    try:
        deadline = time.monotonic() + TIMEOUT
        while gcs.reached == before and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gcs.reached > before, (argv, p.poll(), p.poll() is not None and p.communicate()[1][-2000:])
    finally:
        p.kill()
        p.communicate()


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
