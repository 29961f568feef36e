"""The objects of a cloud repository behind one small interface: list them, fetch one.

Each cloud's own SDK does the talking (boto3, google-cloud-storage, azure-storage-blob,
installed by the extras naiad[s3], naiad[gcs], naiad[azure]); they are imported only when
a repository of that cloud is opened, so `pip install naiad` needs none of them. What goes
wrong is raised as RepositoryUnreachable with a message that names the repository and
says what is wrong (no such bucket, credentials refused, endpoint not reachable).
"""

from __future__ import annotations

import dataclasses
import logging
import os

from naiad.repository.cloud_url import CloudLocation, credentials

__all__ = ["ObjectInfo", "RemoteStore", "RepositoryUnreachable", "open_store"]

_EXTRAS = {"s3": "naiad[s3]", "gs": "naiad[gcs]", "as": "naiad[azure]"}


class RepositoryUnreachable(OSError):
    """A cloud repository that cannot be listed or read; the message names it."""


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the prefix that was listed
    size: int
    etag: str  # changes whenever the object's content is written again


class RemoteStore:
    """One bucket (container) of one cloud."""

    def __init__(self, location: CloudLocation):
        self.location = location

    def list(self, prefix: str) -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, keys relative to it."""
        raise NotImplementedError

    def download(self, key: str, destination: str) -> None:
        """Writes object `key` (a full key) to file `destination`."""
        raise NotImplementedError

    def _fail(self, why: str) -> RepositoryUnreachable:
        return RepositoryUnreachable(f"model repository '{self.location.url}': {why}")


def open_store(location: CloudLocation) -> RemoteStore:
    """The store for `location`; RepositoryUnreachable when its SDK is not installed."""
    kinds = {"s3": _S3Store, "gs": _GcsStore, "as": _AzureStore}
    try:
        return kinds[location.scheme](location)
    except ImportError as exc:
        raise RepositoryUnreachable(
            f"model repository '{location.url}': {location.scheme}:// repositories need "
            f"the {_EXTRAS[location.scheme]} extra (pip install '{_EXTRAS[location.scheme]}'): "
            f"{exc}"
        ) from None


# -- S3 ------------------------------------------------------------------------------------
class _S3Store(RemoteStore):
    def __init__(self, location: CloudLocation):
        super().__init__(location)
        import boto3
        import botocore
        from botocore.config import Config

        given = credentials(location)
        session = boto3.session.Session(
            aws_access_key_id=given.get("key_id"),
            aws_secret_access_key=given.get("secret_key"),
            aws_session_token=given.get("session_token"),
            region_name=given.get("region") or os.environ.get("AWS_REGION"),
            profile_name=given.get("profile"),
        )
        options = {
            "retries": {"max_attempts": 3, "mode": "standard"},
            "connect_timeout": 5,
            "read_timeout": 60,
        }
        if location.endpoint:
            # Other S3 services name the bucket in the path, not in the host name.
            options["s3"] = {"addressing_style": "path"}
        if session.get_credentials() is None:
            options["signature_version"] = botocore.UNSIGNED  # a public bucket
        self._client = session.client(
            "s3",
            endpoint_url=location.endpoint,
            region_name=session.region_name or "us-east-1",
            config=Config(**options),
        )
        self._endpoint = location.endpoint or self._client.meta.endpoint_url

    def list(self, prefix: str) -> list[ObjectInfo]:
        full = self.location.prefix + prefix
        found = []
        with self._errors():
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.location.bucket, Prefix=full
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    found.append(ObjectInfo(item["Key"][len(full) :], item["Size"], item["ETag"]))
        return found

    def download(self, key: str, destination: str) -> None:
        with self._errors():
            self._client.download_file(self.location.bucket, key, destination)

    def _errors(self):
        return _Translate(self, self._why)

    def _why(self, exc: BaseException) -> str | None:
        from botocore import exceptions

        if isinstance(exc, exceptions.ClientError):
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchBucket",):
                return f"bucket '{self.location.bucket}' does not exist"
            if code in ("404", "NoSuchKey"):
                return "an object went away while it was read"
            if code in (
                "AccessDenied",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "ExpiredToken",
                "InvalidToken",
                "403",
            ):
                return f"the credentials were refused ({code})"
            return f"the S3 service answered {code or 'an error'}"
        if isinstance(exc, (exceptions.EndpointConnectionError, exceptions.ConnectionError)):
            return f"cannot connect to {self._endpoint}"
        if isinstance(exc, exceptions.BotoCoreError):
            return str(exc)
        return None


# -- Google Cloud Storage ----------------------------------------------------------------
class _GcsStore(RemoteStore):
    def __init__(self, location: CloudLocation):
        super().__init__(location)
        from google.api_core.retry import Retry
        from google.cloud import storage

        given = credentials(location)
        if given.get("path"):
            import google.auth

            creds, project = google.auth.load_credentials_from_file(given["path"])
            client = storage.Client(credentials=creds, project=project or "naiad")
        elif os.environ.get("STORAGE_EMULATOR_HOST"):
            client = storage.Client()  # the SDK talks to the emulator, without credentials
        else:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            try:  # GOOGLE_APPLICATION_CREDENTIALS, then the attached service account
                creds, project = google.auth.default()
                client = storage.Client(credentials=creds, project=project or "naiad")
            except DefaultCredentialsError:
                client = storage.Client.create_anonymous_client()  # a public bucket
        self._client = client
        self._bucket = client.bucket(location.bucket)
        # Transient errors are tried again for 10 s, not the SDK's 120 s: a poll that
        # fails is tried again at the next one.
        self._retry = Retry(timeout=10)

    def list(self, prefix: str) -> list[ObjectInfo]:
        full = self.location.prefix + prefix
        with _Translate(self, self._why):
            return [
                ObjectInfo(blob.name[len(full) :], blob.size or 0, str(blob.etag or blob.md5_hash))
                for blob in self._client.list_blobs(
                    self._bucket, prefix=full, retry=self._retry, timeout=30
                )
            ]

    def download(self, key: str, destination: str) -> None:
        with _Translate(self, self._why):
            self._bucket.blob(key).download_to_filename(destination, retry=self._retry, timeout=60)

    def _why(self, exc: BaseException) -> str | None:
        from google.api_core import exceptions
        from google.auth.exceptions import GoogleAuthError
        from requests import exceptions as http

        if isinstance(exc, exceptions.NotFound):
            return f"bucket '{self.location.bucket}' does not exist"
        if isinstance(exc, (exceptions.Forbidden, exceptions.Unauthorized, GoogleAuthError)):
            return f"the credentials were refused ({type(exc).__name__})"
        if isinstance(exc, (http.ConnectionError, exceptions.RetryError)):
            return f"cannot connect to {self._client._connection.API_BASE_URL}"
        if isinstance(exc, exceptions.GoogleAPICallError):
            return f"the storage service answered {exc.code}"
        return None


# -- Azure Blob Storage --------------------------------------------------------------------
class _AzureStore(RemoteStore):
    def __init__(self, location: CloudLocation):
        super().__init__(location)
        from azure.storage.blob import BlobServiceClient, LinearRetry

        # The SDK logs every request and response at INFO: not for the server's log.
        logging.getLogger("azure").setLevel(logging.WARNING)

        given = credentials(location)
        account = location.account
        # Naiad's own variable, for an Azurite-style service (the account in the path).
        endpoint = os.environ.get("NAIAD_AZURE_BLOB_ENDPOINT") or (
            f"https://{account}.blob.core.windows.net"
        )
        auth_type = given.get("auth_type") or os.environ.get("AZURE_STORAGE_AUTH_TYPE", "")
        key = given.get("account_key")
        if key is None and not given and os.environ.get("AZURE_STORAGE_ACCOUNT") in (None, account):
            key = os.environ.get("AZURE_STORAGE_KEY")
        if auth_type in ("managed_identity", "default"):
            from azure import identity

            client_id = given.get("client_id") or os.environ.get("AZURE_STORAGE_CLIENT_ID")
            credential = (
                identity.ManagedIdentityCredential(client_id=client_id)
                if auth_type == "managed_identity"
                else identity.DefaultAzureCredential()
            )
        elif key:
            credential = {"account_name": given.get("account_str") or account, "account_key": key}
        else:
            credential = None  # a public container
        self._endpoint = endpoint
        self._container = BlobServiceClient(
            endpoint,
            credential=credential,
            retry_policy=LinearRetry(backoff=1, random_jitter_range=1, retry_total=2),
            connection_timeout=5,
        ).get_container_client(location.bucket)

    def list(self, prefix: str) -> list[ObjectInfo]:
        full = self.location.prefix + prefix
        with _Translate(self, self._why):
            return [
                ObjectInfo(blob.name[len(full) :], blob.size or 0, str(blob.etag))
                for blob in self._container.list_blobs(name_starts_with=full)
            ]

    def download(self, key: str, destination: str) -> None:
        with _Translate(self, self._why), open(destination, "wb") as file:
            self._container.download_blob(key).readinto(file)

    def _why(self, exc: BaseException) -> str | None:
        from azure.core import exceptions

        if isinstance(exc, exceptions.ResourceNotFoundError):
            return f"container '{self.location.bucket}' does not exist"
        if isinstance(exc, exceptions.ClientAuthenticationError):
            code = getattr(exc, "error_code", None)
            return f"the credentials were refused ({getattr(code, 'value', code) or 403})"
        if isinstance(exc, exceptions.ServiceRequestError):
            return f"cannot connect to {self._endpoint}"
        if isinstance(exc, exceptions.HttpResponseError):
            return f"the storage service answered {exc.status_code}"
        return None


class _Translate:
    """Turns an SDK's exception into RepositoryUnreachable (what `why` recognises)."""

    def __init__(self, store: RemoteStore, why):
        self.store = store
        self.why = why

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if exc is None or isinstance(exc, RepositoryUnreachable):
            return False
        why = self.why(exc)
        if why is None:
            return False
        raise self.store._fail(why) from exc
