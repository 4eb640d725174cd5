"""LazyFS: mount the crash simulator over a directory, run things on it, then crash it anywhere.

    with LazyFS(backing_dir) as fs:                 # mounts on a temporary directory
        subprocess.run([..., fs.mountpoint], check=True)    # real programs, unmodified
        fs.mark("committed")                        # a labelled point in the trace
    for k in fs.cut_points():                       # after each fsync, rename, link, mark
        state = fs.crash_state(k, tmp / f"crash-{k}")       # an ordinary directory tree
        check_store(state)                          # opened with normal code, no FUSE

The mount is a passthrough FUSE file system (``passthrough.py``) in its own process: the backing
directory always holds what processes see (the volatile state, i.e. the page cache), while the
process records which inode contents and which directory entries an fsync made durable
(``recorder.py``) and numbers every state-changing operation (``trace.py``). ``crash_state(k)``
replays that record (``durable.py``): the state a power cut right after event k leaves.

The durability model is LazyFS's / ALICE's conservative one: fsync(file) persists that inode's
bytes, fsync(directory) persists its names -> inodes, nothing else persists. It cannot model:

* a device that lies about flushes, or loses data it acknowledged (fsync is taken as the truth);
* partial sector or torn-page writes inside one write(2) (a write is kept whole or not at all);
  reordering of un-fsync'd writes only when torn states are asked for (``record_writes=True``
  and ``crash_state_random``, which keep a random subset of the whole un-fsync'd writes, but
  not un-fsync'd truncates);
* file systems that are stronger than the model (ext4 data=ordered persisting a rename's data,
  the "rename is durable with its file" of btrfs/xfs heuristics): a test passing here passes there;
* metadata other than names, sizes and bytes: modes, owners, times, xattrs are not recorded;
* fsync errors (the backing is never really synced; only the freeze point makes calls fail);
* mmap'd pages the kernel has not written back to us: in no trace event, not durable (as on a
  real crash); msync(MS_SYNC) writes them back and is an fsync, as on Linux;
* after a freeze, what the kernel serves from its own caches (attributes for a second, pages
  read before) may still be read; every write, sync and namespace change fails.

Marks: ``fs.mark(label)``, or any process writing a label to ``<mount>/.crashfs/mark`` (hidden
from listings), records a ``mark`` event: "the operation under test returned here".

Freeze: ``LazyFS(..., freeze_after=k)`` or ``fs.freeze()`` cuts the power at a point of a live
run: every later operation on the mount fails with EIO (the process under test sees the crash),
and ``crash_state(fs.frozen_at)`` is what survives.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref

from .availability import unavailable_reason
from .durable import DurableState, Recording
from .trace import CUT_KINDS, Event

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MountError(RuntimeError):
    pass


def _fusermount_u(mountpoint: str, lazy: bool = False) -> bool:
    cmd = ["fusermount3", "-u", "-q"] + (["-z"] if lazy else []) + [mountpoint]
    return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def _is_mounted(mountpoint: str) -> bool:
    real = os.path.realpath(mountpoint)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == real for line in f)


class LazyFS:
    """A crash-simulator mount over backing_dir (a context manager; see the module docstring).

    workdir: where the mount point and the run's record go (default: a new temporary directory,
    removed when this object is collected or ``cleanup()`` is called). The record outlives the
    mount: crash states are made after the ``with`` block, from the record alone.
    """

    def __init__(self, backing_dir: str | os.PathLike, *, workdir: str | os.PathLike | None = None,
                 freeze_after: int | None = None, record_writes: bool = False,
                 mount_timeout: float = 20.0):
        reason = unavailable_reason()
        if reason:
            raise MountError(reason)
        self.backing = os.path.abspath(os.fspath(backing_dir))
        if not os.path.isdir(self.backing):
            raise NotADirectoryError(self.backing)
        if workdir is not None and os.path.realpath(workdir).startswith(os.path.realpath(self.backing) + os.sep):
            raise ValueError("the workdir (mount point, record) must not be inside the backing directory")
        self._own_workdir = workdir is None
        self.workdir = tempfile.mkdtemp(prefix="crashfs-") if workdir is None else os.fspath(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.mountpoint = tempfile.mkdtemp(prefix="mnt-", dir=self.workdir)
        self.state_dir = tempfile.mkdtemp(prefix="record-", dir=self.workdir)
        self.recording = Recording(self.state_dir)
        self.freeze_after = freeze_after
        self.record_writes = record_writes
        self.mount_timeout = mount_timeout
        self._proc: subprocess.Popen | None = None
        self._log_path = os.path.join(self.state_dir, "fs.log")
        if self._own_workdir:
            self._finalizer = weakref.finalize(self, shutil.rmtree, self.workdir, True)

    # ------------------------------------------------------------------ mount / unmount
    def __enter__(self) -> "LazyFS":
        self.mount()
        return self

    def __exit__(self, *exc) -> None:
        self.unmount()

    @property
    def mounted(self) -> bool:
        return self._proc is not None

    def mount(self) -> None:
        if self._proc is not None:
            raise MountError("already mounted")
        cmd = [sys.executable, "-m", "crashfs.passthrough", self.backing, self.mountpoint, self.state_dir,
               "--parent", str(os.getpid())]
        if self.freeze_after is not None:
            cmd += ["--freeze-after", str(self.freeze_after)]
        if self.record_writes:
            cmd.append("--record-writes")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_PKG_PARENT, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        log = open(self._log_path, "ab")
        try:
            self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                          close_fds=True)
        finally:
            log.close()
        deadline = time.monotonic() + self.mount_timeout
        while not _is_mounted(self.mountpoint):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self._stop_process()
                raise MountError(f"crashfs did not mount on {self.mountpoint}: {self.log_tail()}")
            time.sleep(0.01)

    def unmount(self, timeout: float = 10.0) -> None:
        """Unmount and stop the file system process, whatever state they are in: a clean unmount
        (retried while the mount is busy), then a lazy one, then the process is killed."""
        if self._proc is None:
            return
        try:
            deadline = time.monotonic() + timeout / 2
            while _is_mounted(self.mountpoint) and not _fusermount_u(self.mountpoint):
                if time.monotonic() > deadline:
                    _fusermount_u(self.mountpoint, lazy=True)
                    break
                time.sleep(0.05)
            try:
                self._proc.wait(timeout / 2)
            except subprocess.TimeoutExpired:
                pass
        finally:
            self._stop_process()
        self.recording.reload()

    def _stop_process(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)     # libfuse: leave the loop, unmount, exit
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if _is_mounted(self.mountpoint):         # a dead server leaves a "not connected" mount
            _fusermount_u(self.mountpoint, lazy=True)

    def cleanup(self) -> None:
        """Unmount, and remove the workdir if it is ours."""
        self.unmount()
        if self._own_workdir:
            self._finalizer()

    def log_tail(self, lines: int = 20) -> str:
        try:
            with open(self._log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:]).strip() or "(no output)"
        except OSError:
            return "(no log)"

    # ------------------------------------------------------------------ the live mount
    def path(self, *parts: str) -> str:
        """A path on the mount."""
        return os.path.join(self.mountpoint, *parts)

    def _control(self, name: str, data: str) -> None:
        fd = os.open(os.path.join(self.mountpoint, ".crashfs", name), os.O_WRONLY)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)

    def mark(self, label: str) -> int:
        """Record a mark event (a labelled cut point); returns its number. Processes on the mount
        can mark too: write the label to ``<mount>/.crashfs/mark``."""
        self._control("mark", label)
        self._reload()
        return [e.n for e in self.recording.events if e.kind == "mark"][-1]

    def freeze(self) -> int:
        """Cut the power now: every later operation fails with EIO. Returns the freeze event's
        number (its crash state is the state at the power cut)."""
        self._control("freeze", "1")
        self._reload()
        return self.frozen_at

    def _reload(self) -> None:
        if self._proc is not None:
            self._control("flush", "1")     # a write event still being coalesced, to the trace
        self.recording.reload()

    # ------------------------------------------------------------------ the record
    @property
    def events(self) -> list[Event]:
        """The trace (live: as far as recorded; after unmount: complete)."""
        if self._proc is not None:
            self._reload()
        return self.recording.events

    def event(self, n: int) -> Event:
        _ = self.events  # reloads the live trace
        return self.recording.event(n)

    @property
    def last(self) -> int:
        """The last event's number."""
        return self.events[-1].n

    @property
    def frozen_at(self) -> int | None:
        """The event after which the power was cut, if it was."""
        for ev in self.events:
            if ev.kind == "freeze":
                return ev.n
        if self.freeze_after is not None and self.events and self.events[-1].n >= self.freeze_after:
            return self.freeze_after
        return None

    def cut_points(self, kinds: tuple[str, ...] = CUT_KINDS, **kw) -> list[int]:
        _ = self.events  # reloads the live trace
        return self.recording.cut_points(kinds, **kw)

    def durable_state(self, k: int) -> DurableState:
        _ = self.events  # reloads the live trace
        return self.recording.durable_state(k)

    def crash_state(self, k: int, dest: str | os.PathLike) -> str:
        _ = self.events  # reloads the live trace
        return self.recording.crash_state(k, os.fspath(dest))

    def crash_states(self, dest_root: str | os.PathLike, kinds: tuple[str, ...] = CUT_KINDS, **cut_kw):
        """(event, crash state directory) for each cut point, made one at a time under dest_root
        (ALICE-style: run once, check the state after every fsync, rename, link and mark)."""
        for k in self.cut_points(kinds, **cut_kw):
            yield self.event(k), self.crash_state(k, os.path.join(os.fspath(dest_root), f"crash-{k:05d}"))

    def crash_state_random(self, k: int, dest: str | os.PathLike, seed: int, keep: float = 0.5) -> str:
        _ = self.events  # reloads the live trace
        return self.recording.crash_state_random(k, os.fspath(dest), seed, keep)
