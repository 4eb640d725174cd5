"""The writer lease: one writer per store at a time (``_rocketlake/writer.lock``).

Ingest, expire, adopt, repair and the mirror take it before they plan and check it before each
Delta commit: a writer that lost it (taken over, or not renewed for too long) never commits. The
conditional Delta commits stay the real guard against racing writers; the lease makes the loser
fail early and clearly.

On a local store the lease is held under the broker lock (``io.brokerlock``, shared), taken
first and let go last: a RocketMQ broker running on the directory (a store adopted in place, or a
store a broker was started on), or a repair or in-place adopt of it, refuses the writer
(``BrokerRunning``, exit 3) before anything is written, and no broker starts on the directory
while the lease is held.
"""
from __future__ import annotations

from typing import Any

import json
import os
import socket
import threading
import time
import uuid

from ..errors import ConcurrentWriteError, CorruptStore, LeaseLost
from ..format.paths import LEASE_PATH, META_DIR
from ..io import condput, storage
from ..io.brokerlock import BrokerLock, hold_broker_lock, remove_made_dir
from .manifest import now_ms

__all__ = ["LEASE_TTL_S", "LEASE_RENEW_S", "WriterLease"]

LEASE_TTL_S = float(os.environ.get("ROCKETLAKE_LEASE_TTL", "600"))
# A quarter of the time to live, with no floor: ``check`` counts a holder idle for half of it as
# stalled, so a renewal period of half the TTL or more (1 s under a 2 s TTL) makes the keeper thread
# find its own lease lost on its first round, and a cycle longer than the TTL could never commit.
LEASE_RENEW_S = min(60.0, LEASE_TTL_S / 4) if LEASE_TTL_S > 0 else 1.0


