"""Triton's generate extension over HTTP:

    POST /v2/models/{m}[/versions/{v}]/generate          one JSON answer
    POST /v2/models/{m}[/versions/{v}]/generate_stream   Server-Sent Events

The body is one JSON object. A member named like a model input is that input's data
(a scalar is a tensor of one element, a flat list one of that many; the datatype is
the model config's); every other member is a request parameter (`id` is also the
request id). Each response is a JSON object with the output tensors by name (a
tensor of one element as a scalar, else a flat list), `model_name`,
`model_version` and, when there is one, `id`, keys sorted as Triton writes them.

`generate` wants exactly one response: a decoupled model that sends none or several
gets Triton's error (status 200, as Triton). `generate_stream` writes each response as
`data: {...}` followed by a blank line, in chunks as they come; an error response is
`data: {"error": "..."}` (the status is 400 when it is the first one, as in Triton).
Errors found before the request is queued answer as /infer's do.

A client that closes its connection cancels its request (ModelManager.cancel).
"""

from __future__ import annotations

import asyncio

import numpy as np
import orjson

from naiad.errors import Internal, InvalidArgument, NaiadError
from naiad.http.codec import _SHAPE_MISMATCH, _json_error, _json_to_wire, _output_json_data
from naiad.http.routes import JSON, HttpRequest, Reply, Router, StreamedReply, error_reply
from naiad.types import InferRequest, InputTensor

__all__ = ["register_generate_routes", "parse_generate_request", "response_json"]

SSE = b"Content-Type: text/event-stream; charset=utf-8\r\n"
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model "
    "that generates various number of responses"
)


def register_generate_routes(router: Router, manager) -> None:
    def generate(request: HttpRequest, name: str, version: str):
        model = manager.get(name, version)
        infer_request = parse_generate_request(request.body, model, name, version)
        return _generate(manager, model, infer_request)

    def generate_stream(request: HttpRequest, name: str, version: str):
        model = manager.get(name, version)
        infer_request = parse_generate_request(request.body, model, name, version)
        return _generate_stream(manager, model, infer_request)

    router.register_model_action("generate", generate)
    router.register_model_action("generate_stream", generate_stream)


def parse_generate_request(body, model, name: str, version: str) -> InferRequest:
    """The InferRequest a generate body asks for; NaiadError with Triton's status and
    message for a body it cannot be."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _json_error(body, exc) from None
    if not isinstance(doc, dict):
        raise Internal("attempt to get members for non-object")
    config = getattr(model, "config", None)
    declared = {}
    if config is not None:
        for entry in config.input:
            declared[entry.name] = _wire_datatype(entry.data_type)
    inputs = []
    parameters = {}
    for key, value in doc.items():
        datatype = declared.get(key)
        if datatype is None:
            if type(value) not in (str, int, float, bool):
                raise InvalidArgument(
                    f"parameter '{key}' has invalid type. It should be either 'int', 'bool', "
                    "or 'string'."
                )
            parameters[key] = value
            continue
        data = value if type(value) is list else [value]
        if any(type(item) is list for item in data):
            raise Internal(_SHAPE_MISMATCH)
        shape = [len(data)]
        inputs.append(InputTensor(key, datatype, shape, _json_to_wire(key, datatype, shape, data)))
    request_id = doc.get("id")
    return InferRequest(
        name,
        version,
        request_id if type(request_id) is str else "",
        inputs,
        None,
        parameters,
    )


def _wire_datatype(data_type: int) -> str | None:
    from naiad.protos import model_config_pb2

    name = model_config_pb2.DataType.Name(data_type)  # TYPE_FP32
    return "BYTES" if name == "TYPE_STRING" else name[len("TYPE_") :]


def response_json(response) -> bytes:
    """One response as generate writes it."""
    doc = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        doc["id"] = response.id
    # The response parameters are keys of their own, as Triton writes them (an
    # ensemble's sequence_id / sequence_start / sequence_end among them).
    if response.parameters:
        doc.update(response.parameters)
    for output in response.outputs:
        data = _output_json_data(output)
        if isinstance(data, np.ndarray):
            data = data.tolist()
        doc[output.name] = data[0] if len(data) == 1 else data
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def _generate(manager, model, infer_request: InferRequest):
    """Queues the request now (its errors answer at once) and returns the coroutine
    that waits for its one response."""
    done = asyncio.get_running_loop().create_future()
    responses = []
    errors = []

    def on_response(response, error, final: bool) -> None:
        if error is not None:
            errors.append(error)
        elif response is not None:
            responses.append(response)
        if final and not done.done():
            done.set_result(None)

    request_id = model.submit(infer_request, on_response=on_response)
    return _answer(manager, request_id, done, responses, errors)


async def _answer(manager, request_id: int, done, responses: list, errors: list) -> Reply:
    try:
        await done
    except asyncio.CancelledError:  # the connection closed
        manager.cancel(request_id)
        raise
    if errors and not responses:
        error = errors[0]
        return error_reply(400, error.message if isinstance(error, NaiadError) else str(error))
    if len(responses) != 1 or errors:
        return error_reply(200, ONE_RESPONSE)
    try:
        return Reply(200, JSON, (response_json(responses[0]),))
    except NaiadError as exc:
        return error_reply(exc.http_status, exc.message)


def _generate_stream(manager, model, infer_request: InferRequest) -> StreamedReply:
    state = {"id": None}
    reply = StreamedReply(SSE, on_abort=lambda: manager.cancel(state["id"]))

    def on_response(response, error, final: bool) -> None:
        if reply.ended:
            return  # aborted: the client is gone
        if error is not None:
            message = error.message if isinstance(error, NaiadError) else str(error)
            reply.start(400)
            data = orjson.dumps({"error": message})
        elif response is not None:
            reply.start(200)
            try:
                data = response_json(response)
            except NaiadError as exc:
                data = orjson.dumps({"error": exc.message})
        else:
            data = None
        if data is not None:
            reply.push(b"data: " + data + b"\n\n")
        if final:
            reply.end()

    state["id"] = model.submit(infer_request, on_response=on_response)
    return reply
