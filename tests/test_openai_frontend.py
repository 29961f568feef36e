"""The OpenAI-compatible frontend (naiad serve --openai-port, docs/openai.md) with the
official `openai` client (sync, async, streaming) and raw HTTP, against one real server
serving model_repository/tiny_llm (and add_sub, which is no text model).

The wire format is compared with the examples of OpenAI's API reference (the members of a
completion, a chat completion, their stream chunks and the error body); the token counts
with the tokenizer the model ships (tiny_llm/tokenizer/); cancellation with the model's
log line and statistics. One naiad.Server in this process checks the in-process option.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import openai
import pytest
import requests
from server_harness import EXAMPLE_MODELS, NaiadServer, free_port, make_repository

tokenizers = pytest.importorskip("tokenizers")
jinja2 = pytest.importorskip("jinja2")

MODEL = "tiny_llm"
TIMEOUT = 60
TOKENIZER_DIR = EXAMPLE_MODELS / MODEL / "tokenizer"

# The members of OpenAI's API reference examples (platform.openai.com/docs/api-reference:
# "The completion object", "The chat completion object", "The chat completion chunk
# object", the streamed completion, "The model object", "List models").
COMPLETION_KEYS = {"id", "object", "created", "model", "system_fingerprint", "choices", "usage"}
COMPLETION_CHOICE_KEYS = {"text", "index", "logprobs", "finish_reason"}
CHAT_CHOICE_KEYS = {"index", "message", "logprobs", "finish_reason"}
CHUNK_CHOICE_KEYS = {"index", "delta", "logprobs", "finish_reason"}
USAGE_KEYS = {"prompt_tokens", "completion_tokens", "total_tokens"}
MODEL_KEYS = {"id", "object", "created", "owned_by"}
ERROR_KEYS = {"message", "type", "param", "code"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = make_repository(
        tmp_path_factory.mktemp("openai") / "models",
        {MODEL: EXAMPLE_MODELS / MODEL, "add_sub": EXAMPLE_MODELS / "add_sub"},
    )
    naiad = NaiadServer(
        repository,
        log_dir=tmp_path_factory.mktemp("openai-logs"),
        extra_args=["--openai-port", str(free_port())],
        name="openai",
    )
    naiad.openai_port = int(naiad.extra_args[1])
    naiad.start(wait="ready", timeout=120)
    naiad.base = f"http://{naiad.host}:{naiad.openai_port}/v1"
    yield naiad
    naiad.stop()


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base, api_key="unused", max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizers.Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))


def _count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def _chat_prompt(messages) -> str:
    """The prompt Hugging Face's apply_chat_template makes of `messages` with the
    tokenizer's template (tokenizer_config.json)."""
    config = json.loads((TOKENIZER_DIR / "tokenizer_config.json").read_text())
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(config["chat_template"]).render(
        messages=messages, add_generation_prompt=True, bos_token="", eos_token=""
    )


def _complete(client, prompt, **kwargs):
    kwargs.setdefault("temperature", 0)
    return client.completions.create(model=MODEL, prompt=prompt, **kwargs)


def _streamed_text(client, prompt, **kwargs) -> str:
    kwargs.setdefault("temperature", 0)
    stream = client.completions.create(model=MODEL, prompt=prompt, stream=True, **kwargs)
    return "".join(chunk.choices[0].text for chunk in stream if chunk.choices)


# -- models -------------------------------------------------------------------------------


def test_models_list_and_retrieve(client):
    listed = client.models.list()
    ids = [m.id for m in listed.data]
    assert MODEL in ids and "add_sub" in ids and len(ids) == len(set(ids))
    model = client.models.retrieve(MODEL)
    assert (model.id, model.object) == (MODEL, "model")
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("no_such_model")
    assert caught.value.status_code == 404
    assert caught.value.body["message"] == "Unknown model: no_such_model"


def test_models_wire_format(server):
    listed = requests.get(f"{server.base}/models", timeout=TIMEOUT)
    assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
    body = listed.json()
    assert set(body) == {"object", "data"} and body["object"] == "list"
    for entry in body["data"]:
        assert set(entry) == MODEL_KEYS and entry["object"] == "model"
        assert isinstance(entry["created"], int)


# -- completions --------------------------------------------------------------------------


