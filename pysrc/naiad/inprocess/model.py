"""Models, requests and responses of the in-process API (Triton's `Model`,
`InferenceRequest`, `InferenceResponse` and response iterators).

A request is queued on the server's event loop through the model's general submit
path (`LoadedModel.submit`, the one HTTP's general path and gRPC use): the core
validates it with the one validator and lays it out as for any protocol. Its responses
come back on the loop and are handed to the caller's thread (a queue) or the caller's
event loop (`call_soon_threadsafe`).
"""

from __future__ import annotations

import asyncio
import queue
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from naiad.inprocess.errors import (
    InvalidArgumentError,
    TritonError,
    UnsupportedError,
    triton_error,
)
from naiad.inprocess.tensor import Tensor, input_tensors
from naiad.types import InferRequest

if TYPE_CHECKING:
    from naiad.inprocess.server import Server

# Triton's TRITONSERVER_RequestFlag values (InferenceRequest.flags).
SEQUENCE_START = 1
SEQUENCE_END = 2


class Model:
    """A model of a started server, by name and version (-1: the version the
    version policy serves). Not looked up until it is used, as Triton's."""

    def __init__(
        self,
        server: Server,
        name: str,
        version: int = -1,
        state: str | None = None,
        reason: str | None = None,
    ) -> None:
        server._require_started()
        self._server = server
        self.name = name
        self.version = version
        self.state = state
        self.reason = reason

    @property
    def _version_text(self) -> str:
        return "" if self.version is None or int(self.version) < 0 else str(self.version)

    def create_request(self, **kwargs) -> InferenceRequest:
        kwargs.pop("model", None)
        return InferenceRequest(model=self, **kwargs)

    def infer(
        self,
        inference_request: InferenceRequest | None = None,
        raise_on_error: bool = True,
        **kwargs,
    ) -> ResponseIterator:
        """Queues a request; returns the iterator of its responses (one for a model
        that is not decoupled, 0..N and the final one for a decoupled model). A request
        the core refuses (an unknown model, a bad input) raises here."""
        request = inference_request or InferenceRequest(model=self, **kwargs)
        iterator = ResponseIterator(self, request, raise_on_error)
        iterator._cancel = self._server._submit(self, request, iterator._put)
        return iterator

    def async_infer(
        self,
        inference_request: InferenceRequest | None = None,
        raise_on_error: bool = True,
        **kwargs,
    ) -> AsyncResponseIterator:
        """As infer, from a coroutine: the responses come as an async iterator on the
        running event loop (queuing waits for the server's loop to take the request)."""
        request = inference_request or InferenceRequest(model=self, **kwargs)
        iterator = AsyncResponseIterator(self, request, raise_on_error)
        iterator._cancel = self._server._submit(self, request, iterator._put)
        return iterator

    def ready(self) -> bool:
        return self._server._call(
            lambda manager: manager.model_ready(self.name, self._version_text)
        )

    def metadata(self) -> dict[str, Any]:
        """The model's metadata, as GET /v2/models/{name}[/versions/{v}] answers it."""
        return self._server._call(
            lambda manager: manager.get(self.name, self._version_text).metadata()
        )

    def config(self, config_version: int = 1) -> dict[str, Any]:
        """The model's configuration, as GET /v2/models/{name}/config answers it."""
        return self._server._call(
            lambda manager: manager.get(self.name, self._version_text).config_json()
        )

    def statistics(self) -> dict[str, Any]:
        """{"model_stats": [...]}, as GET /v2/models/{name}/stats answers it."""
        return self._server._call(lambda manager: manager.statistics(self.name, self._version_text))

    def __repr__(self) -> str:
        return str({"name": self.name, "version": self.version, "state": self.state})


