"""Extent lists stored once per batch: a row's older extents in immutable objects it names.

A file continued by many small batches gains an extent a batch (storelib.io.fragments), and its
manifest row is re-uploaded by every batch that continues it: a row carrying the whole list would
make every batch pay again for every earlier one. So a row keeps only its newest extents inline
(``detail.extents``) and names the older ones as a list of immutable **extent-list objects**
(``detail.extent_lists``), oldest first:

    [[object_path, sha256, first, end, size], ...]

each object holding the ``size`` extents of the file range ``[first, end)`` (zlib'd JSON,
``encode``), written under the writing batch attempt's own objects prefix. The lists tile the file
from the first one's ``first`` to where the inline extents begin: no gap and no overlap
(``resolve`` checks it and every object's sha256). A row without ``extent_lists`` reads as before.

A version whose inline extents pass ``INLINE_EXTENTS`` moves all of them but the newest to a new
list, which takes in the newest lists while they are of its size class or below
(``size.bit_length()``), like a binary counter, and is written as one object (``split``): an extent is re-uploaded O(log n) times over a
file's life and a row names O(log n) objects, while what a batch re-uploads of the row stays
bounded. A list whose extents a version changed (an extent merge of ``fragments.merge_run`` over
them) is not kept: it and every newer list are split again from the version's extents.

List objects are named by their row as a paged head's layers are (storelib.io.headpages): the
expiry keeps them while a live row names them and deletes them with the file; the dead-attempt
clean-up deletes those of attempts that never committed (they are under the attempt's prefix).
"""
from __future__ import annotations

import hashlib
import json
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..format.paths import OBJECTS_DIR
from .fragments import Extent, ExtentLike, extents_from_detail, extents_to_detail

__all__ = ["INLINE_EXTENTS", "SUFFIX", "ExtentList", "lists_from_detail", "lists_to_detail", "encode", "decode",
           "resolve", "prefetch", "split", "fetcher", "size_class"]

# Twice fragments.MAX_EXTENTS: the extent merge keeps a consume queue's tiny extents between 16
# and 32 (storelib.io.fragments), so such files never overflow into lists that the next merge of
# their older extents would have to split again; a file gaining an extent a batch that no merge
# can pair (a segment, index entries of small batches) carries 1 to 32 inline, 16 on average.
INLINE_EXTENTS = 32
# A list object's name: the name of the object its writer wrote beside it, plus this.
SUFFIX = ".extents"


class ExtentList(NamedTuple):
    object_rel: str
    sha256: str
    first: int
    end: int
    size: int                # how many extents it holds


def size_class(count: int) -> int:
    return int(count).bit_length()


