"""Storage: local paths and any ``pyarrow.fs`` URI (s3://, gs://, hdfs://, file://; local, s3://
against moto and S3Proxy, hdfs:// against Hadoop's mini cluster are tested, gs:// against a GCS
emulator (files, not Delta tables)).

Store files are written whole, sequentially, by one writer (object stores have no random
writes). Zero tails are sparse on local disks (``ftruncate``) and streamed from one reused
zero block elsewhere. ``publish`` moves a staged file to its final name: an atomic rename
where the file system has one, copy + delete on object stores.

Durability (``write_file(durable=True)``, ``sync_files``, ``sync_dirs``): on local file systems
a file is on stable storage once it and every directory entry leading to it are fsync'd; on
object stores a completed PUT or copy is. Ingest uses it so that every file of a batch is
durable before the Delta commit that makes the batch visible (RocketMQ's ``flushDiskType``:
SYNC_FLUSH, the default here, or ASYNC_FLUSH for scratch stores). Large durable files, and the
staged split records (``cache=False``), are written around the page cache on local file systems
(``storelib.io.direct_io``).

Object-store settings (S3 endpoint, region, keys or a named profile; a GCS emulator) are
``storelib.io.objstore``'s: the driver's environment, shipped to every executor with its tasks.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlparse

import numpy as np
from pyarrow.fs import FileSelector, FileType  # re-exported for callers

from ..errors import BadInput, StoreError, StorePathError
from . import objstore
from .filesystems import check_store_uri, file_system_of, filesystem, is_local, local_path
from .objkeys import delete_tree
from . import objkeys
from . import patches
from .direct_io import MIN_DIRECT_SIZE, read_exact, write_direct
from .fragments import AssembledFile
from .protocol import Capabilities
from ..format.names import rel_path_problem
from ..format.paths import local_target_problem, within

__all__ = ["FileSelector", "FileType", "is_local", "local_path", "filesystem", "join", "rejoin",
           "delta_storage_options", "Store", "read_local_into", "fsync_fd", "sync_dirs",
           "remove_dir_if_empty", "make_dirs", "delete_tree", "inside", "same_file_system"]

ZERO_BLOCK = bytes(8 << 20)


def join(uri: str, *parts: str) -> str:
    out = uri.rstrip("/")
    for p in parts:
        if p:
            out = out + "/" + p.strip("/")
    return out


def rejoin(original: str, root: str, path: str) -> str:
    """Turn a filesystem path found under ``root`` back into a URI like ``original``."""
    if is_local(original):
        return path
    rel = path[len(root):].lstrip("/")
    return join(original, rel)


def inside(store: "Store", other: "Store") -> bool:
    """Whether ``other``'s root is ``store``'s root or lies under it: local ones however either is
    spelled (``paths.within``), remote ones on the same file system (``same_file_system``: the
    same bucket, the same name node however named) by their paths (``filesystem`` refuses ``..``
    and the like in them). Roots whose paths nest on HDFS URIs whose name nodes cannot be resolved
    are ``BadInput`` naming both: they may be one (a caller would write into the store)."""
    if store.os_paths or other.os_paths:
        return store.os_paths and other.os_paths and within(store.root, other.root)
    if not (other.root == store.root or other.root.startswith(store.root.rstrip("/") + "/")):
        return False
    return same_file_system(store.uri, other.uri)


def same_file_system(a: str, b: str) -> bool:
    """Whether remote URIs ``a`` and ``b`` are served by one file system (``file_system_of``);
    ``BadInput`` naming both when that cannot be told (an HDFS name node not resolved). One
    spelling of scheme and host is one file system, resolved or not."""
    ua, ub = urlparse(a), urlparse(b)
    if (ua.scheme.lower(), ua.netloc.lower()) == (ub.scheme.lower(), ub.netloc.lower()):
        return True
    try:
        (sa, ka), (sb, kb) = file_system_of(a), file_system_of(b)
    except LookupError as e:
        raise BadInput(f"cannot tell whether {a} and {b} are on one HDFS name node ({e}): they may be one "
                       "place, so nothing was done; name both with the name node's host:port") from None
    return sa == sb and bool(ka & kb)


def delta_storage_options(uri: str) -> dict[str, str] | None:
    """deltalake (object_store) options for a URI, from the same environment as pyarrow.

    S3: Delta commits must be put-if-absent, or two writers could both write version N.
    deltalake 1.x does that with S3 conditional writes (``If-None-Match: *``) when
    ``AWS_CONDITIONAL_PUT=etag`` (AWS S3 since 2024, MinIO, moto; only moto is tested here). For an S3-compatible store
    without conditional writes set ``ROCKETLAKE_S3_UNSAFE_RENAME=1`` (``AWS_S3_ALLOW_UNSAFE_RENAME``:
    no protection between concurrent writers beyond rocketlake's writer lease). deltalake 1.6 has
    no DynamoDB lock any more: writers refuse ``AWS_S3_LOCKING_PROVIDER`` (``condput``).
    ``AWS_ALLOW_HTTP`` (default true) allows http:// endpoints such as a local test server.
    """
    if not uri.startswith("s3://"):
        return None
    objstore.unset_empty()          # a Spark worker's shipped empty settings: unset for deltalake too
    opts = {"AWS_ALLOW_HTTP": objstore.s3_settings().get("AWS_ALLOW_HTTP", "true")}
    if os.environ.get("ROCKETLAKE_S3_UNSAFE_RENAME"):
        opts["AWS_S3_ALLOW_UNSAFE_RENAME"] = "true"
    else:
        opts["AWS_CONDITIONAL_PUT"] = os.environ.get("AWS_CONDITIONAL_PUT", "etag")
    st = objstore.s3_settings()
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        if st.get(k):
            opts[k] = st[k]
    opts.setdefault("AWS_REGION", "us-east-1")
    return opts


_PATH_CACHE_MAX = 1 << 17
T = TypeVar("T")
# A write's bytes: anything with the buffer protocol (bytes, memoryview, numpy arrays), chunk by chunk.
Chunks = Iterable[Any]
# A file assembled from objects: (file_size, extents as storelib.io.fragments takes them)
Assembly = tuple[int, Sequence[Sequence[Any]]]


class Store(Capabilities):
    """A store root (RocketMQ ``storePathRootDir``) on some file system.

    Every access to a store file goes through ``path(rel)``, which refuses paths leading out of
    the store (``StorePathError``). A ``protocol.Store``; its capability flags (``os_paths``,
    ``atomic_rename``, ``objects``) follow from ``local`` (``protocol.Capabilities``)."""

    def __init__(self, uri: str):
        self.uri = uri.rstrip("/") if uri not in ("/",) else uri
        check_store_uri(self.uri)
        self.fs, self.root = filesystem(self.uri)
        self.local = is_local(self.uri)
        self._paths: dict[str, str] = {}    # rel -> checked path (the check is per file, not per read)
        self._real_root: str | None = None
        # staged rel -> final rel of files a reader was told to read from a batch's staging
        # (storefiles.files_from_snapshot: its publish was unfinished); the publish may move
        # them meanwhile.
        self.moved: dict[str, str] = {}
        # rel -> (file_size, extents) of files assembled from objects (object stores: see
        # storelib.io.fragments); reads of such a file go through its extents.
        self.assembled: dict[str, Assembly] = {}
        self._assembled_files: dict[str, tuple[Sequence[Sequence[Any]], AssembledFile]] = {}
        # (rel -> the extents mapped, their AssembledFile)
        # staged patch rel -> (file rel, [(patch_pos, file_pos, length)]) of files read through a
        # patch not yet applied (map_patched)
        self.patched: dict[str, tuple[str, list[tuple[int, int, int]]]] = {}

    # -- paths
    def path(self, rel: str) -> str:
        """The file system path of ``rel``, which must stay inside the store: not absolute, no
        ``..``/``.``/empty component, no backslash or NUL (``names.rel_path_problem``) and, on a
        local file system, no symlink along it that resolves outside the store root's real path,
        and not a FIFO, device or socket (``paths.local_target_problem``). Raises StorePathError
        naming ``rel`` otherwise."""
        if not rel:
            return self.root
        p = self._paths.get(rel)
        if p is not None:
            return p
        problem = rel_path_problem(rel)
        if problem:
            raise StorePathError(f"store path {rel!r} {problem}: not a path inside the store {self.uri}; "
                                 f"refusing to use it")
        p = self.root + "/" + rel
        if self.local:
            root = self._real_root
            if root is None:
                root = self._real_root = os.path.realpath(self.root)
            problem = local_target_problem(root, p)
            if problem:
                raise StorePathError(f"store path {rel!r} {problem}; refusing to use it")
        if len(self._paths) >= _PATH_CACHE_MAX:
            self._paths.clear()
        self._paths[rel] = p
        return p

    def uri_of(self, rel: str) -> str:
        self.path(rel)
        return join(self.uri, rel)

    # -- queries
    def exists(self, rel: str) -> bool:
        if rel in self.assembled:
            return True
        found: bool = self.fs.get_file_info(self.path(rel)).type != FileType.NotFound
        return found

    def size(self, rel: str) -> int | None:
        if rel in self.assembled:
            return self.assembled[rel][0]
        info = self.fs.get_file_info(self.path(rel))
        size: int | None = None if info.type == FileType.NotFound else info.size
        return size

    def list_files(self, rel: str, recursive: bool = True) -> list[str]:
        """Relative paths of the files under ``rel`` (sorted); [] if it does not exist.
        Locally a symlink met on the way must resolve inside the store (StorePathError)."""
        base = self.path(rel)
        if self.local:
            return self._scan_local(rel, base, recursive, dirs=False)
        info = self.fs.get_file_info(base)
        if info.type == FileType.NotFound:
            return []
        out = []
        for f in self.fs.get_file_info(FileSelector(base, recursive=recursive, allow_not_found=True)):
            if f.type == FileType.File:
                out.append(f.path[len(self.root):].lstrip("/"))
        return sorted(out)

    def list_dirs(self, rel: str) -> list[str]:
        base = self.path(rel)
        if self.local:
            return self._scan_local(rel, base, False, dirs=True)
        if self.fs.get_file_info(base).type == FileType.NotFound:
            return []
        return sorted(f.base_name for f in self.fs.get_file_info(FileSelector(base, allow_not_found=True))
                      if f.type == FileType.Directory)

    def _scan_local(self, rel: str, base: str, recursive: bool, dirs: bool) -> list[str]:
        """Local listing that never leaves the store: every symlink met, and every entry that is
        neither a file nor a directory, is checked by ``path`` (a link out, a FIFO or a device
        raises StorePathError naming it), linked directories inside the store are
        followed once (no loops). ``dirs``: names of the subdirectories of ``base``; else the
        relative paths of the files under it."""
        if not os.path.isdir(base):
            return []
        out: list[str] = []
        seen: set[str] = set()
        stack = [(rel.rstrip("/") + "/" if rel else "", base)]
        while stack:
            prefix, d = stack.pop()
            with os.scandir(d) as it:
                entries = list(it)
            for e in entries:
                r = prefix + e.name
                link = e.is_symlink()
                if link or not (e.is_dir() or e.is_file()):
                    self.path(r)            # StorePathError: a link out of the store, a FIFO, a device
                if e.is_dir():
                    if dirs:
                        out.append(e.name)
                    elif recursive:
                        if link:
                            target, here = os.path.realpath(e.path), os.path.realpath(d)
                            if target in seen or here == target or here.startswith(target.rstrip("/") + "/"):
                                continue    # already listed, or a loop back to an ancestor
                            seen.add(target)
                        stack.append((r + "/", e.path))
                elif not dirs and e.is_file():
                    out.append(r)
        return sorted(out)

    def _follow_move(self, rel: str, err: OSError) -> str:
        """The final name of a staged file that is gone: the publish of its (committed) batch moved
        it there since the reader listed it; the final file holds that version or a later one,
        whose first valid bytes are the same. Re-raises ``err`` for any other file."""
        final = self.moved.get(rel)
        if final is None or self.exists(rel):
            raise err
        return final

    def _reading(self, fn: Callable[..., T], rel: str, *args: Any) -> T:
        """``fn(rel, *args)``, retried at the final name when ``rel`` was published meanwhile."""
        try:
            return fn(rel, *args)
        except OSError as e:
            if not self.moved:
                raise
            return fn(self._follow_move(rel, e), *args)

    def map_file(self, rel: str, file_size: int, extents: Sequence[Sequence[Any]]) -> None:
        """From now on, read ``rel`` as the file assembled from ``extents`` (storelib.io.fragments)."""
        self.path(rel)
        for e in extents:
            self.path(e[2])
        self.assembled[rel] = (file_size, extents)

    def map_patched(self, rel: str, file_size: int, patch: dict[str, Any]) -> None:
        """From now on, read ``rel`` as it is once ``patch`` (storelib.io.patches) is applied; when
        the staged patch is gone by the time a piece of it is read, the publish applied it, and
        the piece is read from the file itself."""
        self.map_file(rel, file_size, patches.overlay_extents(rel, file_size, patch))
        self.patched[patch["staged"]] = (rel, [(e[2], e[0], e[1]) for e in patch["extents"]])

    def mappings(self, rels: Iterable[str] | None = None) -> dict[str, Any]:
        """What this store reads through other names (files assembled from objects, patches not
        yet applied, staged files the publish moves), for ``rels`` (None: all), as plain data: a
        Spark task opening the same store URI applies it (``apply_mappings``) and reads the same
        bytes as the driver that planned it."""
        keep = set(self.assembled) if rels is None else set(rels) & set(self.assembled)
        return {"assembled": {r: self.assembled[r] for r in keep},
                "patched": {k: v for k, v in self.patched.items() if v[0] in keep}, "moved": dict(self.moved)}

    def apply_mappings(self, got: dict[str, Any] | None) -> "Store":
        if got:
            self.assembled.update(got["assembled"])
            self.patched.update(got["patched"])
            self.moved.update(got["moved"])
        return self

    def _assembled(self, rel: str) -> AssembledFile:
        size, extents = self.assembled[rel]
        # built once per mapping (a paged index head has thousands of extents to sort)
        cached = self._assembled_files.get(rel)
        if cached is None or cached[0] is not extents:
            cached = (extents, AssembledFile(size, extents, self._read_object))
            self._assembled_files[rel] = cached
        return cached[1]

    def _read_object(self, rel: str, offset: int, length: int) -> bytes:
        try:
            with self.fs.open_input_file(self.path(rel)) as fh:
                data: bytes = fh.read_at(length, offset)
                return data
        except FileNotFoundError:
            if rel not in self.patched:
                raise
        final, pieces = self.patched[rel]
        for patch_pos, file_pos, n in pieces:
            if patch_pos <= offset < patch_pos + n:
                return self._read_object(final, file_pos + offset - patch_pos, length)
        raise FileNotFoundError(rel)

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        return self._reading(self._read, rel, offset, length)

    def _read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        if rel in self.assembled:
            return self._assembled(rel).read(offset, length)
        if self.local:
            with open(self.path(rel), "rb") as fh:
                fh.seek(offset)
                return fh.read() if length is None else fh.read(length)
        with self.fs.open_input_file(self.path(rel)) as fh:
            if length is None:
                length = fh.size() - offset
            data: bytes = fh.read_at(length, offset)
            return data

    def read_array(self, rel: str, offset: int, length: int, cache: bool = True) -> np.ndarray:
        """``length`` bytes at ``offset`` as a writable uint8 array (read straight into it locally;
        ``cache=False``: around the page cache, for bytes read once: storelib.io.direct_io)."""
        if not cache and self.local and rel not in self.assembled:
            out = read_exact(self.path(rel), offset, length, rel)
            if out is not None:
                return out
        return self._reading(self._read_array, rel, offset, length)

    def _read_array(self, rel: str, offset: int, length: int) -> np.ndarray:
        out = np.empty(length, np.uint8)
        if rel in self.assembled:
            data = self._assembled(rel).read(offset, length)
            got = len(data)
            out[:got] = np.frombuffer(data, np.uint8)
        elif self.local:
            got = read_local_into(self.path(rel), offset, out)
        else:
            with self.fs.open_input_file(self.path(rel)) as fh:
                data = fh.read_at(length, offset)
            got = len(data)
            out[:got] = np.frombuffer(data, np.uint8)
        if got != length:
            raise OSError(f"{rel}: expected {length} bytes at {offset}, read {got}")
        return out

    def reads_in_place(self, rel: str) -> bool:
        return self.local and rel not in self.assembled

    def open_reader(self, rel: str) -> Any:       # a pyarrow input file, or an AssembledFile like one
        if rel in self.assembled:
            return self._assembled(rel)
        return self._reading(lambda r: self.fs.open_input_file(self.path(r)), rel)

    # -- writes in place (local file systems only: storelib.io.patches)
    def write_at(self, rel: str, extents: Iterable[tuple[int, Any]]) -> None:
        """Write ``(position, bytes)`` pairs into an existing local file, in order (no fsync:
        the caller fsyncs once after a group of writes, ``sync_files``)."""
        if not self.local:
            raise StoreError(f"{self.uri}: files are written in place only on local file systems")
        fd = os.open(self.path(rel), os.O_WRONLY)
        try:
            for pos, data in extents:
                mv = memoryview(data).cast("B")
                while len(mv):
                    k = os.pwrite(fd, mv, pos)
                    mv, pos = mv[k:], pos + k
        finally:
            os.close(fd)

    def cut_tail(self, rel: str, valid: int, file_size: int) -> None:
        """Zero a local file's bytes from ``valid`` on (truncate, then extend sparsely to
        ``file_size``): what a dead attempt wrote past the committed end is gone."""
        if not self.local:
            raise StoreError(f"{self.uri}: files are cut only on local file systems")
        fd = os.open(self.path(rel), os.O_WRONLY)
        try:
            os.ftruncate(fd, valid)
            os.ftruncate(fd, file_size)
        finally:
            os.close(fd)

    # -- writes
    def write_file(self, rel: str, chunks: Chunks, total_size: int | None = None, durable: bool = False,
                   cache: bool = True) -> int:
        """Write a whole file from byte chunks, then zero-fill up to ``total_size``.

        ``durable``: on a local file system the file is fsync'd before this returns, and so is
        every directory that got a new entry for it (its parent, and the parents of directories
        created for it), so the file survives a power cut. On an object store a completed PUT
        is already durable. Large durable files, and files written with ``cache=False`` (read
        once, by another task), go around the page cache on local file systems
        (storelib.io.direct_io).
        """
        path = self.path(rel)
        parent = path.rsplit("/", 1)[0]
        written = 0
        if self.local:
            new_dirs = _missing_dirs(parent) if durable else []
            make_dirs(parent)              # (a writer that lost its lease may drop an empty staging/ meanwhile)
            got = None
            if not cache or (durable and _worth_direct(chunks, total_size)):
                got = write_direct(path, chunks, total_size, fsync_fd if durable else None)
            if got is not None:
                if durable:
                    sync_dirs([parent] + [os.path.dirname(d) for d in new_dirs])
                return total_size if total_size is not None else got
            with open(path, "wb") as fh:
                for c in chunks:
                    mv = memoryview(c).cast("B") if not isinstance(c, bytes) else c
                    fh.write(mv)
                    written += len(mv)
                if total_size is not None and total_size > written:
                    fh.truncate(total_size)   # sparse zero tail
                if durable:
                    fh.flush()
                    fsync_fd(fh.fileno())
            if durable:
                sync_dirs([parent] + [os.path.dirname(d) for d in new_dirs])
            return total_size if total_size is not None else written
        objkeys.make_dir(self.fs, parent)
        with self.fs.open_output_stream(path) as out:
            for c in chunks:
                mv = memoryview(c).cast("B") if not isinstance(c, bytes) else c
                out.write(mv)
                written += len(mv)
            if total_size is not None:
                left = total_size - written
                while left > 0:
                    k = min(left, len(ZERO_BLOCK))
                    out.write(ZERO_BLOCK[:k])
                    left -= k
                written = max(written, total_size)
        return written

    def write_objects(self, rel_of_part: Callable[[int], str], chunks: Chunks,
                      part_size: int) -> list[tuple[str, int]]:
        """Write a stream of chunks as consecutive objects of at most ``part_size`` bytes
        (``rel_of_part(k)`` names object k); returns ``[(rel, length), ...]``. Object stores take
        one large file as several objects: each is uploaded (in parts) and completed on its own,
        so no single upload grows past what a server accepts (moto's server fails to complete a
        1 GiB multipart upload), and readers assemble them (storelib.io.fragments)."""
        out: list[list[Any]] = []            # [rel, length] of each object, the last growing
        stream: Any = None                   # the pyarrow output stream of the object being written
        filled = 0
        try:
            for c in chunks:
                mv = memoryview(c).cast("B") if not isinstance(c, bytes) else memoryview(c)
                while len(mv):
                    if stream is None:
                        rel = rel_of_part(len(out))
                        path = self.path(rel)
                        objkeys.make_dir(self.fs, path.rsplit("/", 1)[0])
                        stream, filled = self.fs.open_output_stream(path), 0
                        out.append([rel, 0])
                    k = min(len(mv), part_size - filled)
                    stream.write(mv[:k])
                    filled += k
                    out[-1][1] += k
                    mv = mv[k:]
                    if filled == part_size:
                        stream.close()
                        stream = None
            if stream is not None:
                stream.close()
                stream = None
        finally:
            if stream is not None:
                stream.abort() if hasattr(stream, "abort") else None
        return [(r, n) for r, n in out]

    def publish(self, staged_rel: str, final_rel: str) -> list[str] | None:
        """Move a staged file to its final path, replacing what is there.

        Returns the local directories whose entries changed (the caller fsyncs each of them
        once, after all its renames: ``sync_dirs``); None on object stores, where a completed
        copy is durable.
        """
        src, dst = self.path(staged_rel), self.path(final_rel)
        if self.local:
            parent = os.path.dirname(dst)
            new_dirs = _missing_dirs(parent)
            os.makedirs(parent, exist_ok=True)
            os.replace(src, dst)
            return [parent] + [os.path.dirname(d) for d in new_dirs]
        objkeys.make_dir(self.fs, dst.rsplit("/", 1)[0])
        objkeys.move(self.fs, src, dst)
        return None

    def sync_files(self, rels: Iterable[str]) -> int:
        """fsync existing files (and their directories) of a local store; returns files synced.
        No-op on object stores."""
        if not self.local:
            return 0
        dirs: set[str] = set()
        n = 0
        for rel in rels:
            path = self.path(rel)
            fd = os.open(path, os.O_RDONLY)
            try:
                fsync_fd(fd)
            finally:
                os.close(fd)
            dirs.add(os.path.dirname(path))
            n += 1
        sync_dirs(dirs)
        return n

    def sync_tree(self, rel: str) -> int:
        """fsync every directory of the tree ``rel`` and each of its ancestors up to the store
        root (local stores; no-op on object stores): the entries that lead to its files are
        durable, however the directories came to be (a task may have created one without
        fsync). Returns the directories synced."""
        if not self.local:
            return 0
        top = self.path(rel)
        dirs = [d for d, _, _ in os.walk(top)]
        up = top
        root = os.path.abspath(self.root)
        while os.path.abspath(up) != root and up not in ("/", ""):
            up = os.path.dirname(up)
            dirs.append(up)
        sync_dirs(dirs)
        return len(dirs)

    def delete(self, rel: str) -> None:
        path = self.path(rel)
        info = self.fs.get_file_info(path)
        if info.type == FileType.NotFound:
            return
        if info.type == FileType.Directory:
            if self.local:
                shutil.rmtree(path, ignore_errors=True)
            else:
                delete_tree(self.fs, path)
        else:
            try:
                objkeys.delete_file(self.fs, path)
            except FileNotFoundError:
                pass                               # removed by a racing writer after the look above

    def makedirs(self, rel: str) -> None:
        if self.local:
            os.makedirs(self.path(rel), exist_ok=True)
        else:
            objkeys.make_dir(self.fs, self.path(rel))


def _missing_dirs(path: str) -> list[str]:
    """The directories ``os.makedirs(path)`` would create, deepest first."""
    out = []
    while path and not os.path.isdir(path):
        out.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return out


def read_local_into(path: str, offset: int, out: np.ndarray) -> int:
    """Read a local file's bytes from ``offset`` straight into ``out``; the count read."""
    with open(path, "rb", buffering=0) as fh:
        fh.seek(offset)
        mv, got = out.data, 0           # (the array's own memoryview: readinto fills it in place)
        while got < len(out):
            k = fh.readinto(mv[got:])
            if not k:
                break
            got += k
    return got


