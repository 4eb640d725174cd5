"""The store browser's parts that need no browser and no store: form arguments, refused paths,
hex dumps, the commitlog spans of batches, the one-line errors."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from storelib.errors import BadInput, CorruptStore, NoSuchBatch, StoreNotFound
from storelib.table.manifest import Snapshot
from storelib.table.rows import BatchRow
from storelib.ui import history, lookup
from storelib.ui.storeview import checked_rel, error_line


@given(st.binary(max_size=600))
@settings(max_examples=60, deadline=None)
def test_the_hex_dump_gives_back_every_byte(data):
    dump = lookup.hex_dump(data)
    assert bytes.fromhex("".join(line[10:57] for line in dump.splitlines())) == data
    assert all(len(line.split("|")[1]) <= 16 for line in dump.splitlines())


def test_the_hex_dump_stops_at_its_limit():
    assert len(lookup.hex_dump(bytes(100), limit=32).splitlines()) == 2


@pytest.mark.parametrize("params,line", [
    ({"mode": "nope"}, "argument mode: invalid choice: 'nope'"),
    ({"mode": "key", "topic": "t"}, "argument key: required"),
    ({"mode": "offset", "topic": "t", "queue": "x", "offset": "1"}, "argument queue: invalid int value: 'x'"),
    ({"mode": "offset", "topic": "t", "queue": "1", "offset": "1", "count": "0"}, "argument count: must be at least 1"),
    ({"mode": "range", "begin": "yesterday", "end": "1"}, "argument begin: 'yesterday' is neither epoch milliseconds"),
    ({"mode": "range", "begin": "5", "end": "1"}, "--end is before --begin"),
    ({"mode": "key", "topic": "t", "key": "k", "body_as": "hex"}, "argument body_as: invalid choice"),
])
def test_bad_form_arguments_are_one_line(params, line):
    with pytest.raises(BadInput) as e:
        lookup.Query.from_params(params)
    assert str(e.value).startswith(line)
    assert error_line(e.value, True) == f"error: {e.value}"


def test_a_query_names_the_command_that_prints_it():
    q = lookup.Query.from_params({"mode": "key", "topic": "orders", "key": "k 1", "limit": "5",
                                  "begin": "2024-06-01T00:00:00Z", "after": "1:2"})
    assert q.argv("S", "3") == ["--store", "S", "--as-of-batch", "3", "key", "--topic", "orders", "--key", "k 1",
                                "--begin", "1717200000000", "--limit", "5", "--after", "1:2"]
    q = lookup.Query.from_params({"mode": "offset", "topic": "t", "queue": "2", "offset": "9", "limit": "5"})
    assert q.argv("S") == ["--store", "S", "offset", "--topic", "t", "--queue", "2", "--offset", "9", "--count", "1"]


@pytest.mark.parametrize("rel,what", [("../x", "contains a '..' component"), ("/etc/passwd", "is absolute"),
                                      ("commitlog/../../x", "contains a '..' component"), ("", "is empty")])
def test_paths_outside_the_store_are_refused(rel, what):
    """The request's fault (BadInput: a 400), not the store's."""
    with pytest.raises(BadInput) as e:
        checked_rel(rel, {"commitlog/00000000000000000000"})
    assert what in str(e.value)


def test_a_file_the_batch_does_not_have_is_refused():
    with pytest.raises(BadInput):
        checked_rel("commitlog/00000000000000262144", {"commitlog/00000000000000000000"})
    assert checked_rel("commitlog/00000000000000000000", {"commitlog/00000000000000000000"})


def test_error_lines():
    assert error_line(NoSuchBatch("no committed batch 'x' in S")) == "error: no committed batch 'x' in S"
    assert error_line(StoreNotFound("S: no such store")) == "error: S: no such store"
    bad = CorruptStore("commitlog/0", 12, "bad magic")
    assert error_line(bad, True) == f"error: query failed: {bad}" and error_line(bad) == f"error: {bad}"


def _batch(seq, op, lo, hi):
    return BatchRow({"batch_seq": seq, "batch_id": f"b{seq}", "operation": op, "min_phy_offset": lo, "max_phy_offset": hi})


def test_the_spans_each_batch_appended():
    snap = Snapshot(None, batches=[_batch(1, "import", 1000, 5000), _batch(2, "ingest", 1000, 9000),
                                   _batch(3, "expire", 4096, 9000), _batch(4, "ingest", 4096, 9500)])
    assert [(s.batch_id, s.appended) for s in history.batches_spans(snap)] == \
        [("b1", (1000, 5000)), ("b2", (5000, 9000)), ("b4", (9000, 9500))]
    rows = [{"path": "commitlog/0", "base_offset": 0, "valid_bytes": 4096},
            {"path": "commitlog/4096", "base_offset": 4096, "valid_bytes": 5404}]
    seg = history.segment_map(snap, rows, 4096)
    assert [(p["batch_id"], p["start"], p["end"]) for p in seg[0]["spans"]] == [("b1", 1000, 4096)]
    assert [(p["batch_id"], p["start"], p["end"]) for p in seg[1]["spans"]] == \
        [("b1", 0, 904), ("b2", 904, 4096)]


def test_a_port_in_use_is_one_line(capsys, monkeypatch):
    """``serve`` raises the error; the command's ``guarded`` entry prints its one line (exit 2), as
    every command does: nothing in ui/ prints an error itself."""
    import socket
    from storelib.ui import command
    monkeypatch.setattr(command.cli, "store_config", lambda args: None)     # (no store needed to get here)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BadInput, match="cannot listen"):
            command.serve("unused-store", "127.0.0.1", port)
        assert capsys.readouterr().err == ""
        assert command.main(["--store", "unused-store", "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_page_shows_at_most_page_rows():
    q = lookup.Query.from_params({"mode": "key", "topic": "t", "key": "k"})
    assert q.cap() and q.limit == lookup.PAGE_ROWS
    q = lookup.Query.from_params({"mode": "key", "topic": "t", "key": "k", "limit": "20"})
    assert not q.cap() and q.limit == 20
    q = lookup.Query.from_params({"mode": "offset", "topic": "t", "queue": "0", "offset": "0", "count": "5000"})
    assert q.cap() and q.count == lookup.PAGE_ROWS


def test_times_past_the_year_9999_show_no_iso_form():
    """A store or born time may be any Java long (RocketMQ stores it as given): the pages show no
    ISO form past 9999-12-31, as before 1970, instead of failing."""
    from storelib.cli.timeargs import iso
    assert iso(253_402_300_799_999) == "9999-12-31T23:59:59.999Z"
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert [iso(t) for t in (253_402_300_800_000, 2**53, 2**63 - 1, -1, None)] == [""] * 5
