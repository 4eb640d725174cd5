"""The store browser's web application (Flask): five pages over one store, read only.

Pages (each takes ``?batch=ID|SEQ`` to show the store as of that batch):

    /           Batches: the timeline, each batch's summary and Delta versions
    /topics     Topics and queues: counts, offsets, store times, retention, bytes
    /queue      one queue: its offsets over store time and batch by batch
    /find       Find a message (``rocketlake query``'s lookups); /find.csv its CSV
    /message    one message: properties, times, hosts, body as text and hex; /message/body its bytes
    /segments   which batch wrote which bytes of each CommitLog segment, zone-map times
    /health     the last verify run from the page; POST /health/verify runs one

A failed request shows the one line the command line prints for it (``storeview.error_line``).
The only POST runs a verify, which reads. Static files come from ``static/`` beside this module and
plotly.js from the installed ``plotly`` package (requirements.txt pins it): nothing is fetched
from the internet at run time.
"""
from __future__ import annotations

import base64
import importlib.util
import os

from flask import (Flask, Response, abort, current_app, redirect, render_template, request, send_from_directory,
                   url_for)

from markupsafe import Markup, escape

from ..cli.timeargs import iso
from ..errors import BadInput
from ..ops import inspect as inspection
from . import history, lookup
from .health import Health, files as health_files
from .storeview import StoreView, as_int, error_line, http_status
from ..table.rows import FileKind

__all__ = ["create_app", "Pages", "loopback_hosts", "plotly_js_dir", "PAGES"]

PAGES = (("batches", "Batches"), ("topics", "Topics and queues"), ("find", "Find a message"),
         ("segments", "Segments"), ("health", "Health"))
HERE = os.path.dirname(os.path.abspath(__file__))


def plotly_js_dir() -> str | None:
    """The directory of the installed plotly package's ``plotly.min.js`` (None without plotly)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    d = os.path.join(list(spec.submodule_search_locations)[0], "package_data")
    return d if os.path.isfile(os.path.join(d, "plotly.min.js")) else None


def create_app(store_uri: str, config_path: str | None = None) -> Flask:
    app = Flask("storelib.ui", root_path=HERE, static_folder="static", template_folder="templates")
    app.config.update(SEND_FILE_MAX_AGE_DEFAULT=3600)
    pages = Pages(StoreView(store_uri, config_path), Health())
    app.extensions["rocketlake"] = pages
    for rule, name, methods in (("/", "batches", None), ("/topics", "topics", None), ("/queue", "queue", None),
                                ("/find", "find", None), ("/find.csv", "find_csv", None),
                                ("/message", "message", None), ("/message/body", "message_body", None),
                                ("/segments", "segments", None), ("/health", "health_page", None),
                                ("/health/verify", "health_verify", ["POST"]),
                                ("/vendor/plotly.min.js", "plotly_js", None)):
        app.add_url_rule(rule, name, getattr(pages, name), methods=methods or ["GET"])
    app.add_template_filter(lambda ms: iso(ms) if ms is not None else "", "iso")
    app.add_template_filter(_keep_cr, "cr")
    app.before_request(_same_site)
    return app


def loopback_hosts(host: str, port: int) -> set | None:
    """The Host headers a server bound to a loopback address answers (None: any, for a server a
    user bound to another address on purpose)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    return {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}


def _same_site():
    """A request through another name for this machine (a web page of elsewhere whose name was
    pointed here) is refused, as is a POST from another site's page (the store is read only
    either way; this keeps other sites from reading it or running verifies)."""
    hosts = current_app.config.get("ROCKETLAKE_HOSTS")
    if hosts is not None and request.host not in hosts:
        return Response(f"error: Host {request.host!r} is not this server's address\n", 400, mimetype="text/plain")
    origin = request.headers.get("Origin")
    if request.method == "POST" and origin is not None and origin.rstrip("/") != request.host_url.rstrip("/"):
        return Response(f"error: a form of {origin} cannot post to this server\n", 403, mimetype="text/plain")
    return None


