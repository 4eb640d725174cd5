"""The write stage's task layout and the staged facts it reads (no Spark): file tasks share the
splits they place (storelib.ingest.write._file_groups), and a split's staged facts read back as
written (storelib.ingest.encode.facts_file / load_split_facts)."""
from __future__ import annotations

import numpy as np
import pytest

from storelib.errors import IngestError
from storelib.ingest import encode as encode_stage, write as write_stage
from storelib.ingest.split_staging import LocalStaging
from storelib.table.rows import FileKind


def _jobs(splits: int = 40, queues: int = 64) -> list:
    """Two index files over the first and second half of the splits, and one consume-queue file
    per queue drawing on every split (the shape of a 10M-message batch of 40 splits)."""
    half = splits // 2
    jobs = [(FileKind.INDEX, {"plan": {"ordinal": k}, "sources": list(range(k * half, (k + 1) * half)),
                              "pred_source": None}, 400 << 20) for k in range(2)]
    jobs += [(FileKind.CONSUMEQUEUE, {"plan": {"queue_id": q}, "sources": list(range(splits))}, 5 << 20)
             for q in range(queues)]
    return jobs


def _placements(groups: list) -> int:
    return sum(len({s for kind in g for job in g[kind] for s in job["sources"]}) for g in groups)


def test_consume_queue_files_drawing_on_the_same_splits_share_a_task():
    weights = {s: 250_000 * write_stage.PLACE_WEIGHT for s in range(40)}
    groups = write_stage._file_groups(_jobs(), 4, weights)
    assert sorted(len(g[FileKind.CONSUMEQUEUE]) for g in groups) == [0, 0, 64]
    assert sorted(len(g[FileKind.INDEX]) for g in groups) == [0, 1, 1]
    assert _placements(groups) == 80            # every split placed once for the queues, once for its index file
    every = [job["plan"] for g in groups for kind in g for job in g[kind]]
    assert len(every) == 66


def test_heavy_files_still_spread_over_the_tasks():
    """Files heavier than what placing their splits costs go to separate tasks."""
    jobs = [(FileKind.INDEX, {"plan": {"ordinal": k}, "sources": [0, 1], "pred_source": None}, 400 << 20)
            for k in range(4)]
    groups = write_stage._file_groups(jobs, 4, {0: 1 << 20, 1: 1 << 20})
    assert [len(g[FileKind.INDEX]) for g in groups] == [1, 1, 1, 1]


def test_staged_facts_read_back_as_written(tmp_path):
    staged = LocalStaging(str(tmp_path))
    arrays = {"sizes": np.arange(7, dtype=np.int32), "ts": np.arange(7, dtype=np.int64) * 10**12,
              "ihash": np.array([-1, 5], np.int32), "empty": np.zeros(0, np.int64), "flags": np.array([True, False])}
    staged.write_file("s/split.facts", encode_stage.facts_file(dict(arrays), qkeys=[["T", 3]], rr_topics=["T"]))
    got = encode_stage.load_split_facts(staged, "s/split.facts")
    for name, a in arrays.items():
        assert got[name].dtype == a.dtype and np.array_equal(got[name], a), name
    assert got["qkeys"] == [["T", 3]] and got["rr_topics"] == ["T"]
    staged.write_file("s/other.facts", [b"PK\x03\x04 not facts"])
    with pytest.raises(IngestError, match="not a staged split facts file"):
        encode_stage.load_split_facts(staged, "s/other.facts")



def test_paired_hasher_gives_the_block_hashers_digests():
    """Whole blocks of an update hashed two at a time: the same checksum, digests and tail as
    one block after another, however the bytes are cut into updates (cuts in blocks)."""
    from storelib.io import checksum
    from storelib.ingest.file_versions import PairedBlockHasher
    B = checksum.BLOCK_SIZE
    data = ((np.arange(4 * B + 12345, dtype=np.uint32) * 2654435761) >> 13).astype(np.uint8)
    for start, cuts in [(0, []), (777, []), (0, [0.5, 3]), (777, [2, 2.5]), (0, [1, 3.1])]:
        head = data[:start].tobytes()
        plain, paired = checksum.BlockHasher(start, [], head), PairedBlockHasher(start, [], head)
        edges = [start] + [int(c * B) for c in cuts] + [len(data)]
        for lo, hi in zip(edges, edges[1:]):
            plain.update(data[lo:hi])
            paired.update(data[lo:hi])
        assert paired.finish() == plain.finish(), (start, cuts)
        assert paired.tail() == plain.tail(), (start, cuts)


def test_task_profile_only_when_asked(tmp_path, monkeypatch):
    """ROCKETLAKE_TASK_PROFILE=DIR: a task's profile in DIR, the items unchanged; unset: nothing."""
    import pstats
    from storelib.ingest import task_pipeline
    monkeypatch.delenv(task_pipeline.PROFILE_ENV, raising=False)
    items = iter([1, 2, 3])
    assert task_pipeline.profiled_iter("files", items) is items
    monkeypatch.setenv(task_pipeline.PROFILE_ENV, str(tmp_path / "prof"))
    assert list(task_pipeline.profiled_iter("files", (i * i for i in range(4)))) == [0, 1, 4, 9]
    with task_pipeline.profiled("encode"):
        sum(range(1000))
    names = sorted(p.name.split("-")[0] for p in (tmp_path / "prof").iterdir())
    assert names == ["encode", "files"]
    pstats.Stats(str(next((tmp_path / "prof").glob("encode-*"))))
