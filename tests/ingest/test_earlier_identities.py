"""The identities earlier versions gave an input (storelib.ingest.identity ``earlier_fingerprints``)
are theirs, byte for byte: a rerun after an upgrade is found only if the SHA-256 identity and the
path identity computed now equal what the version that committed the batch computed then. The
expected values were computed by that version's own code (``input_fingerprint`` and
``earlier_fingerprint`` of storelib/ingest/identity.py at 7ecab37) on the same bytes; the tests of
the driver make their "earlier" batches with this module's functions, so only these pin them."""
from __future__ import annotations

import types

import pytest

from storelib.ingest import identity

FILES = {"a.jsonl": bytes(range(256)) * 40 + b"tail", "b.jsonl": b"", "c.jsonl": b"x" * 4096}

# (block size, format, files in input order) -> the SHA-256 identity 7ecab37 gave them
SHA256 = {
    (64 << 20, "jsonl", ("a.jsonl",)): "bc7bb2cdb802b1455206d57f875e99bcc74baa98eadb79f8430c84af9645b3ae",
    (64 << 20, "jsonl", ("a.jsonl", "b.jsonl", "c.jsonl", "a.jsonl")):
        "559eab8541b87bbf965de4b3a68477a3b07c834d6c4ba6c15aefce96c6d75fb8",
    (64 << 20, "jsonl", ("b.jsonl",)): "f7775f88e179aaa814dc966e027131f66d83460b62f288e5c346523289374f40",
    (64 << 20, "parquet", ("a.jsonl",)): "a44d05e08aafeffffe407f10dbf2116ee17e297f75716ace2ed2ab7851079ff2",
    (64 << 20, "parquet", ("a.jsonl", "b.jsonl", "c.jsonl", "a.jsonl")):
        "71e2c4b1a5f5230781c5fc239fa418f60a4a00bf81bfa471f6416b7f174258cf",
    (64 << 20, "parquet", ("b.jsonl",)): "2b4faa9baf98954de6417e297cf76953bfcdd786a408390819934f612a662e93",
    # several blocks a file: the digest of the blocks' digests
    (4096, "jsonl", ("a.jsonl",)): "438ab2a94e2e70fac97c07889d1e70682d97bddd0321243741cf3c27de73dbd3",
    (4096, "jsonl", ("a.jsonl", "b.jsonl", "c.jsonl", "a.jsonl")):
        "c25c0e092142bbbc9e088cbd94bd38a5460326df47c3ab869dd1c1a44c54f12b",
    (4096, "parquet", ("a.jsonl",)): "59b0c8334a6e23022f04ee68c704df5480f062fe03300fe7e11523b9be89c8aa",
    (4096, "parquet", ("a.jsonl", "b.jsonl", "c.jsonl", "a.jsonl")):
        "25755fd039c3dc8c595586e410db8e5232646d54fad7bd7b1dadda052983d421",
}
DELTA_SHA256 = "21988300b87651e72bd17554ad21332c6dbb557d2fb3d4f4fc881f418a7fc9f5"
PATH = {"jsonl": "0c3a28703cd056a5d70a53a15f022085db6b18c5cfd4a14a51e2de03151735a4",
        "parquet": "9892fd504134921484cb04e946fcd76ffd3fece2c4b9259dfd51d48d1d470533"}


@pytest.fixture
def files(tmp_path, monkeypatch):
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _splits(root, names) -> list:
    return [types.SimpleNamespace(path=str(root / n) if root else n) for n in names]


@pytest.mark.parametrize("block, fmt, names", sorted(SHA256))
def test_sha256_identity_is_the_one_earlier_versions_gave(files, monkeypatch, block, fmt, names):
    monkeypatch.setattr(identity, "IDENTITY_BLOCK", block)
    splits = _splits(files, names)
    assert identity.input_fingerprint(str(files), fmt, splits, "sha256") == SHA256[(block, fmt, names)]
    assert identity.earlier_fingerprints(str(files), fmt, splits, ["sha256"]) == [SHA256[(block, fmt, names)]]
    # and the identity of this version is another one
    assert identity.input_fingerprint(str(files), fmt, splits) != SHA256[(block, fmt, names)]


def test_sha256_identity_of_a_delta_table_is_the_one_earlier_versions_gave(files, monkeypatch):
    monkeypatch.setattr(identity, "delta_identity",
                        lambda path, f: '{"table": "4b7e", "files": ["part-0.parquet"]}')
    assert identity.input_fingerprint(str(files), "delta", _splits(files, ["a.jsonl"]), "sha256") == DELTA_SHA256


@pytest.mark.parametrize("fmt", sorted(PATH))
def test_path_identity_is_the_one_earlier_versions_gave(files, fmt):
    splits = _splits(None, ["c.jsonl", "a.jsonl", "b.jsonl"])      # the paths as spelled, relative
    assert identity.path_fingerprint(".", fmt, splits) == PATH[fmt]
    assert identity.earlier_fingerprints(".", fmt, splits, ["path", "sha256"])[0] == PATH[fmt]
