"""tiny_llm: a decoupled text model with the interface of Triton's vLLM backend.

Inputs: `text_input` (the prompt), `stream` (one response per new piece of text, else
one response with the whole text), `sampling_parameters` (a JSON object as vLLM's
SamplingParams takes it), `exclude_input_in_output` (non-streaming only: without it the
prompt is prepended, as vLLM does), `return_num_input_tokens` /
`return_num_output_tokens` (the token counts as outputs, for the usage of the
OpenAI-compatible frontend). Outputs: `text_output`, `num_input_tokens`,
`num_output_tokens` (in streaming mode, the tokens of that response).

The "weights" are a trigram table counted at load time from corpus.txt, tokenized with
the byte-level BPE in tokenizer/ (build_tokenizer.py makes it from the same corpus).
The next token is drawn from the counts of what followed the last two tokens (else the
last one, else the start of a paragraph): temperature 0 takes the most frequent (the
lowest id among equals), so the output is deterministic; a higher temperature flattens
the counts (count ** (1 / temperature)) and top_p keeps the smallest set of likeliest
tokens whose probability reaches it; `seed` makes a sampled answer repeatable.

Sampling parameters honoured: max_tokens (default 16, as vLLM), temperature (1.0),
top_p (1.0), stop (a string or a list: generation ends before the first one and it is
not included), seed, ignore_eos, min_tokens. n, best_of, presence_penalty,
frequency_penalty and repetition_penalty are accepted at their neutral values only;
any other key is an error naming it.

One generation thread steps every active request a token at a time (as a continuous
batcher would), so that execute() returns at once and concurrent streams progress
together. A request whose client went away (request.is_cancelled()) stops generating
and is logged.
"""

import json
import threading
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

try:
    from tokenizers import Tokenizer
except ImportError:  # the load fails with what to install, not a bare traceback
    raise ImportError(
        "tiny_llm needs the tokenizers package: pip install 'naiad[openai]'"
    ) from None

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
EOS = "<|endoftext|>"
DEFAULTS = {
    "max_tokens": 16,
    "temperature": 1.0,
    "top_p": 1.0,
    "stop": [],
    "seed": None,
    "ignore_eos": False,
    "min_tokens": 0,
}
# Accepted at these values only: the frontend sends them with their defaults.
NEUTRAL = {
    "n": 1,
    "best_of": 1,
    "presence_penalty": 0,
    "frequency_penalty": 0,
    "repetition_penalty": 1,
}


class TrigramModel:
    """Next-token counts of a corpus: after two tokens, after one, at a paragraph start."""

    def __init__(self, tokenizer: Tokenizer, corpus: str):
        self.eos = tokenizer.token_to_id(EOS)
        ids = []
        for paragraph in corpus.split("\n"):
            if paragraph.strip():
                ids += tokenizer.encode(paragraph).ids + [self.eos]
        self.after_two = defaultdict(Counter)
        self.after_one = defaultdict(Counter)
        previous = (self.eos, self.eos)
        for token in ids:
            self.after_two[previous][token] += 1
            self.after_one[previous[1]][token] += 1
            previous = (previous[1], token)
        self.start = self.after_one[self.eos]
        # Tables as arrays once, for the sampler: (candidate ids, counts).
        self._tables = {}

    def candidates(self, context: list[int]) -> tuple[np.ndarray, np.ndarray]:
        key = tuple(context[-2:])
        if len(key) == 2 and key in self.after_two:
            counts = self.after_two[key]
        elif key and key[-1] in self.after_one:
            counts = self.after_one[key[-1]]
        else:
            key = ()
            counts = self.start
        table = self._tables.get(key)
        if table is None:
            ids = np.array(sorted(counts), dtype=np.int64)
            table = (ids, np.array([counts[i] for i in ids], dtype=np.float64))
            self._tables[key] = table
        return table

    def next_token(self, context, temperature, top_p, rng, banned=None) -> int:
        ids, counts = self.candidates(context)
        if banned is not None:
            keep = ids != banned
            if not keep.any():  # only the end could follow: go on as after it
                ids, counts = self.candidates([])
                keep = ids != banned
            ids, counts = ids[keep], counts[keep]
        if temperature == 0:
            return int(ids[int(np.argmax(counts))])  # argmax: the first (lowest id) of equals
        weights = counts ** (1.0 / temperature)
        probabilities = weights / weights.sum()
        if top_p < 1.0:
            order = np.argsort(-probabilities, kind="stable")
            cumulative = np.cumsum(probabilities[order])
            kept = order[: int(np.searchsorted(cumulative, top_p) + 1)]
            ids, probabilities = ids[kept], probabilities[kept] / probabilities[kept].sum()
        return int(ids[rng.choice(len(ids), p=probabilities)])


def sampling_settings(text: str) -> dict:
    """The settings a `sampling_parameters` JSON asks for; ValueError naming what is wrong."""
    asked = json.loads(text) if text else {}
    if not isinstance(asked, dict):
        raise ValueError("sampling_parameters must be a JSON object")
    settings = dict(DEFAULTS)
    for key, value in asked.items():
        if key in NEUTRAL:
            if value is not None and value != NEUTRAL[key]:
                raise ValueError(
                    f"tiny_llm does not implement sampling parameter '{key}' "
                    f"(only {NEUTRAL[key]}), got {value!r}"
                )
        elif key in DEFAULTS:
            settings[key] = DEFAULTS[key] if value is None else value
        else:
            raise ValueError(f"tiny_llm has no sampling parameter '{key}'")
    stop = settings["stop"]
    settings["stop"] = [stop] if isinstance(stop, str) else [s for s in stop if s]
    if settings["max_tokens"] < 0:
        raise ValueError(f"max_tokens must be at least 0, got {settings['max_tokens']}")
    if not 0 <= settings["temperature"]:
        raise ValueError(f"temperature must be non-negative, got {settings['temperature']}")
    if not 0 < settings["top_p"] <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {settings['top_p']}")
    return settings


