"""Splits inside commitlog segments and the consume-queue read of a topic filter (storelib.read.splits),
without Spark: every plan gives exactly the rows of a whole-segment walk with the same filters."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import GOLDEN
from storelib.read import rangescan, splits
from storelib.format.config import StoreConfig
from storelib.errors import CorruptStore
from storelib.io.storage import Store
from storelib.table.storefiles import as_store, open_files
from support.zoned_store import BASE_TS

SMALL = os.path.join(GOLDEN, "small-roll")
TINY = StoreConfig(mappedFileSizeCommitLog=65536, mappedFileSizeConsumeQueue=600, maxHashSlotNum=64,
                   maxIndexNum=256)


def _ingest(tmp, name, lines):
    from storelib.ingest.driver import run_ingest
    from storelib.runtime.localrun import LocalSession
    src = tmp / f"{name}.jsonl"
    src.write_text("".join(lines), encoding="utf-8")
    store = str(tmp / name)
    run_ingest(LocalSession(), store, str(src), "jsonl", TINY, quiet=True)
    return store


@pytest.fixture(scope="module")
def stores(tmp_path_factory, restored_golden):
    """{"mixed": 900 small-roll messages, transaction PREPARED/ROLLBACK ones included (no consume-queue
    unit), "units": the same without those (a unit per record), "broker": RocketMQ's own store}."""
    tmp = tmp_path_factory.mktemp("splits")
    lines = open(os.path.join(SMALL, "messages.jsonl"), encoding="utf-8").read().splitlines(True)[:900]
    plain = [x for x in lines if json.loads(x)["sys_flag"] & 0xC in (0, 8)]
    assert len(plain) < len(lines)
    return {"mixed": _ingest(tmp, "mixed", lines), "units": _ingest(tmp, "units", plain),
            "broker": restored_golden("small-roll")}


def _whole(store):
    """Every record of every segment, walked segment by segment (the reference)."""
    files, _ = open_files(as_store(store))
    st = Store(store)
    return pa.concat_tables([rangescan.empty_messages()] + [t for s in files.commitlog
                                                            for t in rangescan.segment_messages(st, s)])


def _read(store, plan, **filters):
    st = Store(store)
    out = [t for sp in plan for t in splits.split_messages(st, sp, **filters)]
    return pa.concat_tables([rangescan.empty_messages()] + out).combine_chunks()


@pytest.mark.parametrize("name,split_bytes", [("units", 2500), ("units", 1 << 30), ("broker", 6000)])
def test_walk_splits_start_on_records_and_cover_every_record(stores, name, split_bytes):
    store = stores[name]
    files, info = open_files(as_store(store))
    plan = splits.plan_splits(as_store(store), files, files.commitlog, split_bytes=split_bytes)
    if split_bytes >= 1 << 30:                     # a split larger than the segment: the segment
        assert [(s.start, s.stop) for s in plan] == [(s.base, s.base + s.valid) for s in files.commitlog]
    else:
        assert len(plan) > 4 * len(files.commitlog)
    assert all(a.stop == b.start for a, b in zip(plan, plan[1:]) if a.base == b.base)
    st = Store(store)
    parts = []
    for sp in plan:                                # a split starts on its first record
        rows = pa.concat_tables([rangescan.empty_messages()] + list(splits.split_messages(st, sp)))
        if rows.num_rows:
            assert rows.column("commitlog_offset")[0].as_py() == sp.start
        parts.append(rows)
    assert pa.concat_tables(parts).combine_chunks().equals(_whole(store).combine_chunks())


def test_topic_filter_through_queues_equals_scan_then_filter(stores):
    store = stores["units"]
    files, info = open_files(as_store(store))
    assert splits.queue_plan_ok(files, info)
    whole = _whole(store)
    ts = np.sort(whole.column("store_timestamp").to_numpy())
    offs = whole.column("commitlog_offset").to_numpy()
    cases = [({"metrics-raw"}, {}), ({"shipping", "audit_log"}, {}), ({"nosuch"}, {}),
             ({"metrics-raw", "trace_topic"}, {"begin": int(ts[100]), "end": int(ts[400])}),
             ({"audit_log"}, {"lo": int(offs[50]) + 1, "hi": int(offs[500])})]
    for topics, bounds in cases:
        want = whole.filter(pc.is_in(whole.column("topic"), pa.array(sorted(topics))))
        mask = np.ones(want.num_rows, bool)
        for col, key, op in (("store_timestamp", "begin", np.greater_equal), ("store_timestamp", "end", np.less_equal),
                             ("commitlog_offset", "lo", np.greater_equal), ("commitlog_offset", "hi", np.less_equal)):
            if key in bounds:
                mask &= op(want.column(col).to_numpy(), bounds[key])
        want = want.filter(pa.array(mask)).combine_chunks()
        for split_bytes, gap in ((1 << 30, 0), (20000, None)):
            plan = splits.plan_splits(as_store(store), files, files.commitlog, topics, True,
                                      bounds.get("lo"), bounds.get("hi"), split_bytes)
            assert all(sp.queues is not None for sp in plan)
            got = _read(store, plan, topics=topics, coalesce_gap=gap, batch_rows=100, **bounds)
            assert got.equals(want), (topics, bounds, split_bytes, gap)
            if topics != {"nosuch"}:
                assert want.num_rows > 0


def test_queue_plan_only_where_every_record_has_a_unit(stores):
    """PREPARED/ROLLBACK records have no unit (a rocketlake store of them), a broker's store has
    no record counts: both read a topic by walking every record, with the same answer."""
    for name in ("mixed", "broker"):
        files, info = open_files(as_store(stores[name]))
        assert not splits.queue_plan_ok(files, info), name
    store = stores["mixed"]
    files, _ = open_files(as_store(store))
    whole = _whole(store)
    plan = splits.plan_splits(as_store(store), files, files.commitlog, {"shipping"}, False, split_bytes=3000)
    want = whole.filter(pc.equal(whole.column("topic"), "shipping")).combine_chunks()
    assert want.num_rows and _read(store, plan, topics={"shipping"}).equals(want)


def test_a_split_off_the_record_boundaries_is_an_error(stores):
    store = stores["units"]
    files, _ = open_files(as_store(store))
    seg = files.commitlog[0]
    plan = splits.plan_splits(as_store(store), files, [seg], split_bytes=4000)
    sp = plan[0]
    st = Store(store)
    for bad in (sp._replace(stop=sp.stop + 5), sp._replace(start=sp.start + 5)):
        with pytest.raises(CorruptStore):
            list(splits.split_messages(st, bad))
    # the segment's last split ends where the records end (a broker's recovery), not at an error
    last = splits.Split(seg.rel, seg.base, seg.valid, plan[-1].start, seg.base + seg.valid)
    assert sum(t.num_rows for t in splits.split_messages(st, last)) > 0


@pytest.mark.parametrize("damage", ["magic", "zero-size", "past-valid"])
def test_a_segment_walk_that_ends_before_its_valid_bytes_is_an_error(stores, tmp_path, damage):
    """A record whose magic or TOTALSIZE is damaged ends the walk before the segment's valid bytes
    (the manifest's): the scan of a range raises CorruptStore naming the file and the record's
    position (as verify does), never returns the records before it as the whole answer."""
    import shutil
    from storelib.read.localscan import scan_range_local
    store = shutil.copytree(stores["units"], str(tmp_path / "store"))
    files, _ = open_files(as_store(store))
    seg = files.commitlog[0]
    path = os.path.join(store, seg.rel)
    with open(path, "rb") as fh:
        data = fh.read(seg.valid)
    second = int.from_bytes(data[:4], "big")
    put = {"magic": (second + 4, b"\x00\x00\x00\x01"), "zero-size": (second, b"\x00\x00\x00\x00"),
           "past-valid": (second, (seg.valid - second + 8).to_bytes(4, "big"))}[damage]
    with open(path, "r+b") as fh:
        fh.seek(put[0])
        fh.write(put[1])
    with pytest.raises(CorruptStore, match=f"^{seg.rel}@{second}: "):
        list(rangescan.segment_messages(Store(store), seg))
    with pytest.raises(CorruptStore, match=f"^{seg.rel}@{second}: "):
        scan_range_local(store, 0, 2**62)
    whole = splits.plan_splits(as_store(store), files, [seg], split_bytes=1 << 30)     # one split: the last
    assert len(whole) == 1 and whole[0].last
    with pytest.raises(CorruptStore, match=f"^{seg.rel}@{second}: "):
        list(splits.split_messages(Store(store), whole[0]))


@pytest.fixture(scope="module")
def zoned(tmp_path_factory):
    """(store, whole walk): times in clusters out of order, two batches (support/zoned_store.py)."""
    from support.zoned_store import zoned_store
    store = zoned_store(tmp_path_factory.mktemp("zoned"), os.path.join(SMALL, "messages.jsonl"), TINY)
    return store, _whole(store).combine_chunks()


def test_zone_maps_cut_and_prune_splits_without_losing_a_record(zoned):
    """Segments with zone maps split on zone starts; a store-time range reads only the runs of
    zones that may hold its records, inside segments, and gets exactly the walk's rows (walk and
    queue splits); a map the file disagrees with is not used."""
    store, whole = zoned
    sto = as_store(store)
    files, info = open_files(sto)
    assert all(info.zones(s.base) is not None for s in files.commitlog)
    ts = whole.column("store_timestamp").to_numpy()
    everything = splits.plan_splits(sto, files, files.commitlog, split_bytes=20000, info=info)
    assert _read(store, everything).equals(whole)
    assert len(everything) > len(files.commitlog)
    all_bytes = sum(s.stop - s.start for s in everything)
    rng = np.random.default_rng(3)
    fewer = 0
    for _ in range(25):
        begin = BASE_TS + int(rng.integers(-2 * 10**5, 21 * 10**5))
        end = begin + int(rng.integers(0, 3 * 10**5))
        want = whole.filter(pa.array((ts >= begin) & (ts <= end))).combine_chunks()
        plan = splits.plan_splits(sto, files, files.commitlog, split_bytes=20000, info=info, begin=begin, end=end)
        assert _read(store, plan, begin=begin, end=end).equals(want), (begin, end)
        fewer += sum(s.stop - s.start for s in plan) < all_bytes / 2
        topics = {"shipping", "audit_log"}
        qplan = splits.plan_splits(sto, files, files.commitlog, topics, True, split_bytes=20000, info=info,
                                   begin=begin, end=end)
        qwant = want.filter(pc.is_in(want.column("topic"), pa.array(sorted(topics)))).combine_chunks()
        assert _read(store, qplan, topics=topics, begin=begin, end=end).equals(qwant)
    assert fewer >= 15                     # most ranges read less than half the store
    # a map whose zone start is not a record start (the manifest and the file disagree)
    seg = next(s for s in files.commitlog if len(info.zones(s.base).pos) > 2)
    zm = info.zones(seg.base)
    info.zone_maps[seg.base] = zm._replace(pos=np.concatenate([zm.pos[:1], zm.pos[1:] + 3]))
    plan = splits.plan_splits(sto, files, [seg], split_bytes=2000, info=info)
    assert all((s.start - seg.base) not in (zm.pos[1:] + 3).tolist() for s in plan)
    want = whole.filter(pa.array((whole.column("commitlog_offset").to_numpy() >= seg.base) &
                                 (whole.column("commitlog_offset").to_numpy() < seg.base + seg.valid)))
    assert _read(store, plan).equals(want.combine_chunks())


def test_range_scan_tasks_pack_small_segments_and_keep_large_ones_apart():
    """``scan_range``'s tasks: a full 1 GiB segment each, small segments packed up to TASK_BYTES,
    never fewer tasks than cores (nor more than segments)."""
    gib, t = 1 << 30, rangescan.TASK_BYTES
    assert rangescan.task_count([], 2) == 0
    assert rangescan.task_count([gib] * 5 + [7], 2) == 6
    assert rangescan.task_count([4096] * 63, 2) == 2
    assert rangescan.task_count([4096] * 63, 200) == 63
    assert rangescan.task_count([t // 4] * 40, 2) == 10
    assert rangescan.task_count([10], 8) == 1


def test_small_splits_share_a_partition_and_large_ones_stay_apart():
    """The Python reader's partitions (``group_splits``): consecutive splits of small segments
    share one up to about ``split_bytes``, never fewer than the cores nor more than the splits,
    no two of ``split_bytes`` together; the splits keep their plan order."""
    def plan(sizes):
        out, at = [], 0
        for n in sizes:
            out.append(splits.Split(f"s{at}", at, n, at, at + n))
            at += n
        return out

    small = plan([65536] * 40)
    groups = splits.group_splits(small, 2, splits.SPLIT_BYTES)
    assert len(groups) == 2 and [s for g in groups for s in g] == small
    assert [len(g) for g in groups] == [20, 20]
    assert len(splits.group_splits(small, 64, splits.SPLIT_BYTES)) == 40
    assert len(splits.group_splits(small, 2, 65536 * 4)) == 10
    large = plan([1 << 28] * 3 + [100, 100])
    assert [len(g) for g in splits.group_splits(large, 2, 1 << 28)] == [1, 1, 3]     # never two large ones
    assert splits.group_splits([], 2) == []


def test_the_coalesce_bytes_option_reaches_the_queue_read_by_name(stores, monkeypatch):
    """docs/OPERATIONS.md: the Python reader reads a topic's records through its queues as byte
    ranges coalesced across gaps up to ``option("coalesceBytes", N)``: the option, given by its
    documented name (in any case), is the gap every queue read uses; the rows stay the same; a
    value that is not a number is refused naming the option."""
    from storelib.read.datasource import RocketMQReader
    store = stores["units"]
    gaps = []
    read = splits._queue_chunks

    def spy(st, sp, lo, hi, gap, batch_rows):
        gaps.append(gap)
        return read(st, sp, lo, hi, gap, batch_rows)
    monkeypatch.setattr(splits, "_queue_chunks", spy)

    def rows(**options):
        gaps.clear()
        r = RocketMQReader({"path": store, "topic": "metrics-raw", **options})
        got = pa.concat_tables([rangescan.empty_messages()] + [pa.Table.from_batches([b]) for p in r.partitions()
                                                               for b in r.read(p)])
        return got.combine_chunks(), set(gaps)
    want, default = rows()
    assert want.num_rows > 0 and default == {splits.COALESCE_LOCAL}
    for options, gap in (({"coalesceBytes": "0"}, 0), ({"COALESCEBYTES": "123456"}, 123456)):
        got, used = rows(**options)
        assert used == {gap} and got.equals(want), options
    with pytest.raises(ValueError, match="option coalesceBytes='lots': expected an integer"):
        rows(coalesceBytes="lots")
