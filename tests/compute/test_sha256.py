"""storelib/compute/sha256.py: the two-stream SHA-NI kernel against hashlib, and the hashlib fallback."""
from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from support.guardpage import guarded_page

from storelib.compute import sha256

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_sha_ni = pytest.mark.skipif(not sha256.HAVE_SHA_NI, reason="numba's target CPU has no SHA extensions (or "
                                                                  "ROCKETLAKE_SHA=hashlib): digest_pair is hashlib")


def _want(a, b):
    return hashlib.sha256(a).digest(), hashlib.sha256(b).digest()


def _random(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def test_constants():
    """K: cube roots of the first 64 primes, H(0): square roots of the first 8 (FIPS 180-4)."""
    assert len(sha256._K) == 64 and len(sha256._H0) == 8
    assert sha256._K[:4] == (0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5)
    assert sha256._K[-2:] == (0xBEF9A3F7, 0xC67178F2)
    assert sha256._H0 == (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)


@pytest.mark.parametrize("n", [0, 1, 3, 55, 56, 63, 64, 65, 119, 120, 127, 128, 200, 1000])
def test_python_model_of_the_instructions(n):
    """The round/schedule sequence the kernel is generated from, run with a Python model of
    sha256rnds2/msg1/msg2 (ABEF/CDGH layout): equals hashlib on any CPU."""
    data = _random(n, n).tobytes()
    assert sha256._model_digest(data) == hashlib.sha256(data).digest()


@needs_sha_ni
def test_all_short_lengths_paired():
    """Lengths 0..200 against lengths around the padding edges (55/56: one or two padding blocks;
    63/64, 119/120: whole blocks), in both orders."""
    pool = _random(5000, 1)
    others = [0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 200, 1000, 4103]
    bad = []
    for n in range(201):
        a = pool[7:7 + n]
        for m in others:
            b = pool[1000 - m // 3:1000 - m // 3 + m]
            want = _want(a, b)
            if sha256.digest_pair(a, b) != want:
                bad.append((n, m))
            if sha256.digest_pair(b, a) != want[::-1]:
                bad.append((m, n))
    assert bad == []


@needs_sha_ni
def test_equal_lengths():
    for n in (0, 1, 55, 56, 63, 64, 119, 120, 4096, 65537):
        a, b = _random(n, 2 * n), _random(n, 2 * n + 1)
        assert sha256.digest_pair(a, b) == _want(a, b), n


@needs_sha_ni
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 100_000), st.integers(0, 100_000), st.integers(0, 2**32 - 1), st.integers(0, 63))
def test_random_pairs(n, m, seed, skew):
    buf = _random(n + m + 64, seed)
    a = buf[skew:skew + n]                       # any alignment
    b = np.frombuffer(buf[n:n + m].tobytes(), np.uint8)     # read-only
    assert sha256.digest_pair(a, b) == _want(a, b)


@needs_sha_ni
def test_two_full_blocks():
    """Two 16 MiB blocks (checksum.BLOCK_SIZE), equal and different lengths."""
    n = 16 << 20
    a, b = _random(n, 10), _random(n, 11)
    assert sha256.digest_pair(a, b) == _want(a, b)
    assert sha256.digest_pair(a, b[:n - 1]) == _want(a, b[:n - 1])
    assert sha256.digest_pair(a[:12345], b) == _want(a[:12345], b)


