"""Triton's cloud repository paths and the credentials that go with each.

`--model-repository` takes, besides a local folder:

- `s3://bucket/path`; for another S3 service `s3://host:port/bucket/path` (plain HTTP, as
  Triton) or `s3://https://host:port/bucket/path`;
- `gs://bucket/path`;
- `as://account/container/path`.

Credentials come from `TRITON_CLOUD_CREDENTIAL_PATH` (Triton's JSON file: per cloud, the
entry whose name is the longest prefix of the path, `""` matching every path) when it is
set, else from each cloud's usual environment variables, which its SDK reads itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

__all__ = ["CloudLocation", "CloudPathError", "is_cloud_path", "parse", "credentials"]

SCHEMES = ("s3", "gs", "as")

# Where Triton copies a remote repository when one of these is set (an existing, empty
# folder); otherwise a temporary folder.
MOUNT_DIRECTORY_VARIABLES = {
    "s3": "TRITON_AWS_MOUNT_DIRECTORY",
    "gs": "TRITON_GCS_MOUNT_DIRECTORY",
    "as": "TRITON_AZURE_MOUNT_DIRECTORY",
}

_HOST_PORT = re.compile(r"[^/:]+:[0-9]+")


class CloudPathError(ValueError):
    """A cloud repository path that cannot be used (its text, or its credentials)."""


@dataclasses.dataclass(frozen=True)
class CloudLocation:
    url: str  # as the user wrote it: every message names the repository by it
    scheme: str  # "s3", "gs" or "as"
    bucket: str  # the S3/GCS bucket, or the Azure container
    prefix: str  # the repository's folder inside the bucket: "" or "a/b/"
    endpoint: str | None = None  # S3: "http(s)://host:port" of another S3 service
    account: str | None = None  # Azure: the storage account


def is_cloud_path(text: str) -> bool:
    return text.split("://", 1)[0] in SCHEMES and "://" in text


def parse(url: str) -> CloudLocation:
    """The parts of a cloud repository path; raises CloudPathError naming what is missing."""
    scheme, _, rest = url.partition("://")
    if scheme not in SCHEMES or not _:
        raise CloudPathError(f"'{url}' is not a cloud repository path (s3://, gs://, as://)")
    endpoint = account = None
    if scheme == "s3":
        for protocol in ("https", "http"):
            if rest.startswith(protocol + "://"):
                host, _, rest = rest[len(protocol) + 3 :].partition("/")
                if not _HOST_PORT.fullmatch(host):
                    raise CloudPathError(
                        f"model repository '{url}': expected {protocol}://host:port/bucket"
                    )
                endpoint = f"{protocol}://{host}"
                break
        else:
            first = rest.split("/", 1)[0]
            if _HOST_PORT.fullmatch(first):  # s3://host:port/bucket: plain HTTP, as Triton
                endpoint = "http://" + first
                rest = rest[len(first) + 1 :]
    elif scheme == "as":
        account, _, rest = rest.partition("/")
        if not account:
            raise CloudPathError(f"model repository '{url}': no storage account named")
    bucket, _, path = rest.partition("/")
    if not bucket:
        what = "container" if scheme == "as" else "bucket"
        raise CloudPathError(f"model repository '{url}': no {what} named")
    path = path.strip("/")
    return CloudLocation(
        url=url,
        scheme=scheme,
        bucket=bucket,
        prefix=path + "/" if path else "",
        endpoint=endpoint,
        account=account,
    )


def credentials(location: CloudLocation) -> dict:
    """The credentials for `location` from TRITON_CLOUD_CREDENTIAL_PATH: for s3 a dict with
    Triton's keys (key_id, secret_key, region, session_token, profile), for gs
    {"path": credential JSON file}, for as {"account_str", "account_key", "auth_type",
    "client_id"}. Empty when the variable is not set or no entry matches: the SDK then
    reads the cloud's own environment variables."""
    path = os.environ.get("TRITON_CLOUD_CREDENTIAL_PATH")
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as file:
            document = json.load(file)
    except (OSError, ValueError) as exc:
        raise CloudPathError(
            f"TRITON_CLOUD_CREDENTIAL_PATH '{path}' cannot be read as JSON: {exc}"
        ) from None
    entries = document.get(location.scheme) if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        return {}
    matching = [name for name in entries if location.url.startswith(name)]
    if not matching:
        return {}
    entry = entries[max(matching, key=len)]
    if location.scheme == "gs":
        if not isinstance(entry, str):
            raise CloudPathError(
                f"TRITON_CLOUD_CREDENTIAL_PATH '{path}': a gs entry is the path of a "
                "credential JSON file"
            )
        return {"path": entry} if entry else {}
    if not isinstance(entry, dict):
        raise CloudPathError(
            f"TRITON_CLOUD_CREDENTIAL_PATH '{path}': the {location.scheme} entry for "
            f"'{location.url}' is not an object"
        )
    return {key: str(value) for key, value in entry.items() if value not in (None, "")}