def _worth_direct(chunks: Chunks, total_size: int | None) -> bool:
    """A durable write goes around the page cache (storelib.io.direct_io) when it is large: a
    stream of chunks (segments, consume queues, index files), or a list or size of at least
    MIN_DIRECT_SIZE bytes."""
    if total_size is not None and total_size >= MIN_DIRECT_SIZE:
        return True
    if isinstance(chunks, (list, tuple)):
        return sum(memoryview(c).nbytes for c in chunks) >= MIN_DIRECT_SIZE
    return True


def fsync_fd(fd: int) -> None:
    os.fsync(fd)


def sync_dirs(dirs: Iterable[str]) -> None:
    """fsync directories (their entries: files created, renamed or removed in them)."""
    for d in sorted(set(dirs), key=lambda p: (-p.count("/"), p)):
        try:
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue
        try:
            fsync_fd(fd)
        finally:
            os.close(fd)


def make_dirs(path: str, tries: int = 16, exist_ok: bool = True) -> None:
    """``os.makedirs(path, exist_ok=exist_ok)`` against writers that remove a shared parent while
    it is empty (``remove_dir_if_empty``, e.g. ``_rocketlake/tmp``, ``_rocketlake/staging``): a
    parent removed between two of its ``mkdir`` calls is made again. ``exist_ok`` False: a
    directory (or link) already at ``path`` is ``FileExistsError`` (a failed ``mkdir`` of
    ``path`` itself made nothing, so trying again never finds its own)."""
    for _ in range(tries - 1):
        try:
            os.makedirs(path, exist_ok=exist_ok)
            return
        except FileNotFoundError:
            continue
    os.makedirs(path, exist_ok=exist_ok)


def remove_dir_if_empty(store: Store, rel: str) -> bool:
    """Remove the directory ``rel`` if nothing is in it (locally atomic: ``rmdir``, so a file another
    writer creates meanwhile is never lost); whether it is gone now."""
    if store.local:
        try:
            os.rmdir(store.path(rel))
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True
    if store.list_files(rel):
        return False
    store.delete(rel)                      # directory markers only
    return True
