"""Generated differential cases: message sets and store configurations (hypothesis strategies).

A case is a plain dict, printable as a reproducer:

* ``config``: MessageStoreConfig keys (tiny or default file sizes, ``maxMessageSize``,
  ``enabledAppendPropCRC``, ``messageDelayLevel``);
* ``topics``: {topic: writeQueueNums}, the topics.json rocketlake gets for round-robin rows;
* ``messages``: golden-format dicts (tests/golden/README.md) in put order; a message without
  ``queue_id`` is round robin (rocketlake assigns it; the reference writer gets the queue the
  README's rule gives, :func:`rocketmq_messages`);
* ``cuts``: where rocketlake's input is cut into batches (message indices).

What the messages cover: short topics and (5.x) topics longer than 127 characters, explicit
queues and round robin, KEYS with several keys, TAGS, UNIQ_KEY, other properties, none at all,
transactions (NOT, PREPARED, COMMIT, ROLLBACK), delay levels on SCHEDULE_TOPIC_XXXX (5.x),
IPv4/IPv6 born and store hosts, bodies from 0 bytes to maxMessageSize, store times that repeat
and go back, and messages sized so a record ends exactly where a commit-log segment leaves 8
(END_FILE_MIN_BLANK_LENGTH) or a few more bytes.

And what a broker's store may hold beyond the common case (each written by RocketMQ itself):
queue ids far above writeQueueNums (up to Integer.MAX_VALUE) and topics of up to 255 queues;
consume-queue file sizes 1 or 19 bytes over a multiple of 20; index files of 1 to 6 entries (one
per message or so: many files) and messages with up to maxIndexNum - 1 index keys (a file fills
in the middle of a message); keys of 100 to 1200 characters, keys with tab, newline, NUL or
U+0001; properties strings as the store parses them, not as a producer would send them: a name
twice (the later value wins), empty values (dropped), U+0001 inside a value, no final U+0002, a
``__CRC32#`` property (removed and replaced with enabledAppendPropCRC, stored as is without);
properties strings 0 to 5 bytes under Short.MAX_VALUE (with the CRC's 21 bytes counted);
sysflags with the multi-tags bit and LZ4/ZSTD compression types; store times at or before 0, in
years 9999 and 10000, 2^53 ms, and jumps of 70 years; born times, reconsume times and transaction
offsets at their extremes. (Topics stay within TopicValidator's characters, which a broker
enforces.)
"""
from __future__ import annotations

import base64
import random

from hypothesis import HealthCheck, Phase, given, seed as hseed, settings, strategies as st

SEG_TINY = (4096, 6144, 8192, 16384, 16384, 65536)
DELAY_LEVELS = ("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h", "1s 1m 1h", "2s 3d")
# a broker's TopicValidator allows these only (and rocketlake, docs/FORMAT.md §11.1)
TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-%|"
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\x01\x02"),
               max_size=12)
KEY = st.one_of(st.sampled_from(["k1", "k2", "Aa", "BB", "AaAa", "BBBB", "café", "ключ", "🔑x"]),
                st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                               blacklist_characters="\x00\x01\x02 "), min_size=1, max_size=10))
# what else a key may hold: the store splits KEYS at " " only, and a value may hold U+0001
ODD_KEY = st.one_of(st.sampled_from(["tab\tkey", "new\nline", "nul\x00key", "soh\x01key", "#", "a#b", "\x01"]),
                    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x02 "),
                            min_size=100, max_size=1200))
HIGH_QUEUES = (15, 16, 255, 1024, 65535, 2**31 - 1)
# store times a broker's clock could have given (or a store we are handed could hold)
ODD_TIMES = (0, 1, -1000, -2**40, 253_402_300_799_000, 253_402_300_800_000, 2**53)
PROPS_MAX = 32767                           # Short.MAX_VALUE: PROPERTIESLENGTH is an i16
CRC_NAME = "__CRC32#"
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
END_BLANK = 8                               # CommitLog.END_FILE_MIN_BLANK_LENGTH


def record_size(m: dict, body_len: int, props_len: int) -> int:
    """TOTALSIZE of a message's record (docs/FORMAT.md §1.2)."""
    b = 20 if m["born_host"].startswith("[") else 8
    s = 20 if m["store_host"].startswith("[") else 8
    topic = len(m["topic"].encode())
    return 72 + b + s + body_len + (2 if topic > 127 else 1) + topic + 2 + props_len


def properties_string(pairs) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in pairs)


