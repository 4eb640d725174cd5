"""properties.property_spans (the compiled ``value_spans`` pass the encoder, the readers and verify's
scan share) against format.textforms.parse_properties_string, the plain reading of
MessageDecoder.string2messageProperties: the same value for every wanted name, on the edge cases
of the properties string and on random strings of separators, names and multi-byte text."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from storelib.codec import properties
from storelib.compute.arrays import string_buffers
from storelib.format.textforms import parse_properties_string

WANTED = ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "键"]

EDGES = [
    "", "\x02", "\x01", "\x01\x02", "\x02\x02\x01\x01",
    "TAGS\x01\x02",                                  # empty value: not counted
    "\x01v\x02",                                     # empty name: not counted
    "TAGS\x01a",                                     # no final U+0002
    "TAGS\x01a\x01b\x02",                            # the value holds U+0001: split on the first only
    "TAGS\x01a\x02TAGS\x01b\x02",                    # a later duplicate wins
    "TAGS\x01a\x02TAGS\x01\x02",                     # ... but not an empty one
    "TAGSa\x02KEYS\x01k\x02",                        # a segment without U+0001 counts for nothing
    "TAG\x01x\x02TAGSS\x01y\x02AGS\x01z\x02",        # names that only share a prefix or suffix
    "ключ\x01значение\x02键\x01值\x02TAGS\x01标签\x02",  # multi-byte names and values
    "\x02TAGS\x01a\x02\x02\x01\x02KEYS\x01k1 k2\x02",
    "WAIT\x01true",
]


def _spans(strings: list) -> list:
    """property_spans over one column of ``strings``: per string, {name: value} of WANTED."""
    col = pa.array(strings, pa.large_string())
    data, off = string_buffers(col)
    starts, ends = properties.property_spans(data, off, WANTED)
    raw = data.tobytes()
    out = []
    for k in range(len(strings)):
        got = {}
        for w, name in enumerate(WANTED):
            assert (starts[w, k] < 0) == (ends[w, k] < 0)
            if starts[w, k] >= 0:
                assert off[k] <= starts[w, k] <= ends[w, k] <= off[k + 1]
                got[name] = raw[starts[w, k]:ends[w, k]].decode("utf-8")
        out.append(got)
    return out


def _expected(s: str) -> dict:
    parsed = parse_properties_string(s)
    return {name: parsed[name] for name in WANTED if name in parsed}


def test_the_edge_cases_read_as_the_broker_reads_them():
    assert _spans(EDGES) == [_expected(s) for s in EDGES]


def test_many_properties_and_very_long_values():
    many = "".join(f"P{i}\x01v{i}\x02" for i in range(2000)) + "KEYS\x01last\x02"
    long_value = "TAGS\x01" + "é" * 200_000 + "\x02UNIQ_KEY\x01" + "u" * 70_000
    strings = [many, long_value, "", many + "TAGS\x01t"]
    assert _spans(strings) == [_expected(s) for s in strings]


def test_random_strings_of_separators_names_and_text():
    rng = random.Random(7)
    parts = ["\x01", "\x02", "TAGS", "KEYS", "UNIQ_KEY", "DELAY", "WAIT", "键", "a", "é", "值", "TAG", "S", " "]
    strings = ["".join(rng.choice(parts) for _ in range(rng.randrange(0, 24))) for _ in range(3000)]
    assert _spans(strings) == [_expected(s) for s in strings]


def test_wanted_names_must_be_distinct():
    with pytest.raises(ValueError, match="distinct"):
        properties.encode_names(["TAGS", "KEYS", "TAGS"])
    data = np.frombuffer(b"TAGS\x01a\x02", np.uint8)
    with pytest.raises(ValueError):
        properties.property_spans(data, np.array([0, len(data)]), ["TAGS", "TAGS"])
