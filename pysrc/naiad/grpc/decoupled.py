"""ModelStreamInfer for decoupled models: each request's 0..N responses, in order.

`submit_stream` queues a request of a stream with a consumer that writes every
response the model sends as a ModelStreamInferResponse on the stream, as Triton does:

- a response with outputs is written as it comes;
- an error response is written with `error_message` (the stream stays open);
- a final flag sent alone is written only when the request asked for it with the
  parameter `triton_enable_empty_final_response: true`, as an empty response;
- every response with outputs carries `triton_final_response` (true on the request's
  last one), asked for or not, as Triton does.

The protocol (grpc/protocol.py) keeps the core's request ids of each stream, so a
stream the client resets (RST_STREAM) or that ends with its connection cancels them
(ModelManager.cancel).
"""

from __future__ import annotations

from naiad.grpc.service import error_of
from naiad.grpc.tensors import to_infer_response
from naiad.protos import grpc_service_pb2 as pb

EMPTY_FINAL = "triton_enable_empty_final_response"
FINAL_PARAMETER = "triton_final_response"


def submit_stream(protocol, stream: int, call, model, request) -> None:
    """Queues `request` (an InferRequest of stream `stream`) on decoupled `model`;
    raises NaiadError when it cannot be queued (the caller answers it on the stream)."""
    flags = request.parameters.get(EMPTY_FINAL) is True
    batching = model.config.max_batch_size > 0
    state = {"id": None}

    def on_response(response, error, final: bool) -> None:
        if stream in protocol.calls:  # else the stream is gone (reset, deadline, connection)
            out = _message(model, request, batching, flags, response, error, final)
            if out is not None:
                protocol.conn.send_message(stream, out)
                protocol._schedule_flush()
        if final:
            ids = protocol.stream_requests.get(stream)
            if ids is not None:
                ids.discard(state["id"])
            protocol.stream_request_done(stream)

    request_id = model.submit(request, on_response=on_response)
    state["id"] = request_id
    protocol.stream_requests.setdefault(stream, set()).add(request_id)


def cancel_stream(protocol, stream: int) -> None:
    """The client reset `stream` (or the connection ended): its requests still in
    flight are cancelled in the core."""
    ids = protocol.stream_requests.pop(stream, None)
    if ids:
        manager = protocol.service.manager
        for request_id in ids:
            manager.cancel(request_id)


def _message(model, request, batching, flags, response, error, final) -> bytes | None:
    """The ModelStreamInferResponse bytes of one response, or None for a final flag
    alone that the client did not ask to see."""
    if error is not None:
        _, message = error_of(error)
        out = pb.ModelStreamInferResponse(error_message=message)
        out.infer_response.id = request.id
        if flags:
            out.infer_response.parameters[FINAL_PARAMETER].bool_param = final
        return out.SerializeToString()
    if response is None:  # the final flag alone
        if not flags:
            return None
        out = pb.ModelStreamInferResponse()
        infer = out.infer_response
        infer.model_name = model.name
        # As Triton: no response of the model, so the version the request named ("" for
        # the policy's default).
        infer.model_version = request.model_version
        infer.id = request.id
        infer.parameters[FINAL_PARAMETER].bool_param = True
        return out.SerializeToString()
    infer = to_infer_response(response, request, batching, getattr(model, "labels", None))
    infer.parameters[FINAL_PARAMETER].bool_param = final  # always, as Triton
    # ModelStreamInferResponse{infer_response (field 2) = infer}, without copying the
    # message into a wrapper first.
    inner = infer.SerializeToString()
    return _INFER_RESPONSE_TAG + _varint(len(inner)) + inner


_INFER_RESPONSE_TAG = b"\x12"  # field 2, length-delimited


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
