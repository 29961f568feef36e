"""gs:// and as:// model repositories, served together by one naiad in poll mode.

GCS: the gcp-storage-emulator package, a GCS JSON API server started on a free port (the
SDK reaches it through STORAGE_EMULATOR_HOST). Azure: no Blob Storage emulator installs
with pip (Azurite is an npm package), so the Azure path is tested against the small fake
of the Blob REST API below (List Blobs and Get Blob, with Shared Key signatures checked as
the REST API documents them), reached through NAIAD_AZURE_BLOB_ENDPOINT.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import threading
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit
from xml.sax.saxutils import escape

import numpy as np
import pytest
import tritonclient.http as httpclient
from cloud_repository_support import (
    CloudServer,
    add_sub_files,
    files_under,
    gcs_emulator,
    serve_fails,
    wait_until,
)
from model_control_support import add_sub_client_inputs, entries

storage = pytest.importorskip("google.cloud.storage")
pytest.importorskip("gcp_storage_emulator")
pytest.importorskip("azure.storage.blob")

ACCOUNT = "naiadaccount"
ACCOUNT_KEY = base64.b64encode(b"the fake's account key").decode()


# -- a fake of Azure's Blob REST API -------------------------------------------------------
class FakeBlobService:
    """Containers of blobs in memory, served over HTTP as Azure's Blob service answers
    List Blobs and Get Blob, for requests signed with the account's Shared Key."""

    def __init__(self):
        self.containers: dict[str, dict[str, bytes]] = {}
        self.lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                service.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}/{ACCOUNT}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def put(self, container: str, name: str, content: bytes) -> None:
        with self.lock:
            self.containers.setdefault(container, {})[name] = content

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlsplit(request.path)
        query = dict(parse_qsl(url.query, keep_blank_values=True))
        if not self._signed(request, url.path, query):
            return self._error(request, 403, "AuthenticationFailed", "signature mismatch")
        parts = unquote(url.path).split("/", 3)  # "", account, container, blob
        if len(parts) < 3 or parts[1] != ACCOUNT:
            return self._error(request, 400, "InvalidUri", "no container")
        with self.lock:
            blobs = dict(self.containers.get(parts[2], {}))
        if parts[2] not in self.containers:
            return self._error(request, 404, "ContainerNotFound", "no such container")
        if len(parts) == 3 and query.get("comp") == "list":
            prefix = query.get("prefix", "")
            items = "".join(
                f"<Blob><Name>{escape(name)}</Name><Properties>"
                f"<Last-Modified>{formatdate(usegmt=True)}</Last-Modified>"
                f"<Etag>{_etag(content)}</Etag><Content-Length>{len(content)}</Content-Length>"
                "<BlobType>BlockBlob</BlobType></Properties></Blob>"
                for name, content in sorted(blobs.items())
                if name.startswith(prefix)
            )
            body = (
                '<?xml version="1.0" encoding="utf-8"?>'
                f'<EnumerationResults ServiceEndpoint="{self.endpoint}/" '
                f'ContainerName="{parts[2]}"><Prefix>{escape(prefix)}</Prefix>'
                f"<Blobs>{items}</Blobs><NextMarker /></EnumerationResults>"
            ).encode()
            return self._send(request, 200, body, {"Content-Type": "application/xml"})
        content = blobs.get(parts[3]) if len(parts) == 4 else None
        if content is None:
            return self._error(request, 404, "BlobNotFound", "no such blob")
        headers = {
            "Content-Type": "application/octet-stream",
            "ETag": _etag(content),
            "Last-Modified": formatdate(usegmt=True),
            "x-ms-blob-type": "BlockBlob",
        }
        wanted = request.headers.get("x-ms-range") or request.headers.get("Range")
        if wanted:
            first, _, last = wanted.removeprefix("bytes=").partition("-")
            end = min(int(last) if last else len(content) - 1, len(content) - 1)
            headers["Content-Range"] = f"bytes {first}-{end}/{len(content)}"
            return self._send(request, 206, content[int(first) : end + 1], headers)
        return self._send(request, 200, content, headers)

    @staticmethod
    def _signed(request, path: str, query: dict) -> bool:
        """Shared Key, as the Blob REST API defines the string to sign."""
        given = request.headers.get("Authorization", "")
        if not given.startswith(f"SharedKey {ACCOUNT}:"):
            return False
        headers = {k.lower(): v for k, v in request.headers.items()}
        length = headers.get("content-length", "")
        standard = [
            headers.get(name, "")
            for name in (
                "content-encoding",
                "content-language",
                "content-length",
                "content-md5",
                "content-type",
                "date",
                "if-modified-since",
                "if-match",
                "if-none-match",
                "if-unmodified-since",
                "range",
            )
        ]
        standard[2] = "" if length == "0" else length
        canonical_headers = "".join(
            f"{name}:{value.strip()}\n"
            for name, value in sorted(headers.items())
            if name.startswith("x-ms-")
        )
        resource = f"/{ACCOUNT}{path}" + "".join(
            f"\n{name.lower()}:{value}" for name, value in sorted(query.items())
        )
        text = "GET\n" + "\n".join(standard) + "\n" + canonical_headers + resource
        digest = hmac.new(base64.b64decode(ACCOUNT_KEY), text.encode(), hashlib.sha256).digest()
        return hmac.compare_digest(
            given, f"SharedKey {ACCOUNT}:{base64.b64encode(digest).decode()}"
        )

    @staticmethod
    def _send(request, status: int, body: bytes, headers: dict) -> None:
        request.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            request.send_header(name, value)
        request.send_header("x-ms-version", "2025-01-05")
        request.end_headers()
        request.wfile.write(body)

    def _error(self, request, status: int, code: str, message: str) -> None:
        body = (
            f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
        )
        self._send(
            request,
            status,
            body.encode(),
            {"Content-Type": "application/xml", "x-ms-error-code": code},
        )


