"""A SHA-256 whose running state can be written down and taken up again (``Sha256``).

A batch that continues a file whose last checksum block is partial (storelib.io.checksum: 16 MiB
blocks) has to hash that block again from its start. hashlib cannot resume a digest, so the
writer would read the block's committed bytes back: on an object store up to 16 MiB downloaded
per continued file for a batch that adds a few kilobytes. The state after the committed bytes
(the eight chaining words after the whole 64-byte blocks hashed, how many bytes that was, and
the bytes of the unfinished 64-byte block) is small; a manifest row keeps it (``detail.tail``)
and the next batch resumes from it instead of reading.

The state is FIPS 180-4's, so it is the same whatever computes it; here OpenSSL's libcrypto
(the library hashlib itself uses) through its SHA256_CTX, read and set word by word. Where
libcrypto cannot be loaded ``AVAILABLE`` is False: writers then store no state and read back.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
from typing import Any

import numpy as np

__all__ = ["AVAILABLE", "Sha256", "state_to_detail", "state_from_detail"]


# (eight chaining words, bytes hashed into them, bytes of the unfinished 64-byte block)
State = tuple[tuple[int, ...], int, bytes]


class _Ctx(ctypes.Structure):
    # openssl/sha.h SHA256state_st: h[8], Nl, Nh, data[16] (the unfinished block's raw bytes), num, md_len
    _fields_ = [("h", ctypes.c_uint32 * 8), ("Nl", ctypes.c_uint32), ("Nh", ctypes.c_uint32),
                ("data", ctypes.c_uint8 * 64), ("num", ctypes.c_uint32), ("md_len", ctypes.c_uint32)]


def _hashlib_module() -> str | None:
    try:
        import _hashlib
        return str(_hashlib.__file__)
    except (ImportError, AttributeError):
        return None


def _load() -> ctypes.CDLL | None:
    """libcrypto's SHA-256 functions, checked: first through hashlib's OpenSSL module (its symbol
    lookup reaches the libcrypto it links, with no search), then by ``ctypes.util.find_library``
    (which runs ``ldconfig -p`` in a child: a child that shares the process's memory until it
    execs, and a process's sampled memory then counts it twice)."""
    lib = _checked(_hashlib_module())
    return lib if lib is not None else _checked(ctypes.util.find_library("crypto"))


def _checked(name: str | None) -> ctypes.CDLL | None:
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        for f in ("SHA256_Init", "SHA256_Update", "SHA256_Final"):
            getattr(lib, f).restype = ctypes.c_int
        lib.SHA256_Update.argtypes = [ctypes.POINTER(_Ctx), ctypes.c_void_p, ctypes.c_size_t]
        lib.SHA256_Init.argtypes = [ctypes.POINTER(_Ctx)]
        lib.SHA256_Final.argtypes = [ctypes.c_char_p, ctypes.POINTER(_Ctx)]
    except (OSError, AttributeError):
        return None
    probe = _Sha256Lib(lib)                        # the layout above must be the library's
    probe.update(b"x" * 100)
    st = probe.state()
    again = _Sha256Lib(lib, st)
    again.update(b"y" * 37)
    ok = again.digest() == hashlib.sha256(b"x" * 100 + b"y" * 37).digest() and st[1] == 64
    return lib if ok else None


class _Sha256Lib:
    def __init__(self, lib: ctypes.CDLL, state: State | None = None):
        self._lib, self._ctx = lib, _Ctx()
        lib.SHA256_Init(ctypes.byref(self._ctx))
        if state is not None:
            words, done, rest = state
            if done % 64 or len(rest) >= 64 or len(words) != 8:
                raise ValueError(f"not a SHA-256 state: {done} bytes done, {len(rest)} pending")
            for i, w in enumerate(words):
                self._ctx.h[i] = w
            bits = (done + len(rest)) * 8
            self._ctx.Nl, self._ctx.Nh = bits & 0xFFFFFFFF, (bits >> 32) & 0xFFFFFFFF
            ctypes.memmove(self._ctx.data, rest, len(rest))
            self._ctx.num = len(rest)

    def update(self, data: Any) -> None:            # any buffer (bytes, memoryview, numpy array)
        mv = memoryview(data).cast("B")
        if not mv.nbytes:
            return
        arr = np.frombuffer(mv, dtype=np.uint8)          # read-only buffers too, without a copy
        self._lib.SHA256_Update(ctypes.byref(self._ctx), arr.ctypes.data, mv.nbytes)

    def state(self) -> State:
        """(eight chaining words, bytes hashed into them, bytes of the unfinished 64-byte block)."""
        total = ((self._ctx.Nh << 32) | self._ctx.Nl) // 8
        num = self._ctx.num
        return tuple(self._ctx.h), total - num, bytes(self._ctx.data[:num])

    def digest(self) -> bytes:
        c = _Ctx()
        ctypes.memmove(ctypes.byref(c), ctypes.byref(self._ctx), ctypes.sizeof(_Ctx))
        out = ctypes.create_string_buffer(32)
        self._lib.SHA256_Final(out, ctypes.byref(c))
        return out.raw


_LIB = _load()
AVAILABLE = _LIB is not None


def Sha256(state: State | None = None) -> _Sha256Lib:
    """A SHA-256 hasher (``update``, ``digest``, ``state``), from ``state`` if given."""
    if _LIB is None:
        raise RuntimeError("SHA-256 states need OpenSSL's libcrypto, which could not be loaded")
    return _Sha256Lib(_LIB, state)


def state_to_detail(state: State) -> dict[str, object]:
    words, done, rest = state
    return {"h": b"".join(int(w).to_bytes(4, "big") for w in words).hex(), "done": int(done), "rest": rest.hex()}


def state_from_detail(value: object) -> State:
    """A state from a manifest row's ``detail``, checked for shape (ValueError otherwise)."""
    if not isinstance(value, dict) or not isinstance(value.get("h"), str) or not isinstance(value.get("done"), int) \
            or not isinstance(value.get("rest"), str):
        raise ValueError(f"SHA-256 state {value!r} is not {{h, done, rest}}")
    words, rest = bytes.fromhex(value["h"]), bytes.fromhex(value["rest"])
    if len(words) != 32 or value["done"] % 64 or len(rest) >= 64:
        raise ValueError(f"SHA-256 state {value!r} has the wrong sizes")
    return tuple(int.from_bytes(words[i:i + 4], "big") for i in range(0, 32, 4)), value["done"], rest
