"""storelib.runtime.fastexit: a finished command's process ends with its status after its threads,
its atexit handlers and its output, without the interpreter's teardown; the job entry points use it."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

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
