"""The errors of an ingest, raised by the driver and by its executor tasks alike.

A leaf module (it imports nothing of storelib), so every stage module can raise them without
importing ``storelib.ingest``. ``storelib.ingest`` re-exports both.
"""
from __future__ import annotations

__all__ = ["IngestError", "AlreadyCommitted"]


class IngestError(RuntimeError):
    pass


class AlreadyCommitted(Exception):
    """The batch id is committed with the same input: nothing to do."""