@dataclass
class InferenceRequest:
    """Triton's request fields: `inputs` {name: numpy array, list, DLPack tensor or
    Tensor}, `parameters` {name: str | int | float | bool}, `priority`, `timeout`
    (microseconds), `correlation_id` and `flags` (SEQUENCE_START | SEQUENCE_END) for
    sequence models. `response_queue`: every response is also put there (a
    queue.SimpleQueue for infer, an asyncio.Queue for async_infer)."""

    model: Model
    request_id: str | None = None
    flags: int = 0
    correlation_id: int | str | None = None
    priority: int = 0
    timeout: int = 0
    inputs: dict[str, Any] = field(default_factory=dict)
    parameters: dict[str, str | int | bool | float] = field(default_factory=dict)
    output_memory_type: Any = None
    response_queue: Any = None

    def _naiad_request(self) -> InferRequest:
        """The request as the front ends hand it to a model (naiad/types.py)."""
        if self.output_memory_type not in (None, "cpu"):
            raise UnsupportedError(
                f"output_memory_type {self.output_memory_type!r}: outputs are host memory"
            )
        if not isinstance(self.parameters, dict):
            raise InvalidArgumentError("request parameters must be a dict")
        # Triton's request fields travel as the KServe parameters the front ends read.
        parameters = dict(self.parameters)
        if self.priority:
            parameters["priority"] = self.priority
        if self.timeout:
            parameters["timeout"] = self.timeout
        if self.correlation_id is not None:
            parameters["sequence_id"] = self.correlation_id
        if self.flags & SEQUENCE_START:
            parameters["sequence_start"] = True
        if self.flags & SEQUENCE_END:
            parameters["sequence_end"] = True
        return InferRequest(
            self.model.name,
            self.model._version_text,
            self.request_id or "",
            input_tensors(self.inputs),
            None,
            parameters,
        )


@dataclass
class InferenceResponse:
    """One response: `outputs` {name: Tensor}, `parameters`, `error` (a TritonError,
    when the model sent one), `final` (the request's last response)."""

    model: Model
    request_id: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Tensor] = field(default_factory=dict)
    error: TritonError | None = None
    classification_label: str | None = None
    final: bool = False


def make_response(model: Model, request: InferenceRequest, response, error, final):
    """The InferenceResponse of what the loop delivered: an InferResponse (naiad
    types), an error, or neither (the final flag alone)."""
    if response is None:
        result = InferenceResponse(model, request.request_id or "", final=final)
        if error is not None:
            result.error = triton_error(error)
        return result
    served = Model(model._server, response.model_name, int(response.model_version))
    return InferenceResponse(
        served,
        response.id,
        dict(response.parameters or {}),
        {o.name: Tensor(o.datatype, list(o.shape), o.data) for o in response.outputs},
        final=final,
    )


class ResponseIterator:
    """The responses of a request, for the caller's thread (blocks in next())."""

    def __init__(self, model: Model, request: InferenceRequest, raise_on_error: bool):
        self._model = model
        self._request = request
        self._raise_on_error = raise_on_error
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._complete = False
        self._cancel = None

    def _put(self, response, error, final: bool) -> None:
        """On the server's loop: one response arrived."""
        item = make_response(self._model, self._request, response, error, final)
        self._queue.put(item)
        if self._request.response_queue is not None:
            self._request.response_queue.put_nowait(item)

    def __iter__(self):
        return self

    def __next__(self) -> InferenceResponse:
        if self._complete:
            raise StopIteration
        response = self._queue.get()
        self._complete = response.final
        if response.error is not None and self._raise_on_error:
            raise response.error
        return response

    def cancel(self) -> None:
        """Cancels the request: a queued one is dropped, a running one sees
        `request.is_cancelled()` in the model."""
        if self._cancel is not None and not self._complete:
            self._model._server._post(self._cancel)


class AsyncResponseIterator:
    """The responses of a request, for a coroutine on the caller's event loop."""

    def __init__(self, model: Model, request: InferenceRequest, raise_on_error: bool):
        self._model = model
        self._request = request
        self._raise_on_error = raise_on_error
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._complete = False
        self._cancel = None

    def _put(self, response, error, final: bool) -> None:
        """On the server's loop: one response arrived; the caller's loop gets it."""
        item = make_response(self._model, self._request, response, error, final)
        try:
            self._loop.call_soon_threadsafe(self._take, item)
        except RuntimeError:
            pass  # the caller's loop is closed: nobody waits for it any more

    def _take(self, item: InferenceResponse) -> None:
        self._queue.put_nowait(item)
        if self._request.response_queue is not None:
            self._request.response_queue.put_nowait(item)

    def __aiter__(self):
        return self

    async def __anext__(self) -> InferenceResponse:
        if self._complete:
            raise StopAsyncIteration
        response = await self._queue.get()
        self._complete = response.final
        if response.error is not None and self._raise_on_error:
            raise response.error
        return response

    def cancel(self) -> None:
        if self._cancel is not None and not self._complete:
            self._model._server._post(self._cancel)
