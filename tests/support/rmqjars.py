#!/usr/bin/env python3
"""RocketMQ's published jars for the test suite, and our Java harness compiled against them.

Every pinned version has its pom, ``tests/rocketmq/pom-<version>.xml``. ``fetch(version)`` runs
``mvn dependency:copy-dependencies`` on it with the local repository ``.cache/m2`` and copies the
resolved jars to ``.cache/jars/rocketmq-<version>/``; a stamp file there (the pom's sha256) makes
a second run fetch nothing. When the stamp is missing but ``.cache/m2`` already holds everything,
mvn runs offline (``-o``) first. ``compile(version, what)`` compiles ``tests/rocketmq/src/<what>``
(plus the line-specific or shared sources) with javac into ``.cache/classes/<what>-<version>/``, again
behind a stamp (the sources' sha256).

    PYTHONPATH=tests python -m support.rmqjars fetch [VERSION ...]      # default: every pinned version
    PYTHONPATH=tests python -m support.rmqjars classpath VERSION WHAT   # fetch + compile, print the classpath

``.cache/`` is git-ignored. Nothing here is needed by ``make check``.
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess

from support.mavenfetch import Unavailable, command, fetch_pom  # Unavailable: what callers catch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.path.join(ROOT, ".cache")
POM_DIR = os.path.join(ROOT, "tests", "rocketmq")
SRC_DIR = os.path.join(POM_DIR, "src")
# The pinned versions: the golden sets' line, the 4.9 line, the newest 5.x store on Maven Central.
V5 = "5.3.3"
V4 = "4.9.8"
NEWEST = "5.5.1"
# The 4.9 line's broker and name server (Maven Central has no 4.9.8 broker or name server).
V4_BROKER = "4.9.7"
VERSIONS = (V5, V4, NEWEST, V4_BROKER)
# rocketlake's rocketmqVersion for a store each writes (docs/FORMAT.md §12)
LINES = {V5: "5", V4: "4.9", NEWEST: "5.5"}


def line(version: str) -> str:
    """The source directory of the version-specific code: v4 for 4.x, v5 for 5.x."""
    return "v4" if version.startswith("4.") else "v5"


def _sha(paths: list[str]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(os.path.relpath(p, ROOT).encode() + b"\0")
        with open(p, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def jar_dir(version: str) -> str:
    return os.path.join(CACHE, "jars", f"rocketmq-{version}")


def fetch(version: str, quiet: bool = True) -> str:
    """The directory holding every jar of the version's classpath, fetched if not there yet."""
    pom = os.path.join(POM_DIR, f"pom-{version}.xml")
    if not os.path.isfile(pom):
        raise ValueError(f"no pinned pom for RocketMQ {version} ({pom})")
    return fetch_pom(pom, jar_dir(version), _sha([pom]), f"RocketMQ {version}", ("-q",) if quiet else ())


def jars(version: str) -> list[str]:
    return sorted(glob.glob(os.path.join(fetch(version), "*.jar")))


def compile(version: str, what: str) -> str:
    """Compile tests/rocketmq/src/<what> (for "main", the reference writer, with src/<v4|v5>, its
    line-specific part; for "broker" and "broker4", the two lines' broker harness, with
    src/brokercommon, the part that uses no RocketMQ API) against the version's jars; the classes
    dir. Other files under src/<what> (META-INF/service/...) are copied beside the classes."""
    dirs = {"main": (what, line(version)), "broker": (what, "brokercommon"),
            "broker4": (what, "brokercommon")}.get(what, (what,))
    files = [p for d in dirs for p in glob.glob(os.path.join(SRC_DIR, d, "**", "*"), recursive=True) if os.path.isfile(p)]
    srcs = [p for p in files if p.endswith(".java")]
    want = _sha(files) + version
    # one directory per source version: checkouts sharing .cache (worktrees) never rebuild, nor
    # delete, the classes a JVM of another one is running on
    out = os.path.join(CACHE, "classes", f"{what}-{version}-{want[:12]}")
    stamp = os.path.join(out, ".stamp")
    if os.path.isfile(stamp) and open(stamp).read() == want:
        return out
    if shutil.which("javac") is None:
        raise Unavailable("javac is not installed (a JDK 17 is needed)")
    cp = os.pathsep.join(jars(version))
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    r = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "--release", "8" if line(version) == "v4" else "11",
                        "-cp", cp, "-d", tmp, *srcs], capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac failed for {what} against RocketMQ {version}:\n{r.stdout}{r.stderr}")
    for d in dirs:
        for p in files:
            if not p.endswith(".java") and p.startswith(os.path.join(SRC_DIR, d) + os.sep):
                dst = os.path.join(tmp, os.path.relpath(p, os.path.join(SRC_DIR, d)))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                shutil.copyfile(p, dst)
    with open(os.path.join(tmp, ".stamp"), "w") as fh:
        fh.write(want)
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return out


def classpath(version: str, what: str) -> str:
    return os.pathsep.join([compile(version, what), *jars(version)])


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "fetch":
        for v in argv[2:] or VERSIONS:
            print(f"RocketMQ {v}: {len(jars(v))} jars in {os.path.relpath(jar_dir(v), ROOT)}")
        return 0
    if len(argv) == 4 and argv[1] == "classpath":
        print(classpath(argv[2], argv[3]))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    command(main)
