"""rocketlake ui --store STORE [--port P] [--host H] [--config FILE]

A local web page over one store (a local path, or any URI the store supports), read only: its
batches as a timeline, topics and queues, a message finder (the lookups of rocketlake query, with
CSV export), the CommitLog segments and the store's health. Bound to 127.0.0.1 unless --host says
otherwise; --port 0 picks a free port. Starts no Spark. A path that is not a store is refused
before anything listens, with the line every command prints for it (exit 2).
"""
from __future__ import annotations

import argparse
import os
import socket
import sys

from ..cli import common as cli
from ..cli.failures import CHECK, guarded
from ..errors import BadInput

__all__ = ["main", "serve"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=cli.prog("ui"), description=cli.help_doc(__doc__),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="store root: a local path or s3://, gs://, hdfs:// URI")
    ap.add_argument("--port", type=int, default=8040, help="port to listen on (default 8040; 0: any free port)")
    ap.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    ap.add_argument("--config", help="broker .properties for a broker's directory (default: the store's own "
                                     "configuration, else the sizes read off its files)")
    args = ap.parse_args(argv)
    args.as_of_batch = None

    def run() -> int:
        cli.store_config(args)                  # not a store: one line, exit 2, nothing listens
        return serve(args.store, args.host, args.port, args.config)
    return guarded(run, CHECK)


def serve(store: str, host: str, port: int, config: str | None = None, ready=None) -> int:
    """Serve the pages until interrupted (``ready(url)``: called once the socket listens). An
    address it cannot listen on: ``BadInput`` (its one line and exit 2 come from ``guarded``)."""
    from werkzeug.serving import make_server
    from .server import create_app, loopback_hosts
    app = create_app(store, config)
    try:                        # bound here: a port in use is our one line, not werkzeug's exit
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except (OSError, OverflowError) as e:       # in use, not an address of this machine, out of range
        why = os.strerror(e.errno) if isinstance(e, OSError) and e.errno else str(e)
        raise BadInput(f"cannot listen on {host}:{port}: {why}") from None
    with sock:
        server = make_server(host, sock.getsockname()[1], app, threaded=True, fd=sock.fileno())
    app.config["ROCKETLAKE_HOSTS"] = loopback_hosts(host, server.port)
    url = f"http://{host if ':' not in host else '[' + host + ']'}:{server.port}/"
    print(f"rocketlake ui: {store} at {url} (read only; Ctrl-C stops)", file=sys.stderr, flush=True)
    if ready is not None:
        ready(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
