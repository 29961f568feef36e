"""`naiad serve` flags of the OpenAI-compatible frontend, with the names and meanings of
Triton's OpenAI frontend (its python/openai main.py) where it has them."""

from __future__ import annotations

from naiad.openai.engine import DEFAULT_MAX_TOKENS


def _max_tokens(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(text)
    return value


def add_arguments(serve) -> None:
    group = serve.add_argument_group("OpenAI-compatible frontend (docs/openai.md)")
    group.add_argument(
        "--openai-port",
        type=int,
        default=None,
        help="serve /v1/models, /v1/completions and /v1/chat/completions on this port "
        "(bound to --http-address); off when not given",
    )
    group.add_argument(
        "--tokenizer",
        default=None,
        help="a folder with tokenizer.json (and tokenizer_config.json for the chat "
        "template), or that file, used for every model; without it a model's own "
        "tokenizer/ folder is used. Local only: Naiad downloads nothing",
    )
    group.add_argument(
        "--chat-template",
        default=None,
        help="a Jinja chat template file used instead of the tokenizer's",
    )
    group.add_argument(
        "--default-max-tokens",
        type=_max_tokens,
        default=DEFAULT_MAX_TOKENS,
        help=f"max_tokens of a request that gives none (default {DEFAULT_MAX_TOKENS})",
    )
