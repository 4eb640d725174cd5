"""Extent lists stored once per batch (storelib.io.extentlists): a row keeps its newest extents
inline and names the older ones as immutable list objects, merged like a binary counter. Split and
rejoin round trip (hypothesis), damaged and missing list objects refused, and a row's bytes per
batch flat in the number of batches (issue 40 item 2). No Spark, no store: objects in a dict."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from storelib.io import extentlists, fragments, headpages
from storelib.io.fragments import Extent


class Objects(dict):
    """A store's objects: ``write`` under a batch's prefix, ``fetch`` as readers do."""

    def __init__(self):
        super().__init__()
        self.uploaded = 0

    def writer(self, batch: int, rel: str = "f"):
        def write(data: bytes) -> str:
            key = f"_rocketlake/objects/b{batch}/a/t/{rel}.extents"
            assert key not in self, "a list object is written once"
            self[key] = data
            self.uploaded += len(data)
            return key
        return write

    def fetch(self, key: str) -> bytes:
        if key not in self:
            raise FileNotFoundError(key)
        return self[key]


def _version(objs, batch, full, prior, inline_max, rel="commitlog/0"):
    """One batch's row detail for extents ``full`` continuing ``prior`` ((lists, full) or None)."""
    lists, inline = extentlists.split(rel, full, prior[0] if prior else [], prior[1] if prior else [],
                                      objs.writer(batch, rel), inline_max)
    detail = {"extents": fragments.extents_to_detail(inline)}
    if lists:
        detail["extent_lists"] = extentlists.lists_to_detail(lists)
    return json.loads(json.dumps(detail)), lists


def _append(full, n, batch, k=0):
    pos = full[-1].file_pos + full[-1].length if full else 0
    return full + [Extent(pos, n, f"_rocketlake/objects/b{batch}/a/t/f.records{k}", 0)]


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 5), st.lists(st.tuples(st.integers(1, 3), st.integers(-1, 40), st.integers(0, 40)),
                                    min_size=1, max_size=70))
def test_split_then_resolve_gives_the_versions_extents(inline_max, batches):
    """Every version reads back as its whole extent list, whatever merges changed among the older
    extents; the lists tile the file; a row names O(log n) lists; no object is ever rewritten."""
    objs, full, prior = Objects(), [], None
    for b, (adds, merge_at, merge_len) in enumerate(batches):
        for k in range(adds):
            full = _append(full, 7 + (b * 13 + k) % 50, b, k)
        if merge_at >= 0 and merge_len >= 2 and merge_at + merge_len < len(full):   # a run rewritten (merge_run)
            i, j = merge_at, merge_at + merge_len
            lo, hi = full[i].file_pos, full[j - 1].file_pos + full[j - 1].length
            full = full[:i] + [Extent(lo, hi - lo, f"_rocketlake/objects/b{b}/a/t/f.merged0", 0)] + full[j:]
        detail, lists = _version(objs, b, full, prior, inline_max)
        assert extentlists.resolve("commitlog/0", detail, objs.fetch) == full
        assert len(detail["extents"]) <= inline_max or not lists
        classes = [extentlists.size_class(x.size) for x in lists]
        assert classes == sorted(set(classes), reverse=True) and len(lists) <= len(full).bit_length()
        for a, c in zip(lists, lists[1:]):
            assert a.end == c.first
        prior = (lists, full)


def test_lists_merge_like_a_binary_counter_and_each_extent_is_uploaded_log_times():
    objs, full, prior, counts, extents_uploaded = Objects(), [], None, [], 0
    for b in range(1000):
        full = _append(full, 100, b)
        before = set(objs)
        detail, lists = _version(objs, b, full, prior, 4)
        extents_uploaded += sum(len(json.loads(__import__("zlib").decompress(objs[k]))["extents"])
                                for k in set(objs) - before)
        counts.append(len(lists))
        prior = (lists, full)
    assert max(counts) <= 10                                          # log2(1000 / 4) + 1
    sizes = [x.size for x in prior[0]]
    classes = [extentlists.size_class(n) for n in sizes]
    assert classes == sorted(set(classes), reverse=True)             # strictly falling: O(log n) lists
    assert extents_uploaded <= 1000 * 10                             # each extent O(log n) times, not n


def test_a_row_without_lists_reads_as_before_and_one_with_lists_needs_them_read():
    ext = [[0, 10, "_rocketlake/objects/b/a/t/f", 0]]
    assert headpages.version_extents({"extents": ext}) == [Extent(*ext[0])]
    objs, full = Objects(), []
    for b in range(6):
        full = _append(full, 10, b)
    detail, lists = _version(objs, 6, full, None, 2)
    assert lists
    with pytest.raises(ValueError, match="not read"):
        headpages.version_extents(detail)
    assert headpages.version_extents(detail, "commitlog/0", objs.fetch) == full


@pytest.mark.parametrize("damage", ["missing", "flipped", "other-file", "wrong-count", "gap"])
def test_a_damaged_or_missing_list_object_is_refused(damage):
    objs, full = Objects(), []
    for b in range(9):
        full = _append(full, 10, b)
    detail, lists = _version(objs, 9, full, None, 2)
    key = lists[0].object_rel
    extentlists._CACHE.clear()
    if damage == "missing":
        del objs[key]
    elif damage == "flipped":
        objs[key] = objs[key][:-1] + bytes([objs[key][-1] ^ 1])
    elif damage == "other-file":                           # the bytes of another file's list: its sha256 too
        data = extentlists.encode("commitlog/1", lists[0].first, lists[0].end, full[:lists[0].size])
        objs[key] = data
        detail["extent_lists"][0][1] = __import__("hashlib").sha256(data).hexdigest()
    elif damage == "wrong-count":
        detail["extent_lists"][0][4] += 1
    else:
        detail["extents"] = detail["extents"][1:]
    with pytest.raises(ValueError) as e:
        extentlists.resolve("commitlog/0", detail, objs.fetch)
    assert key in str(e.value) or damage == "gap"


