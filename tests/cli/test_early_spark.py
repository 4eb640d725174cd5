"""Under spark-submit an ingest's SparkContext starts beside its checks (storelib.cli.common.EarlySpark),
and a check that fails still ends the job with its one line and exit 2, before any task.

No JVM: spark-submit is what ``PYSPARK_GATEWAY_PORT`` in the environment says, and the session a
stand-in (``runtime.localrun.LocalSession``) whose start is timed."""
from __future__ import annotations

import os
import threading
import time

from storelib.cli import common as cli
from storelib.cli import ingest as ingest_cli
from storelib.cli import preflight
from storelib.format.paths import PROJECT_ROOT
from storelib.runtime.localrun import LocalSession

SAMPLE = os.path.join(PROJECT_ROOT, "samples", "messages.jsonl")
CHECKS_S = 0.4


class _Session(LocalSession):
    stopped = False

    def stop(self):
        self.stopped = True


def _submitted_job(monkeypatch, check_error: Exception | None = None):
    """A spark-submit'ed ingest whose checks take CHECKS_S: what happened when, on which thread."""
    events: list = []
    session = _Session()
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")

    def start(app, reach=None, sql=True, starting=None):
        events.append(("spark", time.monotonic(), threading.current_thread().name))
        time.sleep(CHECKS_S)              # the JVM's SparkContext
        events.append(("spark up", time.monotonic(), threading.current_thread().name))
        return session

    real = preflight.check_ingest

    def checks(args):
        events.append(("checks", time.monotonic(), threading.current_thread().name))
        time.sleep(CHECKS_S)
        if check_error is not None:
            raise check_error
        out = real(args)
        events.append(("checked", time.monotonic(), threading.current_thread().name))
        return out

    monkeypatch.setattr(cli, "spark_session", start)
    monkeypatch.setattr(preflight, "check_ingest", checks)
    monkeypatch.setattr(cli, "ingest", lambda spark, cfg, args: events.append(("body", spark is session)) or 0)
    return events, session


def test_the_context_starts_beside_the_checks(monkeypatch, tmp_path):
    events, session = _submitted_job(monkeypatch)
    code = ingest_cli.main(["--store", str(tmp_path / "store"), "--input", SAMPLE, "--format", "jsonl"])
    assert code == 0
    when = {e[0]: e for e in events}
    assert when["spark"][2] != threading.current_thread().name        # on its own thread
    assert when["spark"][1] < when["checks"][1] + CHECKS_S / 2           # started as the checks did,
    assert when["checks"][1] < when["spark up"][1]                       # and its start overlapped them
    assert ("body", True) in events and session.stopped


def test_a_failed_check_still_ends_the_job_with_its_line_and_exit_2(monkeypatch, tmp_path, capsys):
    from storelib.errors import InputError
    events, session = _submitted_job(monkeypatch, InputError(["--input x: no such file or directory"]))
    code = ingest_cli.main(["--store", str(tmp_path / "store"), "--input", SAMPLE, "--format", "jsonl"])
    assert code == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert not any(e[0] == "body" for e in events) and not session.stopped
    assert not os.path.exists(tmp_path / "store")


def test_the_rocketlake_command_starts_no_spark_before_its_checks(monkeypatch, tmp_path):
    """Not under spark-submit: nothing starts early (a bad argument never starts a JVM)."""
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert cli.start_early("ingest", {}, sql=False) is None
