"""``rocketlake ui`` over a store on an object store (the moto S3 server): two batches written
there without Spark, the pages answered as for a local store, a key lookup and its CSV equal to
the command line's on the same URI, a message's body byte-exact (through the application's own
HTTP server, no browser: the local module drives the pages in Chromium)."""
from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request

import pytest

from support import s3server
from support.longrun import long_test
from support.uibrowser import ROOT, SPECIAL, Server, _special_lines, ingest
from support.uibrowser import browser, shot, ui_server, ui_store  # noqa: F401 - the module's fixtures

pytestmark = [pytest.mark.slow, long_test("an S3 server, writes through it and `rocketlake ui`, ~40 s")]
BUCKET = "rocketlake-ui"


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_the_pages_over_a_store_on_s3(tmp_path, monkeypatch):
    from support.uibrowser import run_cli
    uri = f"s3://{BUCKET}/store"
    with s3server.moto(BUCKET) as (env, _s3):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        sample = tmp_path / "sample.jsonl"
        lines = open(os.path.join(ROOT, "samples", "messages.jsonl"), encoding="utf-8").readlines()[:400]
        sample.write_text("".join(lines), encoding="utf-8")
        ingest(uri, str(sample), "s3-sample")
        special = tmp_path / "special.jsonl"
        special.write_text(_special_lines(1717200009000), encoding="utf-8")
        ingest(uri, str(special), "s3-special")
        s = Server(uri)
        try:
            status, page = get(s.url + "/")
            assert status == 200 and page.count(b'class="batch"') == 2 and b"s3-special" in page
            assert get(s.url + "/topics")[0] == 200 and get(s.url + "/segments")[0] == 200
            want = [json.loads(x) for x in run_cli("query", "--store", uri, "key", "--topic", "orders",
                                                   "--key", "order-4711")[1].splitlines()]
            q = urllib.parse.urlencode({"mode": "key", "topic": "orders", "key": "order-4711"})
            status, page = get(s.url + "/find?" + q)
            assert status == 200
            got = [int(x) for x in re.findall(rb'class="result" data-offset="(\d+)"', page)]
            assert got == [m["commitlog_offset"] for m in want] and len(got) == len(SPECIAL)
            out = str(tmp_path / "cli.csv")
            assert run_cli("query", "--store", uri, "--output", out, "key", "--topic", "orders", "--key", "order-4711")[0] == 0
            assert get(s.url + "/find.csv?" + q) == (200, open(out, "rb").read())
            for m, body in zip(want, (x["body"] for x in SPECIAL)):
                assert get(s.url + f"/message/body?offset={m['commitlog_offset']}") == (200, body)
        finally:
            s.stop()
