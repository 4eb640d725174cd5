"""Both store objects implement ``io.protocol.Store`` and take their capability flags from
locality (``protocol.Capabilities``), instead of ``LocalStore`` restating ``storage.Store``'s."""
from __future__ import annotations

from storelib.io import localstore, protocol, storage


def test_both_stores_are_the_protocol(tmp_path):
    (tmp_path / "commitlog").mkdir()
    full, light = storage.Store(str(tmp_path)), localstore.open_local(str(tmp_path))
    for s in (full, light):
        assert isinstance(s, protocol.Store)
        assert (s.local, s.os_paths, s.atomic_rename, s.objects) == (True, True, True, False)
        assert s.list_dirs("") == ["commitlog"]
    assert localstore.open_local("s3://bucket/store") is None


def test_the_flags_are_stated_once():
    for cls in (storage.Store, localstore.LocalStore):
        assert issubclass(cls, protocol.Capabilities)
        assert not {"os_paths", "atomic_rename", "objects"} & set(vars(cls))

    class Remote(protocol.Capabilities):
        local = False
    r = Remote()
    assert (r.os_paths, r.atomic_rename, r.objects) == (False, False, True)
