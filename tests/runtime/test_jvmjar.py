"""The JVM reader's jar (storelib.runtime.jvmjar): the layout comes from storelib.format, the jar
is keyed by what went into it, and it holds the source's classes. No Spark session."""
from __future__ import annotations

import os
import re
import shutil
import zipfile

from storelib.format import commitlog as cl
from storelib.runtime import jvmjar


def test_layout_is_generated_from_the_format_modules():
    text = jvmjar.layout_java()
    consts = dict(re.findall(r"static final int (\w+) = (-?\d+);", text))
    assert consts["MAGIC_V2"] == str(cl.MAGIC_V2) and consts["BLANK_MAGIC"] == str(cl.BLANK_MAGIC)
    assert consts["REL_BODY"] == str(cl.REL_BODY) and consts["POS_BORNHOST"] == str(cl.POS_BORNHOST)
    assert len(consts) == len(jvmjar._INTS) + len(jvmjar._CQ_INTS)
    # every Layout constant the sources use is generated
    used = set()
    for root, _, names in os.walk(jvmjar.SOURCE_DIR):
        for n in names:
            with open(os.path.join(root, n), encoding="utf-8") as fh:
                src = fh.read()
            if "import static org.rocketlake.spark.Layout.*" in src:
                used |= set(re.findall(r"\b([A-Z][A-Z0-9_]{3,})\b", src))
    generated = set(consts) | set(re.findall(r"static final byte(?:\[\])? (\w+)", text))
    assert {u for u in used if u.startswith(("POS_", "REL_", "MAGIC", "HOST_", "FLAG_", "PROPERTY_", "CQ_"))} <= generated


def test_jar_is_built_keyed_and_rebuilt_when_a_source_changes(tmp_path, monkeypatch):
    src = tmp_path / "src"
    shutil.copytree(jvmjar.SOURCE_DIR, src)
    monkeypatch.setattr(jvmjar, "SOURCE_DIR", str(src))
    cache = str(tmp_path / "cache")
    jar = jvmjar.cached_jar(cache)
    assert jar == jvmjar.jar_path(cache) and os.path.exists(jar)
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert {"org/rocketlake/spark/RocketMQSource.class", "org/rocketlake/spark/Layout.class",
            "org/rocketlake/spark/SplitReader.class"} <= names
    assert jvmjar.cached_jar(cache) == jar                     # found, not rebuilt
    reader = src / "org" / "rocketlake" / "spark" / "SplitReader.java"
    reader.write_text(reader.read_text() + "\n// another version\n")
    assert jvmjar.jar_path(cache) != jar


def test_without_a_jdk_there_is_no_jar_and_a_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(jvmjar.shutil, "which", lambda name: None)
    assert jvmjar.cached_jar(str(tmp_path / "cache")) is None
    assert "javac not found" in capsys.readouterr().err
