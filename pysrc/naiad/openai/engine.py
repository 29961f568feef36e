"""The model convention of Triton's OpenAI frontend for a vLLM model, and one request
through the core.

A model serves the completions endpoints when its config declares the inputs
`text_input` (BYTES, the prompt) and `sampling_parameters` (BYTES, a JSON object);
`stream` (BOOL), `exclude_input_in_output` (BOOL; Triton also accepts the name
`sampling_param_exclude_input_from_output`), `return_num_input_tokens` and
`return_num_output_tokens` (BOOL) are sent when declared. Its responses carry
`text_output` (BYTES: in streaming mode the new text of that response) and, when asked,
`num_input_tokens` / `num_output_tokens` (UINT32 or INT32), the usage counts.

The sampling parameters are the request's (schema.GenerateRequest.sampling) plus
max_tokens: the request's (`max_completion_tokens`, else `max_tokens`, for chat), else
`--default-max-tokens` (16, Triton's default).

The request goes to the core as every front end's does (LoadedModel.submit with a
response callback), on the server's event loop; `cancel()` cancels it in the core
(ModelManager.cancel), as a closed HTTP or gRPC stream does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from naiad.datatypes import deserialize_bytes, serialize_bytes
from naiad.errors import NaiadError
from naiad.openai.errors import CLIENT, SERVER, OpenAIError, client_error
from naiad.types import InferRequest, InputTensor

TEXT_INPUT = "text_input"
SAMPLING_INPUT = "sampling_parameters"
STREAM_INPUT = "stream"
ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")
COUNT_INPUTS = ("return_num_input_tokens", "return_num_output_tokens")
TEXT_OUTPUT = "text_output"
COUNT_OUTPUTS = ("num_input_tokens", "num_output_tokens")
DEFAULT_MAX_TOKENS = 16


@dataclass
class Convention:
    """The optional inputs a text model declares."""

    stream: bool
    echo_input: str | None
    counts: tuple


def convention_of(model) -> Convention | None:
    """The model's text convention, or None when it does not follow it."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    names = {entry.name for entry in config.input}
    if TEXT_INPUT not in names or SAMPLING_INPUT not in names:
        return None
    echo = next((n for n in ECHO_INPUTS if n in names), None)
    return Convention(STREAM_INPUT in names, echo, tuple(n for n in COUNT_INPUTS if n in names))


def require_convention(model, name: str) -> Convention:
    convention = convention_of(model)
    if convention is None:
        raise client_error(
            f"model '{name}' is not a text model: its config has no '{TEXT_INPUT}' and "
            f"'{SAMPLING_INPUT}' inputs (the convention is in docs/openai.md)",
            "model",
            "model_not_supported",
        )
    return convention


@dataclass
class Piece:
    """One response of the model, decoded."""

    text: str
    final: bool
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: OpenAIError | None = None


def _bool_input(name: str, value: bool) -> InputTensor:
    return InputTensor(name, "BOOL", [1], np.array([value], dtype=np.bool_).tobytes())


def _bytes_input(name: str, text: str) -> InputTensor:
    return InputTensor(
        name, "BYTES", [1], serialize_bytes(np.array([text.encode("utf-8")], dtype=object))
    )


def max_tokens_of(request, default_max_tokens: int) -> int:
    return request.max_tokens if request.max_tokens is not None else default_max_tokens


def build_request(
    name: str, convention: Convention, prompt: str, request, default_max_tokens: int
) -> InferRequest:
    """The core request for `request` (schema.GenerateRequest) with `prompt`."""
    sampling = dict(request.sampling)
    sampling["max_tokens"] = max_tokens_of(request, default_max_tokens)
    inputs = [
        _bytes_input(TEXT_INPUT, prompt),
        _bytes_input(SAMPLING_INPUT, orjson.dumps(sampling).decode()),
    ]
    if convention.stream:
        inputs.append(_bool_input(STREAM_INPUT, request.stream))
    elif request.stream:
        raise client_error(
            f"model '{name}' has no '{STREAM_INPUT}' input: it cannot stream", "stream"
        )
    if convention.echo_input is not None:
        # Chat never echoes; a completion echoes the prompt only when asked (Triton's).
        echo = bool(request.echo) if request.kind == "completion" else False
        inputs.append(_bool_input(convention.echo_input, not echo))
    for count in convention.counts:
        inputs.append(_bool_input(count, True))
    return InferRequest(name, "", "", inputs, None, {})


def _count(output) -> int | None:
    if output.datatype not in ("UINT32", "INT32", "UINT64", "INT64"):
        return None
    values = np.frombuffer(output.data, dtype=output.datatype.lower())
    return int(values[0]) if values.size else None


def decode_response(response) -> Piece:
    text = ""
    counts = {}
    for output in response.outputs:
        if output.name == TEXT_OUTPUT and output.datatype == "BYTES":
            values = deserialize_bytes(output.data)
            if len(values):
                first = values[0]
                text = first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
        elif output.name in COUNT_OUTPUTS:
            counts[output.name] = _count(output)
    return Piece(text, False, counts.get("num_input_tokens"), counts.get("num_output_tokens"))


def error_of(error) -> OpenAIError:
    """A core or model error as the answer's error (the status Triton's frontend gives:
    its engine's ServerError, 500, for what inference raises; 400 for a request the core
    refuses as invalid)."""
    if isinstance(error, NaiadError):
        status = CLIENT if error.http_status == 400 else SERVER
        return OpenAIError(status, error.message)
    return OpenAIError(SERVER, str(error))


class Generation:
    """One request in the core; each response goes to `on_piece` as a Piece, the last
    one with `final` set (an error ends it too)."""

    def __init__(self, manager, model, infer_request: InferRequest, on_piece):
        self.manager = manager
        self.on_piece = on_piece
        self.finished = False
        self.request_id = None
        try:
            self.request_id = model.submit(infer_request, on_response=self._on_response)
        except NaiadError as exc:
            raise error_of(exc) from None

    def _on_response(self, response, error, final: bool) -> None:
        if self.finished:
            return
        if error is not None:
            piece = Piece("", True, error=error_of(error))
        elif response is not None:
            piece = decode_response(response)
            piece.final = final
        else:
            piece = Piece("", final)
        if piece.final:
            self.finished = True
        self.on_piece(piece)

    def cancel(self) -> None:
        """The client went away: the core drops or flags the request."""
        if not self.finished and self.request_id is not None:
            self.finished = True
            self.manager.cancel(self.request_id)
