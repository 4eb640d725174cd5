"""storelib.io.direct_io: durable whole-file writes around the page cache, byte for byte what a
buffered write gives, for every way the chunks can fall against the buffers and the alignment."""
import os
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from storelib.io import direct_io, storage
from storelib.io.direct_io import ALIGN, BUFFER_SIZE, write_direct


def _direct_ok(directory) -> bool:
    """Whether this file system takes O_DIRECT (tmpfs does not: there the writes go through the
    page cache, which the fallback tests cover)."""
    p = os.path.join(str(directory), ".probe")
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o644)
    except OSError:
        return False
    os.close(fd)
    os.unlink(p)
    return direct_io.direct_supported()


def _chunks(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]


def _expect(chunks, total):
    data = b"".join(c.tobytes() for c in chunks)
    return data + bytes(max(0, (total or 0) - len(data)))


@pytest.mark.parametrize("sizes,total", [
    ([], None), ([], 1 << 20), ([1], None), ([ALIGN], None), ([ALIGN - 1, 2], None),
    ([BUFFER_SIZE], None), ([BUFFER_SIZE - 1, 1, 1], 3 * BUFFER_SIZE), ([3 * BUFFER_SIZE + 5], None),
    ([100] * 1000, 1 << 30),
])
def test_same_bytes_as_a_buffered_write(tmp_path, sizes, total):
    chunks = _chunks(sizes)
    p = str(tmp_path / "f")
    got = write_direct(p, chunks, total, fsync=os.fsync)
    if got is None:
        assert not _direct_ok(tmp_path), "write_direct refused a file system that takes O_DIRECT"
        pytest.skip("this file system refuses O_DIRECT")
    assert got == sum(sizes)
    assert os.path.getsize(p) == max(sum(sizes), total or 0)
    with open(p, "rb") as fh:
        assert fh.read() == _expect(chunks, total)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3 * ALIGN + 7), max_size=12), st.one_of(st.none(), st.integers(0, 1 << 16)))
def test_any_chunking(tmp_path_factory, sizes, total):
    d = tmp_path_factory.mktemp("d")
    if not _direct_ok(d):
        pytest.skip("this file system refuses O_DIRECT")
    p = str(d / "f")
    chunks = _chunks(sizes, seed=len(sizes))
    assert write_direct(p, chunks, total) == sum(sizes)
    with open(p, "rb") as fh:
        assert fh.read() == _expect(chunks, total)


def _open_fds() -> set:
    return set(os.listdir("/proc/self/fd"))


def test_a_failing_stream_leaves_no_thread_and_raises(tmp_path):
    """The writer thread (a buffer goes out while the next fills) and the file descriptor are gone
    when the stream fails mid-file, after a full buffer was handed to the thread."""
    if not _direct_ok(tmp_path):
        pytest.skip("this file system refuses O_DIRECT (the page-cache path has no writer thread)")

    def chunks():
        yield bytes(2 * BUFFER_SIZE + 10)
        raise RuntimeError("crash in the middle")
    threads, fds = set(threading.enumerate()), _open_fds()
    with pytest.raises(RuntimeError, match="crash in the middle"):
        write_direct(str(tmp_path / "f"), chunks())
    assert [t.name for t in set(threading.enumerate()) - threads if t.is_alive()] == []
    assert _open_fds() <= fds


def test_refused_direct_io_falls_back_to_the_page_cache(tmp_path, monkeypatch):
    """A file system that takes O_DIRECT at open but refuses the write (EINVAL) gets the bytes
    through the page cache; one that refuses it at open gets None and nothing written."""
    real = os.pwrite
    calls = {"n": 0}

    def refusing(fd, data, pos):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(22, "Invalid argument")
        return real(fd, data, pos)
    monkeypatch.setattr(direct_io.os, "pwrite", refusing)
    chunks = _chunks([BUFFER_SIZE + 3, 5])
    p = str(tmp_path / "f")
    assert write_direct(p, chunks, 1 << 24) == BUFFER_SIZE + 8
    with open(p, "rb") as fh:
        assert fh.read() == _expect(chunks, 1 << 24)


def test_store_writes_large_durable_files_directly(tmp_path, monkeypatch):
    """Store.write_file(durable=True) takes the direct path for a stream, and the result is the
    same file, fsync'd (the fsync of the file is the caller's, via fsync_fd)."""
    seen, synced = [], []
    real = direct_io.write_direct
    monkeypatch.setattr(storage, "write_direct", lambda *a, **k: seen.append(a[0]) or real(*a, **k))
    real_fsync = storage.fsync_fd
    monkeypatch.setattr(storage, "fsync_fd", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}"))
                        or real_fsync(fd))
    st_ = storage.Store(str(tmp_path))
    chunks = _chunks([5000, 70000])
    assert st_.write_file("a/b/seg", iter(chunks), 1 << 20, durable=True) == 1 << 20
    assert st_.write_file("small", [b"x" * 10], durable=True) == 10          # small list: buffered
    assert st_.write_file("fast", iter(chunks), 1 << 20) == 1 << 20          # not durable: buffered
    assert seen == [str(tmp_path / "a/b/seg")]
    # both durable files were fsync'd through their own descriptors, the fast one was not
    assert str(tmp_path / "a/b/seg") in synced and str(tmp_path / "small") in synced
    assert str(tmp_path / "fast") not in synced
    assert st_.read("a/b/seg") == _expect(chunks, 1 << 20)
    assert st_.read("fast") == _expect(chunks, 1 << 20)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 3 * ALIGN), st.integers(0, 3 * ALIGN), st.integers(1, 5 * ALIGN))
