"""storelib.io.gcsreach: GCS must answer one request in time before pyarrow's GCS client (which has no
timeouts) is used; any HTTP answer will do, none in time is ``GcsUnreachable`` (an OSError)."""
from __future__ import annotations

from storelib.io import gcsreach
from test_objreach import answering


def test_the_endpoint_is_the_emulator_s_else_gcs_s_own():
    assert gcsreach.endpoint(None) == "https://storage.googleapis.com"
    assert gcsreach.endpoint("http://127.0.0.1:9023/") == "http://127.0.0.1:9023"
    assert gcsreach.endpoint("localhost:9023") == "http://localhost:9023"


def test_any_answer_is_a_reachable_gcs_asked_once():
    with answering("GET", 404) as (url, asked):           # no such bucket: still an answer
        gcsreach.require_reachable("gs://b/s", url)
        gcsreach.require_reachable("gs://other/x", url)
    assert [path for _, path, _ in asked] == ["/storage/v1/b/b?fields=name"]