class Pages:
    """The pages over one store; each request reads the store afresh (``StoreView``)."""

    def __init__(self, view: StoreView, health: Health):
        self.view, self.health = view, health

    @staticmethod
    def as_of():
        return (request.args.get("batch") or "").strip() or None

    def page(self, template: str, name: str, status: int = 200, **kw):
        kw.setdefault("error", None)
        try:
            batches = self.view.snapshot().batches
        except Exception:  # noqa: BLE001 - the page's own error says why
            batches = ()
        return render_template(template, page=name, pages=PAGES, store=self.view.uri, as_of=self.as_of(),
                               nav_batches=batches, **kw), status

    def failed(self, template: str, name: str, e: Exception, lookup_line: bool = False, **kw):
        return self.page(template, name, http_status(e), error=error_line(e, lookup_line), **kw)

    def batches(self):
        try:
            self.view.config(self.as_of())
            snap = self.view.snapshot(self.as_of())
            rows = history.batches(self.view.store, snap) if snap.batch is not None else []
            return self.page("batches.html", "batches", rows=rows, broker=snap.batch is None)
        except Exception as e:  # noqa: BLE001 - every failure is one line on the page
            return self.failed("batches.html", "batches", e, rows=[], broker=False)

    def topics(self):
        try:
            cfg = self.view.config(self.as_of())
            st = inspection.stats(self.view.store, self.view.snapshot(self.as_of()), cfg)
            return self.page("topics.html", "topics", stats=st)
        except Exception as e:  # noqa: BLE001
            return self.failed("topics.html", "topics", e, stats=None)

    def queue(self):
        try:
            topic, qid = request.args.get("topic") or "", as_int(request.args, "queue")
            cfg = self.view.config(self.as_of())
            snap = self.view.snapshot(self.as_of())
            reader = self.view.reader(self.as_of(), cfg)
            if (topic, qid) not in reader.files.consume_queues:
                raise BadInput(f"no queue {topic}/{qid} in this batch of the store")
            return self.page("queue.html", "topics", series=history.queue_series(reader, snap, topic, qid))
        except Exception as e:  # noqa: BLE001
            return self.failed("queue.html", "topics", e, series=None)

    def run_find(self, rows: int):
        """The lookup the form asks, at most ``rows`` rows (``lookup.PAGE_ROWS`` a page,
        ``lookup.CSV_ROWS`` a CSV); (query, found, whether the bound lowered what was asked)."""
        q = lookup.Query.from_params(request.args)
        capped = q.cap(rows)
        cfg = self.view.config(self.as_of())
        return q, lookup.find(self.view.reader(self.as_of(), cfg), q, self.view.uri, self.as_of(), cfg), capped

    def find(self):
        params = request.args.to_dict()
        if not params.get("mode"):
            return self.page("find.html", "find", q=None, found=None, rows=[], argv=None, params={})
        try:
            q, found, capped = self.run_find(lookup.PAGE_ROWS)
            return self.page("find.html", "find", q=q, found=found, rows=lookup.display_rows(found),
                             argv=q.argv(self.view.uri, self.as_of()), params=params,
                             capped=lookup.PAGE_ROWS if capped else None, csv_rows=lookup.CSV_ROWS)
        except Exception as e:  # noqa: BLE001
            return self.failed("find.html", "find", e, lookup_line=True, q=None, found=None, rows=[], argv=None,
                               params=params)

    def find_csv(self):
        try:
            q, found, capped = self.run_find(lookup.CSV_ROWS)
        except Exception as e:  # noqa: BLE001
            return Response(error_line(e, True) + "\n", http_status(e), mimetype="text/plain")
        # a cut CSV says so in its name and a header: its rows stay exactly the command's CSV
        cut = lookup.csv_cut(q, found, capped)
        name = f"rocketlake-{q.mode}" + (f"-first-{lookup.CSV_ROWS}" if cut else "")
        headers = {"Content-Disposition": f"attachment; filename={name}.csv"}
        if cut:
            headers["X-Rocketlake-Cut"] = cut
        return Response(lookup.csv_text(found, q.body_as), mimetype="text/csv", headers=headers)

    def one_message(self):
        offset = as_int(request.args, "offset", minimum=0)
        m = self.view.reader(self.as_of()).get_by_offset(offset)
        if m is None:
            raise BadInput(f"nothing found: no message starts at commitlog offset {offset} in this batch")
        return m

    def message(self):
        try:
            m = lookup.message_fields(self.one_message())
            b64 = base64.b64encode(m["body"]).decode() if len(m["body"]) <= 1 << 20 else None
            return self.page("message.html", "find", m=m, hex=lookup.hex_dump(m["body"]),
                             hex_limit=lookup.HEX_LIMIT, body_b64=b64)
        except Exception as e:  # noqa: BLE001
            return self.failed("message.html", "find", e, lookup_line=True, m=None)

    def message_body(self):
        try:
            m = self.one_message()
        except Exception as e:  # noqa: BLE001
            return Response(error_line(e, True) + "\n", http_status(e), mimetype="text/plain")
        return Response(bytes(m["body"]), mimetype="application/octet-stream",
                        headers={"Content-Disposition": f"attachment; filename={m['msg_id']}.body"})

    def segments(self):
        try:
            cfg = self.view.config(self.as_of())
            snap = self.view.snapshot(self.as_of())
            if snap.batch is not None:
                rows, files = inspection.segment_rows(snap, FileKind.COMMITLOG), inspection.segment_rows(snap)
            else:
                rows = [{"path": s.rel, "base_offset": s.base, "valid_bytes": s.valid}
                        for s in self.view.reader(None, cfg).files.commitlog]
                files = []
            return self.page("segments.html", "segments", files=files,
                             segments=history.segment_map(snap, rows, cfg.mappedFileSizeCommitLog))
        except Exception as e:  # noqa: BLE001
            return self.failed("segments.html", "segments", e, segments=[], files=[])

    def health_page(self):
        try:
            files = health_files(self.view, self.view.snapshot(), self.view.config())
        except Exception as e:  # noqa: BLE001
            return self.failed("health.html", "health", e, last=self.health.last, files=[])
        return self.page("health.html", "health", last=self.health.last, files=files)

    def health_verify(self):
        try:
            rel = request.form.get("file")
            if rel is not None:
                self.health.verify_file(self.view, rel)
            else:
                self.health.verify_store(self.view, self.as_of())
        except Exception as e:  # noqa: BLE001
            return self.failed("health.html", "health", e, last=self.health.last, files=[])
        return redirect(url_for("health_page", batch=self.as_of()), 303)

    @staticmethod
    def plotly_js():
        d = plotly_js_dir()
        if d is None:
            abort(404)
        return send_from_directory(d, "plotly.min.js", mimetype="text/javascript", max_age=86400)

def _keep_cr(text) -> Markup:
    """Text escaped for HTML with its carriage returns as character references (an HTML parser
    turns a raw CR into a line feed): a property value shows exactly as stored."""
    return Markup(str(escape(text)).replace("\r", "&#13;"))
