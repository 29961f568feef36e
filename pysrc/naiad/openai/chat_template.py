"""Chat messages into one prompt with the tokenizer's Jinja chat template, rendered as
Hugging Face's apply_chat_template renders it (a sandboxed environment, trim_blocks
and lstrip_blocks, `raise_exception`, the bos/eos tokens, add_generation_prompt)."""

from __future__ import annotations

from functools import lru_cache

from naiad.openai.errors import SERVER, OpenAIError, client_error


class TemplateRefusal(Exception):
    pass


def _raise(message):
    raise TemplateRefusal(message)


@lru_cache(maxsize=16)
def _compiled(source: str):
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise OpenAIError(
            SERVER, "the chat template needs jinja2: pip install 'naiad[openai]'"
        ) from None
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise
    return environment.from_string(source)


def render(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> str:
    """The prompt of `messages`; OpenAIError 500 when the tokenizer has no template
    (Triton's 'Unknown tokenizer' when there is no tokenizer at all), 400 when the
    template refuses the conversation (raise_exception)."""
    if tokenizer is None:
        raise OpenAIError(SERVER, "Unknown tokenizer")
    if not tokenizer.chat_template:
        raise OpenAIError(
            SERVER,
            f"the tokenizer '{tokenizer.location}' has no chat template "
            "(tokenizer_config.json's chat_template, or --chat-template)",
        )
    template = _compiled(tokenizer.chat_template)
    try:
        return template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=tokenizer.bos_token,
            eos_token=tokenizer.eos_token,
        )
    except TemplateRefusal as exc:
        raise client_error(f"the chat template refused the messages: {exc}", "messages") from None
    except Exception as exc:  # a template bug: jinja2's own error
        raise OpenAIError(SERVER, f"the chat template failed: {exc}") from None
