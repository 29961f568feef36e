"""The answers of the completions endpoints, whole or as Server-Sent Events, in the
shapes of OpenAI's API reference (the members Triton's frontend writes: `logprobs`,
`system_fingerprint` and a streamed chunk's `usage` are null).

A stream is `data: <chunk JSON>` and a blank line per chunk, ending with
`data: [DONE]`. A chat stream opens with a chunk whose delta sets the role and has empty
content; the last chunk of a choice has its finish_reason; with
`stream_options.include_usage` a chunk with no choices and the usage comes before
[DONE]. An error after the stream began is a `data: {"error": {...}}` event, then [DONE].
"""

from __future__ import annotations

import time
import uuid

import orjson

SSE_HEADERS = b"Content-Type: text/event-stream; charset=utf-8\r\nCache-Control: no-cache\r\n"
DONE = b"data: [DONE]\n\n"

_OBJECTS = {
    "completion": ("text_completion", "text_completion", "cmpl-"),
    "chat": ("chat.completion", "chat.completion.chunk", "chatcmpl-"),
}


def event(doc) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


class Answer:
    """The answer of one request: its id, creation time and model, the text and counts
    gathered, and the documents OpenAI's API gives for them."""

    def __init__(self, kind: str, model: str, max_tokens: int):
        self.kind = kind
        self.model = model
        self.max_tokens = max_tokens
        whole, chunk, prefix = _OBJECTS[kind]
        self.object, self.chunk_object = whole, chunk
        self.id = prefix + uuid.uuid4().hex
        self.created = int(time.time())
        self.text_parts: list[str] = []
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None

    # -- counts ---------------------------------------------------------------------
    def add_counts(self, piece) -> None:
        """A response's counts: the prompt's once, the completion's summed (a streamed
        response counts its own tokens, as vLLM's does)."""
        if piece.input_tokens is not None and self.prompt_tokens is None:
            self.prompt_tokens = piece.input_tokens
        if piece.output_tokens is not None:
            self.completion_tokens = (self.completion_tokens or 0) + piece.output_tokens

    def fill_counts(self, tokenizer, prompt: str, generated: str) -> None:
        """Counts the model did not report, from the tokenizer."""
        if tokenizer is None:
            return
        if self.prompt_tokens is None:
            self.prompt_tokens = tokenizer.count(prompt)
        if self.completion_tokens is None:
            self.completion_tokens = tokenizer.count(generated)

    def usage(self):
        if self.prompt_tokens is None or self.completion_tokens is None:
            return None
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def finish_reason(self) -> str:
        """'length' when the completion used all of max_tokens, else 'stop' (the model
        ended it: its end token or a stop sequence)."""
        if self.completion_tokens is not None and self.completion_tokens >= self.max_tokens:
            return "length"
        return "stop"

    # -- whole answers --------------------------------------------------------------
    def whole(self, text: str) -> dict:
        if self.kind == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": self.finish_reason(),
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": self.finish_reason(),
            }
        return self._document(self.object, [choice], self.usage())

    # -- stream chunks ----------------------------------------------------------------
    def first_chunk(self) -> bytes | None:
        """A chat stream's opening chunk (the role); None for a completion stream."""
        if self.kind != "chat":
            return None
        return event(self._chunk({"role": "assistant", "content": ""}, None))

    def text_chunk(self, text: str, finish_reason: str | None) -> bytes:
        if self.kind == "chat":
            return event(self._chunk({"content": text} if text else {}, finish_reason))
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        return event(self._document(self.chunk_object, [choice], None))

    def usage_chunk(self) -> bytes | None:
        usage = self.usage()
        if usage is None:
            return None
        return event(self._document(self.chunk_object, [], usage))

    def _chunk(self, delta: dict, finish_reason: str | None) -> dict:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._document(self.chunk_object, [choice], None)

    def _document(self, obj: str, choices: list, usage) -> dict:
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": choices,
            "usage": usage,
        }
