"""The store browser under a real browser: Debian's Chromium, headless, driven by Selenium.

* ``ui_store``: a store written in several batches (the bundled sample in three, then a batch of
  binary and unicode bodies and properties), small files (conf/demo.properties), in this process;
* ``ui_server(store)``: ``rocketlake ui --store S --port 0`` as a process (ended by the test);
* ``browser``: one headless Chromium (``nice``d) for the module; skipped, saying why, when
  Debian's ``chromium`` / ``chromium-driver`` or pip's ``selenium`` are missing (``make install``
  installs them);
* ``shot(name)``: a screenshot of the page into the test's tmp dir (the artifacts), and into
  ``$ROCKETLAKE_UI_SCREENSHOTS`` too when set (``make ui-screenshots``: docs/ui/).
"""
from __future__ import annotations

import base64
import collections
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # tests/support/ -> the checkout
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

BINARY_BODY = bytes(range(256)) + b"\r\n\x00\xff\xfe"
TEXT_BODY = "订单 4711 ✓ — émoji 🚀\r\nzweite Zeile\ttab \u00a0nbsp \ufeffbom".encode("utf-8")
SPECIAL = [
    {"topic": "orders", "queue_id": 1, "body": BINARY_BODY,
     "properties": [["TAGS", "bin"], ["KEYS", "order-4711 blob-1"], ["UNIQ_KEY", "UK-BINARY-1"]]},
    {"topic": "orders", "queue_id": 2, "body": TEXT_BODY,
     "properties": [["TAGS", "标签"], ["KEYS", "order-4711 订单-4711"], ["UNIQ_KEY", "UK-TEXT-1"],
                    ["note", "valeur é ✓\rretour \ttab"]]},
]


def _special_lines(ts0: int) -> str:
    out = []
    for i, m in enumerate(SPECIAL):
        out.append(json.dumps({"topic": m["topic"], "queue_id": m["queue_id"], "flag": 0, "sys_flag": 0,
                               "born_timestamp": ts0 + i, "store_timestamp": ts0 + 10 + i,
                               "born_host": "10.0.0.7:50123", "store_host": "192.168.0.10:10911",
                               "reconsume_times": 0, "prepared_transaction_offset": 0,
                               "body_b64": base64.b64encode(m["body"]).decode(), "properties": m["properties"]},
                              ensure_ascii=False))
    return "\n".join(out) + "\n"


def ingest(store: str, path: str, batch_id: str) -> dict:
    """One batch, in this process (no Spark), with the demo's small files."""
    from storelib.format.config import load_config
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    return run_ingest(LocalSession(), store, path, "jsonl", load_config(os.path.join(ROOT, "conf", "demo.properties")),
                      batch_id=batch_id, quiet=True)


@pytest.fixture(scope="session")
def ui_store(tmp_path_factory) -> str:
    """A store of four batches: the 2,000-message sample in three, then the special bodies."""
    d = tmp_path_factory.mktemp("ui-store")
    lines = open(os.path.join(ROOT, "samples", "messages.jsonl"), encoding="utf-8").read().splitlines(True)
    store = str(d / "store")
    third = len(lines) // 3
    for i, part in enumerate((lines[:third], lines[third:2 * third], lines[2 * third:])):
        p = d / f"part{i}.jsonl"
        p.write_text("".join(part), encoding="utf-8")
        ingest(store, str(p), f"sample-{i + 1}")
    last_ts = max(json.loads(x)["store_timestamp"] for x in lines)
    p = d / "special.jsonl"
    p.write_text(_special_lines(last_ts + 1000), encoding="utf-8")
    ingest(store, str(p), "special")
    return store


class Server:
    def __init__(self, store: str):
        self.store = store
        self.proc = subprocess.Popen(["nice", "-n", "5", sys.executable, "-m", "storelib.cli.main", "ui", "--store",
                                      store, "--port", "0"], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                                     stderr=subprocess.PIPE, text=True)
        seen = []
        for line in self.proc.stderr:           # the line saying where it listens (after any warning)
            seen.append(line)
            if line.startswith("rocketlake ui: ") and " at http" in line:
                break
        else:
            self.stop()
            raise AssertionError(f"rocketlake ui did not start: {''.join(seen)[-3000:]}")
        self.log = collections.deque(maxlen=200)     # its request log, read on so the pipe never fills
        self.reader = threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True)
        self.reader.start()
        self.url = line.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "reader", None) is not None:
            self.reader.join(10)
        self.proc.stderr.close()


@pytest.fixture
def ui_server():
    servers = []

    def start(store: str) -> Server:
        s = Server(store)
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    missing = [what for what, ok in (("Debian's chromium", os.path.exists(CHROMIUM)),
                                     ("Debian's chromium-driver", os.path.exists(CHROMEDRIVER))) if not ok]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("pip's selenium (requirements.txt)")
    if missing:
        pytest.skip(f"{' and '.join(missing)} missing: `make install` installs them")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000",
              "--disable-extensions", "--no-first-run", "--disable-background-networking", "--lang=en-US"):
        opts.add_argument(a)
    os.environ.setdefault("SE_OFFLINE", "true")      # Selenium Manager never downloads a browser or driver
    niced = tmp_path_factory.mktemp("chromedriver") / "chromedriver"      # the browser runs niced too
    niced.write_text(f'#!/bin/sh\nexec nice -n 5 {CHROMEDRIVER} "$@"\n')
    niced.chmod(0o755)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=str(niced)))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture
def shot(browser, tmp_path):
    def take(name: str) -> str:
        path = str(tmp_path / f"{name}.png")
        browser.save_screenshot(path)
        docs = os.environ.get("ROCKETLAKE_UI_SCREENSHOTS")
        if docs:
            os.makedirs(docs, exist_ok=True)
            shutil.copy(path, os.path.join(docs, f"{name}.png"))
        return path
    return take


def run_cli(module: str, *argv) -> tuple[int, str, str]:
    """``rocketlake query|inspect|verify ARGS`` (``ui.command``: ``rocketlake ui``) in this process:
    (exit status, stdout, stderr)."""
    import importlib
    mod = importlib.import_module(f"storelib.{module}" if "." in module else f"storelib.cli.{module}")
    if module == "query":
        argv = ("--local", "always") + argv
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = mod.main(list(argv))
    return int(code or 0), out.getvalue(), err.getvalue()
