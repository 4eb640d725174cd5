"""What the driver hands the executor tasks of an ingest: one typed, frozen value per stage,
broadcast once, so the tasks never parse the configuration or the topics again.

* ``EncodeContext``: stage 1 (``storelib.ingest.encode`` / ``storelib.ingest.frame``) and what
  stage 3 needs of it to re-read an input split (``encode.reencode_rows``);
* ``IngestOptions``: what the caller asked of one batch (``run_ingest``, ``ingest_dataframe``,
  the streaming sink), handed to ``driver.ingest_batch`` as one value;
* ``WriteContext``: stage 3 (``storelib.ingest.write``): the encode context with this attempt's
  staging directory, where each split's messages go (``split_places``) and where each file
  version goes (``storelib.ingest.file_versions``: the store's kind, the attempt, the committed
  facts of every file the plan continues).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ..format.config import StoreConfig
from .topics import Topics

__all__ = ["ALLOW_EMPTY_BODY_ENV", "EncodeContext", "WriteContext", "IngestOptions", "empty_bodies_allowed"]

ALLOW_EMPTY_BODY_ENV = "ROCKETLAKE_ALLOW_EMPTY_BODY"


def empty_bodies_allowed(given: bool | None = None) -> bool:
    """``allow_empty_body`` as given, else the environment's ``ROCKETLAKE_ALLOW_EMPTY_BODY=1`` (a
    deployment whose inputs are a broker's stored messages, which may hold empty bodies)."""
    if given is not None:
        return bool(given)
    return os.environ.get(ALLOW_EMPTY_BODY_ENV, "") in ("1", "true")


@dataclass(frozen=True)
class IngestOptions:
    """One batch's options (``run_ingest`` documents each): its id (None: derived from the input),
    the topic config (a topics.json path or ``Topics``; None: the store's) and whether it may
    change the recorded queue counts, the sharding-key column, empty bodies (None: the
    environment's), progress lines, and when the run started (``t0``; None: now)."""
    batch_id: str | None = None
    topics: Any = None
    update_topics: bool = False
    queue_by: str | None = None
    allow_empty_body: bool | None = None
    quiet: bool = False
    progress_interval: float = 5.0
    t0: float | None = None


@dataclass(frozen=True)
class EncodeContext:
    store: str                          # the store's URI
    config: StoreConfig
    topics: Topics
    staging: str                        # this attempt's staging directory, store-relative
    local_staging: str | None = None    # host-local directory of the split files (split_staging)
    splits: tuple = ()                  # the input splits (``Split.to_dict``); none for a DataFrame
    queue_by: str | None = None         # the sharding-key column, if any (storelib.ingest.topics)
    default_store_ts: int | None = None
    # write rows whose body is empty (RocketMQ's producers refuse them); default: the environment's
    allow_empty_body: bool = field(default_factory=empty_bodies_allowed)


@dataclass(frozen=True)
class WriteContext(EncodeContext):
    split_places: dict = field(default_factory=dict)    # split index -> its placement (write.split_places)
    committed: dict = field(default_factory=dict)       # rel -> committed facts of a continued file
    objects: bool = False               # an object store: file versions are new objects
    batch_id: str = ""
    attempt: str = ""
    durable: bool = True

    @classmethod
    def of(cls, encode: EncodeContext, **more) -> "WriteContext":
        """The write stage's context: ``encode``'s fields, then ``more`` (which may replace them)."""
        base = {f.name: getattr(encode, f.name) for f in dataclasses.fields(EncodeContext)}
        return cls(**{**base, **more})