@needs_sha_ni
def test_same_array_twice():
    for n in (0, 64, 100, 1 << 20):
        a = _random(n, 20)
        d = hashlib.sha256(a).digest()
        assert sha256.digest_pair(a, a) == (d, d)
        assert sha256.digest_pair(a, a[:n // 2]) == _want(a, a[:n // 2])


@needs_sha_ni
def test_read_only_inputs(tmp_path):
    """Read-only arrays: from bytes, and views of a read-only mmap (as a verify reads blocks)."""
    data = _random(300_000, 30).tobytes()
    ro = np.frombuffer(data, np.uint8)
    rw = _random(70_001, 31)
    assert sha256.digest_pair(ro, rw) == _want(ro, rw)
    assert sha256.digest_pair(rw, ro) == _want(rw, ro)
    assert sha256.digest_pair(ro, ro[5:]) == _want(ro, ro[5:])
    path = tmp_path / "f"
    path.write_bytes(data)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        view = np.frombuffer(mm, np.uint8)
        assert not view.flags.writeable
        a, b = view[:200_000], view[200_000:]
        assert sha256.digest_pair(a, b) == _want(data[:200_000], data[200_000:])
        del view, a, b


@needs_sha_ni
def test_reads_nothing_outside_the_arrays():
    """Arrays that start at a page start or end at a page end next to an inaccessible page: a
    read before or after them would crash the process."""
    with guarded_page(_random(mmap.PAGESIZE, 40)) as (data, lo, hi):
        for n in list(range(0, 140)) + [hi - lo - 1, hi - lo]:
            a, b = data[lo:lo + n], data[hi - n:hi]
            want = (hashlib.sha256(a.tobytes()).digest(), hashlib.sha256(b.tobytes()).digest())
            assert sha256.digest_pair(a, b) == want, n
            assert sha256.digest_pair(b, data[lo:lo + 3]) == (want[1], hashlib.sha256(data[lo:lo + 3].tobytes()).digest())
        del a, b


def test_bytes_like_and_bad_inputs():
    a, b = b"abc" * 100, bytearray(b"xyz" * 33)
    assert sha256.digest_pair(a, b) == _want(a, b)
    assert sha256.digest_pair(memoryview(a), b"") == _want(a, b"")
    with pytest.raises(ValueError):
        sha256.digest_pair(np.zeros(10, np.uint16), a)
    with pytest.raises(ValueError):
        sha256.digest_pair(np.zeros(20, np.uint8)[::2], a)
    with pytest.raises(ValueError):
        sha256.digest_pair(a, np.zeros((2, 8), np.uint8))


@needs_sha_ni
def test_threads():
    """Two Python threads hashing at once (the kernel runs without the GIL)."""
    assert sha256._pair_kernel.targetoptions.get("nogil") is True
    bufs = [_random(3 << 20, 50 + k) for k in range(4)]
    results = [None, None]

    def run(i):
        results[i] = [sha256.digest_pair(bufs[2 * i], bufs[2 * i + 1]) for _ in range(3)]
    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in (0, 1):
        assert results[i] == [_want(bufs[2 * i], bufs[2 * i + 1])] * 3


def _run(code: str, **env) -> str:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, **env},
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@needs_sha_ni
def test_kernel_is_cached(tmp_path):
    """cache=True: a second fresh process loads the kernel from numba's cache (no compilation)."""
    code = ("import hashlib, numpy as np\nfrom storelib.compute import sha256\n"
            "a, b = np.arange(300, dtype=np.uint8), np.frombuffer(bytes(range(70)), np.uint8)\n"
            "assert sha256.digest_pair(a, b) == (hashlib.sha256(a).digest(), hashlib.sha256(b).digest())\n"
            "st = sha256._pair_kernel.stats\n"
            "print(sum(st.cache_hits.values()), sum(st.cache_misses.values()))\n")
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    assert _run(code, **env).split() == ["0", "1"]
    assert _run(code, **env).split() == ["1", "0"]


@pytest.mark.parametrize("env", [{"ROCKETLAKE_SHA": "hashlib"}, {"NUMBA_CPU_NAME": "generic"}],
                         ids=["ROCKETLAKE_SHA=hashlib", "NUMBA_CPU_NAME=generic"])
def test_fallback(tmp_path, env):
    """Forced off, or no SHA in numba's target features: hashlib, same results, kernel never
    compiled (fresh process, its own numba cache)."""
    code = ("import hashlib, numpy as np\nfrom storelib.compute import sha256\n"
            "assert sha256.HAVE_SHA_NI is False\n"
            "for n, m in ((0, 0), (55, 56), (1000, 64), (4096, 70001)):\n"
            "    a, b = np.arange(n, dtype=np.uint8), np.frombuffer(bytes(m), np.uint8)\n"
            "    assert sha256.digest_pair(a, b) == (hashlib.sha256(a).digest(), hashlib.sha256(b).digest())\n"
            "assert not sha256._pair_kernel.signatures\n")
    _run(code, NUMBA_CACHE_DIR=str(tmp_path), **env)


def test_public_names():
    assert sorted(sha256.__all__) == ["HAVE_SHA_NI", "digest_pair"]
    assert isinstance(sha256.HAVE_SHA_NI, bool)
