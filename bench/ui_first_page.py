"""Time to first page of ``rocketlake ui`` on a store (docs/PERFORMANCE.md-style figures):

    python bench/ui_first_page.py STORE [--browser]

Starts ``rocketlake ui --store STORE --port 0`` as a fresh process and prints one JSON line:
``listening_s`` (process start to the socket listening: imports, the store check),
``first_page_s`` (process start to the Batches page's HTML received), then each page's
server time (``pages``: one GET each, in order). ``--browser``: also the time for headless
Chromium (Debian's) to load the Batches page with its plot drawn (``browser_first_page_s``,
from the browser's start excluded). The server is ended before the script exits.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ("/", "/topics", "/segments", "/health", "/queue?topic={topic}&queue=0",
         "/find?mode=key&topic={topic}&key={key}&limit=50")


def get(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as r:
        n = len(r.read())
    return time.perf_counter() - t0, n


def browser_load(url: str) -> float:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import WebDriverWait
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        opts.add_argument(a)
    d = webdriver.Chrome(options=opts, service=Service("/usr/bin/chromedriver"))
    try:
        t0 = time.perf_counter()
        d.get(url)
        WebDriverWait(d, 600).until(lambda x: x.execute_script(
            "const t = document.getElementById('timeline'); return t && t.dataset.ready === '1'"))
        return time.perf_counter() - t0
    finally:
        d.quit()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("store")
    ap.add_argument("--topic", default="topic-0")
    ap.add_argument("--key", default="key-1")
    ap.add_argument("--browser", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "storelib.cli.main", "ui", "--store", a.store, "--port", "0"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        listening = time.perf_counter() - t0
        url = line.split(" at ", 1)[1].split(" ", 1)[0].rstrip("/")
        first, _ = get(url + "/")
        out = {"store": a.store, "listening_s": round(listening, 3), "first_page_s": round(listening + first, 3),
               "pages": {}}
        for p in PAGES:
            p = p.format(topic=a.topic, key=a.key)
            s, n = get(url + p)
            out["pages"][p] = {"s": round(s, 3), "bytes": n}
        if a.browser:
            out["browser_first_page_s"] = round(browser_load(url + "/"), 3)
        print(json.dumps(out))
    finally:
        proc.terminate()
        proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
