"""Bytes an ingest moves on an object store: a local moto S3 server behind a counting HTTP proxy
(a thread of the bench process). Every request of the job (pyarrow's S3 client, delta-rs) goes
through the proxy, which classifies it:

  uploaded    PUT object / UploadPart bodies (x-amz-decoded-content-length when aws-chunked)
  copied      CopyObject / UploadPartCopy: the source object's size (or the copied range)
  downloaded  GET response bodies
and counts requests by kind; ``by_area`` splits them (and the bytes) by what they touch: ``delta
log`` (``_delta_log/``), ``delta data`` (the rest of the Delta tables under ``_rocketlake/``:
their Parquet files) and ``store files`` (everything else), with the kinds GET, PUT, COPY, HEAD,
LIST, DELETE, POST (a request with ``If-None-Match``, such as a Delta commit's conditional PUT,
counted as e.g. ``PUT if-none-match``). Responses are streamed through (a GET of a 1 GiB segment is never held in
memory). Figures are per byte of valid records the job added. With
S3BENCH_LOG=<file> every request is also logged there (method, kind, bytes, Range, path): what
each GET, HEAD and PUT was for."""
from __future__ import annotations

import http.client
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import ROOT, job_env, run_process

sys.path.insert(0, os.path.join(ROOT, "tests"))

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade", "trailer"}


# the request names of ``_classify`` by HTTP kind
_KIND = {"GetObject": "GET", "ListObjects": "LIST", "PutObject": "PUT", "UploadPart": "PUT", "CopyObject": "COPY",
         "UploadPartCopy": "COPY", "DeleteObjects": "DELETE", "CompleteMultipartUpload": "POST",
         "CreateMultipartUpload": "POST"}
_TABLES = ("/_rocketlake/manifest/", "/_rocketlake/checkpoints/", "/_rocketlake/tmp/")


def area(path: str) -> str:
    """What a request's path touches: the Delta log, the Delta tables' data files, or store files."""
    p = urllib.parse.unquote(urllib.parse.urlsplit(path).path)
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
    if "/" not in p.strip("/"):                  # a listing: what it lists is its prefix
        p = "/" + (q.get("prefix") or [""])[0]
    if "/_delta_log/" in p or p.endswith("/_delta_log"):
        return "delta log"
    return "delta data" if any(t in p for t in _TABLES) else "store files"


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        self.bytes = {"uploaded": 0, "copied": 0, "downloaded": 0}
        self.requests: dict = {}
        self.by_area: dict = {}

    def add(self, kind: str, request: str, n: int = 0, where: str | None = None, conditional: bool = False):
        with self.lock:
            if kind:
                self.bytes[kind] += n
            self.requests[request] = self.requests.get(request, 0) + 1
            if where:
                a = self.by_area.setdefault(where, {"requests": {}, "bytes": {"uploaded": 0, "copied": 0,
                                                                              "downloaded": 0}})
                k = _KIND.get(request, request) + (" if-none-match" if conditional else "")
                a["requests"][k] = a["requests"].get(k, 0) + 1
                if kind:
                    a["bytes"][kind] += n

    def snapshot(self) -> dict:
        with self.lock:
            return {"bytes": dict(self.bytes), "requests": dict(self.requests),
                    "by_area": {k: {"requests": dict(v["requests"]), "bytes": dict(v["bytes"])}
                                for k, v in self.by_area.items()}}