def test_read_direct_any_range(tmp_path_factory, offset, length, size):
    d = tmp_path_factory.mktemp("r")
    if not _direct_ok(d):
        pytest.skip("this file system refuses O_DIRECT")
    p = str(d / "f")
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    with open(p, "wb") as fh:
        fh.write(data.tobytes())
    got = direct_io.read_direct(p, offset, length)
    assert got is not None
    assert got.flags.writeable
    assert got.tobytes() == data[offset:offset + length].tobytes()


def test_staged_reads_and_writes_around_the_cache(tmp_path):
    """Store and LocalStaging with cache=False: the same bytes, a short file is an error."""
    from storelib.ingest.split_staging import LocalStaging
    chunks = _chunks([12345, 99999])
    whole = _expect(chunks, None)
    for st_ in (storage.Store(str(tmp_path / "s")), LocalStaging(str(tmp_path / "l"))):
        assert st_.write_file("x/rec", iter(chunks), cache=False) == len(whole)
        assert st_.read_array("x/rec", 777, 50000, cache=False).tobytes() == whole[777:50777]
        with pytest.raises(OSError, match="expected"):
            st_.read_array("x/rec", len(whole) - 10, 11, cache=False)
        with pytest.raises(FileNotFoundError):
            st_.read_array("x/gone", 0, 1, cache=False)


def test_large_files_are_written_direct_small_ones_buffered(tmp_path, monkeypatch):
    """Every write of a file of several buffers goes out with O_DIRECT, and so does the one write
    of a file within one buffer from MIN_DIRECT_FILL bytes on (a consume-queue file); a smaller
    file is one write through the page cache (a direct write of a few KB only waits)."""
    import fcntl
    flags = []
    real = os.pwrite

    def spy(fd, data, pos):
        flags.append(bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT))
        return real(fd, data, pos)
    if not _direct_ok(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    monkeypatch.setattr(direct_io.os, "pwrite", spy)
    write_direct(str(tmp_path / "big"), [bytes(3 * BUFFER_SIZE + 10)])
    assert flags == [True] * 4
    flags.clear()
    write_direct(str(tmp_path / "small"), [bytes(1000)])
    assert flags == [False]
    flags.clear()
    mid = np.random.default_rng(7).integers(0, 256, direct_io.MIN_DIRECT_FILL + 12345, dtype=np.uint8)
    assert write_direct(str(tmp_path / "mid"), [mid[:1000], mid[1000:]], 6 << 20) == len(mid)
    assert flags == [True]
    data = (tmp_path / "mid").read_bytes()
    assert len(data) == 6 << 20 and data[:len(mid)] == mid.tobytes() and not any(data[len(mid):])
    flags.clear()
    write_direct(str(tmp_path / "below"), [bytes(direct_io.MIN_DIRECT_FILL - 1)])
    assert flags == [False]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3 * ALIGN + 7)), max_size=10),
       st.integers(1, 3), st.one_of(st.none(), st.integers(0, 1 << 16)))
def test_placed_chunks_are_written_from_where_they_are_same_bytes(tmp_path_factory, parts, scale, total):
    """Chunks made by ``placed`` for their file position, among ordinary ones and of any size
    against the buffers: the file holds the same bytes as a buffered write of them, and the
    bytes before each placed chunk's own are the writer's to use (nothing else is written to)."""
    d = tmp_path_factory.mktemp("d")
    if not _direct_ok(d):
        pytest.skip("this file system refuses O_DIRECT")
    rng = np.random.default_rng(len(parts))
    chunks, pos, n_placed = [], 0, 0
    for is_placed, n in parts:
        n *= scale if is_placed else 1
        data = rng.integers(0, 256, n, dtype=np.uint8)
        if is_placed:
            c = direct_io.placed(n, pos)
            assert c.pre == pos % ALIGN and (not n or c.owner.ctypes.data % ALIGN == 0)
            c[:] = data
            n_placed += n >= ALIGN
            chunks.append(c)
        else:
            chunks.append(data)
        pos += n
    expect = _expect([np.asarray(c) for c in chunks], total)
    p = str(d / "f")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(direct_io, "MIN_PLACED", ALIGN)
        assert write_direct(p, chunks, total) == pos
    with open(p, "rb") as fh:
        assert fh.read() == expect


def test_a_split_of_placed_chunks_is_written_without_copying_them(tmp_path, monkeypatch):
    """The staged records of a split (chunks placed at their positions, as the encode task makes
    them): the same bytes, each chunk written from where it is (only the block it shares with
    the chunk before is copied)."""
    if not _direct_ok(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    in_place = []
    real = direct_io._Writer._write_placed

    def counting(self, data):
        in_place.append(len(data))
        real(self, data)
    monkeypatch.setattr(direct_io._Writer, "_write_placed", counting)
    sizes = [3 * BUFFER_SIZE + 123, 2 * BUFFER_SIZE + 4001, BUFFER_SIZE // 2 + 1]
    rng = np.random.default_rng(5)
    chunks, pos = [], 0
    for n in sizes:
        c = direct_io.placed(n, pos)
        c[:] = rng.integers(0, 256, n, dtype=np.uint8)
        chunks.append(c)
        pos += n
    p = str(tmp_path / "records")
    assert write_direct(p, chunks) == pos
    with open(p, "rb") as fh:
        assert fh.read() == b"".join(np.asarray(c).tobytes() for c in chunks)
    assert in_place == sizes
