"""storelib.runtime.accumserver: a context's stop() ends PySpark's accumulator server at once.

PySpark's own server, in this process, with a client speaking the JVM's side of its protocol (the
token, then updates acknowledged one byte each); no JVM."""
from __future__ import annotations

import socket
import struct
import threading
import time
import types

import pytest

pytest.importorskip("pyspark")

from pyspark.accumulators import INT_ACCUMULATOR_PARAM, Accumulator, _start_update_server  # noqa: E402
from pyspark.serializers import CPickleSerializer, write_int  # noqa: E402

from storelib.runtime.stoplogs import quiet_stops  # noqa: E402

TOKEN = "rocketlake-test-token"


class _NoJvm:
    def __getattr__(self, name):
        raise RuntimeError("no JVM in this test")


def _context_of(server):
    """What ``quiet_stops`` reads of a session: its context's accumulator server (and a JVM it
    cannot reach: the log filter is skipped, as for a stopped JVM)."""
    sc = types.SimpleNamespace(_accumulatorServer=server, _jvm=_NoJvm(), _gateway=None)
    return types.SimpleNamespace(sparkContext=sc)


def _jvm_side(server, aid: int, value: int) -> socket.socket:
    """Connect as the JVM does, send one update and wait for its acknowledgement; stay connected."""
    s = socket.create_connection(server.server_address)
    f = s.makefile("rwb")
    f.write(TOKEN.encode())
    write_int(1, f)
    CPickleSerializer()._write_with_length((aid, value), f)
    f.flush()
    assert struct.unpack("!b", f.read(1)) == (1,)
    return s


def _serving_threads():
    return [t for t in threading.enumerate() if t.is_alive() and "serve_forever" in repr(getattr(t, "_target", ""))]


def test_stop_ends_the_server_at_once_after_applying_every_update():
    before = len(_serving_threads())
    server = _start_update_server(TOKEN, False)
    acc = Accumulator(987654, 0, INT_ACCUMULATOR_PARAM)
    quiet_stops(_context_of(server))           # as a rocketlake job's session start does
    conn = _jvm_side(server, 987654, 5)
    try:
        time.sleep(0.05)                       # the handler back in its 1 s select
        assert acc.value == 5
        t0 = time.monotonic()
        server.shutdown()
        took = time.monotonic() - t0
        assert took < 0.4, f"stop took {took:.2f} s (PySpark's polls alone: 0.5-1.5 s)"
        deadline = time.monotonic() + 2
        while len(_serving_threads()) > before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_serving_threads()) == before, "the server's thread is still running"
        time.sleep(0.1)
        assert not any(t.name == "rocketlake-accum-wake" and t.is_alive() for t in threading.enumerate())
    finally:
        conn.close()


def test_a_server_without_a_connection_stops_at_once_too():
    server = _start_update_server(TOKEN, False)
    quiet_stops(_context_of(server))
    quiet_stops(_context_of(server))           # twice: changed once
    t0 = time.monotonic()
    server.shutdown()
    assert time.monotonic() - t0 < 0.4
