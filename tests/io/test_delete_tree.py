"""storage.delete_tree on a file system with directories (HDFS; S3 goes through botocore, see
tests/io/test_objkeys.py): an entry a racing writer removed meanwhile is no error (a winner clearing
a loser's attempt while the loser clears it too must not fail after its commit), other errors are
raised."""
from __future__ import annotations

import pytest

from storelib.io import storage
from storelib.io.storage import FileType


class _Info:
    def __init__(self, path, type_):
        self.path, self.type = path, type_


class _Tree:
    """A file system of a small tree whose ``delete_dir`` of a non-empty directory fails."""

    def __init__(self, files):
        self.files = set(files)
        self.dirs = {"t", "t/a", "t/a/b"}

    def delete_dir(self, path):
        if any(f.startswith(path + "/") for f in self.files):
            raise OSError(f"{path}: directory not empty")
        if path not in self.dirs:
            raise FileNotFoundError(path)
        self.dirs.discard(path)

    def get_file_info(self, selector):
        return [_Info(f, FileType.File) for f in sorted(self.files)] + \
               [_Info(d, FileType.Directory) for d in sorted(self.dirs) if d != selector.base_dir]

    def delete_file(self, path):
        if path not in self.files:
            raise FileNotFoundError(path)
        self.files.discard(path)


def test_other_errors_are_not_swallowed():
    class Broken(_Tree):
        def delete_dir(self, path):
            raise OSError("AWS Error ACCESS_DENIED during DeleteDir")
    with pytest.raises(OSError, match="ACCESS_DENIED"):
        storage.delete_tree(Broken({"t/a/y"}), "t")


def test_a_tree_another_writer_removes_while_it_is_deleted_is_no_error():
    """A tree whose entries a racing writer removed first (in part) is said not to exist (a winner
    clearing a loser's attempt while the loser clears it too); what is still there is removed one
    by one and nothing is raised."""
    class Racing(_Tree):
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
