"""Request bodies of /v1/completions and /v1/chat/completions, checked as Triton's
OpenAI frontend checks them: first its schema (OpenAI's published one: types, ranges,
required fields, no unknown field; refused with 422), then what its engine does not
support (refused with 400, its messages). One table of fields per endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from naiad.openai.errors import client_error, schema_error

_INT64 = (-(1 << 63), (1 << 63) - 1)


def _bool(name, value):
    if type(value) is not bool:
        raise schema_error(f"'{name}' must be a boolean, got {value!r}", name)


def _number(low=None, high=None, integer=False):
    def check(name, value):
        kinds = (int,) if integer else (int, float)
        if type(value) is bool or not isinstance(value, kinds):
            kind = "an integer" if integer else "a number"
            raise schema_error(f"'{name}' must be {kind}, got {value!r}", name)
        if (low is not None and value < low) or (high is not None and value > high):
            if high is None:
                bound = f"greater than or equal to {low}"
            elif low is None:
                bound = f"less than or equal to {high}"
            else:
                bound = f"between {low} and {high}"
            raise schema_error(f"'{name}' must be {bound}, got {value!r}", name)

    return check


def _string(name, value):
    if not isinstance(value, str):
        raise schema_error(f"'{name}' must be a string, got {value!r}", name)


def _stop(name, value):
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise schema_error(f"'{name}' must be a string or a list of strings, got {value!r}", name)


def _object(name, value):
    if not isinstance(value, dict):
        raise schema_error(f"'{name}' must be an object, got {value!r}", name)


def _list(name, value):
    if not isinstance(value, list):
        raise schema_error(f"'{name}' must be a list, got {value!r}", name)


def _stream_options(name, value):
    _object(name, value)
    for key, item in value.items():
        if key != "include_usage":
            raise schema_error(f"'{name}.{key}' is not a known field", f"{name}.{key}")
        if item is not None:
            _bool(f"{name}.include_usage", item)


def _prompt(name, value):
    if isinstance(value, str):
        return
    ok = isinstance(value, list) and (
        all(isinstance(p, str) for p in value)
        or all(type(p) is int for p in value)
        or all(isinstance(p, list) and all(type(t) is int for t in p) for p in value)
    )
    if not ok:
        raise schema_error(
            f"'{name}' must be a string, a list of strings or a list of token ids", name
        )


def _anything(name, value):
    pass


_MODEL = {"model": _string}
_SAMPLING = {
    "frequency_penalty": _number(-2.0, 2.0),
    "ignore_eos": _bool,
    "logit_bias": _object,
    "max_tokens": _number(0, integer=True),
    "min_tokens": _number(0, integer=True),
    "n": _number(1, 128, integer=True),
    "presence_penalty": _number(-2.0, 2.0),
    "seed": _number(*_INT64, integer=True),
    "stop": _stop,
    "stream": _bool,
    "stream_options": _stream_options,
    "top_p": _number(0.0, 1.0),
    "temperature": _number(0.0, 2.0),
    "user": _string,
}
COMPLETION_FIELDS = {
    **_MODEL,
    "prompt": _prompt,
    "best_of": _number(0, 20, integer=True),
    "echo": _bool,
    "logprobs": _number(0, 5, integer=True),
    "suffix": _string,
    **_SAMPLING,
}
CHAT_FIELDS = {
    **_MODEL,
    "messages": _list,
    "logprobs": _bool,
    "top_logprobs": _number(0, 20, integer=True),
    "max_completion_tokens": _number(0, integer=True),
    "response_format": _object,
    "tools": _list,
    "tool_choice": _anything,
    "function_call": _anything,
    "functions": _list,
    **_SAMPLING,
}
# OpenAI's defaults where they differ between the endpoints (Triton's schema has them).
_DEFAULT_TEMPERATURE = {"completion": 1.0, "chat": 0.7}
_ROLES = ("system", "user", "assistant", "tool", "function")


@dataclass
class GenerateRequest:
    """What either endpoint asks the model for."""

    kind: str  # "completion" or "chat"
    model: str
    prompt: str = ""  # a completion's; a chat's is rendered from `messages`
    messages: list = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    echo: bool | None = None
    max_tokens: int | None = None
    # The sampling parameters the model gets, as Triton's frontend sends them for a vLLM
    # model: the request's sampling fields with OpenAI's defaults (max_tokens added
    # by the engine).
    sampling: dict = field(default_factory=dict)


def parse_body(body) -> dict:
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError as exc:
        raise schema_error(f"the body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise schema_error("the body must be a JSON object")
    return doc


def _check_fields(doc: dict, fields: dict, required: tuple) -> None:
    for name in required:
        if name not in doc:
            raise schema_error(f"'{name}' is a required field", name)
    for name, value in doc.items():
        check = fields.get(name)
        if check is None:
            raise schema_error(f"'{name}' is not a known field (extra fields are forbidden)", name)
        if value is not None:
            check(name, value)


def _sampling(doc: dict, kind: str) -> dict:
    sampling = {
        "frequency_penalty": 0,
        "n": 1,
        "presence_penalty": 0,
        "temperature": _DEFAULT_TEMPERATURE[kind],
        "top_p": 1,
    }
    for name in ("frequency_penalty", "ignore_eos", "min_tokens", "n", "presence_penalty"):
        if doc.get(name) is not None:
            sampling[name] = doc[name]
    for name in ("seed", "stop", "temperature", "top_p"):
        if doc.get(name) is not None:
            sampling[name] = doc[name]
    return sampling


def _common_refusals(doc: dict) -> None:
    """What Triton's engine refuses for both endpoints (400, its messages)."""
    n = doc.get("n")
    if n is not None and n > 1:
        raise client_error(
            f"Received n={n}, but only single choice (n=1) is currently supported", "n"
        )
    if doc.get("logit_bias") is not None:
        raise client_error("logit bias is not supported", "logit_bias")
    if doc.get("stream_options") is not None and not doc.get("stream"):
        raise client_error(
            "`stream_options` can only be used when `stream` is True", "stream_options"
        )


