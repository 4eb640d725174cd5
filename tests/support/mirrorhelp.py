"""A broker's store grown in steps for the mirror's tests: its records' offsets and store times, and
the checkpoint's physicMsgTimestamp (the mirror's safe point) moved by hand."""
from __future__ import annotations

import os
import struct

import numpy as np

from storelib.codec import messages as codec
from storelib.compute import kernels
from storelib.ops import mirror


def records(broker: str) -> tuple:
    """(commitlog offset, end, store timestamp) of every record, in order."""
    b = mirror.BrokerFiles(broker)
    phys, ends, ts = [], [], []
    for base, rel in b.segments():
        buf = np.frombuffer(b.read(rel, 0, 1 << 30), np.uint8)
        st, _, _ = codec.record_starts(buf, 0, len(buf))
        f = kernels.record_fields(buf, np.asarray(st, np.int64))
        phys += (base + np.asarray(st)).tolist()
        ends += (base + np.asarray(st) + f[kernels.F_SIZE]).tolist()
        ts += f[kernels.F_STORETS].tolist()
    return np.array(phys), np.array(ends), np.array(ts)


def set_safe(broker: str, t: int) -> None:
    """The broker's checkpoint says a record stored at ``t`` was flushed."""
    path = os.path.join(broker, "checkpoint")
    raw = bytearray(open(path, "rb").read())
    raw[0:8] = struct.pack(">q", t)
    with open(path, "wb") as fh:
        fh.write(bytes(raw))


def first_batch(base) -> tuple:
    """(broker, mirror) under ``base``: the small-roll golden store (RocketMQ 5.3.3's own files) as
    the broker, mirrored up to its 1,500th record in one batch; the broker's safe point then moved
    to its end (the next cycle commits a second batch)."""
    from support import goldenlib
    from conftest import golden_set
    broker = goldenlib.restore(golden_set("small-roll"), str(base / "broker"))
    _, _, ts = records(broker)
    set_safe(broker, int(ts[1500]))
    store = str(base / "mirror")
    assert mirror.mirror_broker(broker, store, quiet=True)["status"] == "committed"
    set_safe(broker, int(ts.max()) + 1)
    return broker, store, int(ts.max())
