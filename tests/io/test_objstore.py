"""Object-store settings shipped with every task (storelib.io.objstore), the refusals of paths a
multi-host master cannot reach (storelib.runtime.multihost), and kernels cached by source, not by the
folder a shipped zip sits in (storelib.compute.kernelcache). No Spark: the cluster itself is
test_cluster_multihost.py's."""
from __future__ import annotations

import os
import zipfile

import pytest

from conftest import ROOT
from storelib.compute import kernelcache
from storelib.runtime import multihost
from storelib.io import objstore, s3reach, storage


def _profile_files(tmp_path):
    (tmp_path / "credentials").write_text("[dev]\naws_access_key_id = AKDEV\naws_secret_access_key = SKDEV\n"
                                          "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = SKDEF\n")
    (tmp_path / "config").write_text("[profile dev]\nregion = eu-west-3\nendpoint_url = http://10.1.2.3:9000\n"
                                     "[default]\nregion = ap-south-1\n")
    return {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"), "AWS_CONFIG_FILE": str(tmp_path / "config")}


def test_a_named_profile_is_resolved_on_the_driver(tmp_path):
    files = _profile_files(tmp_path)
    got = objstore.s3_settings({**files, "AWS_PROFILE": "dev"})
    assert got == {"AWS_ENDPOINT_URL": "http://10.1.2.3:9000", "AWS_REGION": "eu-west-3",
                   "AWS_ACCESS_KEY_ID": "AKDEV", "AWS_SECRET_ACCESS_KEY": "SKDEV"}
    # the environment wins over the profile; its keys as a set (never one key from each)
    env = {**files, "AWS_PROFILE": "dev", "AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "AKENV",
           "AWS_SECRET_ACCESS_KEY": "SKENV"}
    got = objstore.s3_settings(env)
    assert (got["AWS_REGION"], got["AWS_ACCESS_KEY_ID"], got["AWS_SECRET_ACCESS_KEY"]) == ("us-west-2", "AKENV", "SKENV")
    assert got["AWS_ENDPOINT_URL"] == "http://10.1.2.3:9000"


def test_executors_get_the_drivers_settings_and_nothing_of_their_own_host(tmp_path):
    files = _profile_files(tmp_path)
    shipped = objstore.executor_env({**files, "AWS_PROFILE": "dev"})
    assert set(shipped) == set(objstore.SHIPPED)
    assert shipped["AWS_PROFILE"] == "" and shipped["AWS_ENDPOINT_URL_S3"] == "" and shipped[objstore.MARK] == "1"
    # an executor whose host has a default profile and an endpoint variable of its own
    host = {**files, "AWS_ENDPOINT_URL_S3": "http://elsewhere:1", "AWS_DEFAULT_REGION": "ap-south-1"}
    on_executor = {**host, **shipped}
    assert objstore.s3_settings(on_executor) == objstore.s3_settings({**files, "AWS_PROFILE": "dev"})
    # a driver with no endpoint: the executor does not pick up its host's profile or variables either
    bare = objstore.executor_env({"AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_CONFIG_FILE": "/nonexistent"})
    assert objstore.s3_settings({**host, **bare}) == {}

    class Context:
        environment = {"PYTHONHASHSEED": "0"}
    objstore.ship(Context, {**files, "AWS_PROFILE": "dev"})
    assert Context.environment["AWS_SECRET_ACCESS_KEY"] == "SKDEV" and Context.environment["PYTHONHASHSEED"] == "0"


def test_a_worker_opening_a_delta_table_unsets_the_shipped_empty_settings(tmp_path, monkeypatch):
    """deltalake reads the environment itself: an empty AWS_ENDPOINT_URL_S3 made it panic and an empty
    AWS_SESSION_TOKEN sent an empty token header (the streaming source's planner on S3 failed)."""
    shipped = objstore.executor_env({"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_CONFIG_FILE": "/nonexistent",
                                     "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"})
    for k, v in shipped.items():
        monkeypatch.setenv(k, v)
    assert os.environ["AWS_ENDPOINT_URL_S3"] == "" and os.environ["AWS_SESSION_TOKEN"] == ""
    opts = storage.delta_storage_options("s3://b/store")
    assert opts["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9"
    assert not [k for k in objstore.SHIPPED if os.environ.get(k, None) == ""]
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9" and os.environ[objstore.MARK] == "1"


def test_describe_masks_keys_and_secrets(tmp_path):
    line = objstore.describe({**_profile_files(tmp_path), "AWS_PROFILE": "dev", "AWS_SESSION_TOKEN": "tok-value-9"})
    assert "SKDEV" not in line and "AKDEV" not in line and "tok-value-9" not in line
    assert "AWS_ENDPOINT_URL=http://10.1.2.3:9000" in line and "AWS_SECRET_ACCESS_KEY=***" in line


def test_the_s3_file_system_uses_the_resolved_settings(tmp_path, monkeypatch):
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    for k, v in {**_profile_files(tmp_path), "AWS_PROFILE": "dev"}.items():
        monkeypatch.setenv(k, v)
    asked: list = []       # the profile's endpoint is asked first (no server there: taken as answering)
    monkeypatch.setattr(s3reach, "require_reachable", lambda uri, st: asked.append((uri, st["AWS_ENDPOINT_URL"])))
    fs, path = storage.filesystem("s3://bucket/a/store/")
    assert path == "bucket/a/store" and fs.region == "eu-west-3"
    assert storage.filesystem("s3://bucket/x")[0] is fs          # one client per process and settings
    assert asked == [("s3://bucket/a/store/", "http://10.1.2.3:9000"), ("s3://bucket/x", "http://10.1.2.3:9000")]
    opts = storage.delta_storage_options("s3://bucket/a")
    assert opts["AWS_ENDPOINT_URL"] == "http://10.1.2.3:9000" and opts["AWS_ACCESS_KEY_ID"] == "AKDEV"


@pytest.mark.parametrize("master", ["local[2]", "local[*]", "local-cluster[2,1,1024]"])
def test_single_host_masters_take_local_paths(master, tmp_path):
    multihost.check_reachable(master, {"--store": str(tmp_path), "--input": str(tmp_path / "in.jsonl")})


def test_multi_host_masters_refuse_the_drivers_disk(tmp_path):
    for master in ("spark://10.0.0.1:7077", "yarn", "k8s://https://api:6443"):
        multihost.check_reachable(master, {"--store": "s3://b/s", "--input": "gs://b/in", "--from-store": None})
        with pytest.raises(multihost.UnreachablePath) as e:
            multihost.check_reachable(master, {"--store": "s3://b/s", "--input": str(tmp_path / "in.jsonl")})
        assert "\n" not in str(e.value) and str(e.value).startswith(f"--input {tmp_path}/in.jsonl is on the driver")
        with pytest.raises(multihost.UnreachablePath, match="^--store file:///data/store "):
            multihost.check_reachable(master, {"--store": "file:///data/store"})
    # a file system mounted at the same path on every host
    shared = {multihost.SHARED_ENV: f"/elsewhere:{tmp_path}"}
    multihost.check_reachable("yarn", {"--store": str(tmp_path / "store")}, env=shared)
    with pytest.raises(multihost.UnreachablePath):
        multihost.check_reachable("yarn", {"--store": str(tmp_path) + "-other"}, env=shared)



def test_a_shared_path_is_the_one_the_executors_are_given(tmp_path, monkeypatch):
    """The executors open the path as given, not as the driver resolves it: a relative path (each
    executor resolves it in its own working directory) and a symlink on the driver's disk into the
    shared directory (other hosts do not have it) were let through, and their tasks wrote files
    outside the store. A trailing slash, and a shared directory named through a symlink, still pass."""
    share = tmp_path / "nfs"
    (share / "store").mkdir(parents=True)
    os.symlink(share, tmp_path / "mnt")                   # /mnt -> the mount, on every host
    os.symlink(share / "store", tmp_path / "my-store")    # a link in the driver's home
    env = {multihost.SHARED_ENV: f"{tmp_path}/mnt/"}
    for ok in (f"{share}/store/", f"{tmp_path}/mnt/store", f"file://{share}/store"):
        multihost.check_reachable("yarn", {"--store": ok}, env=env)
    with pytest.raises(multihost.UnreachablePath, match=f"^--store {tmp_path}/my-store is a symlink .* {share}/store"):
        multihost.check_reachable("yarn", {"--store": str(tmp_path / "my-store")}, env=env)
    monkeypatch.chdir(share)
    with pytest.raises(multihost.UnreachablePath, match="^--store store is a relative path"):
        multihost.check_reachable("yarn", {"--store": "store"}, env=env)
    multihost.check_reachable("local[2]", {"--store": "store"}, env=env)

def test_kernels_of_a_shipped_zip_are_cached_by_source_not_by_folder(tmp_path, monkeypatch):
    from numba.core import caching
    monkeypatch.setattr(caching.config, "CACHE_DIR", "")
    monkeypatch.setenv(kernelcache.ENV, str(tmp_path / "cache"))
    assert caching.CacheImpl._locator_classes[0] is kernelcache.SourceKeyedZipLocator

    def zipped(folder, text):
        os.makedirs(tmp_path / folder)
        z = tmp_path / folder / "storelib.zip"
        with zipfile.ZipFile(z, "w") as zf:
            zf.writestr("storelib/compute/kernels.py", text)
        return str(z) + "/storelib/compute/kernels.py"

    def fn():
        pass
    source = open(os.path.join(ROOT, "storelib", "compute", "kernels.py")).read()
    a = kernelcache.SourceKeyedZipLocator.from_function(fn, zipped("app-1", source))
    b = kernelcache.SourceKeyedZipLocator.from_function(fn, zipped("app-2", source))
    c = kernelcache.SourceKeyedZipLocator.from_function(fn, zipped("app-3", source + "\n# changed\n"))
    assert a.get_cache_path() == b.get_cache_path() != c.get_cache_path()
    assert a.get_cache_path().startswith(str(tmp_path / "cache")) and a.get_source_stamp() == b.get_source_stamp()
    assert kernelcache.SourceKeyedZipLocator.from_function(fn, os.path.join(ROOT, "storelib", "compute", "kernels.py")) is None
