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
