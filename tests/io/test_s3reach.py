"""storelib.io.s3reach: S3 must answer one unsigned request in time before pyarrow's S3 client (which
waits its request timeout on each of three attempts of each request) is used; any HTTP answer will
do, none in time is ``S3Unreachable`` (an OSError). Its setting travels to the executors."""
from __future__ import annotations

import pytest

from storelib.io import objstore, s3reach
from storelib.io.filesystems import filesystem
from test_objreach import answering

NO_PROFILE = {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}


@pytest.fixture
def s3_at(monkeypatch):
    """Point this process's S3 settings at ``url`` (keys set, no profile of the host's)."""
    def point(url: str, **more: str) -> None:
        for k, v in {**NO_PROFILE, "AWS_ENDPOINT_URL": url, "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                     "AWS_REGION": "us-east-1", **more}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return point


def test_the_endpoint_is_the_one_pyarrow_is_given_else_aws_s_regional_one():
    assert s3reach.endpoint({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000/"}) == "http://127.0.0.1:9000"
    assert s3reach.endpoint({"AWS_ENDPOINT_URL": "https://minio.example:9000"}) == "https://minio.example:9000"
    assert s3reach.endpoint({}) == "https://s3.us-east-1.amazonaws.com"
    assert s3reach.endpoint({"AWS_REGION": "eu-west-3"}) == "https://s3.eu-west-3.amazonaws.com"
    assert s3reach.endpoint({"AWS_REGION": "cn-north-1"}) == "https://s3.cn-north-1.amazonaws.com.cn"


def test_the_setting_is_shipped_to_the_executors():
    driver = {**NO_PROFILE, "AWS_ENDPOINT_URL": "http://127.0.0.1:9", s3reach.TIMEOUT_ENV: "7"}
    shipped = objstore.executor_env(driver)
    assert shipped[s3reach.TIMEOUT_ENV] == "7"
    on_executor = {s3reach.TIMEOUT_ENV: "99", **shipped}         # its host's own value does not apply
    assert s3reach.timeout(objstore.s3_settings(on_executor)) == 7.0
    assert s3reach.timeout(objstore.s3_settings({**objstore.executor_env(NO_PROFILE), s3reach.TIMEOUT_ENV: ""})) == 30


def test_any_answer_is_a_reachable_s3_asked_once_unsigned(s3_at):
    with answering("HEAD", 403) as (url, asked):          # no credentials: still an answer
        s3_at(url)
        filesystem("s3://b/s")
        filesystem("s3://other/x")
    assert asked == [("HEAD", "/b", None)]
