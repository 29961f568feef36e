"""The SageMaker multi-model endpoint's control plane, as Triton 2.51's
sagemaker_server.cc serves it: `POST /models` loads the model of a folder under a
name, `GET /models[/<name>]` lists or describes what was loaded so, `DELETE
/models/<name>` unloads it.

The endpoint's route rewrite (csrc/http1/endpoint_routes.h) sends these requests to
`_core.SAGEMAKER_MODELS_PATH`, the path's name in a header; it infers
`POST /models/<name>/invoke` itself, for the names this module adds to its
`_core.SageMakerNames`. A load registers the folder as a model repository
(repository/registry.py) with the one mapping Triton makes, and unregisters it again
when the load fails or the model is unloaded.
"""

from __future__ import annotations

import os
import re

import orjson

from naiad import _core
from naiad.errors import AlreadyExists, Internal, NaiadError
from naiad.http.codec import _json_error
from naiad.http.routes import TEXT, HttpRequest, Reply, error_reply

__all__ = ["SageMakerModels", "model_layout"]

_NAME_HEADER = _core.ENDPOINT_NAME_HEADER.lower()
_TARGET_HEADER = _core.SAGEMAKER_TARGET_HEADER.lower()
# A folder whose config says this holds the ensemble to load among several models.
_ENSEMBLE = re.compile(r'platform:(\s)*"ensemble"')
# The folders SageMaker unpacks a model archive into: /opt/ml/models/<hash>/model[/<sub>].
_SAGEMAKER_PATH = re.compile(r"(/opt/ml/models/[0-9A-Za-z._]+)/(model)/?([0-9A-Za-z._]+)?")
# Messages Triton answers a failed load with 507 (Insufficient Storage) for, not 400.
_OUT_OF_MEMORY = (
    "CUDA out of memory",
    "CUDA_OUT_OF_MEMORY",
    "Out of memory",
    "Out Of Memory",
    "out of memory",
    "MemoryError",
    "OutOfMemory",
    "OOM",
    "Dst tensor is not initialized",
    "Src tensor is not initialized",
    "CNMEM_STATUS_OUT_OF_MEMORY",
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "Failed to allocate memory",
    "failed to allocate memory",
    "No space left on device",
)
_EMPTY = {status: Reply(status, TEXT, ()) for status in (200, 404)}


def model_layout(url: str) -> tuple[str, str]:
    """(the repository to register, the subfolder the model is) for a load of `url`, by
    Triton's rules: the one subfolder of `url`, or among several the one whose config
    says `platform: "ensemble"`; where `url` itself holds config.pbtxt, SageMaker's
    `/opt/ml/models/<hash>` is the repository and `model` the subfolder (any other
    path then names no repository, as in Triton)."""
    subfolder = ensemble = ""
    try:
        folders = sorted(entry.name for entry in os.scandir(url) if entry.is_dir())
    except OSError:
        folders = []
    for folder in folders:
        subfolder = folder
        try:
            with open(f"{url}/{folder}/config.pbtxt", encoding="utf-8") as file:
                if _ENSEMBLE.search(file.read()):
                    ensemble = folder
        except (OSError, UnicodeDecodeError):
            continue
    if os.path.exists(f"{url}/config.pbtxt"):
        match = _SAGEMAKER_PATH.fullmatch(url)
        return (match.group(1), match.group(2)) if match else ("", "")
    return url, ensemble or subfolder


class SageMakerModels:
    """The models loaded through the endpoint: name (the request's `model_name`) -> the
    repository registered for it, as Triton's list keeps them."""

    def __init__(self, manager):
        self.manager = manager
        self.names = _core.SageMakerNames()  # what the route rewrite reads
        self.loaded: dict[str, str] = {}

    async def handle(self, request: HttpRequest) -> Reply:
        name = request.headers.get(_NAME_HEADER)
        if request.method == "GET":
            return self.describe(name) if name is not None else self.list()
        if request.method == "DELETE":
            return await self.unload(name or "", request.headers.get(_TARGET_HEADER))
        return await self.load(request)

    def list(self) -> Reply:
        models = []
        for name, url in self.loaded.items():
            # Triton lists the name whose version 1 is not ready as an empty object.
            ready = self.manager.model_ready(name, "1")
            models.append({"modelName": name, "modelUrl": url} if ready else {})
        return Reply(200, TEXT, (orjson.dumps({"models": models}),))

    def describe(self, name: str) -> Reply:
        url = self.loaded.get(name)
        if url is None:
            return _EMPTY[404]
        return Reply(200, TEXT, (orjson.dumps({"modelName": name, "modelUrl": url}),))

    async def load(self, request: HttpRequest) -> Reply:
        try:
            name, url = _load_request(request.body)
        except NaiadError as exc:
            return error_reply(400, exc.message, TEXT)
        target = request.headers.get(_TARGET_HEADER) or name
        repository, subfolder = model_layout(url)
        control = self.manager.control
        try:
            control.register_repository(repository, {target: subfolder})
        except AlreadyExists as exc:
            return error_reply(409, exc.message, TEXT)
        except NaiadError as exc:
            return error_reply(400, exc.message, TEXT)
        try:
            await self.manager.load_model(target)
        except NaiadError as exc:
            control.unregister_repository(repository)
            status = 507 if any(text in exc.message for text in _OUT_OF_MEMORY) else 400
            return error_reply(status, exc.message, TEXT)
        self.loaded[name] = repository
        self.names.add(name)
        return _EMPTY[200]

    async def unload(self, name: str, target: str | None) -> Reply:
        repository = self.loaded.get(name)
        if repository is None:
            return _EMPTY[404]
        try:
            # Its composing models too, for an ensemble (Triton's UnloadModelAndDependents).
            await self.manager.unload_model(target or name, True)
        except NaiadError as exc:
            return error_reply(400, exc.message, TEXT)
        self.names.remove(name)
        del self.loaded[name]
        try:
            self.manager.control.unregister_repository(repository)
        except NaiadError as exc:
            return error_reply(400, exc.message, TEXT)
        return _EMPTY[200]


def _load_request(body) -> tuple[str, str]:
    """The load body's `model_name` and `url` (each "" when missing, as Triton reads
    them); Internal with Triton's message for a body that is not JSON."""
    if not body:
        return "", ""
    try:
        document = orjson.loads(bytes(body))
    except orjson.JSONDecodeError as exc:
        raise _json_error(bytes(body), exc) from None
    if not isinstance(document, dict):
        return "", ""
    values = []
    for member in ("model_name", "url"):
        value = document.get(member, "")
        if not isinstance(value, str):
            raise Internal("attempt to access JSON non-string as string")
        values.append(value)
    return values[0], values[1]
