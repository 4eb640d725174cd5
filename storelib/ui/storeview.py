"""The store a request reads, and the one line a failed request shows.

Every request opens the store afresh (``StoreView``): the configuration and the refusal of a path
that is not (or no longer) a store come from ``cli.common.store_config`` as for every command, the
snapshot from the Delta tables (``table.snapshots``). A batch committed while the server runs is
on the next page; one being written is not, since a batch is visible only once its checkpoint row
is committed. Nothing here writes: the page reads what a single lookup reads.
"""
from __future__ import annotations

from types import SimpleNamespace

from ..cli import failures
from ..cli.common import store_snapshot
from ..errors import BadInput, ExitCode, exit_code
from ..format.names import rel_path_problem
from ..io import storage
from ..table.snapshots import StoreSnapshot, open_snapshot

__all__ = ["StoreView", "error_line", "http_status", "as_int", "checked_rel"]


class StoreView:
    """One store as the pages read it (``as_of``: a batch id or sequence number, None: the latest)."""

    def __init__(self, uri: str, config_path: str | None = None):
        self.uri = uri
        self.config_path = config_path

    def resolved(self, as_of=None):
        """The store's configuration and snapshot (``cli.common.store_snapshot``): a path that is not
        a store, a batch it does not have or a ``--config`` that disagrees raise the command line's
        errors."""
        return store_snapshot(SimpleNamespace(store=self.uri, config=self.config_path, as_of_batch=as_of))

    def config(self, as_of=None):
        return self.resolved(as_of).config

    @property
    def store(self) -> storage.Store:
        return storage.Store(self.uri)

    def snapshot(self, as_of=None) -> StoreSnapshot:
        """The committed snapshot of ``as_of`` with every batch before it (its ``batch`` None: a
        broker's directory)."""
        return open_snapshot(self.store, as_of, history=True)

    def reader(self, as_of=None, config=None):
        """A ``StoreReader`` over the batch (``read.query.open_store``, as ``rocketlake query``)."""
        from ..read.query import open_store
        if config is not None:
            return open_store(self.uri, as_of, config)
        res = self.resolved(as_of)
        return open_store(self.uri, as_of, res.config, res.snapshot)


def error_line(e: BaseException, lookup: bool = False) -> str:
    """The one line the command line prints for ``e`` (``cli.failures``): ``rocketlake query``'s
    (``lookup``) or ``rocketlake inspect``'s. A batch the store does not have, a bad argument, a
    path that is not a store: ``error: <what>``; a damaged store or a path leading out of it: the
    lookup says ``error: query failed: <what>``."""
    return failures.line(e, failures.QUERY if lookup else failures.INSPECT)[1]


def http_status(e: BaseException) -> int:
    """400 for what the request asked (a bad argument, a batch the store lacks), 500 for the store."""
    return 400 if exit_code(e) == ExitCode.BAD_INPUT else 500


def as_int(params, name: str, default=None, minimum: int | None = None):
    """An integer request parameter (``BadInput`` naming it when it is not one)."""
    text = (params.get(name) or "").strip()
    if not text:
        if default is None:
            raise BadInput(f"argument {name}: required")
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"argument {name}: invalid int value: {text!r}") from None
    if minimum is not None and value < minimum:
        raise BadInput(f"argument {name}: must be at least {minimum}")
    return value


def checked_rel(rel: str, known) -> str:
    """A store-relative path a request names: refused unless it stays in the store and is one of
    ``known`` (the files of the batch shown); the page never opens anything else. Either refusal
    is ``BadInput`` (a request's 400): what the request asked, not damage of the store."""
    problem = rel_path_problem(rel) if rel else "is empty"
    if problem:
        raise BadInput(f"{rel!r} {problem}: the browser reads only files of the store")
    if rel not in known:
        raise BadInput(f"{rel!r} is not a file of this batch of the store")
    return rel
