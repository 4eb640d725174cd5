"""tests/support/filedigest.py itself: equal bytes give equal digests whatever is a hole, and any
difference (one byte anywhere, in data or where the other file has a hole; the size) shows."""
from __future__ import annotations

import os

from support.filedigest import BLOCK, digest, digest_of

SIZE = 5 * BLOCK + 123                 # a last block shorter than BLOCK


def make(path, writes: dict, size: int = SIZE, written_zeros: bool = False) -> str:
    """A sparse file of ``size`` with ``writes`` (offset -> bytes); ``written_zeros``: every byte
    written, no holes."""
    with open(path, "wb") as fh:
        if written_zeros:
            fh.write(bytes(size))
        for off, data in writes.items():
            fh.seek(off)
            fh.write(data)
        fh.truncate(size)
    return str(path)


def test_equal_bytes_equal_digests_holes_or_not(tmp_path):
    writes = {10: b"abc", 3 * BLOCK - 2: b"across", SIZE - 5: b"end!!"}
    sparse = make(tmp_path / "sparse", writes)
    dense = make(tmp_path / "dense", writes, written_zeros=True)
    assert open(sparse, "rb").read() == open(dense, "rb").read()
    assert digest(sparse) == digest(dense)
    assert digest(make(tmp_path / "empty-a", {}, 0)) == digest(make(tmp_path / "empty-b", {}, 0))


def test_every_difference_shows(tmp_path):
    writes = {10: b"abc", 3 * BLOCK - 2: b"across", SIZE - 5: b"end!!"}
    want = digest(make(tmp_path / "a", writes))
    others = [
        make(tmp_path / "b", {**writes, 10: b"abd"}),                     # one byte in a data block
        make(tmp_path / "c", {**writes, 4 * BLOCK + 7: b"\x01"}),         # a byte where the other has a hole
        make(tmp_path / "d", {**writes, 3 * BLOCK - 2: b"acrosz"}),       # in the second of two blocks
        make(tmp_path / "e", writes, SIZE + 1),                           # one more zero at the end
        make(tmp_path / "f", {11: b"abc", 3 * BLOCK - 2: b"across", SIZE - 5: b"end!!"}),   # moved
    ]
    for path in others:
        assert open(path, "rb").read() != open(tmp_path / "a", "rb").read()
        assert digest(path) != want, os.path.basename(path)


def test_digest_of_a_head_and_its_zero_tail_is_the_files(tmp_path):
    """A head that ends inside a block, on a block's end, or is empty; a size past its last block."""
    for name, head, size in (("mid", b"\x07" * (BLOCK + 10) + bytes(5) + b"z", SIZE),
                             ("edge", b"x" * (2 * BLOCK), SIZE), ("none", b"", SIZE),
                             ("short", b"abc", 3), ("zeros", bytes(BLOCK + 1) + b"q", 4 * BLOCK)):
        path = make(tmp_path / name, {0: head}, size)
        assert digest_of(head, size) == digest(path), name
    assert digest_of(b"abc", SIZE) != digest_of(b"abd", SIZE)
    assert digest_of(b"abc", SIZE) != digest_of(b"abc", SIZE + 1)
