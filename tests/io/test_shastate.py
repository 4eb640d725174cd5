"""Digest states written down and taken up again (storelib.io.shastate), and the block checksum
continued from one without the committed bytes (storelib.io.checksum)."""
from __future__ import annotations

import hashlib
import os

import pytest

from storelib.io import checksum, shastate

pytestmark = pytest.mark.skipif(not shastate.AVAILABLE, reason="libcrypto could not be loaded")


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 4095])
def test_a_state_resumes_to_hashlibs_digest(n):
    data = os.urandom(5000)
    h = shastate.Sha256()
    h.update(data[:n])
    state = shastate.state_from_detail(shastate.state_to_detail(h.state()))
    g = shastate.Sha256(state)
    g.update(memoryview(data)[n:])
    assert g.digest() == hashlib.sha256(data).digest()
    assert h.digest() == hashlib.sha256(data[:n]).digest()          # digest() leaves the state as it was
    h.update(data[n:])
    assert h.digest() == hashlib.sha256(data).digest()


@pytest.mark.parametrize("bad", [{"h": "00" * 31, "done": 0, "rest": ""}, {"h": "00" * 32, "done": 3, "rest": ""},
                                 {"h": "00" * 32, "done": 64, "rest": "00" * 64}, [1, 2], {"h": 1}])
def test_a_damaged_state_is_refused(bad):
    with pytest.raises(ValueError):
        shastate.state_from_detail(bad)


def test_appends_continue_the_last_block_from_its_state(monkeypatch):
    monkeypatch.setattr(checksum, "BLOCK_SIZE", 256)
    data = os.urandom(3000)
    h = checksum.BlockHasher()
    h.update(data[:1100])
    _, known = h.finish()
    tail = h.tail()
    assert tail is not None
    g = checksum.BlockHasher(1100, known, state=shastate.state_from_detail(tail))
    g.update(data[1100:2000])
    assert g.finish()[0] == checksum.checksum_of_bytes(data[:2000])
    # a state of another length than the block's committed bytes is refused
    with pytest.raises(ValueError):
        checksum.BlockHasher(1101, known, state=shastate.state_from_detail(tail))
    h2 = checksum.BlockHasher()
    h2.update(data[:1024])
    assert h2.tail() is None                     # ends on a block boundary: nothing unfinished


def test_in_place_changes_read_only_what_the_state_does_not_cover(monkeypatch):
    """A file changed at its start and appended to: the dirty first block is read again, the last
    committed block is hashed on from its state (nothing of it read), and the new tail comes back."""
    monkeypatch.setattr(checksum, "BLOCK_SIZE", 256)
    old = os.urandom(1100)
    h = checksum.BlockHasher()
    h.update(old)
    _, known = h.finish()
    new = bytearray(old) + os.urandom(300)
    new[5:9] = b"abcd"
    reads = []

    def read_at(p, n):
        reads.append((p, n))
        return bytes(new[p:p + n])
    tail: list = []
    got = checksum.rehash_blocks(read_at, 1400, known, [(5, 9), (1100, 1400)], shastate.state_from_detail(h.tail()),
                                 tail)
    assert checksum.combine(got) == checksum.checksum_of_bytes(bytes(new))
    assert sorted(reads) == [(0, 256), (1100, 180), (1280, 120)]
    g = checksum.BlockHasher(1400, got, state=shastate.state_from_detail(tail[0]))
    g.update(b"xyz")
    assert g.finish()[0] == checksum.checksum_of_bytes(bytes(new) + b"xyz")
    # a change inside what the state covers: the block is read whole again
    reads.clear()
    new[1050] ^= 1
    got = checksum.rehash_blocks(read_at, 1400, known, [(5, 9), (1050, 1051), (1100, 1400)],
                                 shastate.state_from_detail(h.tail()))
    assert checksum.combine(got) == checksum.checksum_of_bytes(bytes(new)) and (1024, 256) in reads


_SPAWNS = """
import sys
spawned = []
sys.addaudithook(lambda event, args: spawned.append(event) if event in ("subprocess.Popen", "os.posix_spawn",
                                                                         "os.fork", "os.system") else None)
from storelib.io import shastate
assert shastate.AVAILABLE
print(spawned)
"""


def test_loading_libcrypto_starts_no_child_process():
    """No library search in a child (``ldconfig -p``): until it execs, a child started by a big
    process (an ingest's driver) shares its memory, and a sampled memory figure counts it twice."""
    import subprocess
    import sys
    from conftest import ROOT
    out = subprocess.run([sys.executable, "-c", _SPAWNS], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT), check=True).stdout
    assert out.strip() == "[]"