def test_the_rows_bytes_per_batch_stay_flat_in_the_number_of_batches():
    """The bench's shape: a segment and an index file gaining an extent a batch that no merge
    share of these batches can pair, 32 consume queues whose tiny extents the merge share keeps in
    a band (storelib.io.fragments). The segment's and the index file's rows a batch re-uploads do
    not grow with the batches (a list entry per doubling), where whole lists inline grew an extent
    a batch (the baseline, computed beside them); the queues' rows stay inline; the list bytes a
    batch uploads are O(log n) amortized."""
    R = 410_000
    rels = ["commitlog/0", "index/0"] + [f"consumequeue/t/{q}/0" for q in range(32)]
    adds = {"commitlog/0": R, "index/0": 41_000, **{r: 625 for r in rels[2:]}}
    files = dict.fromkeys(rels, [])
    priors: dict = dict.fromkeys(rels)
    objs = Objects()
    rows, whole, lists_up = [], [], []
    for b in range(400):
        plan = fragments.plan_merges({r: e for r, e in files.items() if e}, int(fragments.MERGE_SHARE * R))
        up0, row_bytes, whole_bytes = objs.uploaded, 0, 0
        for rel in rels:
            files[rel] = _append(files[rel], adds[rel], b)
            run = fragments.merge_run(files[rel], plan.get(rel, 0))
            if run is not None:
                i, j = run
                lo = files[rel][i].file_pos
                hi = files[rel][j - 1].file_pos + files[rel][j - 1].length
                files[rel] = files[rel][:i] + [Extent(lo, hi - lo, f"_rocketlake/objects/b{b}/a/t/m", 0)] + files[rel][j:]
            detail, lists = _version(objs, b, files[rel], priors[rel], None, rel)
            priors[rel] = (lists, files[rel])
            assert len(detail["extents"]) <= extentlists.INLINE_EXTENTS
            if rel in rels[:2]:
                row_bytes += len(json.dumps(detail))
                whole_bytes += len(json.dumps(fragments.extents_to_detail(files[rel])))
        rows.append(row_bytes)
        whole.append(whole_bytes)
        lists_up.append(objs.uploaded - up0)
    early, late = slice(64, 192), slice(256, 384)        # four whole cycles of the inline extents each

    def mean(xs):
        return sum(xs) / len(xs)
    assert mean(rows[late]) <= mean(rows[early]) + 400            # flat: one more list entry a file at most
    assert mean(whole[late]) > mean(whole[early]) + 20_000        # whole lists grow ~130 bytes a file a batch
    assert sum(lists_up[late]) <= 2 * sum(lists_up[early]) + 10_000


def _nine_batches_cached():
    """(objects, extents, detail, lists) of a file nine batches of ten extents long, its version
    read once (its lists in the cache)."""
    objs, full = Objects(), []
    for b in range(9):
        full = _append(full, 10, b)
    detail, lists = _version(objs, 9, full, None, 2)
    extentlists._CACHE.clear()
    assert extentlists.resolve("commitlog/0", detail, objs.fetch) == full       # cached now
    return objs, full, detail, lists


@pytest.mark.parametrize("damage", ["end", "size"])
def test_a_row_that_misstates_a_cached_list_is_refused_as_an_uncached_one(damage):
    """The cache holds a list read for one row; another row naming the same object (its sha256 and
    first) but another range or count is checked as a fresh read would check it, not served the
    cached extents (the file would read with a gap, or a list short of what its row says)."""
    objs, full, detail, lists = _nine_batches_cached()
    bad = json.loads(json.dumps(detail))
    if damage == "end":              # the list said to end later, the inline extents moved to match
        bad["extent_lists"][-1][3] += 5
        bad["extents"] = [[e[0] + 5, e[1], e[2], e[3]] for e in bad["extents"]]
    else:
        bad["extent_lists"][-1][4] += 1
    with pytest.raises(ValueError, match=lists[-1].object_rel):
        extentlists.resolve("commitlog/0", bad, objs.fetch)
    extentlists._CACHE.clear()
    with pytest.raises(ValueError, match=lists[-1].object_rel):
        extentlists.resolve("commitlog/0", bad, objs.fetch)


def test_a_fresh_prefetch_reads_again_what_the_cache_holds():
    """Verify's read: a list object deleted or damaged since this process cached it is refused,
    as a fresh process would refuse it; a plain prefetch leaves the cache as it is."""
    objs, full, detail, lists = _nine_batches_cached()
    for x in lists:
        del objs[x.object_rel]
    extentlists.prefetch([("commitlog/0", detail)], objs.fetch)
    assert extentlists.resolve("commitlog/0", detail, objs.fetch) == full       # readers: the cache serves
    extentlists.prefetch([("commitlog/0", detail)], objs.fetch, fresh=True)
    with pytest.raises(ValueError, match="cannot be read"):
        extentlists.resolve("commitlog/0", detail, objs.fetch)
