"""storelib.runtime.sparkenv.quiet_jvm_boot: the in-process JVM's stderr reaches this process's
stderr without the boot noise, every line of it the JVM wrote before the command ended, also when
the command ends through ``exit_now`` (which does not wait for the relay's daemon thread). The JVM
is stood in for by a child process given the same ``popen_kwargs`` pyspark gives it."""
from __future__ import annotations

import os
import subprocess
import sys

from storelib.format.paths import PROJECT_ROOT

SCRIPT = r'''
import subprocess, sys
from storelib.runtime import sparkenv
from storelib.runtime.fastexit import exit_now
try:
    from pyspark.core import context as ctx_mod
except ImportError:
    from pyspark import context as ctx_mod

def fake_launch(conf=None, popen_kwargs=None):
    # as the JVM: prints its boot warning, then many lines, the last one without a newline, and
    # lives on until its stdin ends (the JVM's gateway does, when its Python process is gone)
    child = ("import os, sys; os.write(2, b'WARNING: Using incubator modules: jdk.incubator.vector\\n'); "
             "[os.write(2, b'jvm line %d\\n' % i) for i in range(4000)]; os.write(2, b'last words'); "
             "print('written', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, **popen_kwargs)
    proc.stdout.readline()            # every line is in the pipe; the relay may not have read it yet
    return proc

ctx_mod.launch_gateway = fake_launch
sparkenv.quiet_jvm_boot()
ctx_mod.launch_gateway(None, {"stdin": subprocess.PIPE})
if sys.argv[1] == "exit_now":
    exit_now(0)
'''


def _run(how: str):
    env = dict(os.environ, PYTHONPATH=PROJECT_ROOT)
    return subprocess.run([sys.executable, "-c", SCRIPT, how], env=env, capture_output=True, timeout=120)


def test_every_line_the_jvm_wrote_reaches_stderr_at_exit_and_the_boot_noise_does_not():
    for how in ("exit_now", "interpreter"):
        out = _run(how)
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stderr.decode().splitlines()
        assert lines == [f"jvm line {i}" for i in range(4000)] + ["last words"], (how, lines[:3], lines[-3:])