def lists_from_detail(value: object) -> list[ExtentList]:
    """The lists a row's ``detail.extent_lists`` names, checked for shape and order (ValueError)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"extent lists {value!r} is not a list")
    out: list[ExtentList] = []
    for v in value:
        if (not isinstance(v, list) or len(v) != 5 or not isinstance(v[0], str)
                or not v[0].startswith(OBJECTS_DIR + "/") or not isinstance(v[1], str) or len(v[1]) != 64
                or not all(isinstance(x, int) and x >= 0 for x in v[2:]) or v[2] >= v[3] or v[4] < 1):
            raise ValueError(f"extent list {v!r} is not [objects/ path, sha256, first, end, size]")
        if out and v[2] != out[-1].end:
            raise ValueError(f"extent list {v!r} does not start where the one before it ends ({out[-1].end})")
        out.append(ExtentList(*v))
    return out


def lists_to_detail(lists: Sequence[ExtentList]) -> list[list[Any]]:
    return [[str(x.object_rel), str(x.sha256), int(x.first), int(x.end), int(x.size)] for x in lists]


def encode(rel: str, first: int, end: int, extents: Sequence[ExtentLike]) -> bytes:
    """A list object's bytes: the file it belongs to, its range and its extents (zlib'd JSON)."""
    doc = {"file": rel, "first": int(first), "end": int(end), "extents": extents_to_detail(extents)}
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)


def decode(data: bytes, rel: str, lst: ExtentList) -> list[Extent]:
    """The extents of list object ``lst`` of file ``rel`` from its ``data`` (ValueError: damaged,
    or not this list)."""
    if hashlib.sha256(data).hexdigest() != lst.sha256:
        raise ValueError(f"extent list object {lst.object_rel}: its bytes do not match the row's sha256")
    try:
        doc = json.loads(zlib.decompress(data))
    except (zlib.error, ValueError) as e:
        raise ValueError(f"extent list object {lst.object_rel}: {e}") from None
    if not isinstance(doc, dict) or doc.get("file") != rel or doc.get("first") != lst.first or doc.get("end") != lst.end:
        raise ValueError(f"extent list object {lst.object_rel} is not of {rel} [{lst.first}, {lst.end})")
    ext = extents_from_detail(doc.get("extents"))
    if len(ext) != lst.size or ext[0].file_pos != lst.first or ext[-1].file_pos + ext[-1].length > lst.end:
        raise ValueError(f"extent list object {lst.object_rel}: {len(ext)} extents do not fill "
                         f"[{lst.first}, {lst.end}) as its row says ({lst.size})")
    return ext


# Decoded lists by sha256 and what the row that read them said of them (file, range, count: all
# that ``decode`` checked), so a row that says otherwise is checked afresh, not served (immutable
# and checked: safe to share between stores and rows).
_CACHE: OrderedDict[tuple[str, str, int, int, int], tuple[Extent, ...]] = OrderedDict()
_CACHE_MAX = 4096
_LOCK = threading.Lock()


def _key(lst: ExtentList, rel: str) -> tuple[str, str, int, int, int]:
    return (lst.sha256, rel, lst.first, lst.end, lst.size)


def _contents(lst: ExtentList, rel: str, fetch: Callable[[str], bytes]) -> tuple[Extent, ...]:
    key = _key(lst, rel)
    with _LOCK:
        got = _CACHE.get(key)
        if got is not None:
            _CACHE.move_to_end(key)
            return got
    try:
        data = fetch(lst.object_rel)
    except OSError as e:
        raise ValueError(f"extent list object {lst.object_rel} cannot be read: {e}") from None
    got = tuple(decode(data, rel, lst))
    with _LOCK:
        _CACHE[key] = got
        while len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    return got


def fetcher(store: Any) -> Callable[[str], bytes]:
    """Reads a whole list object of ``store`` (a Store or LocalStore)."""
    return lambda obj: store.read(obj)


def prefetch(rows: Iterable[tuple[str, Mapping[str, Any]]], fetch: Callable[[str], bytes], threads: int = 16,
             fresh: bool = False) -> None:
    """Read the list objects ``rows`` (``(file, detail)``) name into the cache, ``threads`` at a
    time: a reader opening a store of many files with lists waits for one round of requests, not
    one per list. What cannot be read is left for ``resolve`` to refuse. ``fresh``: what the cache
    holds of them is dropped and read again (verify: an object deleted or damaged since this
    process cached it is found so, as a fresh process would find it)."""
    todo = []
    for rel, detail in rows:
        try:
            lists = lists_from_detail(detail.get("extent_lists"))
        except ValueError:
            continue
        for lst in lists:
            if fresh:
                with _LOCK:
                    _CACHE.pop(_key(lst, rel), None)
            elif _key(lst, rel) in _CACHE:
                continue
            todo.append((lst, rel))

    def one(item: tuple[ExtentList, str]) -> None:
        try:
            _contents(item[0], item[1], fetch)
        except ValueError:
            pass
    if len(todo) > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(min(threads, len(todo))) as ex:
            list(ex.map(one, todo))


def resolve(rel: str, detail: Mapping[str, Any], fetch: Callable[[str], bytes] | None) -> list[Extent]:
    """Every extent of ``rel``'s version from its row's ``detail``: its lists' (read through
    ``fetch``, checked) and its inline ones. ValueError, naming what is wrong, when a list object
    is missing or damaged or the lists and the inline extents do not tile the file."""
    inline = extents_from_detail(detail["extents"])
    lists = lists_from_detail(detail.get("extent_lists"))
    if not lists:
        return inline
    if fetch is None:
        raise ValueError("the row names extent lists, which were not read")
    if not inline or inline[0].file_pos != lists[-1].end:
        raise ValueError(f"the inline extents do not start where the extent lists end ({lists[-1].end})")
    out: list[Extent] = []
    for lst in lists:
        out += _contents(lst, rel, fetch)
    return out + inline


def _within(extents: Sequence[Extent], lo: int, hi: int) -> list[Extent]:
    return [e for e in extents if lo <= e.file_pos < hi]


def split(rel: str, full: Sequence[ExtentLike], prior_lists: Sequence[ExtentList], prior_full: Sequence[ExtentLike],
          write: Callable[[bytes], str], inline_max: int | None = None) -> tuple[list[ExtentList], list[Extent]]:
    """(lists, inline extents) of a version whose extents are ``full``, continuing one whose lists
    were ``prior_lists`` over extents ``prior_full``. A prior list is kept while its extents are
    the version's, unchanged, and the version's next extent starts at its end; past
    ``inline_max`` inline extents, all but the newest go to a new list, merged with the newest
    lists while they are of its size class or below, and written as one object (``write(bytes)`` -> its object
    path)."""
    inline_max = INLINE_EXTENTS if inline_max is None else inline_max
    ext = [Extent(*e) for e in full]
    prior = [Extent(*e) for e in prior_full]
    lists: list[ExtentList] = []
    k = 0
    for lst in prior_lists:
        mine = _within(prior, lst.first, lst.end)
        if ext[k:k + len(mine)] != mine or k + len(mine) >= len(ext) or ext[k + len(mine)].file_pos != lst.end:
            break
        lists.append(lst)
        k += len(mine)
    inline = ext[k:]
    if len(inline) <= inline_max:
        return lists, inline
    # the new list takes in the newest lists of its size class or below (in memory: only the final
    # object is written, so none is left unnamed). Classes then fall from the oldest list to the
    # newest (O(log n) lists), and a list taken in lands in one at least 1.5 times its size (an
    # extent is rewritten O(log n) times), whatever the sizes of the batches' new lists.
    new, inline = inline[:-1], inline[-1:]
    while lists and size_class(lists[-1].size) <= size_class(len(new)):
        new = _within(ext, lists[-1].first, lists[-1].end) + new
        lists.pop()
    end = inline[0].file_pos
    data = encode(rel, new[0].file_pos, end, new)
    lists.append(ExtentList(write(data), hashlib.sha256(data).hexdigest(), new[0].file_pos, end, len(new)))
    return lists, inline
