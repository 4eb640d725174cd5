"""storage.delete_tree on a server that refuses pyarrow's bulk DeleteObjects (S3Proxy 4.0): one
delete per object, and an object a racing writer removed meanwhile is no error (a winner clearing
a loser's attempt while the loser clears it too must not fail after its commit)."""
from __future__ import annotations

import pytest

from storelib.io import storage
from storelib.io.storage import FileType


class _Info:
    def __init__(self, path, type_):
        self.path, self.type = path, type_


class _RefusesBulk:
    """A file system whose delete_dir of a non-empty tree fails as S3Proxy's DeleteObjects does."""

    def __init__(self, files, vanished=()):
        self.files = set(files)
        self.vanished = set(vanished)            # removed by another writer after the listing
        self.dirs = {"t", "t/a", "t/a/b"}
        self.calls = []

    def delete_dir(self, path):
        self.calls.append(("delete_dir", path))
        if any(f.startswith(path + "/") for f in self.files):
            raise OSError("AWS Error [code 134] during DeleteObjects operation: Missing required header for this "
                          "request: Content-Md5")
        if path not in self.dirs:
            raise FileNotFoundError(path)
        self.dirs.discard(path)

    def get_file_info(self, selector):
        return [_Info(f, FileType.File) for f in sorted(self.files | self.vanished)] + \
               [_Info(d, FileType.Directory) for d in sorted(self.dirs) if d != selector.base_dir]

    def delete_file(self, path):
        self.calls.append(("delete_file", path))
        if path not in self.files:
            raise FileNotFoundError(path)
        self.files.discard(path)


def test_one_delete_per_object_when_the_bulk_delete_is_refused():
    fs = _RefusesBulk({"t/a/b/x", "t/a/y"}, vanished={"t/a/b/gone"})
    storage.delete_tree(fs, "t")
    assert not fs.files and not fs.dirs
    deletes = [p for op, p in fs.calls if op == "delete_file"]
    assert sorted(deletes) == ["t/a/b/gone", "t/a/b/x", "t/a/y"]


def test_other_errors_are_not_swallowed():
    class Broken(_RefusesBulk):
        def delete_dir(self, path):
            raise OSError("AWS Error ACCESS_DENIED during DeleteDir")
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        storage.delete_tree(Broken({"t/a/y"}), "t")


def test_a_tree_another_writer_removes_while_it_is_deleted_is_no_error():
    """pyarrow's bulk delete of a tree whose objects a racing writer removed first says the path
    does not exist (the CI failure of a winner clearing a loser's attempt); what is still there is
    removed one by one and nothing is raised."""
    class Racing(_RefusesBulk):
        first = True

        def delete_dir(self, path):
            if self.first:
                self.first = False
                self.files.discard("t/a/y")      # the other writer got here first, in part
                raise FileNotFoundError(f"Path does not exist '{path}/'")
            super().delete_dir(path)

    fs = Racing({"t/a/b/x", "t/a/y"})
    storage.delete_tree(fs, "t")
    assert not fs.files and not fs.dirs