def test_greedy_completion_is_deterministic_with_usage_from_the_tokenizer(client, tokenizer):
    prompt = "The miller opens the gate"
    first = _complete(client, prompt, max_tokens=40)
    second = _complete(client, prompt, max_tokens=40)
    text = first.choices[0].text
    assert text and text == second.choices[0].text
    assert first.object == "text_completion" and first.model == MODEL
    assert first.id.startswith("cmpl-") and first.id != second.id
    usage = first.usage
    assert usage.prompt_tokens == _count(tokenizer, prompt)
    assert 0 < usage.completion_tokens <= 40
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # The same request streamed gives the same text, piece by piece.
    assert _streamed_text(client, prompt, max_tokens=40) == text


def test_max_tokens_bounds_the_completion_and_says_length(client):
    prompt = "The miller opens the gate"
    full = _complete(client, prompt, max_tokens=40)
    assert full.usage.completion_tokens > 2
    short = _complete(client, prompt, max_tokens=2)
    assert short.usage.completion_tokens == 2
    assert short.choices[0].finish_reason == "length"
    assert full.choices[0].text.startswith(short.choices[0].text)
    none = _complete(client, prompt, max_tokens=0)
    assert (none.choices[0].text, none.usage.completion_tokens) == ("", 0)


def test_default_max_tokens_is_tritons_16(client):
    answer = client.completions.create(
        model=MODEL, prompt="The river", temperature=1, seed=5, extra_body={"ignore_eos": True}
    )
    assert answer.usage.completion_tokens == 16


def test_ignore_eos_generates_max_tokens(client):
    # Greedy decoding of this prompt ends a sentence with the model's end token early.
    assert _complete(client, "The river", max_tokens=200).usage.completion_tokens < 200
    extended = _complete(client, "The river", max_tokens=200, extra_body={"ignore_eos": True})
    assert extended.usage.completion_tokens == 200
    assert extended.choices[0].finish_reason == "length"


def test_stop_sequence_ends_the_text_before_it(client):
    prompt = "The miller opens the gate"
    text = _complete(client, prompt, max_tokens=40).choices[0].text
    words = text.split()
    assert len(words) >= 3, text
    stop = " " + words[2]
    expected = text[: text.index(stop)]
    stopped = _complete(client, prompt, max_tokens=40, stop=[stop, "never appears"])
    assert stopped.choices[0].text == expected
    assert stopped.choices[0].finish_reason == "stop"
    assert _streamed_text(client, prompt, max_tokens=40, stop=stop) == expected


def test_sampling_with_a_seed_repeats_and_top_p_narrows_to_greedy(client):
    prompt = "The naiad"
    sampled = [
        _complete(client, prompt, max_tokens=30, temperature=1.5, seed=11).choices[0].text
        for _ in range(2)
    ]
    assert sampled[0] == sampled[1]
    greedy = _complete(client, prompt, max_tokens=30).choices[0].text
    # A nucleus this small keeps only the likeliest token: greedy decoding.
    narrowed = _complete(client, prompt, max_tokens=30, temperature=1.5, top_p=0.01, seed=3)
    assert narrowed.choices[0].text == greedy


def test_echo_prepends_the_prompt(client):
    prompt = "The river"
    plain = _complete(client, prompt, max_tokens=10).choices[0].text
    echoed = _complete(client, prompt, max_tokens=10, echo=True).choices[0].text
    assert echoed == prompt + plain


def test_completion_wire_format(server):
    answer = requests.post(
        f"{server.base}/completions",
        json={"model": MODEL, "prompt": "The river", "max_tokens": 5, "temperature": 0},
        timeout=TIMEOUT,
    )
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert set(body) == COMPLETION_KEYS and body["object"] == "text_completion"
    (choice,) = body["choices"]
    assert set(choice) == COMPLETION_CHOICE_KEYS and choice["index"] == 0
    assert set(body["usage"]) == USAGE_KEYS


def _sse_events(response) -> list:
    """The data of each event, checking the framing: `data: ...` lines each followed by a
    blank line, nothing else."""
    raw = b"".join(response.iter_content(chunk_size=None)).decode()
    assert raw.endswith("\n\n")
    events = raw[:-2].split("\n\n")
    assert all(event.startswith("data: ") and "\n" not in event for event in events), raw
    data = [event[len("data: ") :] for event in events]
    assert data[-1] == "[DONE]" and "[DONE]" not in data[:-1]
    return [json.loads(d) for d in data[:-1]]