class Generation:
    """One request being answered."""

    def __init__(self, request, prompt: str, flags: dict, settings: dict, model):
        self.request = request
        self.sender = request.get_response_sender()
        self.prompt = prompt
        self.stream = flags["stream"]
        self.prepend = not flags["exclude_input_in_output"] and not self.stream
        self.counts = flags["return_num_input_tokens"] or flags["return_num_output_tokens"]
        self.settings = settings
        self.rng = np.random.default_rng(settings["seed"])
        self.prompt_ids = model.tokenizer.encode(prompt).ids
        self.context = list(self.prompt_ids)
        self.generated: list[int] = []
        self.text = ""  # decoded so far (stop strings cut off)
        self.sent = 0  # characters of `text` already sent (streaming)
        self.tokens_sent = 0
        self.done = False
        # Streaming holds back the last characters that may begin a stop string.
        self.hold = max((len(s) for s in settings["stop"]), default=1) - 1


class TritonPythonModel:
    def initialize(self, args):
        folder = Path(args["model_repository"])
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer" / "tokenizer.json"))
        self.model = TrigramModel(self.tokenizer, (folder / "corpus.txt").read_text())
        self.model.tokenizer = self.tokenizer
        self.logger = pb_utils.Logger
        self.active: list[Generation] = []
        self.lock = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._generate, name="tiny_llm", daemon=True)
        self.thread.start()

    def execute(self, requests):
        for request in requests:
            try:
                generation = self._parse(request)
            except (ValueError, TypeError) as exc:
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))), flags=FINAL
                )
                continue
            with self.lock:
                self.active.append(generation)
                self.lock.notify()
        return None

    def _parse(self, request) -> Generation:
        prompt = _scalar(request, "text_input", b"")
        prompt = prompt.decode("utf-8") if isinstance(prompt, bytes) else str(prompt)
        flags = {
            name: bool(_scalar(request, name, False))
            for name in (
                "stream",
                "exclude_input_in_output",
                "return_num_input_tokens",
                "return_num_output_tokens",
            )
        }
        parameters = _scalar(request, "sampling_parameters", b"")
        if isinstance(parameters, bytes):
            parameters = parameters.decode("utf-8")
        return Generation(request, prompt, flags, sampling_settings(parameters), self.model)

    def _generate(self):
        while True:
            with self.lock:
                while not self.active and not self.stopping:
                    self.lock.wait()
                if self.stopping:
                    return
                batch = list(self.active)
            for generation in batch:
                try:
                    self._step(generation)
                except Exception as exc:  # a bug must answer the request, not end the thread
                    generation.done = True
                    generation.sender.send(
                        pb_utils.InferenceResponse(error=pb_utils.TritonError(repr(exc))),
                        flags=FINAL,
                    )
            with self.lock:
                self.active = [g for g in self.active if not g.done]

    def _step(self, g: Generation):
        """One token of `g`, and its response when there is text to send."""
        if g.request.is_cancelled():
            g.done = True
            self.logger.log_info(
                f"tiny_llm: request cancelled after {len(g.generated)} of "
                f"{g.settings['max_tokens']} tokens"
            )
            g.sender.send(flags=FINAL)
            return
        settings = g.settings
        finished = len(g.generated) >= settings["max_tokens"]
        if not finished:
            banned = None
            if settings["ignore_eos"] or len(g.generated) < settings["min_tokens"]:
                banned = self.model.eos
            token = self.model.next_token(
                g.context, settings["temperature"], settings["top_p"], g.rng, banned
            )
            if token == self.model.eos:
                finished = True
            else:
                g.generated.append(token)
                g.context.append(token)
                g.text = self.tokenizer.decode(g.generated)
                for stop in settings["stop"]:
                    at = g.text.find(stop)
                    if at >= 0:
                        g.text = g.text[:at]
                        finished = True
                finished = finished or len(g.generated) >= settings["max_tokens"]
        if finished:
            g.done = True
            if g.stream:
                self._send(g, g.text[g.sent :], len(g.generated) - g.tokens_sent, FINAL)
            else:
                text = g.prompt + g.text if g.prepend else g.text
                self._send(g, text, len(g.generated), FINAL)
            return
        if g.stream:
            # A byte-level token may end inside a UTF-8 character: wait for the rest.
            ready = len(g.text) - g.hold
            if ready > g.sent and not g.text[:ready].endswith("\ufffd"):
                self._send(g, g.text[g.sent : ready], len(g.generated) - g.tokens_sent, 0)
                g.sent = ready
                g.tokens_sent = len(g.generated)

    def _send(self, g: Generation, text: str, tokens: int, flags: int):
        outputs = [pb_utils.Tensor("text_output", np.array([text.encode("utf-8")], dtype=object))]
        if g.counts:
            outputs.append(
                pb_utils.Tensor("num_input_tokens", np.array([len(g.prompt_ids)], np.uint32))
            )
            outputs.append(pb_utils.Tensor("num_output_tokens", np.array([tokens], np.uint32)))
        g.sender.send(pb_utils.InferenceResponse(output_tensors=outputs), flags=flags)

    def finalize(self):
        with self.lock:
            self.stopping = True
            self.lock.notify()
        self.thread.join()


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]
