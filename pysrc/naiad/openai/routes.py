"""The OpenAI-compatible paths, as naiad.http.protocol.HttpProtocol calls a router:

    GET  /v1/models                the ready models (each once, by name)
    GET  /v1/models/{id}           one of them; 404 when it is not
    POST /v1/completions           a prompt
    POST /v1/chat/completions      messages, through the tokenizer's chat template

A handler returns a Reply, a coroutine of one (a whole answer: the request is cancelled
in the core when the connection closes first) or a StreamedReply (`stream: true`: its
on_abort cancels the request when the client goes away mid-stream).
"""

from __future__ import annotations

import asyncio
import logging
import time

import orjson

from naiad.errors import NaiadError
from naiad.http.routes import JSON, HttpRequest, Reply, StreamedReply
from naiad.openai import chat_template, schema
from naiad.openai.engine import (
    DEFAULT_MAX_TOKENS,
    Generation,
    build_request,
    max_tokens_of,
    require_convention,
)
from naiad.openai.errors import NOT_FOUND, SERVER, OpenAIError, client_error
from naiad.openai.streaming import DONE, SSE_HEADERS, Answer, event

log = logging.getLogger("naiad.openai")

OWNED_BY = "naiad"


def error_reply(error: OpenAIError) -> Reply:
    return Reply(error.status, JSON, (error.body(),))


class OpenAIRouter:
    def __init__(self, manager, tokenizers, default_max_tokens: int = DEFAULT_MAX_TOKENS):
        self.manager = manager
        self.tokenizers = tokenizers
        self.default_max_tokens = default_max_tokens
        self.started = int(time.time())
        self._created: dict[tuple, int] = {}  # (name, version) -> when first listed

    # HttpProtocol asks every POST whether the infer fast lane takes it: never here.
    def infer_fast(self, url, headers, body, new_on_done) -> bool:
        return False

    def dispatch(self, request: HttpRequest):
        path = request.path.rstrip("/")
        try:
            if path == "/v1/models":
                self._method(request, "GET")
                return self._json({"object": "list", "data": self._models()})
            if path.startswith("/v1/models/"):
                self._method(request, "GET")
                return self._json(self._model(path[len("/v1/models/") :]))
            if path == "/v1/completions":
                self._method(request, "POST")
                return self._generate(schema.completion_request(request.body))
            if path == "/v1/chat/completions":
                self._method(request, "POST")
                return self._generate(schema.chat_request(request.body))
            raise OpenAIError(NOT_FOUND, f"Not Found: {request.method} {request.path}")
        except OpenAIError as exc:
            return error_reply(exc)
        except Exception as exc:  # a bug answers in OpenAI's shape, and is logged
            log.exception("OpenAI frontend: %s %s", request.method, request.path)
            return error_reply(OpenAIError(SERVER, f"internal error: {exc}"))

    @staticmethod
    def _method(request: HttpRequest, method: str) -> None:
        if request.method != method:
            raise OpenAIError(405, f"Method Not Allowed: {request.method} {request.path}")

    @staticmethod
    def _json(doc) -> Reply:
        return Reply(200, JSON, (orjson.dumps(doc),))

    # -- models ---------------------------------------------------------------------
    def _ready_models(self) -> dict:
        """{name: the version served by default} of every ready model."""
        ready = {}
        for name in sorted(self.manager.models):
            try:
                ready[name] = self.manager.get(name)
            except NaiadError:
                continue  # no ready version
        return ready

    def _entry(self, name: str, model) -> dict:
        created = self._created.setdefault((name, model.version), int(time.time()))
        return {"id": name, "object": "model", "created": created, "owned_by": OWNED_BY}

    def _models(self) -> list:
        return [self._entry(name, model) for name, model in self._ready_models().items()]

    def _model(self, name: str) -> dict:
        model = self._ready_models().get(name)
        if model is None:
            raise OpenAIError(NOT_FOUND, f"Unknown model: {name}", "model", "model_not_found")
        return self._entry(name, model)

    # -- completions ----------------------------------------------------------------
    def _generate(self, request: schema.GenerateRequest):
        try:
            model = self.manager.get(request.model)
        except NaiadError:
            raise client_error(
                f"Unknown model: {request.model}", "model", "model_not_found"
            ) from None
        convention = require_convention(model, request.model)
        tokenizer = self.tokenizers.for_model(model)
        if request.kind == "chat":
            prompt = chat_template.render(tokenizer, request.messages)
        else:
            prompt = request.prompt
        infer_request = build_request(
            request.model, convention, prompt, request, self.default_max_tokens
        )
        answer = Answer(
            request.kind, request.model, max_tokens_of(request, self.default_max_tokens)
        )
        if request.stream:
            return self._stream(model, infer_request, answer, request, tokenizer, prompt)
        return self._whole(model, infer_request, answer, request, tokenizer, prompt)

    def _whole(self, model, infer_request, answer: Answer, request, tokenizer, prompt: str):
        done = asyncio.get_running_loop().create_future()

        def on_piece(piece) -> None:
            if piece.error is not None:
                if not done.done():
                    done.set_exception(piece.error)
                return
            answer.add_counts(piece)
            answer.text_parts.append(piece.text)
            if piece.final and not done.done():
                done.set_result(None)

        generation = Generation(self.manager, model, infer_request, on_piece)

        async def wait() -> Reply:
            try:
                await done
            except asyncio.CancelledError:  # the connection closed first
                generation.cancel()
                raise
            except OpenAIError as exc:
                return error_reply(exc)
            text = "".join(answer.text_parts)
            generated = text[len(prompt) :] if request.echo and text.startswith(prompt) else text
            answer.fill_counts(tokenizer, prompt, generated)
            return self._json(answer.whole(text))

        return wait()

    def _stream(self, model, infer_request, answer: Answer, request, tokenizer, prompt: str):
        holder = {}
        reply = StreamedReply(SSE_HEADERS, on_abort=lambda: holder["generation"].cancel())

        def on_piece(piece) -> None:
            if reply.ended:
                return  # the client is gone
            if piece.error is not None:
                reply.push(event(orjson.loads(piece.error.body())))
                reply.push(DONE)
                reply.end()
                return
            answer.add_counts(piece)
            answer.text_parts.append(piece.text)
            if not piece.final:
                if piece.text:
                    reply.push(answer.text_chunk(piece.text, None))
                return
            answer.fill_counts(tokenizer, prompt, "".join(answer.text_parts))
            reply.push(answer.text_chunk(piece.text, answer.finish_reason()))
            if request.include_usage:
                usage = answer.usage_chunk()
                if usage is not None:
                    reply.push(usage)
            reply.push(DONE)
            reply.end()

        holder["generation"] = Generation(self.manager, model, infer_request, on_piece)
        reply.start(200)
        first = answer.first_chunk()
        if first is not None:
            reply.push(first)
        return reply
