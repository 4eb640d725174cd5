"""storelib.runtime.fastexit: a finished command's process ends with its status after its threads,
its atexit handlers and its output, without the interpreter's teardown; the job entry points use it."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

from storelib.format.paths import PROJECT_ROOT

SCRIPT = r'''
import atexit, sys, threading, time
from storelib.runtime.fastexit import exit_now

class Teardown:
    def __del__(self):
        print("teardown ran", flush=True)      # only the interpreter's teardown would print this

keep = Teardown()
atexit.register(lambda: print("atexit ran", flush=True))
threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
sys.stdout.write("unflushed output ")         # no newline: still in the buffer
exit_now(int(sys.argv[1]) if sys.argv[1:] else None)
'''


def _run(*args):
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT)
    return subprocess.run([sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=60)


def test_exit_now_keeps_the_status_threads_atexit_and_output_and_skips_the_teardown():
    out = _run("3")
    assert out.returncode == 3, out.stderr
    assert out.stdout.split("\n")[:3] == ["unflushed output thread finished", "atexit ran", ""]
    assert "teardown ran" not in out.stdout
    assert _run().returncode == 0


def test_every_job_entry_point_ends_with_exit_now():
    for path in sorted(glob.glob(os.path.join(PROJECT_ROOT, "jobs", "*.py"))):
        text = open(path).read()
        assert "exit_now(main())" in text and "sys.exit(main())" not in text, path


def test_a_job_that_fails_still_exits_non_zero():
    """argparse's SystemExit and an uncaught error leave as Python makes them leave."""
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT)
    job = os.path.join(PROJECT_ROOT, "jobs", "verify.py")
    out = subprocess.run([sys.executable, job, "--no-such-option"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and "usage:" in out.stderr
    out = subprocess.run([sys.executable, job, "--store", os.path.join(PROJECT_ROOT, "no-such-store-here")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0


def _quiet_env():
    """The environment a user's shell gives a job: stdout block-buffered (no PYTHONUNBUFFERED)."""
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT)
    env.pop("PYTHONUNBUFFERED", None)
    return env


def test_output_that_cannot_be_flushed_is_a_failure_not_a_success():
    """`rocketlake --version > /dev/full`: the line never reaches the file; the interpreter's own
    exit says so with status 120, and so must the fast exit (a job that failed keeps its status)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "storelib.cli.main", "--version"], env=_quiet_env(),
                             stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
        assert out.returncode == 120, out.stderr
        assert "No space left" in out.stderr
        failed = subprocess.run([sys.executable, "-c", "from storelib.runtime.fastexit import exit_now\n"
                                 "print('summary'); exit_now(3)"], env=_quiet_env(), stdout=full,
                                stderr=subprocess.PIPE, text=True, timeout=60)
        assert failed.returncode == 3, failed.stderr


SIGNALLED_AT_EXIT = r'''
import atexit, os, signal, threading, time
from storelib.cli.common import exit_now, on_signals

on_signals()                                  # a job's handlers: SIGTERM raises errors.Interrupted
atexit.register(lambda: print("atexit ran", flush=True))
threading.Thread(target=time.sleep, args=(1.5,)).start()          # joined by the exit
# SIGTERM as the exit starts to join the threads (threading's own exit hook, on the main thread)
threading._register_atexit(os.kill, os.getpid(), signal.SIGTERM)
exit_now(0)                                   # the job's main returned 0: its work is done
'''


def test_a_signal_while_the_exit_joins_threads_keeps_the_jobs_status():
    """As after ``sys.exit(0)``: the interpreter prints an error its shutdown meets and goes on; the
    job that finished still exits 0, its atexit handlers run (not a traceback and status 1)."""
    out = subprocess.run([sys.executable, "-c", SIGNALLED_AT_EXIT], env=_quiet_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "atexit ran\n"
    assert "Traceback" not in out.stderr and "Interrupted" in out.stderr
