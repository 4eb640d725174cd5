"""S3 objects written, moved and deleted as keys, leaving no directory marker objects.

pyarrow's S3 file system makes S3 look like a file system with directories: ``create_dir``
writes an empty object ``<dir>/`` for each level it creates, and ``delete_file``, ``delete_dir``
and ``move`` write one for the parent of what they removed, whether or not other objects are
still under it. S3 has no directories and a store needs none (a listing finds what is under a
prefix), but each such object is a request and a change to the bucket: a writer that took its
lease and then refused (damage found, a bad input) would still have added keys to a bucket that
had none (a store copied without them). So on S3 a store creates no directory, deletes through
S3's own ``DeleteObject`` / ``DeleteObjects`` (botocore: ``filesystems.s3_client``, the
settings pyarrow's client uses) and moves by a copy and such a delete. Markers an earlier writer
left go with the tree they are in. Other file systems (local, HDFS) have directories and go
through pyarrow as they are.
"""
from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs
from pyarrow.fs import FileSelector, FileType

from .filesystems import s3_client

__all__ = ["keyed", "make_dir", "delete_file", "move", "delete_tree"]

_BULK = 1000                     # keys per DeleteObjects request (S3's limit)


def keyed(fs: pafs.FileSystem) -> bool:
    """Whether ``fs`` is S3, whose objects go through this module."""
    return isinstance(fs, pafs.S3FileSystem)


def _split(path: str) -> tuple[str, str]:
    bucket, _, key = path.partition("/")
    return bucket, key


def make_dir(fs: pafs.FileSystem, path: str) -> None:
    """The directory ``path`` and its parents, where the file system has directories."""
    if not keyed(fs):
        fs.create_dir(path, recursive=True)


def delete_file(fs: pafs.FileSystem, path: str) -> None:
    """Remove the file ``path``; on S3 an object already gone is no error (S3 answers so)."""
    if not keyed(fs):
        fs.delete_file(path)
        return
    bucket, key = _split(path)
    s3_client().delete_object(Bucket=bucket, Key=key)


def move(fs: pafs.FileSystem, src: str, dst: str) -> None:
    """Move a file, replacing ``dst``: a rename where there is one, else a copy and a delete."""
    if not keyed(fs):
        try:
            fs.move(src, dst)
            return
        except (OSError, NotImplementedError):
            fs.copy_file(src, dst)
            fs.delete_file(src)
            return
    fs.copy_file(src, dst)
    delete_file(fs, src)


def delete_tree(fs: pafs.FileSystem, path: str) -> None:
    """Remove a directory and everything under it: on S3 every key under ``path/``, the markers
    of earlier writers included, in bulk deletes (botocore's ``DeleteObjects`` carries the
    checksum S3Proxy 4.0 asks for, which pyarrow's did not); elsewhere pyarrow's ``delete_dir``.
    An object another writer removed meanwhile (a racing writer clearing its own attempt) is gone
    as asked."""
    if not keyed(fs):
        _delete_dir(fs, path)
        return
    bucket, key = _split(path.rstrip("/"))
    client = s3_client()
    keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/")
            for o in page.get("Contents", ())]
    for i in range(0, len(keys), _BULK):
        _delete_keys(client, bucket, keys[i:i + _BULK])


def _delete_keys(client: Any, bucket: str, keys: list[str]) -> None:
    got = client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
    errors = got.get("Errors") or []
    if errors:
        first = errors[0]
        raise OSError(f"s3://{bucket}/{first.get('Key')}: DeleteObjects failed: {first.get('Code')} "
                      f"{first.get('Message')} ({len(errors)} of {len(keys)} keys not deleted)")


def _delete_dir(fs: pafs.FileSystem, path: str) -> None:
    """pyarrow's ``delete_dir``; a tree another writer removed (in part) meanwhile is emptied
    one entry at a time, deepest first."""
    try:
        fs.delete_dir(path)
        return
    except FileNotFoundError:
        pass                                   # removed (in part, or all) by another writer meanwhile
    infos = fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
    for f in sorted(infos, key=lambda i: (i.type == FileType.Directory, -i.path.count("/"))) + [None]:
        try:
            if f is None:
                fs.delete_dir(path)
            elif f.type == FileType.File:
                fs.delete_file(f.path)
            elif f.type == FileType.Directory:
                fs.delete_dir(f.path)
        except FileNotFoundError:
            pass
