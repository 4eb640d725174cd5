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

from flask import Flask, Response, abort, redirect, render_template, request, send_from_directory, url_for

from markupsafe import Markup, escape

from ..cli.timeargs import iso
from ..errors import BadInput
from ..ops import inspect as inspection
from . import history, lookup
from .health import Health
from .storeview import StoreView, as_int, error_line, http_status

__all__ = ["create_app", "plotly_js_dir", "PAGES"]

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
    app.config.update(SEND_FILE_MAX_AGE_DEFAULT=3600, JSON_SORT_KEYS=False)
    view = StoreView(store_uri, config_path)
    health = Health()
    app.extensions["rocketlake"] = {"view": view, "health": health}

    def as_of():
        return (request.args.get("batch") or "").strip() or None

    def page(template: str, name: str, status: int = 200, **kw):
        kw.setdefault("error", None)
        batches = kw.pop("nav_batches", None)
        if batches is None:
            try:
                batches = view.snapshot().batches
            except Exception:  # noqa: BLE001 - the page's own error says why
                batches = []
        return render_template(template, page=name, pages=PAGES, store=store_uri, as_of=as_of(),
                               nav_batches=batches, **kw), status

    def failed(template: str, name: str, e: Exception, lookup_line: bool = False, **kw):
        return page(template, name, http_status(e), error=error_line(e, lookup_line), **kw)

    @app.get("/")
    def batches():
        try:
            cfg = view.config(as_of())
            snap = view.snapshot(as_of())
            rows = history.batches(view.store, snap) if snap.batch is not None else []
            return page("batches.html", "batches", rows=rows, broker=snap.batch is None,
                        file_size=cfg.mappedFileSizeCommitLog)
        except Exception as e:  # noqa: BLE001 - every failure is one line on the page
            return failed("batches.html", "batches", e, rows=[], broker=False)

    @app.get("/topics")
    def topics():
        try:
            cfg = view.config(as_of())
            snap = view.snapshot(as_of())
            st = inspection.stats(view.store, snap, cfg)
            return page("topics.html", "topics", stats=st)
        except Exception as e:  # noqa: BLE001
            return failed("topics.html", "topics", e, stats=None)

    @app.get("/queue")
    def queue():
        try:
            topic = request.args.get("topic") or ""
            qid = as_int(request.args, "queue")
            cfg = view.config(as_of())
            snap = view.snapshot(as_of())
            reader = view.reader(as_of(), cfg)
            if (topic, qid) not in reader.files.consume_queues:
                raise BadInput(f"no queue {topic}/{qid} in this batch of the store")
            return page("queue.html", "topics", series=history.queue_series(reader, snap, topic, qid))
        except Exception as e:  # noqa: BLE001
            return failed("queue.html", "topics", e, series=None)

    def run_find():
        q = lookup.Query.from_params(request.args)
        cfg = view.config(as_of())
        return q, lookup.find(view.reader(as_of(), cfg), q, store_uri, as_of(), cfg)

    @app.get("/find")
    def find():
        if not request.args.get("mode"):
            return page("find.html", "find", q=None, found=None, rows=[], argv=None, params={})
        params = request.args.to_dict()
        try:
            q, found = run_find()
            return page("find.html", "find", q=q, found=found, rows=lookup.display_rows(found),
                        argv=q.argv(store_uri, as_of()), params=params)
        except Exception as e:  # noqa: BLE001
            return failed("find.html", "find", e, lookup_line=True, q=None, found=None, rows=[], argv=None,
                          params=params)

    @app.get("/find.csv")
    def find_csv():
        try:
            q, found = run_find()
        except Exception as e:  # noqa: BLE001
            return Response(error_line(e, True) + "\n", http_status(e), mimetype="text/plain")
        return Response(lookup.csv_text(found, q.body_as), mimetype="text/csv",
                        headers={"Content-Disposition": f"attachment; filename=rocketlake-{q.mode}.csv"})

    def one_message():
        offset = as_int(request.args, "offset", minimum=0)
        m = view.reader(as_of()).get_by_offset(offset)
        if m is None:
            raise BadInput(f"nothing found: no message starts at commitlog offset {offset} in this batch")
        return m

    @app.get("/message")
    def message():
        try:
            m = lookup.message_fields(one_message())
            return page("message.html", "find", m=m, hex=lookup.hex_dump(m["body"]), hex_limit=lookup.HEX_LIMIT,
                        body_b64=base64.b64encode(m["body"]).decode() if len(m["body"]) <= 1 << 20 else None)
        except Exception as e:  # noqa: BLE001
            return failed("message.html", "find", e, lookup_line=True, m=None)

    @app.get("/message/body")
    def message_body():
        try:
            m = one_message()
        except Exception as e:  # noqa: BLE001
            return Response(error_line(e, True) + "\n", http_status(e), mimetype="text/plain")
        return Response(bytes(m["body"]), mimetype="application/octet-stream",
                        headers={"Content-Disposition": f"attachment; filename={m['msg_id']}.body"})

    @app.get("/segments")
    def segments():
        try:
            cfg = view.config(as_of())
            snap = view.snapshot(as_of())
            if snap.batch is not None:
                rows = inspection.segment_rows(snap, "commitlog")
                files = inspection.segment_rows(snap)
            else:
                reader = view.reader(None, cfg)
                rows = [{"path": s.rel, "base_offset": s.base, "valid_bytes": s.valid}
                        for s in reader.files.commitlog]
                files = []
            return page("segments.html", "segments",
                        segments=history.segment_map(snap, rows, cfg.mappedFileSizeCommitLog), files=files)
        except Exception as e:  # noqa: BLE001
            return failed("segments.html", "segments", e, segments=[], files=[])

    @app.get("/health")
    def health_page():
        try:
            view.config()
            files = sorted(view.snapshot().files)
        except Exception as e:  # noqa: BLE001
            return failed("health.html", "health", e, last=health.last, files=[])
        return page("health.html", "health", last=health.last, files=files)

    @app.post("/health/verify")
    def health_verify():
        try:
            rel = request.form.get("file")
            if rel is not None:
                health.verify_file(view, rel)
            else:
                health.verify_store(view, as_of())
        except Exception as e:  # noqa: BLE001
            return failed("health.html", "health", e, last=health.last, files=[])
        return redirect(url_for("health_page", batch=as_of()), 303)

    @app.get("/vendor/plotly.min.js")
    def plotly_js():
        d = plotly_js_dir()
        if d is None:
            abort(404)
        return send_from_directory(d, "plotly.min.js", mimetype="text/javascript", max_age=86400)

    app.add_template_filter(lambda ms: iso(ms) if ms is not None else "", "iso")
    app.add_template_filter(_keep_cr, "cr")

    return app


def _keep_cr(text) -> Markup:
    """Text escaped for HTML with its carriage returns as character references (an HTML parser
    turns a raw CR into a line feed): a property value shows exactly as stored."""
    return Markup(str(escape(text)).replace("\r", "&#13;"))
