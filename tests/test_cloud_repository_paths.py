"""Triton's cloud repository paths and its credential file (TRITON_CLOUD_CREDENTIAL_PATH),
as naiad reads them (naiad/repository/cloud_url.py)."""

from __future__ import annotations

import json

import pytest
from naiad.repository.cloud_url import CloudPathError, credentials, is_cloud_path, parse


@pytest.mark.parametrize(
    "url, scheme, endpoint, account, bucket, prefix",
    [
        ("s3://bucket/path/to/repo", "s3", None, None, "bucket", "path/to/repo/"),
        ("s3://bucket", "s3", None, None, "bucket", ""),
        ("s3://minio:9000/bucket/repo/", "s3", "http://minio:9000", None, "bucket", "repo/"),
        ("s3://https://host:443/bucket/a/b", "s3", "https://host:443", None, "bucket", "a/b/"),
        ("gs://bucket/path", "gs", None, None, "bucket", "path/"),
        ("as://account/container/path", "as", None, "account", "container", "path/"),
    ],
)
def test_paths_as_triton_writes_them(url, scheme, endpoint, account, bucket, prefix):
    assert is_cloud_path(url)
    location = parse(url)
    assert (location.scheme, location.endpoint, location.account) == (scheme, endpoint, account)
    assert (location.bucket, location.prefix, location.url) == (bucket, prefix, url)


def test_local_paths_are_not_cloud_paths():
    assert not is_cloud_path("/models")
    assert not is_cloud_path("relative/s3://x")
    assert not is_cloud_path("http://host/bucket")


@pytest.mark.parametrize(
    "url, message",
    [
        ("s3://", "model repository 's3://': no bucket named"),
        (
            "s3://https://host/bucket",
            "model repository 's3://https://host/bucket': expected https://host:port/bucket",
        ),
        ("as://account", "model repository 'as://account': no container named"),
        ("as:///container", "model repository 'as:///container': no storage account named"),
    ],
)
def test_paths_that_name_no_bucket_are_refused(url, message):
    with pytest.raises(CloudPathError) as caught:
        parse(url)
    assert str(caught.value) == message


def test_the_credential_file_entry_with_the_longest_matching_name_wins(tmp_path, monkeypatch):
    path = tmp_path / "cloud_credential.json"
    path.write_text(
        json.dumps(
            {
                "gs": {"": "/default.json", "gs://gcs-bucket-002": "/second.json"},
                "s3": {
                    "": {"key_id": "ANY", "secret_key": "any", "region": "", "profile": ""},
                    "s3://s3-bucket-002": {"key_id": "TWO", "secret_key": "two", "region": "r2"},
                },
                "as": {"as://Account-002/Container": {"account_str": "a2", "account_key": "k2"}},
            }
        )
    )
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(path))
    assert credentials(parse("gs://gcs-bucket-002/model_repository")) == {"path": "/second.json"}
    assert credentials(parse("gs://any-other-gcs-bucket")) == {"path": "/default.json"}
    # Empty values are left out: the SDK's own defaults apply to them.
    assert credentials(parse("s3://s3-bucket-001/repo")) == {"key_id": "ANY", "secret_key": "any"}
    assert credentials(parse("s3://s3-bucket-002/repo")) == {
        "key_id": "TWO",
        "secret_key": "two",
        "region": "r2",
    }
    assert credentials(parse("as://Account-002/Container/repo")) == {
        "account_str": "a2",
        "account_key": "k2",
    }
    assert credentials(parse("as://Other/Container/repo")) == {}  # no "" entry for as


def test_without_the_variable_the_environment_is_left_to_the_sdk(monkeypatch):
    monkeypatch.delenv("TRITON_CLOUD_CREDENTIAL_PATH", raising=False)
    assert credentials(parse("s3://bucket/repo")) == {}


def test_an_unreadable_credential_file_is_named(tmp_path, monkeypatch):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    monkeypatch.setenv("TRITON_CLOUD_CREDENTIAL_PATH", str(path))
    with pytest.raises(CloudPathError) as caught:
        credentials(parse("gs://bucket/repo"))
    assert str(caught.value).startswith(
        f"TRITON_CLOUD_CREDENTIAL_PATH '{path}' cannot be read as JSON: "
    )


def test_the_mount_directory_must_be_a_folder_without_our_folder_in_use(tmp_path, monkeypatch):
    pytest.importorskip("boto3")
    from naiad.repository.remote_repository import RemoteRepository

    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(tmp_path / "absent"))
    with pytest.raises(CloudPathError) as caught:
        RemoteRepository("s3://bucket/repo", 0)
    assert str(caught.value) == (
        f"model repository 's3://bucket/repo': TRITON_AWS_MOUNT_DIRECTORY "
        f"'{tmp_path / 'absent'}' is not a folder"
    )
    (tmp_path / "repository-0").mkdir()
    (tmp_path / "repository-0" / "left_over").write_text("")
    monkeypatch.setenv("TRITON_AWS_MOUNT_DIRECTORY", str(tmp_path))
    with pytest.raises(CloudPathError) as caught:
        RemoteRepository("s3://bucket/repo", 0)
    assert str(caught.value) == (
        f"model repository 's3://bucket/repo': TRITON_AWS_MOUNT_DIRECTORY '{tmp_path}' holds "
        "'repository-0' already (it must be empty, as Triton asks)"
    )
    # The next repository's folder is free: it is made, and closing removes it.
    repository = RemoteRepository("s3://bucket/repo", 1)
    assert (tmp_path / "repository-1").is_dir()
    repository.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repository-0"]


def test_a_missing_sdk_names_the_extra(monkeypatch):
    import sys

    from naiad.repository.remote_store import RepositoryUnreachable, open_store

    # As if not installed: `from google.cloud import storage` finds neither the package's
    # attribute (set once another test imported it) nor the module.
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    cloud = sys.modules.get("google.cloud")
    if cloud is not None:
        monkeypatch.delattr(cloud, "storage", raising=False)
    with pytest.raises(RepositoryUnreachable) as caught:
        open_store(parse("gs://bucket/repo"))
    assert str(caught.value).startswith(
        "model repository 'gs://bucket/repo': gs:// repositories need the naiad[gcs] extra "
        "(pip install 'naiad[gcs]'): "
    )