def test_completion_stream_wire_format(server, tokenizer):
    prompt = "The river"
    with requests.post(
        f"{server.base}/completions",
        json={
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": 6,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        stream=True,
        timeout=TIMEOUT,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = _sse_events(response)
    *texts, usage = chunks
    assert len({c["id"] for c in chunks}) == 1
    for chunk in texts:
        assert set(chunk) == COMPLETION_KEYS and chunk["object"] == "text_completion"
        assert chunk["usage"] is None
        (choice,) = chunk["choices"]
        assert set(choice) == COMPLETION_CHOICE_KEYS
    assert [c["choices"][0]["finish_reason"] for c in texts][:-1] == [None] * (len(texts) - 1)
    assert texts[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert usage["choices"] == [] and set(usage["usage"]) == USAGE_KEYS
    assert usage["usage"]["prompt_tokens"] == _count(tokenizer, prompt)
    text = "".join(c["choices"][0]["text"] for c in texts)
    whole = requests.post(
        f"{server.base}/completions",
        json={"model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0},
        timeout=TIMEOUT,
    ).json()
    assert text == whole["choices"][0]["text"] and usage["usage"] == whole["usage"]


# -- chat ---------------------------------------------------------------------------------


MESSAGES = [
    {"role": "system", "content": "You answer about rivers."},
    {"role": "user", "content": "Where does the river start?"},
]


def test_chat_completion_with_the_chat_template(client, tokenizer):
    answer = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=20
    )
    assert answer.object == "chat.completion" and answer.id.startswith("chatcmpl-")
    (choice,) = answer.choices
    assert choice.message.role == "assistant" and choice.message.content
    assert answer.usage.prompt_tokens == _count(tokenizer, _chat_prompt(MESSAGES))
    # max_completion_tokens (OpenAI's newer name) bounds it as max_tokens does.
    short = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_completion_tokens=2
    )
    assert short.usage.completion_tokens == 2 and short.choices[0].finish_reason == "length"
    assert choice.message.content.startswith(short.choices[0].message.content)


def test_chat_stream_with_the_client(client):
    whole = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=20
    )
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        temperature=0,
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage == whole.usage


def test_chat_stream_wire_format(server):
    with requests.post(
        f"{server.base}/chat/completions",
        json={
            "model": MODEL,
            "messages": MESSAGES,
            "max_tokens": 5,
            "temperature": 0,
            "stream": True,
        },
        stream=True,
        timeout=TIMEOUT,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        chunks = _sse_events(response)
    assert len({c["id"] for c in chunks}) == 1
    for chunk in chunks:
        assert set(chunk) == COMPLETION_KEYS and chunk["object"] == "chat.completion.chunk"
        (choice,) = chunk["choices"]
        assert set(choice) == CHUNK_CHOICE_KEYS
    # OpenAI's streamed example: the role first with empty content, then content deltas,
    # then the finish_reason.
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(set(c["choices"][0]["delta"]) <= {"content"} for c in chunks[1:])
    reasons = [c["choices"][0]["finish_reason"] for c in chunks]
    assert reasons[:-1] == [None] * (len(chunks) - 1) and reasons[-1] in ("stop", "length")


def test_chat_wire_format(server):
    answer = requests.post(
        f"{server.base}/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "max_tokens": 5, "temperature": 0},
        timeout=TIMEOUT,
    )
    assert answer.status_code == 200
    body = answer.json()
    assert set(body) == COMPLETION_KEYS and body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert set(choice) == CHAT_CHOICE_KEYS
    assert set(choice["message"]) == {"role", "content"}


# -- async --------------------------------------------------------------------------------


def test_async_client_streams_concurrently(server, client):
    prompts = ["The river", "The naiad", "The server", "In winter"]
    expected = [_complete(client, p, max_tokens=25).choices[0].text for p in prompts]

    async def main():
        async with openai.AsyncOpenAI(
            base_url=server.base, api_key="unused", max_retries=0
        ) as aclient:

            async def one(prompt):
                stream = await aclient.completions.create(
                    model=MODEL, prompt=prompt, max_tokens=25, temperature=0, stream=True
                )
                return "".join([c.choices[0].text async for c in stream if c.choices])

            whole = await aclient.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=5, temperature=0
            )
            return await asyncio.gather(*(one(p) for p in prompts)), whole

    streamed, whole = asyncio.run(main())
    assert streamed == expected
    assert whole.choices[0].message.content


# -- errors -------------------------------------------------------------------------------


def _error_body(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == ERROR_KEYS, body
    return body["error"]


def test_unknown_model_is_400_in_openais_error_shape(client, server):
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="no_such_model", prompt="x")
    assert caught.value.status_code == 400
    assert caught.value.body["message"] == "Unknown model: no_such_model"
    assert caught.value.body["code"] == "model_not_found"
    raw = requests.post(
        f"{server.base}/chat/completions",
        json={"model": "no_such_model", "messages": MESSAGES},
        timeout=TIMEOUT,
    )
    assert raw.status_code == 400
    error = _error_body(raw)
    assert error["type"] == "invalid_request_error" and error["param"] == "model"


def test_bad_parameters_are_refused_as_tritons_frontend_refuses_them(client, server):
    # Out of the schema's range (Triton: FastAPI's 422).
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        _complete(client, "x", temperature=2.5)
    assert caught.value.status_code == 422 and caught.value.body["param"] == "temperature"
    with pytest.raises(openai.UnprocessableEntityError):
        _complete(client, "x", extra_body={"no_such_field": 1})
    # What Triton's engine does not support (400, its message).
    with pytest.raises(openai.BadRequestError) as caught:
        _complete(client, "x", n=2)
    assert (
        caught.value.body["message"]
        == "Received n=2, but only single choice (n=1) is currently supported"
    )
    with pytest.raises(openai.BadRequestError) as caught:
        _complete(client, "x", stream_options={"include_usage": True})
    assert "`stream_options` can only be used when `stream` is True" in caught.value.body["message"]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        )
    assert (
        caught.value.body["message"] == "tool calling is not supported by Naiad's OpenAI frontend"
    )
    # A model that is no text model.
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="add_sub", prompt="x")
    assert "'add_sub' is not a text model" in caught.value.body["message"]
    # Not JSON at all.
    raw = requests.post(f"{server.base}/completions", data=b"{not json", timeout=TIMEOUT)
    assert raw.status_code == 422 and _error_body(raw)["type"] == "invalid_request_error"
    missing = requests.post(f"{server.base}/completions", json={"model": MODEL}, timeout=TIMEOUT)
    assert missing.status_code == 422 and _error_body(missing)["param"] == "prompt"