class WriterLease:
    """One ingest at a time per store: ``_rocketlake/writer.lock``, created exclusively.

    The file holds the batch id, host, pid, start and last renewal time (ms). The holder renews
    it while it runs (Progress thread). A lease is **stale**, and is taken over, when its holder
    ran on this host and that pid is gone (a SIGKILLed driver), or when it was not renewed for
    ``ROCKETLAKE_LEASE_TTL`` seconds (default 600; a holder on another host that died).
    ``ROCKETLAKE_LEASE_TTL=0`` turns leases off: every lease is stale, any writer takes it over
    and none checks it before committing, so only the conditional Delta commits decide (the
    tests of racing writers use it to prove that guard on its own).

    On a local file system creation is atomic (``O_CREAT|O_EXCL``) and a takeover renames the
    stale file away first, so of two takers one wins. Object stores without a conditional create
    (pyarrow.fs) get a best-effort lease (write, then read back). Either way the lease only makes
    the loser fail early and clearly: the conditional Delta commits remain the real guard.
    """

    def __init__(self, store: storage.Store, batch_id: str):
        self.store = store
        self.batch_id = batch_id
        self.token = uuid.uuid4().hex
        self.held = False
        self.lost: str | None = None        # why the lease is gone, once it is
        self._lock = threading.Lock()         # renewals from the keeper thread and from check()
        self._broker: BrokerLock | None = None

    def _content(self, started: int | None = None) -> bytes:
        now = now_ms()
        return (json.dumps({"batch_id": self.batch_id, "host": socket.gethostname(), "pid": os.getpid(),
                            "token": self.token, "started_ms": started or now, "renewed_ms": now},
                           sort_keys=True) + "\n").encode()

    def read(self) -> dict[Any, Any] | None:
        """The lease file's content; None without one, ``{}`` for one that cannot be read (a
        writer died writing it, or a power cut left it empty): stale. Something no writer
        leaves there (a directory, JSON whose fields have other types) is ``CorruptStore``
        naming the file: nobody's lease, so not one to take over either."""
        if self.store.os_paths and os.path.isdir(self.store.path(LEASE_PATH)):
            raise CorruptStore(LEASE_PATH, 0, f"is a directory, not a writer lease: {_REMOVE}")
        try:
            data = self.store.read(LEASE_PATH)
        except OSError:
            return None if not self.store.exists(LEASE_PATH) else {}
        try:
            doc = json.loads(data.decode())
        except ValueError:
            return {}
        if not isinstance(doc, dict):
            return {}
        wrong = [f"{k} {doc[k]!r}" for k, t in _FIELDS.items() if k in doc and not _typed(doc[k], t)]
        if wrong:
            raise CorruptStore(LEASE_PATH, 0, f"writer lease with {', '.join(wrong)} (not what a writer writes): "
                                              f"{_REMOVE}")
        return doc

    @staticmethod
    def is_stale(holder: dict[Any, Any] | None) -> bool:
        if not holder:
            return True           # unreadable / half-written by a writer that died creating it
        if holder.get("host") == socket.gethostname() and not _pid_alive(int(holder.get("pid", -1))):
            return True
        return now_ms() - int(holder.get("renewed_ms", 0)) > LEASE_TTL_S * 1000

    def acquire(self) -> None:
        # a server that ignores conditional puts is refused before anything is written (exit 2)
        condput.require_conditional_put(self.store.uri)
        made_root = self._hold_broker_lock()        # BrokerRunning: nothing written
        try:
            for _ in range(3):
                if self._create():
                    self.held = True
                    self._started = now_ms()
                    self._renewed = _clocks()
                    self._keep()
                    return
                holder = self.read()
                if holder is None:
                    continue          # released meanwhile: try again
                if not self.is_stale(holder):
                    raise ConcurrentWriteError(
                        f"the store is being written by batch {holder.get('batch_id')!r} (pid {holder.get('pid')} "
                        f"on {holder.get('host')}, lease {LEASE_PATH} renewed "
                        f"{(now_ms() - int(holder.get('renewed_ms', 0))) / 1000:.0f}s ago)")
                self._break(holder)
            raise ConcurrentWriteError(f"could not take the writer lease {LEASE_PATH}: other writers keep taking it")
        except BaseException:
            self._release_broker_lock()
            if made_root:
                _remove_made(self.store.root)
            raise

    def _hold_broker_lock(self) -> bool:
        """A local store's broker lock, held shared (the store's directory made first when there is
        none yet, so that no broker starts on a first batch either; its ``lock`` then stays in
        it, as every ``lock`` does); whether the directory was made."""
        if not self.store.local:
            return False
        made = not os.path.isdir(self.store.root)
        if made:
            os.makedirs(self.store.root, exist_ok=True)
        try:
            self._broker = hold_broker_lock(self.store, create=True, shared=True)
        except BaseException:
            if made:
                _remove_made(self.store.root)
            raise
        return made

    def _release_broker_lock(self) -> None:
        broker, self._broker = self._broker, None
        if broker is not None:
            broker.release()

    def _create(self) -> bool:
        data = self._content()
        if self.store.atomic_rename:
            path = self.store.path(LEASE_PATH)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            return True
        if self.store.exists(LEASE_PATH):
            return False
        self.store.write_file(LEASE_PATH, [data])
        got = self.read() or {}
        return got.get("token") == self.token

    def _break(self, holder: dict[Any, Any]) -> None:
        if self.store.atomic_rename:
            path = self.store.path(LEASE_PATH)
            aside = f"{path}.stale-{self.token}"
            try:
                os.rename(path, aside)        # only one taker gets the stale file
            except FileNotFoundError:
                return
            got = None
            try:
                with open(aside, "rb") as fh:
                    got = json.loads(fh.read().decode() or "null")
            except (OSError, ValueError):
                pass
            if got and holder and got.get("token") != holder.get("token") and not self.is_stale(got):
                os.rename(aside, path)        # it was renewed/retaken meanwhile: put it back
                return
            os.unlink(aside)
            return
        self.store.delete(LEASE_PATH)

    def renew(self) -> None:
        """Write a fresh renewal time, if the lease is still this writer's (else ``LeaseLost``,
        and every later ``check`` fails too)."""
        with self._lock:
            if not self.held:
                return
            self._still_mine()
            self._write_renewal()

    def _write_renewal(self) -> None:
        data = self._content(getattr(self, "_started", None))
        if self.store.atomic_rename:
            path = self.store.path(LEASE_PATH)
            tmp = f"{path}.renew-{self.token}"
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        else:
            self.store.write_file(LEASE_PATH, [data])
        self._renewed = _clocks()

    def _idle(self) -> float:
        """Seconds since this writer last renewed: the larger of the wall clock's count (what other
        writers judge staleness by) and the boot clock's (it counts a suspended VM too)."""
        then: tuple[float, float] | None = getattr(self, "_renewed", None)
        if then is None:
            return 0.0
        now = _clocks()
        return max(now[0] - then[0], now[1] - then[1])

    def _keep(self) -> None:
        """Renew every ``LEASE_RENEW_S`` on a daemon thread until released or lost. A process
        that is stopped (SIGSTOP, a paused VM) renews nothing: other writers may take the lease
        over, and this one's next ``check`` fails."""
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.wait(LEASE_RENEW_S):
                try:
                    self.renew()
                except ConcurrentWriteError:
                    return                    # lost: check() says so before any commit
                except Exception:  # noqa: BLE001 - a failed write: the next round tries again
                    pass
        threading.Thread(target=run, name="rocketlake-lease", daemon=True).start()

    def check(self) -> None:
        """Right before a commit: the lease is still this writer's, renewed just now. ``LeaseLost``
        when it was taken over, or when this writer went longer than half the lease's time to
        live without renewing it (a stalled process: another writer may be about to take it
        over, so neither renewing nor committing is safe any more)."""
        if not self.held:
            raise LeaseLost(f"batch {self.batch_id!r} does not hold the writer lease {LEASE_PATH}")
        if LEASE_TTL_S <= 0:
            return                            # leases off: the conditional commits alone decide
        self._still_mine()
        self.renew()

    def _still_mine(self) -> None:
        if self.lost:
            raise LeaseLost(self.lost)
        idle = self._idle()
        if idle > LEASE_TTL_S / 2:
            self.lost = (f"batch {self.batch_id!r} lost the writer lease {LEASE_PATH}: not renewed for {idle:.0f}s "
                         f"(more than half of ROCKETLAKE_LEASE_TTL={LEASE_TTL_S:.0f}s); nothing was committed "
                         "by this run after that")
            raise LeaseLost(self.lost)
        cur = self.read()
        if not cur or cur.get("token") != self.token:
            who = (cur or {}).get("batch_id")
            self.lost = (f"batch {self.batch_id!r} lost the writer lease {LEASE_PATH}"
                         + (f" to batch {who!r}" if who else "") + "; nothing was committed by this run after that")
            raise LeaseLost(self.lost)

    def release(self) -> None:
        """Give the lease up (its file removed if still this writer's), then the broker lock."""
        if not self.held:
            self._release_broker_lock()
            return
        self.held = False
        if getattr(self, "_stop", None) is not None:
            self._stop.set()
        try:
            cur = self.read()
            if cur is not None and (not cur or cur.get("token") == self.token):
                self.store.delete(LEASE_PATH)
            if self.store.os_paths:     # an object store's listing costs a request: a failed writer's cleanup does it
                storage.remove_dir_if_empty(self.store, META_DIR)     # if the lease was all there was in it
        except Exception:  # noqa: BLE001 - best effort; a stale lease is taken over later
            pass
        finally:
            self._release_broker_lock()


# The fields a writer writes into its lease, with their types.
_FIELDS = {"batch_id": str, "host": str, "pid": int, "token": str, "started_ms": int, "renewed_ms": int}
_REMOVE = "if no rocketlake writer is running on this store, remove it and rerun (nothing was changed)"


def _typed(value: Any, t: type) -> bool:
    return isinstance(value, t) and not isinstance(value, bool)


def _remove_made(path: str) -> None:
    """Remove the store directory this writer made (and the empty ``lock`` it held there), if that
    is all there is."""
    try:
        remove_made_dir(path)
    except OSError:
        pass


def _clocks() -> tuple[float, float]:
    boot = time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()
    return (time.time(), boot)


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:                                    # a killed but not yet reaped process is a zombie
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
