"""The crash simulator's own tests: each durability rule of the model, the POSIX calls real
programs make on it, and what a power cut does to a delta-rs write. Small and fast, no Spark."""
from __future__ import annotations

import ctypes
import errno
import json
import os
import subprocess
import sys
import time

import pytest

from support.crashfs import LazyFS, unavailable_reason

_REASON = unavailable_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


@pytest.fixture
def backing(tmp_path):
    d = tmp_path / "backing"
    d.mkdir()
    return d


@pytest.fixture
def mount(backing, tmp_path):
    """mount(**options): a LazyFS over `backing`, its record under tmp_path; always unmounted."""
    made = []

    def make(**kw) -> LazyFS:
        fs = LazyFS(backing, workdir=tmp_path / f"fs{len(made)}", **kw)
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.unmount()
        assert not fs.mounted


def write_file(path, data: bytes, *, fsync: bool = False) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def fsync_dir(path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tree(root) -> dict[str, bytes]:
    """{relative path: bytes} of the regular files under root (directories as b'<dir>')."""
    out = {}
    for here, dirs, files in os.walk(root):
        rel = os.path.relpath(here, root)
        for d in dirs:
            out[os.path.normpath(os.path.join(rel, d))] = b"<dir>"
        for f in files:
            with open(os.path.join(here, f), "rb") as fh:
                out[os.path.normpath(os.path.join(rel, f))] = fh.read()
    return out


def state(fs: LazyFS, k: int, tmp_path) -> dict[str, bytes]:
    return tree(fs.crash_state(k, tmp_path / f"crash-{id(fs)}-{k}"))


# ---------------------------------------------------------------- the durability rules

def test_unsynced_write_is_lost(backing, mount, tmp_path):
    (backing / "f").write_bytes(b"old")
    with mount() as fs:
        write_file(fs.path("f"), b"new content")
        assert open(fs.path("f"), "rb").read() == b"new content"      # what processes see
    assert (backing / "f").read_bytes() == b"new content"
    assert state(fs, fs.last, tmp_path) == {"f": b"old"}


def test_fsynced_file_survives(backing, mount, tmp_path):
    (backing / "f").write_bytes(b"old")
    with mount() as fs:
        write_file(fs.path("f"), b"new", fsync=False)
        before = fs.mark("before fsync")
        fd = os.open(fs.path("f"), os.O_RDWR)
        os.fdatasync(fd)          # fdatasync counts like fsync
        os.close(fd)
    sync = [e for e in fs.events if e.kind == "fsync-file"]
    assert len(sync) == 1 and sync[0].data["datasync"] is True
    assert state(fs, before, tmp_path) == {"f": b"old"}
    assert state(fs, sync[0].n, tmp_path) == {"f": b"new"}


def test_created_file_fsynced_without_dir_fsync_is_gone(backing, mount, tmp_path):
    with mount() as fs:
        write_file(fs.path("new"), b"data", fsync=True)
    assert "fsync-file" in [e.kind for e in fs.events]
    for k in fs.cut_points():
        assert state(fs, k, tmp_path) == {}


def test_dir_fsync_without_file_fsync_gives_an_empty_file(backing, mount, tmp_path):
    with mount() as fs:
        write_file(fs.path("commit.json"), b'{"add": 1}')
        fsync_dir(fs.mountpoint)
        dirsync = fs.events[-1].n
        write_file(fs.path("commit.json"), b'{"add": 1}', fsync=True)
    assert fs.event(dirsync).kind == "fsync-dir"
    assert state(fs, dirsync, tmp_path) == {"commit.json": b""}
    assert state(fs, fs.last, tmp_path) == {"commit.json": b'{"add": 1}'}


def test_rename_without_dir_fsync_reverts(backing, mount, tmp_path):
    (backing / "table").write_bytes(b"v1")
    with mount() as fs:
        write_file(fs.path("table.tmp"), b"v2", fsync=True)
        os.replace(fs.path("table.tmp"), fs.path("table"))
        assert open(fs.path("table"), "rb").read() == b"v2"
        renamed = fs.events[-1].n
        fsync_dir(fs.mountpoint)
    assert fs.event(renamed).kind == "rename"
    assert state(fs, renamed, tmp_path) == {"table": b"v1"}
    assert state(fs, fs.last, tmp_path) == {"table": b"v2"}


def test_hard_link_and_dir_fsync(backing, mount, tmp_path):
    with mount() as fs:
        write_file(fs.path("x"), b"payload", fsync=True)
        fsync_dir(fs.mountpoint)
        os.link(fs.path("x"), fs.path("y"))
        assert os.stat(fs.path("x")).st_ino == os.stat(fs.path("y")).st_ino
        linked = fs.events[-1].n
        fsync_dir(fs.mountpoint)
    assert fs.event(linked).kind == "link"
    assert state(fs, linked, tmp_path) == {"x": b"payload"}
    last = fs.crash_state(fs.last, tmp_path / "last")
    assert tree(last) == {"x": b"payload", "y": b"payload"}
    assert os.stat(os.path.join(last, "x")).st_ino == os.stat(os.path.join(last, "y")).st_ino


def test_unlink_reverts_without_dir_fsync(backing, mount, tmp_path):
    (backing / "keep").write_bytes(b"k")
    (backing / "gone").write_bytes(b"g")
    with mount() as fs:
        os.unlink(fs.path("gone"))
        assert sorted(os.listdir(fs.mountpoint)) == ["keep"]
        unlinked = fs.events[-1].n
        fsync_dir(fs.mountpoint)
    assert fs.event(unlinked).kind == "unlink"
    assert state(fs, unlinked, tmp_path) == {"keep": b"k", "gone": b"g"}
    assert state(fs, fs.last, tmp_path) == {"keep": b"k"}


def test_truncate(backing, mount, tmp_path):
    (backing / "f").write_bytes(b"0123456789" * 10)
    with mount() as fs:
        os.truncate(fs.path("f"), 10)
        assert os.path.getsize(fs.path("f")) == 10
        cut = fs.mark("path truncate")
        fd = os.open(fs.path("f"), os.O_RDWR)
        os.ftruncate(fd, 4)
        os.fsync(fd)
        os.close(fd)
    kinds = [e.kind for e in fs.events]
    assert kinds.count("truncate") == 2
    assert state(fs, cut, tmp_path) == {"f": b"0123456789" * 10}
    assert state(fs, fs.last, tmp_path) == {"f": b"0123"}


def test_mkdir_and_rmdir_need_a_parent_fsync(backing, mount, tmp_path):
    (backing / "old").mkdir()
    with mount() as fs:
        os.mkdir(fs.path("d"))
        os.rmdir(fs.path("old"))
        changed = fs.events[-1].n
        fsync_dir(fs.mountpoint)
    assert state(fs, changed, tmp_path) == {"old": b"<dir>"}
    assert state(fs, fs.last, tmp_path) == {"d": b"<dir>"}


def test_memmap_write_flush_fsync_survives(backing, mount, tmp_path):
    np = pytest.importorskip("numpy")
    with mount() as fs:
        path = fs.path("cq.bin")
        m = np.memmap(path, dtype=np.int64, mode="w+", shape=(1024,))
        m[:] = np.arange(1024)          # dirty pages in the kernel: nothing reached the file system
        fsync_dir(fs.mountpoint)        # the name is durable, its bytes not
        dirsync = fs.last
        m.flush()                       # msync(MS_SYNC): the kernel writes the pages, then FSYNC
        flushed = fs.last
        fd = os.open(path, os.O_RDWR)
        os.fsync(fd)
        os.close(fd)
        del m
    assert fs.event(dirsync).kind == "fsync-dir"
    assert [e.kind for e in fs.events[dirsync + 1:flushed + 1]] == ["write", "fsync-file"]
    assert state(fs, dirsync, tmp_path) == {"cq.bin": b""}
    for k in (flushed, fs.last):
        after = fs.crash_state(k, tmp_path / f"after{k}")
        assert (np.fromfile(os.path.join(after, "cq.bin"), dtype=np.int64) == np.arange(1024)).all()


def test_preallocated_files_stay_sparse(backing, mount, tmp_path):
    """A 256 MiB preallocated segment with 4 KiB of data: copies and crash states hold the data,
    not the zeros (copy-on-fsync would otherwise copy the whole size at every fsync)."""
    size = 256 << 20
    with mount() as fs:
        fd = os.open(fs.path("00000000000000000000"), os.O_CREAT | os.O_RDWR, 0o644)
        os.ftruncate(fd, size)
        os.pwrite(fd, b"m" * 4096, 10 << 20)
        os.fsync(fd)
        os.close(fd)
        fsync_dir(fs.mountpoint)
    blobs = os.path.join(fs.state_dir, "blobs")
    assert sum(os.stat(os.path.join(blobs, b)).st_blocks for b in os.listdir(blobs)) * 512 < 1 << 20
    seg = os.path.join(fs.crash_state(fs.last, tmp_path / "s"), "00000000000000000000")
    st = os.stat(seg)
    assert st.st_size == size and st.st_blocks * 512 < 1 << 20
    with open(seg, "rb") as f:
        f.seek((10 << 20) - 1)
        assert f.read(4098) == b"\0" + b"m" * 4096 + b"\0"


# ---------------------------------------------------------------- real programs' calls

def test_posix_calls_programs_make(backing, mount):
    with mount() as fs:
        fd = os.open(fs.path("seg"), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        with pytest.raises(FileExistsError):
            os.open(fs.path("seg"), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        os.pwrite(fd, b"tail", 1 << 20)
        os.pwrite(fd, b"head", 0)
        assert os.pread(fd, 4, 1 << 20) == b"tail"
        assert os.fstat(fd).st_size == (1 << 20) + 4
        os.close(fd)
        with open(fs.path("seg"), "ab") as f:          # O_APPEND goes to the end
            f.write(b"!")
        assert open(fs.path("seg"), "rb").read()[-5:] == b"tail!"
        os.rename(fs.path("seg"), fs.path("seg2"))
        assert os.listdir(fs.mountpoint) == ["seg2"]
        os.symlink("seg2", fs.path("ln"))
        assert os.readlink(fs.path("ln")) == "seg2" and open(fs.path("ln"), "rb").read(4) == b"head"
        os.utime(fs.path("seg2"), ns=(10**18, 10**18))
        assert os.stat(fs.path("seg2")).st_mtime_ns == 10**18
        try:
            fd = os.open(fs.path("seg2"), os.O_RDONLY | os.O_DIRECT)
        except OSError as e:           # refusing O_DIRECT is allowed: the project falls back
            assert e.errno == errno.EINVAL
        else:
            os.close(fd)
        # an unlinked file stays usable through its open fd, and leaves no hidden name behind
        fd = os.open(fs.path("seg2"), os.O_RDWR)
        os.unlink(fs.path("seg2"))
        os.pwrite(fd, b"x", 0)
        os.fsync(fd)
        os.close(fd)
        assert sorted(os.listdir(fs.mountpoint)) == ["ln"]


RENAME_NOREPLACE = 1


def test_rename_noreplace_is_honoured(backing, mount):
    libc = ctypes.CDLL(None, use_errno=True)
    with mount() as fs:
        write_file(fs.path("a"), b"a")
        write_file(fs.path("b"), b"b")
        rc = libc.renameat2(-100, fs.path("a").encode(), -100, fs.path("b").encode(), RENAME_NOREPLACE)
        assert rc == -1 and ctypes.get_errno() == errno.EEXIST
        assert open(fs.path("b"), "rb").read() == b"b"
        rc = libc.renameat2(-100, fs.path("a").encode(), -100, fs.path("c").encode(), RENAME_NOREPLACE)
        assert rc == 0 and sorted(os.listdir(fs.mountpoint)) == ["b", "c"]
    assert [e.data["flags"] for e in fs.events if e.kind == "rename"] == [RENAME_NOREPLACE]


def test_marks_from_a_subprocess_and_cut_points(backing, mount, tmp_path):
    with mount() as fs:
        script = ("import os, sys\n"
                  "m = sys.argv[1]\n"
                  "open(os.path.join(m, 'f'), 'w').write('1')\n"
                  "open(os.path.join(m, '.crashfs', 'mark'), 'w').write('written')\n"
                  "fd = os.open(m, os.O_RDONLY); os.fsync(fd); os.close(fd)\n")
        subprocess.run([sys.executable, "-c", script, fs.mountpoint], check=True, timeout=60)
        assert ".crashfs" not in os.listdir(fs.mountpoint)
    marks = fs.recording.marks()
    assert list(marks) == ["written"]
    kinds = {k: fs.event(k).kind for k in fs.cut_points()}
    assert kinds == {0: "mount", marks["written"]: "mark", fs.last: "fsync-dir"}
    # a dir fsync with the file's bytes never synced: the distinct states are {} and {f: b""}
    assert [state(fs, k, tmp_path) for k in fs.cut_points(distinct=True)] == [{}, {"f": b""}]


def test_freeze_fails_everything_after_the_power_cut(backing, mount, tmp_path):
    with mount() as fs:
        write_file(fs.path("a"), b"A", fsync=True)
        fsync_dir(fs.mountpoint)
        at = fs.freeze()
        with pytest.raises(OSError) as e:
            write_file(fs.path("b"), b"B")
        assert e.value.errno == errno.EIO
        with pytest.raises(OSError):
            os.listdir(fs.mountpoint)
    assert fs.frozen_at == at and fs.last == at
    assert state(fs, at, tmp_path) == {"a": b"A"}


def test_freeze_after_an_event_number(backing, mount, tmp_path):
    with mount(freeze_after=2) as fs:           # 0 mount, 1 create, 2 write: then the power goes
        with pytest.raises(OSError) as e:
            write_file(fs.path("a"), b"A", fsync=True)
        assert e.value.errno == errno.EIO
    assert [e.kind for e in fs.events] == ["mount", "create", "write"]
    assert fs.frozen_at == 2


def test_torn_states_keep_some_unsynced_writes(backing, mount, tmp_path):
    (backing / "f").write_bytes(b"." * 8)
    with mount(record_writes=True) as fs:
        fd = os.open(fs.path("f"), os.O_RDWR)
        for i in range(8):
            os.pwrite(fd, b"x", i)
        os.close(fd)
    seen = {tree(fs.crash_state_random(fs.last, tmp_path / f"torn{s}", seed=s))["f"]
            for s in range(20)}
    assert b"." * 8 not in seen or len(seen) > 1
    assert len(seen) > 2 and all(len(v) == 8 and set(v) <= {ord("."), ord("x")} for v in seen)


def test_a_failing_test_still_unmounts(backing, mount):
    fs = mount()
    with pytest.raises(RuntimeError, match="the test failed"):
        with fs:
            pid = fs._proc.pid
            write_file(fs.path("f"), b"x")
            raise RuntimeError("the test failed")
    assert not fs.mounted and not os.path.ismount(fs.mountpoint)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert [e.kind for e in fs.events] == ["mount", "create", "write"]


def test_unmount_never_waits_forever_on_a_busy_mount(backing, mount):
    fs = mount()
    fs.mount()
    f = open(fs.path("held"), "wb")
    t = time.monotonic()
    fs.unmount(timeout=2)
    assert time.monotonic() - t < 10
    assert not fs.mounted and not os.path.ismount(fs.mountpoint)
    with pytest.raises(OSError):
        f.write(b"x")
        f.flush()
    try:
        f.close()
    except OSError:
        pass


def test_write_throughput(backing, mount):
    """50 MB through the mount and one fsync (copy-on-fsync): seconds, not minutes."""
    block = os.urandom(1 << 20)
    with mount() as fs:
        t = time.monotonic()
        with open(fs.path("big"), "wb") as f:
            for _ in range(50):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        elapsed = time.monotonic() - t
    assert os.path.getsize(backing / "big") == 50 << 20
    assert elapsed < 30, f"50 MB took {elapsed:.1f} s"


# ---------------------------------------------------------------- delta-rs on the mount

DELTA_WRITE = """
import os, sys
import pyarrow as pa
from deltalake import write_deltalake
write_deltalake(sys.argv[1], pa.table({"x": list(range(100, 200))}), mode="append")
sys.stdout.flush()
os._exit(0)   # delta-rs/pyarrow sometimes abort at interpreter exit (not ours): skip the teardown
"""


def _delta_read(path) -> tuple[int, int] | str:
    """(version, rows) of the Delta table at path, or the error reading it."""
    from deltalake import DeltaTable
    try:
        t = DeltaTable(str(path))
        return t.version(), t.to_pyarrow_table().num_rows
    except Exception as e:  # noqa: BLE001 - any failure to read is the answer compared
        return f"{type(e).__name__}: {e}"


def test_deltalake_write_is_not_crash_safe(backing, mount, tmp_path):
    """delta-rs writes its parquet and its log entry (temp file + link) without any fsync: a crash
    after its write returns keeps nothing of it; a caller that then fsyncs the log directory alone
    publishes an empty commit (read as an empty version 1: rows lost, version taken); fsyncing
    the log entry too still leaves the data file, whose directory nobody synced, missing, and the
    table unreadable. This is what rocketlake's commit code works around."""
    pytest.importorskip("deltalake")
    import pyarrow as pa
    from deltalake import write_deltalake
    table = backing / "t"
    write_deltalake(str(table), pa.table({"x": list(range(100))}))     # version 0: durable at mount
    with mount() as fs:
        subprocess.run([sys.executable, "-c", DELTA_WRITE, fs.path("t")], check=True, timeout=120)
        wrote = fs.mark("delta-rs write returned")
        log = fs.path("t", "_delta_log")
        commit = os.path.join(log, f"{1:020d}.json")
        assert os.path.getsize(commit) > 0
        fsync_dir(log)                                   # a naive caller: the log dir only
        dir_synced = fs.mark("log dir fsync'd")
        fd = os.open(commit, os.O_RDONLY)
        os.fsync(fd)                                     # ... then the commit file too
        os.close(fd)
        log_synced = fs.mark("commit fsync'd")
    delta_events = [e for e in fs.events if 0 < e.n < wrote]
    kinds = {e.kind for e in delta_events}
    assert not kinds & {"fsync-file", "fsync-dir"}, "delta-rs now fsyncs: revisit this test"
    assert "link" in kinds or "rename" in kinds

    outcomes = {}
    for ev, dest in fs.crash_states(tmp_path / "delta"):
        k = ev.n
        t = os.path.join(dest, "t")
        entry = os.path.join(t, "_delta_log", f"{1:020d}.json")
        size = os.path.getsize(entry) if os.path.exists(entry) else None
        missing = []
        if size:
            for line in open(entry):
                add = json.loads(line).get("add")
                if add and not os.path.exists(os.path.join(t, add["path"])):
                    missing.append(add["path"])
        outcomes[k] = (size, missing, _delta_read(t))

    # every crash up to the moment delta-rs returned: the table as it was at mount
    for k in fs.cut_points(stop=wrote):
        assert outcomes[k] == (None, [], (0, 100)), (fs.event(k), outcomes[k])
    # the log dir fsync'd: an empty commit file. delta-rs reads it as a version without actions:
    # the appended rows are silently gone and version 1 is taken (the next writer's 1 conflicts)
    assert outcomes[dir_synced] == (0, [], (1, 100)), outcomes[dir_synced]
    # the commit fsync'd too: the log names a data file that did not survive; unreadable
    size, missing, read = outcomes[log_synced]
    assert size > 0 and len(missing) == 1 and isinstance(read, str), outcomes[log_synced]
    assert outcomes[fs.last] == outcomes[log_synced]
