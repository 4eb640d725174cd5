"""Crash states: the durable state after event k of a recorded run, as an ordinary directory tree.

The model (conservative, as in LazyFS and ALICE): at mount everything is durable; afterwards only
fsync makes anything durable.

* ``fsync``/``fdatasync`` of a file makes that inode's current bytes durable (event ``fsync-file``).
* ``fsync`` of a directory makes its current names durable, each name -> inode
  (event ``fsync-dir``); a subdirectory named there exists after a crash, with the names its own
  last fsync made durable (none: empty).
* Nothing else: creates, writes, truncates, renames, links, unlinks, mkdirs and rmdirs that no
  fsync covered are lost.

Materialising walks the durable names from the root. A name whose inode's bytes were never made
durable becomes an empty file (the "0-byte commit file" of a crash after a directory fsync).
Names of one inode become hard links of one file. A directory reached twice (renamed, and both
parents fsync'd at different times) is materialised at both places, a cycle only once.

Torn states (``crash_state_random``) add to a crash state a random subset of the writes made
after each file's last durable copy, in their order, each whole or not at all (runs recorded with
``record_writes``): the model of a page cache that wrote back some pages before the power cut.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass

from . import sparsecopy
from .trace import BLOB_DIR, CUT_KINDS, WRITE_LOG, Event, read_trace


@dataclass
class DurableState:
    root: int
    dirs: dict[int, dict[str, list]]        # directory id -> {name: [ino, kind, (target)]}
    files: dict[int, str | None]            # file id -> blob name (None: empty)

    def fingerprint(self) -> tuple:
        """Equal for states that materialise the same (names, inodes and contents)."""
        live = {}
        self._walk(self.root, "", set(), lambda p, ent: live.__setitem__(p, (ent[0], ent[1], self.files.get(ent[0])
                                                                            if ent[1] == "f" else tuple(ent[2:]))))
        return tuple(sorted(live.items()))

    def _walk(self, dir_id: int, prefix: str, seen: set[int], visit) -> None:
        for name, ent in sorted(self.dirs.get(dir_id, {}).items()):
            path = f"{prefix}/{name}"
            visit(path, ent)
            if ent[1] == "d" and ent[0] not in seen:
                self._walk(ent[0], path, seen | {ent[0]}, visit)


def replay(events: list[Event], k: int) -> DurableState:
    """The durable state right after event k (events 0..k applied)."""
    if not events or events[0].kind != "mount":
        raise ValueError("trace does not start with its mount event")
    if not 0 <= k <= events[-1].n:
        raise IndexError(f"no event {k}: the trace has events 0..{events[-1].n}")
    m = events[0].data
    state = DurableState(m["root"], {int(d): dict(e) for d, e in m["dirs"].items()},
                         {int(f): b for f, b in m["files"].items()})
    for ev in events[1:]:
        if ev.n > k:
            break
        if ev.kind == "fsync-file":
            state.files[ev.data["ino"]] = ev.data["blob"]
        elif ev.kind == "fsync-dir":
            state.dirs[ev.data["ino"]] = ev.data["entries"]
    return state


def materialize(state: DurableState, blob_dir: str, dest: str) -> dict[str, int]:
    """Write the state as a directory tree at dest (created; must not exist or be empty).
    Returns {relative path: inode id} of the regular files made."""
    os.makedirs(dest, exist_ok=True)
    if os.listdir(dest):
        raise FileExistsError(f"crash state destination is not empty: {dest}")
    made: dict[int, str] = {}
    files: dict[str, int] = {}

    def visit(rel: str, ent: list) -> None:
        ino, kind, path = ent[0], ent[1], dest + rel
        if kind == "d":
            os.mkdir(path)
        elif kind == "l":
            os.symlink(ent[2], path)
        elif ino in made:
            os.link(made[ino], path)
            files[rel.lstrip("/")] = ino
        else:
            blob = state.files.get(ino)
            if blob is None:
                open(path, "wb").close()
            else:
                sparsecopy.copy_path(os.path.join(blob_dir, blob), path)
            made[ino] = path
            files[rel.lstrip("/")] = ino

    state._walk(state.root, "", {state.root}, visit)
    return files


class Recording:
    """One recorded run, read from its state directory: events, cut points, crash states."""

    def __init__(self, state_dir: str):
        self.state_dir = state_dir
        self._events: list[Event] | None = None

    def reload(self) -> None:
        self._events = None

    @property
    def events(self) -> list[Event]:
        if self._events is None:
            self._events = read_trace(self.state_dir)
        return self._events

    @property
    def last(self) -> int:
        return self.events[-1].n

    def event(self, n: int) -> Event:
        # by number, not index: a file system process that was killed may have lost an event
        ev = self.events[n] if n < len(self.events) else None
        if ev is None or ev.n != n:
            ev = next((e for e in self.events if e.n == n), None)
        if ev is None:
            raise IndexError(f"no event {n} in the trace")
        return ev

    def marks(self) -> dict[str, int]:
        """{label: event number} of the test's marks (a repeated label: its last one)."""
        return {ev.data.get("label", ""): ev.n for ev in self.events if ev.kind == "mark"}

    def cut_points(self, kinds: tuple[str, ...] = CUT_KINDS, *, start: int = 0, stop: int | None = None,
                   include_mount: bool = True, distinct: bool = False) -> list[int]:
        """Event numbers to crash after: the mount (0) and each event of the given kinds, within
        [start, stop]. distinct: only the first of each run of cut points whose durable states
        are the same (a rename without a dir fsync changes nothing durable, for one)."""
        stop = self.last if stop is None else stop
        cuts = [ev.n for ev in self.events
                if start <= ev.n <= stop and (ev.kind in kinds or (include_mount and ev.n == 0))]
        if not distinct:
            return cuts
        out, seen = [], set()
        for k in cuts:
            fp = replay(self.events, k).fingerprint()
            if fp not in seen:
                seen.add(fp)
                out.append(k)
        return out

    def durable_state(self, k: int) -> DurableState:
        return replay(self.events, k)

    def crash_state(self, k: int, dest: str) -> str:
        """The durable state right after event k, materialised at dest; returns dest."""
        materialize(replay(self.events, k), os.path.join(self.state_dir, BLOB_DIR), dest)
        return dest

    def crash_state_random(self, k: int, dest: str, seed: int, keep: float = 0.5) -> str:
        """A torn crash state after event k: crash_state(k) plus each write made after its file's
        last durable copy (and by event k) kept with probability keep, in order. Needs a run
        recorded with record_writes."""
        log = os.path.join(self.state_dir, WRITE_LOG)
        if not os.path.exists(log):
            raise RuntimeError("torn states need a run recorded with record_writes=True")
        state = replay(self.events, k)
        files = materialize(state, os.path.join(self.state_dir, BLOB_DIR), dest)
        paths: dict[int, str] = {}
        for rel, ino in files.items():
            paths.setdefault(ino, os.path.join(dest, rel))
        last_sync: dict[int, int] = {}
        for ev in self.events[1:k + 1]:
            if ev.kind == "fsync-file":
                last_sync[ev.data["ino"]] = ev.n
        rng = random.Random(seed)
        with open(log, "rb") as wl:
            for ev in self.events[1:k + 1]:
                ino = ev.data.get("ino")
                if ev.kind != "write" or ino not in paths or ev.n < last_sync.get(ino, 0):
                    continue
                with open(paths[ino], "r+b") as f:
                    for offset, length, log_off in ev.data["extents"]:
                        if rng.random() < keep:
                            wl.seek(log_off)
                            f.seek(offset)
                            f.write(wl.read(length))
        return dest