def parsed_properties(pairs) -> dict:
    """The properties the store sees (MessageDecoder.string2messageProperties on the string of
    ``pairs``): a pair with an empty value is dropped, a later name wins."""
    return {k: v for k, v in pairs if k and v}


def index_entries(pairs) -> int:
    """Index entries one message makes at most: its UNIQ_KEY, each non-empty KEYS token, and (the
    newest 5.x line) its TAGS."""
    p = parsed_properties(pairs)
    return (1 if "UNIQ_KEY" in p else 0) + len([k for k in p.get("KEYS", "").split(" ") if k]) + \
        (1 if "TAGS" in p else 0)


def stored_properties_length(ps: str, crc: bool) -> int:
    """PROPERTIESLENGTH of a record whose properties string is ``ps`` (no __CRC32# in it): with
    enabledAppendPropCRC a final U+0002 is added where missing, and 20 bytes for the CRC."""
    n = len(ps.encode())
    return n + (20 + (1 if ps and not ps.endswith("\x02") else 0) if crc else 0)


@st.composite
def case(draw, line: str = "5"):
    """One case for RocketMQ line "5" (5.x) or "4" (4.9: no topics over 127 characters, no
    enabledAppendPropCRC, no delay messages: 4.9's store moves DELAY messages itself)."""
    tiny = draw(st.sampled_from([True] * 7 + [False]))
    if tiny:
        seg = draw(st.sampled_from(SEG_TINY))
        few = draw(st.integers(0, 5)) == 0      # index files of 1 to 6 entries: many files
        cfg = {"mappedFileSizeCommitLog": seg,
               "mappedFileSizeConsumeQueue": draw(st.integers(1, 8)) * 20 + draw(st.sampled_from([0, 0, 0, 7, 1, 19])),
               "maxHashSlotNum": draw(st.integers(1, 16)),
               "maxIndexNum": draw(st.integers(2, 7)) if few else draw(st.integers(8, 40)),
               "maxMessageSize": draw(st.integers(64, seg // 2))}
    else:
        cfg = {}
    max_msg = cfg.get("maxMessageSize", 4 << 20)
    seg_size = cfg.get("mappedFileSizeCommitLog", 1 << 30)
    # At most maxIndexNum - 1 index entries a message: the index then rolls at most once within
    # a message, and RocketMQ names index files by the wall clock's millisecond (two new files
    # within one dispatch would share a name; the reference writer spaces messages instead).
    max_entries = cfg.get("maxIndexNum", 20_000_000) - 1
    crc = line == "5" and draw(st.integers(0, 4)) == 0
    if crc:
        cfg["enabledAppendPropCRC"] = True
    delay = DELAY_LEVELS[0]
    if line == "5" and draw(st.booleans()):
        delay = draw(st.sampled_from(DELAY_LEVELS))
        if delay != DELAY_LEVELS[0]:
            cfg["messageDelayLevel"] = delay

    def topic_name(long: bool):
        n = draw(st.integers(128, 255)) if long else draw(st.integers(1, 24))
        return draw(st.text(alphabet=TOPIC_CHARS, min_size=n, max_size=n)).replace("%", "_", 0)

    ntopics = draw(st.integers(1, 4))
    topics = {}
    for _ in range(ntopics):
        name = topic_name(line == "5" and draw(st.integers(0, 3)) == 0)
        if name in (SCHEDULE,) or name in topics:
            continue
        topics[name] = draw(st.integers(1, 4)) if draw(st.integers(0, 9)) else draw(st.sampled_from([16, 64, 255]))
    names = sorted(topics)
    store_host = draw(st.sampled_from(["192.168.0.10:10911", "[fd00::a]:10911", "127.0.0.1:1"]))
    odd_times = draw(st.integers(0, 9)) == 0
    ts = draw(st.sampled_from(ODD_TIMES)) if odd_times else draw(st.integers(1_600_000_000_000, 1_800_000_000_000))
    n = draw(st.integers(1, 40 if tiny else 12))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    messages = []
    for _ in range(n):
        m = {}
        kind = draw(st.integers(0, 19))
        delayed = line == "5" and kind == 0
        m["topic"] = SCHEDULE if delayed else draw(st.sampled_from(names))
        tx = draw(st.sampled_from([0, 0, 0, 0, 0, 4, 8, 12]))
        sys_flag = tx | draw(st.sampled_from([0, 0, 0, 1, 0x300 | 1, 0x2, 0x100 | 1, 0x200 | 3]))
        m["born_host"] = draw(st.sampled_from(["10.0.0.1:40429", "172.16.5.9:1", "[2001:db8::1]:65535",
                                                "[::1]:0", "255.255.255.255:65535"]))
        m["store_host"] = store_host if draw(st.integers(0, 9)) else draw(st.sampled_from(
            ["10.1.1.1:10911", "[fe80::1]:10911"]))
        if m["born_host"].startswith("["):
            sys_flag |= 0x10
        if m["store_host"].startswith("["):
            sys_flag |= 0x20
        m["flag"] = draw(st.sampled_from([0, 0, 1, -1, -2147483648, 2147483647, 12345]))
        m["sys_flag"] = sys_flag
        if odd_times:
            step = draw(st.sampled_from([0, 1, 999, -1, -1000, 2_200_000_000_000, -2_200_000_000_000]))
            ts = ts + step if abs(ts + step) < 2**62 else ts
        else:
            step = draw(st.sampled_from([0, 1, 7, 999, 1000, 61_000, -5, -3_600_000]))
            ts = max(ts + step, 1)
        m["store_timestamp"] = ts
        m["born_timestamp"] = ts - draw(st.integers(0, 5000)) if draw(st.integers(0, 9)) else \
            draw(st.sampled_from([0, -1, -2**63, 2**63 - 1]))
        m["reconsume_times"] = draw(st.sampled_from([0, 0, 1, 16, -1, 2**31 - 1]))
        m["prepared_transaction_offset"] = draw(st.sampled_from([0, 0, 12345, 2**40])) if tx else \
            draw(st.sampled_from([0] * 9 + [-1, 2**63 - 1]))
        pairs = []
        if draw(st.integers(0, 4)):
            pairs.append(["UNIQ_KEY", "".join(rnd.choice("0123456789ABCDEF") for _ in range(32))])
        if draw(st.booleans()):
            many = draw(st.integers(0, 7)) == 0
            keys = draw(st.lists(KEY | ODD_KEY if draw(st.integers(0, 3)) == 0 else KEY,
                                 min_size=1, max_size=max(1, min(60, max_entries)) if many else 4))
            sep = draw(st.sampled_from([" ", " ", "  "]))
            pairs.append(["KEYS", sep.join(keys) + draw(st.sampled_from(["", "", " "]))])
        if draw(st.booleans()):
            pairs.append(["TAGS", draw(st.sampled_from(["TagA", "*", "标签", "a||b"]) | KEY
                                       | (ODD_KEY if draw(st.integers(0, 3)) == 0 else KEY))])
        if draw(st.integers(0, 3)) == 0:
            pairs.append([draw(st.sampled_from(["a", "WAIT", "ORDER_ID", "x-é"])), draw(TEXT)])
        if draw(st.integers(0, 5)) == 0:
            # as the store parses the string: a name again (the later non-empty value wins),
            # empty values (dropped), U+0001 inside a value
            for _ in range(draw(st.integers(1, 3))):
                pairs.append([draw(st.sampled_from(["KEYS", "TAGS", "UNIQ_KEY", "a", "x-é"])),
                              draw(st.sampled_from(["", " ", "\x01", "v\x01w", "k1 \x01k2", "Aa"]) | KEY)])
        if draw(st.integers(0, 9)) == 0:
            # the CRC property by hand: enabledAppendPropCRC removes it (MessageUtils.deleteProperty),
            # without it the store keeps it; names that only look like it stay
            pairs.append([draw(st.sampled_from([CRC_NAME, CRC_NAME, "x" + CRC_NAME, CRC_NAME + "x"])),
                          draw(st.sampled_from(["0123456789", "", "1\x01" + CRC_NAME]))])
        if delayed:
            levels = len(delay.split())
            level = draw(st.integers(1, levels + 2))
            real_q = draw(st.integers(0, 3))
            pairs += [["DELAY", str(level)], ["REAL_TOPIC", draw(st.sampled_from(names))], ["REAL_QID", str(real_q)]]
            m["queue_id"] = min(level, levels) - 1
        elif draw(st.booleans()):
            m["queue_id"] = draw(st.integers(0, 7)) if draw(st.integers(0, 9)) else draw(st.sampled_from(HIGH_QUEUES))
        draw(st.randoms())                      # keeps shrinking stable across the branches above
        pairs = draw(st.permutations(pairs)) if len(pairs) > 1 else pairs
        # the room a record has: a tiny segment less the end blank and a margin
        room = seg_size - END_BLANK - 16 - record_size(m, 0, 0)
        big = not any(k == CRC_NAME for k, _ in pairs) and room > PROPS_MAX and draw(st.integers(0, 11)) == 0
        if big:
            pairs.append(["x-big", "v"])
        while pairs and (index_entries(pairs) > max_entries
                         or stored_properties_length(properties_string(pairs), crc) + 21 > min(room, PROPS_MAX)):
            pairs = _drop_one(pairs)            # (never the last, the big one: it is sized below)
        trim = draw(st.integers(0, 7)) == 0     # no final U+0002: stored as given
        m["properties"] = pairs
        ps = properties_string(pairs)
        if big and pairs and pairs[-1][0] == "x-big":
            want = PROPS_MAX - draw(st.sampled_from([0, 0, 1, 2, 5]))
            need = want - stored_properties_length(ps[:-1] if trim else ps, crc) + 1
            wide = rnd.randint(0, need // 2)
            pairs[-1][1] = "é" * wide + "v" * (need - 2 * wide)
            ps = properties_string(pairs)
        m["properties_string"] = ps[:-1] if trim and ps else ps
        size = draw(st.sampled_from(["empty", "small", "small", "mid", "max"]))
        props_len = stored_properties_length(m["properties_string"], crc)
        body_len = {"empty": 0, "small": rnd.randint(1, 40), "mid": rnd.randint(41, max(41, max_msg // 2)),
                    "max": max_msg}[size]
        if tiny:
            # the record must fit a segment with the end blank
            body_len = max(0, min(body_len, cfg["mappedFileSizeCommitLog"] - END_BLANK - record_size(m, 0, props_len) - 16))
        body_len = min(body_len, 70_000)
        m["body_b64"] = base64.b64encode(rnd.randbytes(body_len) if rnd.random() < 0.7 else bytes(body_len)).decode()
        messages.append(m)
    if tiny and not crc and n > 1 and draw(st.booleans()):
        # size one message so that a segment is left with exactly END_BLANK (+ a little) bytes
        _fit_to_segment_end(messages, draw(st.integers(0, n - 2)), cfg, draw(st.sampled_from([8, 8, 9, 12, 20])))
    nb = min(n, draw(st.sampled_from([1, 1, 2, 2, 3, 4])))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), min_size=nb - 1, max_size=nb - 1))) if n > 1 else []
    return {"config": cfg, "topics": topics, "messages": messages, "cuts": cuts}


def _drop_one(pairs: list) -> list:
    """``pairs`` without one entry: the longest KEYS first (its last token), else the longest
    other pair (never the trailing ``x-big``, which is sized last)."""
    head, tail = (pairs[:-1], pairs[-1:]) if pairs and pairs[-1][0] == "x-big" else (pairs, [])
    keys = [i for i, (k, v) in enumerate(head) if k == "KEYS" and " " in v.strip(" ")]
    if keys:
        i = keys[-1]
        toks = head[i][1].rstrip(" ").split(" ")
        return head[:i] + [["KEYS", " ".join(toks[:-1])]] + head[i + 1:] + tail
    if not head:
        return []
    i = max(range(len(head)), key=lambda j: len(head[j][0]) + len(head[j][1]))
    return head[:i] + head[i + 1:] + tail


def _fit_to_segment_end(messages: list, j: int, cfg: dict, left: int) -> None:
    seg = cfg["mappedFileSizeCommitLog"]
    pos = 0
    for i, m in enumerate(messages):
        props = len(m["properties_string"].encode())
        body = len(base64.b64decode(m["body_b64"]))
        size = record_size(m, body, props)
        if i == j:
            base = record_size(m, 0, props)
            start = pos
            want = seg - (start % seg) - left - base
            if 0 <= want <= cfg["maxMessageSize"]:
                m["body_b64"] = base64.b64encode(bytes([i % 251]) * want).decode()
            return
        if pos % seg + size + END_BLANK > seg:
            pos += seg - pos % seg
        pos += size


def rocketmq_messages(c: dict) -> list[dict]:
    """The case's messages with every queue_id set: round-robin rows get the k-th row of their
    topic without a queue id -> k % writeQueueNums (README "Queue assignment")."""
    seen = {}
    out = []
    for m in c["messages"]:
        m = dict(m)
        if "queue_id" not in m:
            k = seen.get(m["topic"], 0)
            seen[m["topic"]] = k + 1
            m["queue_id"] = k % c["topics"].get(m["topic"], 4)
        out.append(m)
    return out


def draw_cases(n: int, line: str, seed: int) -> list[dict]:
    """n cases drawn by hypothesis (generation only: the cases run in batches, see rmqdiff)."""
    out: list[dict] = []

    @hseed(seed)
    @settings(max_examples=n, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case(line))
    def collect(c):
        out.append(c)

    collect()
    return out
