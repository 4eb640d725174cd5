"""The store browser in a real browser (Debian's Chromium, headless, Selenium), against a store
written in four batches: every page answers what the command line answers.

The command line is run in this process through its command modules (``storelib.cli.query`` /
``inspect`` with ``rocketlake``'s ``--local auto``); ``rocketlake ui`` runs as its own process.
Screenshots of every page go to the test's tmp dir (``shot``).
"""
from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import shutil
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest

from support.uibrowser import BINARY_BODY, ROOT, TEXT_BODY, Server, ingest, run_cli
from support.uibrowser import browser, shot, ui_server, ui_store  # noqa: F401 - the module's fixtures

pytestmark = pytest.mark.slow         # starts a server and a browser

By = pytest.importorskip("selenium.webdriver.common.by").By
Select = pytest.importorskip("selenium.webdriver.support.select").Select
WebDriverWait = pytest.importorskip("selenium.webdriver.support.ui").WebDriverWait


# ----------------------------------------------------------------------------- helpers
def cli_rows(module: str, *argv) -> list:
    code, out, err = run_cli(module, *argv)
    assert code == 0, err
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def cli_line(module: str, *argv) -> str:
    """The one line a failing command prints."""
    code, _out, err = run_cli(module, *argv)
    assert code != 0
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def open_page(browser, url: str, plots: tuple = ()) -> None:
    browser.get(url)
    WebDriverWait(browser, 60).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    for p in plots:
        WebDriverWait(browser, 60).until(
            lambda d, p=p: d.execute_script(f"return document.getElementById('{p}').dataset.ready === '1'"))


def text_of(browser, css: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, css).get_property("textContent")