def _etag(content: bytes) -> str:
    return '"0x' + hashlib.md5(content).hexdigest()[:16].upper() + '"'


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    server = gcs_emulator(tmp_path_factory.mktemp("gcs"))
    from google.auth.credentials import AnonymousCredentials

    client = storage.Client(
        project="naiad",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": server.endpoint},
    )
    bucket = client.create_bucket("gmodels")
    for key, content in add_sub_files().items():
        bucket.blob(f"repo/{key}").upload_from_string(content)
    server.bucket = bucket
    yield server
    server.stop()


@pytest.fixture(scope="module")
def azure():
    service = FakeBlobService()
    for key, content in add_sub_files("add_sub_az").items():
        service.put("amodels", f"repo/{key}", content)
    yield service
    service.close()


@pytest.fixture(scope="module")
def env(gcs, azure):
    return {
        "STORAGE_EMULATOR_HOST": gcs.endpoint,
        "NAIAD_AZURE_BLOB_ENDPOINT": azure.endpoint,
        "AZURE_STORAGE_ACCOUNT": ACCOUNT,
        "AZURE_STORAGE_KEY": ACCOUNT_KEY,
        "TRITON_CLOUD_CREDENTIAL_PATH": None,
    }


@pytest.fixture(scope="module")
def server(env, tmp_path_factory):
    gcs_cache = tmp_path_factory.mktemp("gcs-cache")
    azure_cache = tmp_path_factory.mktemp("azure-cache")
    naiad = CloudServer(
        ["gs://gmodels/repo", f"as://{ACCOUNT}/amodels/repo"],
        {
            **env,
            "TRITON_GCS_MOUNT_DIRECTORY": str(gcs_cache),
            "TRITON_AZURE_MOUNT_DIRECTORY": str(azure_cache),
        },
        log_dir=tmp_path_factory.mktemp("logs"),
        extra_args=["--model-control-mode", "poll", "--repository-poll-secs", "1"],
    )
    naiad.caches = (gcs_cache, azure_cache)
    naiad.start()
    yield naiad
    naiad.stop()


def _answer(server, model: str) -> np.ndarray:
    client = httpclient.InferenceServerClient(f"{server.host}:{server.http_port}")
    try:
        return client.infer(model, add_sub_client_inputs(httpclient, 3.0)).as_numpy("OUTPUT0")
    finally:
        client.close()


def _ready(server, name: str) -> bool:
    return any(e.get("state") == "READY" for e in entries(server.url, name))


# -- tests ---------------------------------------------------------------------------------
def test_models_from_gcs_and_azure_answer(server):
    np.testing.assert_array_equal(_answer(server, "add_sub"), np.full((1, 16), 4.0, np.float32))
    np.testing.assert_array_equal(_answer(server, "add_sub_az"), np.full((1, 16), 4.0, np.float32))
    gcs_cache, azure_cache = server.caches
    assert (gcs_cache / "repository-0/add_sub/1/model.py").is_file()
    assert (azure_cache / "repository-1/add_sub_az/1/model.py").is_file()


def test_poll_picks_up_models_uploaded_to_gcs_and_azure(server, gcs, azure):
    for key, content in add_sub_files("add_sub_gcs_new").items():
        gcs.bucket.blob(f"repo/{key}").upload_from_string(content)
    for key, content in add_sub_files("add_sub_az_new").items():
        azure.put("amodels", f"repo/{key}", content)
    wait_until(lambda: _ready(server, "add_sub_gcs_new"), "add_sub_gcs_new")
    wait_until(lambda: _ready(server, "add_sub_az_new"), "add_sub_az_new")
    for model in ("add_sub_gcs_new", "add_sub_az_new"):
        np.testing.assert_array_equal(_answer(server, model), np.full((1, 16), 4.0, np.float32))


def test_the_caches_are_empty_after_shutdown(server):
    assert server.stop() == 0
    assert [files_under(cache) for cache in server.caches] == [[], []]


def test_a_missing_bucket_or_container_or_a_wrong_key_stops_the_start(env, tmp_path):
    missing = "gs://no-such-bucket/repo"
    assert f"model repository '{missing}': bucket 'no-such-bucket' does not exist" in (
        serve_fails([missing], env, tmp_path)
    )
    missing = f"as://{ACCOUNT}/no-such-container/repo"
    assert f"model repository '{missing}': container 'no-such-container' does not exist" in (
        serve_fails([missing], env, tmp_path)
    )
    url = f"as://{ACCOUNT}/amodels/repo"
    wrong_key = base64.b64encode(b"another key").decode()
    assert f"model repository '{url}': the credentials were refused (AuthenticationFailed)" in (
        serve_fails([url], {**env, "AZURE_STORAGE_KEY": wrong_key}, tmp_path)
    )