def _read_body(handler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            parts.append(handler.rfile.read(size))
            handler.rfile.readline()
    n = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(n) if n else b""


def make_handler(upstream: tuple, counts: Counts):
    local = threading.local()

    def conn() -> http.client.HTTPConnection:
        if getattr(local, "conn", None) is None:
            local.conn = http.client.HTTPConnection(*upstream, timeout=600)
        return local.conn

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _classify(self, body: bytes) -> tuple:
            url = urllib.parse.urlsplit(self.path)
            q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            part = "partNumber" in q
            if self.command == "PUT" and self.headers.get("x-amz-copy-source"):
                return "copied", "UploadPartCopy" if part else "CopyObject", self._copy_size()
            if self.command == "PUT":
                n = int(self.headers.get("x-amz-decoded-content-length") or len(body))
                return "uploaded", "UploadPart" if part else "PutObject", n
            if self.command == "POST":
                name = "CompleteMultipartUpload" if "uploadId" in q else \
                    "CreateMultipartUpload" if "uploads" in q else "DeleteObjects" if "delete" in q else "POST"
                return None, name, 0
            if self.command == "GET":
                listing = "/" not in url.path.strip("/")          # GET of the bucket itself
                return "downloaded", "ListObjects" if listing else "GetObject", 0
            return None, self.command, 0

        def _copy_size(self) -> int:
            rng = self.headers.get("x-amz-copy-source-range")
            if rng:
                lo, hi = rng.split("=")[1].split("-")
                return int(hi) - int(lo) + 1
            src = urllib.parse.quote(urllib.parse.unquote(self.headers["x-amz-copy-source"]).split("?")[0])
            c = http.client.HTTPConnection(*upstream, timeout=60)
            # moto wants a request that looks signed (it does not check the signature)
            auth = {k: v for k, v in self.headers.items() if k.lower() in ("host", "authorization", "x-amz-date")}
            c.request("HEAD", src if src.startswith("/") else "/" + src, headers=auth)
            r = c.getresponse()
            r.read()
            c.close()
            if r.status != 200:                  # shown in the request counts, never silently 0
                counts.add(None, f"copy of unknown size (HEAD {r.status})")
            return int(r.getheader("Content-Length") or 0)

        def _forward(self):
            body = _read_body(self) if self.command in ("PUT", "POST") else b""
            kind, request, n = self._classify(body)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            c = conn()
            try:
                c.request(self.command, self.path, body=body or None, headers=headers)
                r = c.getresponse()
            except (http.client.HTTPException, OSError):
                local.conn = None
                c = conn()
                c.request(self.command, self.path, body=body or None, headers=headers)
                r = c.getresponse()
            self.send_response_only(r.status, r.reason)
            head = self.command == "HEAD"           # its Content-Length is the object's size
            for k, v in r.getheaders():
                if k.lower() not in _HOP and (head or k.lower() != "content-length"):
                    self.send_header(k, v)
            length = r.getheader("Content-Length")
            # a body of known length is streamed through; one without (chunked) is read whole
            data = b"" if head or length is not None else r.read()
            size = 0 if head else int(length) if length is not None else len(data)
            # counted before the reply goes out, so a client that has its answer sees it counted
            counts.add(kind, request, size if kind == "downloaded" else n, area(self.path),
                       bool(self.headers.get("If-None-Match")))
            if os.environ.get("S3BENCH_LOG"):
                with open(os.environ["S3BENCH_LOG"], "a") as fh:
                    fh.write(f"{self.command}\t{request}\t{size if kind == 'downloaded' else n}\t"
                             f"{self.headers.get('Range', '')}\t{self.path}\t{r.status}\t"
                             f"{self.headers.get('If-None-Match', '')}\n")
            if not head:
                self.send_header("Content-Length", str(size))
            self.end_headers()
            if head:
                return
            if data:
                self.wfile.write(data)
                return
            left = size
            while left > 0:
                chunk = r.read(min(left, 1 << 20))
                if not chunk:
                    raise ConnectionError(f"upstream closed {left} bytes before the end of {self.path}")
                self.wfile.write(chunk)
                left -= len(chunk)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

    return Handler


class CountingProxy:
    def __init__(self, upstream_url: str):
        u = urllib.parse.urlsplit(upstream_url)
        self.counts = Counts()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler((u.hostname, u.port), self.counts))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.server.shutdown()
        self.server.server_close()


def _record(res, section: str, what: str, counts: dict, record_bytes: int, run: dict, note: str):
    b = counts["bytes"]
    reqs = ", ".join(f"{k} {v}" for k, v in sorted(counts["requests"].items()))
    for kind in ("uploaded", "copied", "downloaded"):
        res.record(section, f"{what}: {kind} per record byte", b[kind] / record_bytes, 1.0, "x",
                   f"{b[kind] / 1e6:.1f} MB for {record_bytes / 1e6:.2f} MB of records; baseline: the record "
                   f"bytes once" + (f"; requests: {reqs}; wall {run['wall_s']:.1f} s; {note}" if kind == "uploaded"
                                    else ""), mode="cold", bytes=b[kind], record_bytes=record_bytes)


def bench_s3(res, workdir: str, src: str, n: int, batch_src: str, config: str | None = None,
             section: str = "s3"):
    """A cold ingest of ``src`` (n messages) into s3://bench/store through the proxy, then a
    small batch into the same store; bytes moved per record byte for each."""
    from support.s3server import moto
    from cold import ingest_argv
    summary = os.path.join(workdir, "summary-s3.json")
    extra = ["--config", config] if config else []
    with moto("bench") as (env, _s3), CountingProxy(env["AWS_ENDPOINT_URL"]) as proxy:
        jenv = job_env(dict(env, AWS_ENDPOINT_URL=proxy.url))
        for what, input_dir in ((f"ingest {n} msgs", src), ("small batch into that store", batch_src)):
            proxy.counts.reset()
            if os.path.exists(summary):
                os.remove(summary)
            run = run_process(ingest_argv("s3://bench/store", input_dir, summary, *extra), env=jenv,
                              workdir=workdir, timeout=3600)
            counts = proxy.counts.snapshot()
            if run["rc"] != 0:
                tail = run["stderr"].strip().splitlines()[-1:] or [""]
                res.record(section, f"{what}: FAILED (exit {run['rc']})", 0, None, "",
                           f"{tail[0][:200]}; moved before failing: {json.dumps(counts['bytes'])}", mode="cold")
                return
            with open(summary) as fh:
                rb = json.load(fh)["record_bytes"]
            _record(res, section, what, counts, rb, run, "default file sizes" if not config else f"config {config}")
