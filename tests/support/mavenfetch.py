"""Jars from Maven Central for the tests: ``mvn dependency:copy-dependencies`` of a pinned pom into
a directory under ``.cache/``, with the project's own local repository ``.cache/m2`` (no ``~/.m2``).

A stamp in the directory (a digest of the pom, given by the caller) makes a second run fetch
nothing; without it, mvn first tries offline (a cache that holds everything needs no network).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = ["Unavailable", "fetch_pom", "command"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
M2 = os.path.join(ROOT, ".cache", "m2")


class Unavailable(RuntimeError):
    """The jars cannot be had (no mvn, no network to Maven Central): tests skip with this text."""


def command(main: Callable[[list[str]], int]) -> NoReturn:
    """A fetcher's command line: exits with ``main(sys.argv)``, or 1 after the reason where the
    jars are unavailable."""
    try:
        sys.exit(main(sys.argv))
    except Unavailable as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


def fetch_pom(pom: str, out: str, want: str, what: str, mvn_args: tuple = ("-q",)) -> str:
    """``out`` holding the pom's resolved jars; ``want`` is the stamp a complete ``out`` carries."""
    stamp = os.path.join(out, ".stamp")
    if os.path.isfile(stamp) and open(stamp).read() == want:
        return out
    if shutil.which("mvn") is None:
        raise Unavailable(f"mvn is not installed: cannot fetch {what}'s jars from Maven Central")
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    base = ["mvn", "-B", *mvn_args, "-f", pom, f"-Dmaven.repo.local={M2}", "dependency:copy-dependencies",
            f"-DoutputDirectory={tmp}"]
    r = subprocess.run(base[:1] + ["-o"] + base[1:], capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        r = subprocess.run(base, capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise Unavailable(f"mvn could not resolve {what} ({os.path.relpath(pom, ROOT)}) from Maven Central:\n"
                          f"{(r.stdout + r.stderr)[-2000:]}")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    with open(stamp, "w") as fh:
        fh.write(want)
    return out