def _include_usage(doc: dict) -> bool:
    options = doc.get("stream_options") or {}
    return bool(options.get("include_usage"))


def completion_request(body) -> GenerateRequest:
    doc = parse_body(body)
    _check_fields(doc, COMPLETION_FIELDS, ("model", "prompt"))
    if doc.get("suffix") is not None:
        raise client_error("suffix is not currently supported", "suffix")
    prompt = doc["prompt"]
    if not prompt:
        raise client_error("prompt must be non-empty", "prompt")
    if not isinstance(prompt, str):
        raise client_error("only single string input is supported", "prompt")
    best_of = doc.get("best_of")
    if best_of is not None and best_of > 1:
        raise client_error(
            f"Received best_of={best_of}, but only single choice (best_of=1) is currently "
            "supported",
            "best_of",
        )
    _common_refusals(doc)
    if doc.get("logprobs") is not None and doc["logprobs"] > 0:
        raise client_error("logprobs are not supported by Naiad's OpenAI frontend", "logprobs")
    return GenerateRequest(
        kind="completion",
        model=doc["model"],
        prompt=prompt,
        stream=bool(doc.get("stream")),
        include_usage=_include_usage(doc),
        echo=doc.get("echo"),
        max_tokens=doc.get("max_tokens"),
        sampling=_sampling(doc, "completion"),
    )


def chat_request(body) -> GenerateRequest:
    doc = parse_body(body)
    _check_fields(doc, CHAT_FIELDS, ("model", "messages"))
    messages = [_message(i, m) for i, m in enumerate(doc["messages"])]
    if not messages:
        raise schema_error("'messages' must have at least 1 item", "messages")
    _common_refusals(doc)
    if doc.get("logprobs") or doc.get("top_logprobs") is not None:
        raise client_error("logprobs are not supported by Naiad's OpenAI frontend", "logprobs")
    # Triton's needs --tool-call-parser for tools; Naiad has no tool calling at all.
    if doc.get("tools") or doc.get("tool_choice") not in (None, "none"):
        raise client_error("tool calling is not supported by Naiad's OpenAI frontend", "tools")
    max_tokens = doc.get("max_completion_tokens")
    if max_tokens is None:
        max_tokens = doc.get("max_tokens")  # deprecated by OpenAI, still read
    return GenerateRequest(
        kind="chat",
        model=doc["model"],
        messages=messages,
        stream=bool(doc.get("stream")),
        include_usage=_include_usage(doc),
        max_tokens=max_tokens,
        sampling=_sampling(doc, "chat"),
    )


def _message(index: int, message) -> dict:
    """A chat message as the template gets it: role and text content (text parts joined,
    as Triton's frontend joins them)."""
    where = f"messages[{index}]"
    if not isinstance(message, dict):
        raise schema_error(f"'{where}' must be an object", where)
    role = message.get("role")
    if role not in _ROLES:
        raise schema_error(
            f"'{where}.role' must be one of {', '.join(_ROLES)}, got {role!r}", where
        )
    content = message.get("content")
    if content is None:
        if role in ("system", "user", "tool"):
            raise schema_error(f"'{where}.content' is a required field", f"{where}.content")
        content = ""
    elif isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "image_url"):
                raise schema_error(
                    f"'{where}.content' parts must be text or image_url objects", where
                )
            if part["type"] != "text":
                raise client_error(
                    "only text content is supported by Naiad's OpenAI frontend", where
                )
            if not isinstance(part.get("text"), str):
                raise schema_error(f"'{where}.content' text parts need a string 'text'", where)
            texts.append(part["text"])
        content = "\n".join(texts)
    elif not isinstance(content, str):
        raise schema_error(f"'{where}.content' must be a string or a list of parts", where)
    out = {"role": role, "content": content}
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    return out