def test_unknown_path_and_method(server):
    assert requests.get(f"{server.base}/embeddings", timeout=TIMEOUT).status_code == 404
    wrong = requests.get(f"{server.base}/completions", timeout=TIMEOUT)
    assert wrong.status_code == 405 and _error_body(wrong)["message"].startswith("Method")


# -- cancellation -------------------------------------------------------------------------


def _finished_requests(server) -> int:
    stats = requests.get(f"{server.url}/v2/models/{MODEL}/stats", timeout=TIMEOUT).json()
    inference = stats["model_stats"][0]["inference_stats"]
    return inference["success"]["count"] + inference["fail"]["count"]


def test_a_client_that_disconnects_mid_stream_cancels_the_request(server):
    before = _finished_requests(server)
    max_tokens = 1_000_000  # far more than the model makes before the client leaves
    body = json.dumps(
        {
            "model": MODEL,
            "prompt": "The river",
            "max_tokens": max_tokens,
            "temperature": 1,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    with socket.create_connection((server.host, server.openai_port), timeout=TIMEOUT) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        received = b""
        while b'"text"' not in received:  # the first generated piece
            received += sock.recv(4096)
    # The model sees request.is_cancelled(), logs it and ends the request: the statistics
    # count it as finished.
    while _finished_requests(server) == before:
        time.sleep(0.02)  # polls the statistics; orders nothing
    lines = [
        line for line in server.stderr_text().splitlines() if "tiny_llm: request cancelled" in line
    ]
    assert len(lines) == 1, server.stderr_text()[-3000:]
    generated = int(lines[0].split("cancelled after ")[1].split(" of ")[0])
    assert 0 < generated < max_tokens


# -- in-process ---------------------------------------------------------------------------


def test_in_process_server_serves_openai(tmp_path):
    import naiad

    repository = make_repository(tmp_path / "models", {MODEL: EXAMPLE_MODELS / MODEL})
    port = free_port()
    with naiad.Server(model_repository=str(repository), openai_port=port) as inprocess:
        assert inprocess.ready()
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0
        ) as c:
            assert [m.id for m in c.models.list().data] == [MODEL]
            answer = c.completions.create(model=MODEL, prompt="The river", max_tokens=3)
            assert answer.usage.completion_tokens <= 3


def test_a_tokenizer_flag_that_names_nothing_stops_the_start(tmp_path):
    import naiad
    from naiad.inprocess.errors import InvalidArgumentError

    repository = make_repository(tmp_path / "models", {MODEL: EXAMPLE_MODELS / MODEL})
    missing = tmp_path / "no_tokenizer"
    server = naiad.Server(
        model_repository=str(repository),
        openai_port=free_port(),
        extra_args=[f"--tokenizer={missing}"],
    )
    with pytest.raises(InvalidArgumentError, match=f"no tokenizer.json at '{missing}'"):
        server.start()