def fetch(browser, url: str) -> tuple[int, bytes]:
    """GET ``url`` from the page (the browser's own fetch): (status, body bytes)."""
    res = browser.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch(arguments[0]).then(r => r.arrayBuffer().then(b => {
            let s = ""; new Uint8Array(b).forEach(c => s += String.fromCharCode(c));
            done([r.status, btoa(s)]); })).catch(e => done([0, ""]));""", url)
    return res[0], base64.b64decode(res[1])


def result_offsets(browser) -> list:
    return [int(r.get_attribute("data-offset")) for r in browser.find_elements(By.CSS_SELECTOR, "#results tr.result")]


def fill(browser, **fields) -> None:
    for name, value in fields.items():
        el = browser.find_element(By.ID, f"f-{name}")
        if el.tag_name == "select":
            Select(el).select_by_visible_text(value)
        else:
            el.clear()
            el.send_keys(str(value))


def tree_state(root: str) -> dict:
    """Every file under ``root``: (size, mtime, sha256)."""
    out = {}
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(open(p, "rb").read()).hexdigest())
    return out


@pytest.fixture(scope="module")
def srv(ui_store):
    """One ``rocketlake ui`` over the four-batch store for the read-only tests, and the store's
    files before it started (the last test checks nothing changed)."""
    before = tree_state(ui_store)
    s = Server(ui_store)
    s.before = before
    yield s
    s.stop()


@pytest.fixture(scope="module")
def spare(ui_store, tmp_path_factory):
    """A copy of the store under its own ``rocketlake ui``, for the tests that spoil a store: the
    quick verify damages a queue file of it, then the error test moves it away (in that order)."""
    copy = str(tmp_path_factory.mktemp("ui-spare") / "store")
    shutil.copytree(ui_store, copy)
    s = Server(copy)
    yield s
    s.stop()


# ----------------------------------------------------------------------------- pages
def test_timeline_shows_every_batch(browser, srv, ui_store, shot):
    open_page(browser, srv.url + "/", plots=("timeline",))
    want = cli_rows("inspect", "--store", ui_store, "--json", "checkpoints")
    assert [b["batch_id"] for b in want] == ["sample-1", "sample-2", "sample-3", "special"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#batches tr.batch")
    got = sorted((int(r.get_attribute("data-seq")), r.get_attribute("data-batch"),
                  int(r.find_element(By.CSS_SELECTOR, ".messages").text),
                  int(r.find_element(By.CSS_SELECTOR, ".bytes").text)) for r in rows)
    assert got == [(b["batch_seq"], b["batch_id"], b["messages"], b["bytes"]) for b in want]
    plotted = browser.execute_script("const d = document.getElementById('timeline').data;"
                                     "return [d[0].y, d[1].y];")
    assert plotted == [[b["messages"] for b in want], [b["bytes"] for b in want]]
    versions = [r.find_element(By.CSS_SELECTOR, ".versions").text for r in rows]
    assert all("manifest v" in v and "checkpoints v" in v for v in versions)
    shot("batches")


def test_topics_and_a_queue_over_time(browser, srv, ui_store, shot):
    open_page(browser, srv.url + "/topics")
    st = json.loads(run_cli("inspect", "--store", ui_store, "--json", "stats")[1])
    rows = browser.find_elements(By.CSS_SELECTOR, "#queues tr.queue")
    got = {(r.get_attribute("data-topic"), int(r.get_attribute("data-queue"))):
           (int(r.find_element(By.CSS_SELECTOR, ".min-offset").text), int(r.find_element(By.CSS_SELECTOR, ".max-offset").text))
           for r in rows}
    assert got == {(q["topic"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in st["queues"]}
    assert len(browser.find_elements(By.CSS_SELECTOR, "#topics tbody tr")) == len(st["topics"])
    shot("topics")
    browser.find_element(By.CSS_SELECTOR, "tr.queue[data-topic='orders'][data-queue='1'] a").click()
    WebDriverWait(browser, 60).until(lambda d: d.execute_script(
        "return document.getElementById('queue-time') && document.getElementById('queue-time').dataset.ready === '1'"))
    q = next(q for q in st["queues"] if (q["topic"], q["queue_id"]) == ("orders", 1))
    ys = browser.execute_script("return document.getElementById('queue-time').data[0].y")
    assert ys[0] == q["min_offset"] and ys[-1] == q["max_offset"] - 1 and ys == sorted(ys)
    per_batch = browser.execute_script("return document.getElementById('queue-batches').data[0].y")
    assert len(per_batch) == 4 and per_batch[-1] == q["max_offset"]
    shot("queue")


def test_a_key_lookup_finds_exactly_what_the_cli_finds(browser, srv, ui_store, shot):
    want = [m["commitlog_offset"] for m in cli_rows("query", "--store", ui_store, "key", "--topic", "orders",
                                                    "--key", "hot-key")]
    assert len(want) > 8
    open_page(browser, srv.url + "/find")
    browser.find_element(By.ID, "mode-key").click()
    fill(browser, topic="orders", key="hot-key", limit=4)
    browser.find_element(By.ID, "find-button").click()
    got = []
    while True:
        WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "summary"))
        got += result_offsets(browser)
        if len(got) == 4:
            shot("find")
        nxt = browser.find_elements(By.ID, "next-page")
        if not nxt:
            break
        nxt[0].click()
    assert got == want
    # a key of the special batch (a KEYS token in Chinese): exactly its two messages
    want = [m["commitlog_offset"] for m in cli_rows("query", "--store", ui_store, "key", "--topic", "orders",
                                                    "--key", "order-4711")]
    open_page(browser, srv.url + "/find?" + urllib.parse.urlencode({"mode": "key", "topic": "orders", "key": "order-4711"}))
    assert result_offsets(browser) == want and len(want) == 2


def test_offset_and_time_range_lookups_agree_with_the_cli(browser, srv, ui_store):
    want = [m["commitlog_offset"] for m in cli_rows("query", "--store", ui_store, "offset", "--topic", "payments",
                                                    "--queue", "2", "--offset", "3", "--count", "7")]
    open_page(browser, srv.url + "/find")
    browser.find_element(By.ID, "mode-offset").click()
    fill(browser, topic="payments", queue=2, offset=3, count=7)
    browser.find_element(By.ID, "find-button").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "summary"))
    assert result_offsets(browser) == want and len(want) == 7
    begin, end = "2024-06-01T00:00:01Z", "2024-06-01T00:00:01.500Z"
    _code, out, err = run_cli("query", "--store", ui_store, "range", "--begin", begin, "--end", end, "--limit", "25")
    want = [json.loads(x)["commitlog_offset"] for x in out.splitlines()]
    cursor = re.search(r"--after (\S+)", err).group(1)
    open_page(browser, srv.url + "/find")
    browser.find_element(By.ID, "mode-range").click()
    fill(browser, begin=begin, end=end, limit=25)
    browser.find_element(By.ID, "find-button").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "summary"))
    assert result_offsets(browser) == want and len(want) == 25
    browser.find_element(By.ID, "next-page").click()
    WebDriverWait(browser, 60).until(lambda d: "after=" in d.current_url and d.find_elements(By.ID, "summary"))
    want = [m["commitlog_offset"] for m in cli_rows("query", "--store", ui_store, "range", "--begin", begin,
                                                    "--end", end, "--limit", "25", "--after", cursor)]
    assert result_offsets(browser) == want and want


@pytest.mark.parametrize("uniq,body,name", [("UK-BINARY-1", BINARY_BODY, "message-binary"),
                                            ("UK-TEXT-1", TEXT_BODY, "message-text")])
def test_a_message_body_and_properties_are_byte_exact(browser, srv, ui_store, shot, uniq, body, name):
    [want] = cli_rows("query", "--store", ui_store, "unique-key", "--topic", "orders", "--key", uniq)
    assert base64.b64decode(want["body"]) == body
    open_page(browser, srv.url + "/find?" + urllib.parse.urlencode({"mode": "unique-key", "topic": "orders", "key": uniq}))
    browser.find_element(By.CSS_SELECTOR, "#results a.open").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "body-hex"))
    hexed = bytes.fromhex("".join(line[10:57] for line in text_of(browser, "#body-hex").splitlines()))
    assert hexed == body
    if body is TEXT_BODY:
        assert text_of(browser, "#body-text") == body.decode("utf-8")
    props = {p.find_element(By.CSS_SELECTOR, ".pname").get_property("textContent"):
             p.find_element(By.CSS_SELECTOR, ".pvalue").get_property("textContent")
             for p in browser.find_elements(By.CSS_SELECTOR, "#properties tr.property")}
    assert props == want["properties"]
    fields = {f.get_attribute("data-field"): f.get_property("textContent")
              for f in browser.find_elements(By.CSS_SELECTOR, "#fields td.field")}
    for k in ("msg_id", "topic", "queue_id", "queue_offset", "born_host", "store_host", "store_timestamp",
              "born_timestamp", "tags", "keys"):
        assert fields[k] == str(want[k]), k
    status, data = fetch(browser, browser.find_element(By.ID, "download").get_attribute("href"))
    assert status == 200 and data == body
    browser.execute_script("document.getElementById('properties').scrollIntoView()")
    shot(name)


def test_the_as_of_view_of_an_earlier_batch_shows_its_queues(browser, srv, ui_store, shot):
    open_page(browser, srv.url + "/topics")
    Select(browser.find_element(By.ID, "asof")).select_by_value("1")
    WebDriverWait(browser, 60).until(lambda d: "batch=1" in d.current_url and d.find_elements(By.ID, "asof-note"))
    st = json.loads(run_cli("inspect", "--store", ui_store, "--as-of-batch", "1", "--json", "stats")[1])
    latest = json.loads(run_cli("inspect", "--store", ui_store, "--json", "stats")[1])
    got = {(r.get_attribute("data-topic"), int(r.get_attribute("data-queue"))):
           int(r.find_element(By.CSS_SELECTOR, ".max-offset").text)
           for r in browser.find_elements(By.CSS_SELECTOR, "#queues tr.queue")}
    want = {(q["topic"], q["queue_id"]): q["max_offset"] for q in st["queues"]}
    assert got == want and want != {(q["topic"], q["queue_id"]): q["max_offset"] for q in latest["queues"]}
    # the batch follows every link: Find by offset as of batch 1 ends where batch 1 ended
    browser.find_element(By.ID, "nav-find").click()
    assert "batch=1" in browser.current_url
    shot("topics-as-of-batch-1")


def test_csv_export_equals_the_cli_csv(browser, srv, ui_store, tmp_path):
    cases = [({"mode": "key", "topic": "orders", "key": "hot-key", "limit": "5", "body_as": "text"},
              ["key", "--topic", "orders", "--key", "hot-key", "--limit", "5", "--body-as", "text"]),
             ({"mode": "unique-key", "topic": "orders", "key": "UK-BINARY-1"},
              ["unique-key", "--topic", "orders", "--key", "UK-BINARY-1"]),
             ({"mode": "range", "begin": "1717200002000", "end": "1717200002300", "topic": "refund"},
              ["range", "--begin", "1717200002000", "--end", "1717200002300", "--topic", "refund"])]
    for params, argv in cases:
        open_page(browser, srv.url + "/find?" + urllib.parse.urlencode(params))
        status, got = fetch(browser, browser.find_element(By.ID, "csv").get_attribute("href"))
        out = str(tmp_path / "cli.csv")
        code, _o, err = run_cli("query", "--store", ui_store, "--output", out, *argv)
        assert code == 0, err
        want = open(out, "rb").read()
        assert status == 200 and got == want and want.count(b"\n") > 1, params


def test_the_quick_verify_of_one_file(browser, srv, spare, shot):
    open_page(browser, srv.url + "/health")
    Select(browser.find_element(By.ID, "verify-file")).select_by_visible_text("commitlog/00000000000000262144")
    browser.find_element(By.ID, "verify-file-button").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "last-verify"))
    assert text_of(browser, "#verify-status") == "ok"
    assert "files=1" in text_of(browser, "#verify-summary")
    shot("health")
    # a damaged queue file of a copy: FAILED, the problem line rocketlake verify prints for it
    rel = "consumequeue/orders/1/00000000000000000000"
    with open(os.path.join(spare.store, rel), "r+b") as fh:
        fh.seek(8)
        fh.write(b"\x7f\xff\xff\xff")            # a unit's size
    code, out, _err = run_cli("verify", "--store", spare.store)
    want = [x for x in out.splitlines() if x.startswith(rel)]
    assert code == 1 and want
    open_page(browser, spare.url + "/health")
    Select(browser.find_element(By.ID, "verify-file")).select_by_visible_text(rel)
    browser.find_element(By.ID, "verify-file-button").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "last-verify"))
    assert text_of(browser, "#verify-status") == "FAILED"
    assert set(want) <= set(text_of(browser, "#verify-problems").splitlines())


def test_errors_are_the_cli_one_line(browser, srv, ui_store, spare, shot):
    # a batch the store does not have
    open_page(browser, srv.url + "/find?" + urllib.parse.urlencode(
        {"mode": "key", "topic": "orders", "key": "x", "batch": "no-such"}))
    assert text_of(browser, "#error") == cli_line("query", "--store", ui_store, "--as-of-batch", "no-such", "key",
                                                  "--topic", "orders", "--key", "x")
    # a path outside the store is refused (the form's file replaced by one leading out)
    open_page(browser, srv.url + "/health")
    browser.execute_script("const s = document.getElementById('verify-file');"
                           "s.options[0].value = '../../../etc/passwd'; s.selectedIndex = 0;")
    browser.find_element(By.ID, "verify-file-button").click()
    WebDriverWait(browser, 60).until(lambda d: d.find_elements(By.ID, "error"))
    assert "contains a '..' component" in text_of(browser, "#error")
    # a store path that stops being a store while the page is open
    copy = spare.store
    open_page(browser, spare.url + "/")
    assert not browser.find_elements(By.ID, "error")
    os.rename(copy, copy + ".gone")
    open_page(browser, spare.url + "/")
    assert text_of(browser, "#error") == cli_line("inspect", "--store", copy, "stats")
    shot("error")
    open_page(browser, spare.url + "/find?mode=key&topic=orders&key=hot-key")
    assert text_of(browser, "#error") == cli_line("query", "--store", copy, "key", "--topic", "orders", "--key", "k")
    # and the command refuses it before anything listens, with the same line (exit 2)
    assert cli_line("ui.command", "--store", copy, "--port", "0") == cli_line("inspect", "--store", copy, "stats")
    assert run_cli("ui.command", "--store", copy, "--port", "0")[0] == 2


def test_concurrent_requests(srv):
    paths = ["/", "/topics", "/segments", "/find?mode=key&topic=orders&key=hot-key",
             "/find.csv?mode=range&begin=1717200001000&end=1717200001100", "/queue?topic=orders&queue=0"]
    got: dict = {}

    def worker(i):
        for p in paths[i % 3:] + paths[:i % 3]:
            with urllib.request.urlopen(srv.url + p, timeout=120) as r:
                got.setdefault(p, []).append((r.status, hashlib.sha256(r.read()).hexdigest() if "csv" in p else None))
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert all(len(v) == 8 and all(s == 200 for s, _ in v) for v in got.values()), got
    assert len(set(h for _, h in got[paths[4]])) == 1


def test_a_batch_appended_while_open_shows_on_refresh(browser, ui_server, ui_store, tmp_path, shot):
    copy = str(tmp_path / "growing")
    shutil.copytree(ui_store, copy)
    s = ui_server(copy)
    open_page(browser, s.url + "/")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#batches tr.batch")) == 4
    seen, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            with urllib.request.urlopen(s.url + "/topics", timeout=120) as r:
                page = r.read().decode()
            seen.append(int(re.search(r"(\d+) readable messages", page).group(1)))
            stop.wait(0.05)
    t = threading.Thread(target=poll)
    t.start()
    try:
        lines = open(os.path.join(ROOT, "samples", "messages.jsonl"), encoding="utf-8").readlines()[:300]
        p = tmp_path / "more.jsonl"
        p.write_text("".join(lines), encoding="utf-8")
        ingest(copy, str(p), "appended-while-open")
    finally:
        stop.set()
        t.join(120)
    assert seen and set(seen) <= {2002, 2302}, sorted(set(seen))     # each page one committed batch
    browser.refresh()
    WebDriverWait(browser, 60).until(lambda d: d.execute_script("return document.body.dataset.ready === '1'"))
    ids = [r.get_attribute("data-batch") for r in browser.find_elements(By.CSS_SELECTOR, "#batches tr.batch")]
    assert ids[0] == "appended-while-open" and len(ids) == 5
    open_page(browser, s.url + "/segments", plots=("segment-map",))
    spans = [e.get_attribute("data-batch") for e in browser.find_elements(By.CSS_SELECTOR, ".span")]
    assert "appended-while-open" in spans
    shot("segments")


def test_nothing_but_reads_and_nothing_from_elsewhere(ui_store):
    """Through the application itself (no browser): no method but GET (and the verify's POST), no
    static path leading out of its folder, every script and stylesheet served by the server."""
    from storelib.ui.server import create_app, plotly_js_dir
    client = create_app(ui_store).test_client()
    for path in ("/", "/topics", "/find", "/segments", "/health"):
        r = client.get(path)
        assert r.status_code == 200
        refs = re.findall(r'(?:src|href)="([^"]+)"', r.get_data(as_text=True))
        assert refs and all(x.startswith(("/", "#", "?")) for x in refs), refs
        assert client.post(path).status_code == 405 and client.put(path).status_code == 405
        assert client.delete(path).status_code == 405
    for path in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fserver.py",
                 "/vendor/../server.py"):
        assert client.get(path).status_code == 404, path
    r = client.get("/vendor/plotly.min.js")
    assert r.status_code == 200 and r.get_data() == open(os.path.join(plotly_js_dir(), "plotly.min.js"), "rb").read()
    r.close()
    r = client.get("/", query_string={"batch": "2"})
    assert 'id="asof-note"' in r.get_data(as_text=True)
    # bound to 127.0.0.1: another name pointed at this machine is refused, and so is another site's form
    from storelib.ui.server import loopback_hosts
    client.application.config["ROCKETLAKE_HOSTS"] = loopback_hosts("127.0.0.1", 8040)
    assert client.get("/", headers={"Host": "localhost:8040"}).status_code == 200
    r = client.get("/", headers={"Host": "evil.example:8040"})
    assert r.status_code == 400 and r.get_data(as_text=True).startswith("error: Host 'evil.example:8040'")
    r = client.post("/health/verify", headers={"Host": "127.0.0.1:8040", "Origin": "http://evil.example"})
    assert r.status_code == 403



def test_a_verify_outside_the_store_is_a_400_and_a_csv_is_bounded(ui_store, tmp_path, monkeypatch):
    """Through the application (no browser): a quick verify naming a path out of the store is the
    request's fault, 400 with its one line (it was a 500, the store's fault); a CSV download holds
    at most ``lookup.CSV_ROWS`` rows (it had no bound: a range of the whole store was built in the
    server's memory), and one cut there says so in its name and a header while its rows stay the
    command's own CSV of that many; the page says the bound."""
    from storelib.ui import lookup
    from storelib.ui.server import create_app
    client = create_app(ui_store).test_client()
    for rel in ("../outside", "/etc/passwd", "commitlog/../../x"):
        r = client.post("/health/verify", data={"file": rel})
        assert r.status_code == 400, (rel, r.status_code)
        assert "the browser reads only files of the store" in html.unescape(r.get_data(as_text=True))
    monkeypatch.setattr(lookup, "CSV_ROWS", 7)
    span = ["--begin", "0", "--end", "9999999999999"]
    r = client.get("/find.csv", query_string={"mode": "range", "begin": "0", "end": "9999999999999"})
    out = str(tmp_path / "cli.csv")
    code, _o, err = run_cli("query", "--store", ui_store, "--output", out, "range", *span, "--limit", "7")
    assert code == 0, err
    assert r.status_code == 200 and r.get_data() == open(out, "rb").read() and r.get_data().count(b"\n") == 8
    assert "filename=rocketlake-range-first-7.csv" in r.headers["Content-Disposition"]
    assert r.headers["X-Rocketlake-Cut"].startswith("cut at 7 rows") and "after=" in r.headers["X-Rocketlake-Cut"]
    r = client.get("/find.csv", query_string={"mode": "offset", "topic": "orders", "queue": "0", "offset": "0",
                                              "count": "50"})
    assert r.status_code == 200 and r.get_data().count(b"\n") == 8 and "offset=7" in r.headers["X-Rocketlake-Cut"]
    r = client.get("/find.csv", query_string={"mode": "range", "begin": "0", "end": "9999999999999", "limit": "5"})
    assert "X-Rocketlake-Cut" not in r.headers and "filename=rocketlake-range.csv" in r.headers["Content-Disposition"]
    page = client.get("/find", query_string={"mode": "range", "begin": "0", "end": "9999999999999"})
    assert "at most 7 rows" in page.get_data(as_text=True)


def test_a_damaged_store_shows_the_cli_line(ui_store, tmp_path):
    """A Delta log file turned to garbage: each page says what the command line says (through the
    application, no browser: the lines are the same text the pages above show)."""
    from storelib.ui.server import create_app
    copy = str(tmp_path / "damaged")
    shutil.copytree(ui_store, copy)
    with open(os.path.join(copy, "_rocketlake", "checkpoints", "_delta_log", "00000000000000000001.json"), "w") as fh:
        fh.write("garbage{\n")
    client = create_app(copy).test_client()

    def line(path):
        r = client.get(path)
        assert r.status_code == 500
        return html.unescape(re.search(r'id="error">([^<]*)<', r.get_data(as_text=True)).group(1))
    assert line("/") == line("/topics") == cli_line("inspect", "--store", copy, "stats")
    assert "00000000000000000001.json" in line("/")
    assert line("/find?mode=key&topic=orders&key=hot-key") == cli_line("query", "--store", copy, "key", "--topic",
                                                                        "orders", "--key", "hot-key")


def test_a_brokers_directory(restored_golden):
    """A store RocketMQ itself wrote (no manifest): shown as a broker sees it after a restart; its
    queues and a key lookup are the command line's (through the application, no browser)."""
    from storelib.ui.server import create_app
    store = restored_golden("small-roll")
    client = create_app(store).test_client()
    page = client.get("/").get_data(as_text=True)
    assert 'id="broker"' in page and 'class="batch"' not in page
    st = json.loads(run_cli("inspect", "--store", store, "--json", "stats")[1])
    page = client.get("/topics").get_data(as_text=True)
    got = re.findall(r'class="queue" data-topic="([^"]+)" data-queue="(\d+)">.*?class="num max-offset">(\d+)<', page, re.S)
    assert {(t, int(q)): int(m) for t, q, m in got} == {(q["topic"], q["queue_id"]): q["max_offset"] for q in st["queues"]}
    assert client.get("/segments").status_code == 200
    topic, key = next((m["topic"], m["keys"].split()[0]) for m in cli_rows("query", "--store", store, "range", "--begin",
                                                                            "0", "--end", "9999999999999", "--limit", "50")
                      if m["keys"])
    want = [m["commitlog_offset"] for m in cli_rows("query", "--store", store, "key", "--topic", topic, "--key", key)]
    page = client.get("/find", query_string={"mode": "key", "topic": topic, "key": key}).get_data(as_text=True)
    assert [int(x) for x in re.findall(r'class="result" data-offset="(\d+)"', page)] == want and want
    # a quick verify of one of its files, as the broker's recovery sees them
    page = client.get("/health").get_data(as_text=True)
    rel = re.search(r"<option>(consumequeue/[^<]+)</option>", page).group(1)
    page = client.post("/health/verify", data={"file": rel}, follow_redirects=True).get_data(as_text=True)
    assert 'id="verify-status">ok<' in page and rel in page


def test_the_server_wrote_nothing(srv, ui_store):
    """Last: every test above left the store's files exactly as they were."""
    assert tree_state(ui_store) == srv.before
