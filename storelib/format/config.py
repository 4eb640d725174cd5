"""Store configuration: RocketMQ ``MessageStoreConfig`` keys, RocketMQ defaults.

Only the keys that shape file bytes or query answers are modelled. They are read
from a Java ``.properties`` file (``conf/store.properties`` documents every key)
with RocketMQ's own key names, so a broker's ``broker.conf`` fragment can be
reused as is. Unknown keys are kept (``extra``) and ignored, as a broker would.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any
from dataclasses import dataclass, field

__all__ = ["DEFAULT_CONFIG", "default_config", "DEFAULT_MESSAGE_DELAY_LEVEL", "FILE_SHAPING_KEYS", "ROCKETMQ_LINES", "DEFAULT_ROCKETMQ_LINE", "StoreConfig",
           "parse_java_properties", "load_config", "retention_hours", "parse_topic_retention", "MAX_HOURS"]

# The file layouts own their sizes (consumequeue.py, indexfile.py: leaf modules, no cycle).
from ..errors import ConfigError
from . import consumequeue, indexfile
from .paths import PROJECT_ROOT

# The configuration a command starts from when it is given none (the store's recorded file-shaping
# keys go over it): the project's documented properties file.
DEFAULT_CONFIG = os.path.join(PROJECT_ROOT, "conf", "store.properties")

# RocketMQ 5.3.3 defaults (MessageStoreConfig.java).
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# Keys whose value changes the bytes of existing files; a store keeps them for life.
FILE_SHAPING_KEYS = (
    "mappedFileSizeCommitLog",
    "mappedFileSizeConsumeQueue",
    "maxHashSlotNum",
    "maxIndexNum",
    "enabledAppendPropCRC",
    "messageDelayLevel",
    "rocketmqVersion",
)

# The RocketMQ lines a store can match (docs/FORMAT.md §12): "5" is 5.0 to 5.3 (the golden sets'
# line, 5.3.3), "4.9" the 4.9 line (4.9.8), "5.5" the newest 5.x (5.5.1: TAGS index entries, a
# sixth checkpoint field). A store written before the key existed is a "5" store.
ROCKETMQ_LINES = ("4.9", "5", "5.5")
DEFAULT_ROCKETMQ_LINE = "5"


@dataclass(frozen=True)
class StoreConfig:
    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = 300000 * consumequeue.UNIT_SIZE
    maxHashSlotNum: int = 5000000
    maxIndexNum: int = 5000000 * 4
    maxMessageSize: int = 1024 * 1024 * 4
    messageDelayLevel: str = DEFAULT_MESSAGE_DELAY_LEVEL
    enabledAppendPropCRC: bool = False
    maxMsgsNumBatch: int = 64
    maxTransferCountOnMessageInMemory: int = 32
    maxTransferBytesOnMessageInMemory: int = 256 * 1024
    # Broker-side defaults used when the input leaves a field out (queue assignment, hosts).
    defaultTopicQueueNums: int = 4
    brokerIP1: str = "127.0.0.1"
    listenPort: int = 10911
    fileReservedTime: int = 72
    # SYNC_FLUSH: every file of a batch is fsync'd before the commit that makes it visible.
    # RocketMQ's broker defaults to ASYNC_FLUSH; a batch store promises durable commits, so
    # ASYNC_FLUSH (no fsync at all) must be asked for, e.g. for scratch stores and benchmarks.
    flushDiskType: str = "SYNC_FLUSH"
    # Which RocketMQ line the files and the readers' answers match (ROCKETMQ_LINES).
    rocketmqVersion: str = DEFAULT_ROCKETMQ_LINE
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    # ----------------------------------------------------------------- derived
    @property
    def cq_file_size(self) -> int:
        """RocketMQ rounds the consume queue file size up to whole 20-byte units."""
        return -(-self.mappedFileSizeConsumeQueue // consumequeue.UNIT_SIZE) * consumequeue.UNIT_SIZE

    @property
    def cq_units_per_file(self) -> int:
        return self.cq_file_size // consumequeue.UNIT_SIZE

    @property
    def index_file_size(self) -> int:
        return indexfile.file_size(self.maxHashSlotNum, self.maxIndexNum)

    @property
    def index_entries_per_file(self) -> int:
        """Entry position 0 is never used: a file holds maxIndexNum - 1 entries."""
        return self.maxIndexNum - 1

    @property
    def delay_level_millis(self) -> list[int]:
        """Delay of level i (1-based) is element i-1, parsed like DefaultMessageStore.parseDelayLevel."""
        units = {"s": 1000, "m": 60000, "h": 3600000, "d": 86400000}
        out = []
        for token in self.messageDelayLevel.split(" "):
            m = re.fullmatch(r"(\d+)([smhd])", token)
            if not m:
                raise ConfigError(f"messageDelayLevel: cannot parse level {token!r}")
            out.append(int(m.group(1)) * units[m.group(2)])
        return out

    @property
    def store_host(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    def validate(self) -> "StoreConfig":
        if self.mappedFileSizeCommitLog < 64:
            raise ConfigError("mappedFileSizeCommitLog must be at least 64 bytes")
        if self.mappedFileSizeConsumeQueue < consumequeue.UNIT_SIZE:
            raise ConfigError("mappedFileSizeConsumeQueue must be at least 20 bytes")
        if self.maxHashSlotNum < 1 or self.maxIndexNum < 2:
            raise ConfigError("maxHashSlotNum must be >= 1 and maxIndexNum >= 2")
        if self.index_file_size > 2**31 - 1:
            raise ConfigError("index file larger than 2 GiB: lower maxHashSlotNum/maxIndexNum")
        if self.maxMessageSize < 1:
            raise ConfigError("maxMessageSize must be positive")
        _ = self.delay_level_millis  # parses messageDelayLevel: raises ConfigError when it is bad
        if self.rocketmqVersion not in ROCKETMQ_LINES:
            raise ConfigError(f"rocketmqVersion must be one of {', '.join(ROCKETMQ_LINES)}, "
                              f"not {self.rocketmqVersion!r}")
        if self.rocketmqVersion == "4.9" and self.enabledAppendPropCRC:
            raise ConfigError("enabledAppendPropCRC=true needs rocketmqVersion 5: RocketMQ 4.9 has no "
                              "properties CRC")
        if self.flushDiskType not in ("SYNC_FLUSH", "ASYNC_FLUSH"):
            raise ConfigError(f"flushDiskType must be SYNC_FLUSH or ASYNC_FLUSH, not {self.flushDiskType!r}")
        parse_topic_retention(self.extra.get("topicRetention"))     # every command, not only expire
        return self

    @property
    def line_4_9(self) -> bool:
        """The store matches RocketMQ 4.9 (rocketmqVersion=4.9)."""
        return self.rocketmqVersion == "4.9"

    @property
    def line_5_5(self) -> bool:
        """The store matches the newest 5.x line (rocketmqVersion=5.5)."""
        return self.rocketmqVersion == "5.5"

    @property
    def durable(self) -> bool:
        """Files are fsync'd before a batch is committed (flushDiskType=SYNC_FLUSH)."""
        return self.flushDiskType == "SYNC_FLUSH"

    def file_shaping(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in FILE_SHAPING_KEYS}

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d.pop("extra")
        return json.dumps(d, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "StoreConfig":
        return cls(**json.loads(text)).validate()


JAVA_INT_MIN, JAVA_INT_MAX = -2**31, 2**31 - 1
MAX_HOURS = 10**9          # 114,000 years: any retention, and hours * 3,600,000 stays a 64-bit time


def retention_hours(text: object) -> float:
    """``text`` as a retention in hours: a finite number in [0, MAX_HOURS]; ValueError saying what
    is wrong otherwise (nan, inf, 1e308, negative, not a number)."""
    try:
        value = float(text)  # type: ignore[arg-type]  # anything: float() says what it cannot take
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not a number of hours") from None
    if not 0 <= value <= MAX_HOURS:          # (False for nan)
        raise ValueError(f"{text!r} hours: expected a number from 0 to {MAX_HOURS}")
    return value


def parse_topic_retention(text: str | None) -> dict[str, float]:
    """``topic=hours,topic=hours`` (the ``topicRetention`` key) -> {topic: hours}; ConfigError (a bad
    configuration value, exit 2) on anything else."""
    out = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        topic, sep, hours = part.rpartition("=")
        if not sep or not topic.strip():
            raise ConfigError(f"topicRetention entry {part!r}: expected topic=hours, e.g. orders=72")
        try:
            out[topic.strip()] = retention_hours(hours)
        except ValueError as e:
            raise ConfigError(f"topicRetention entry {part!r}: {e}") from None
    return out


def parse_java_properties(text: str) -> dict[str, str]:
    """Minimal Java .properties reader: ``key=value`` / ``key: value`` / ``key value``, # and ! comments."""
    out = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if not m:
            raise ConfigError(f"line {lineno}: cannot parse {raw!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def _coerce(name: str, value: str, default: object) -> str | int | bool:
    if isinstance(default, bool):
        low = value.lower()
        if low not in ("true", "false"):
            raise ConfigError(f"{name}: expected true or false, got {value!r}")
        return low == "true"
    if isinstance(default, int):
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"{name}: expected an integer, got {value!r}") from None
        if not JAVA_INT_MIN <= number <= JAVA_INT_MAX:      # each is a Java int in RocketMQ's MessageStoreConfig
            raise ConfigError(f"{name}: {value} is out of range (RocketMQ takes an int, at most {JAVA_INT_MAX})")
        return number
    return value


def load_config(path: str | None = None, overrides: dict[str, Any] | None = None) -> StoreConfig:
    """Defaults, then the properties file, then explicit overrides (all by RocketMQ key name)."""
    values: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except (OSError, UnicodeDecodeError) as e:     # a bad --config is a bad argument (exit 2)
            raise ConfigError(f"{path}: cannot read it as a .properties file "
                              f"({getattr(e, 'strerror', None) or e})") from None
        try:
            values.update(parse_java_properties(text))
            if not overrides:
                return _from_values(values)
        except ConfigError as e:        # the one line names the file to fix
            raise ConfigError(f"{path}: {e}") from None
    if overrides:
        values.update({k: str(v) for k, v in overrides.items()})
    return _from_values(values)


def _from_values(values: dict[str, str]) -> StoreConfig:
    base = StoreConfig()
    known = {f.name: getattr(base, f.name) for f in dataclasses.fields(StoreConfig) if f.name != "extra"}
    kwargs: dict[str, Any] = {}
    extra: dict[str, str] = {}
    for k, v in values.items():
        if k in known:
            kwargs[k] = _coerce(k, v, known[k])
        else:
            extra[k] = v
    return StoreConfig(**kwargs, extra=extra).validate()


def default_config() -> StoreConfig:
    """``DEFAULT_CONFIG`` loaded (RocketMQ's defaults where the file is absent)."""
    return load_config(DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None)
