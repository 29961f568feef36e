"""The OpenAI-compatible frontend's listening socket: Naiad's HTTP/1.1 protocol layer
(naiad.http.protocol.HttpProtocol, as the metrics port uses it) on the server's event
loop, with the OpenAI router. Requests go to the core like every front end's."""

from __future__ import annotations

import asyncio

from naiad.http.protocol import HttpProtocol
from naiad.openai.engine import DEFAULT_MAX_TOKENS
from naiad.openai.routes import OpenAIRouter
from naiad.openai.tokenizer import Tokenizers

# A chat request with a long conversation is still far below this; larger bodies are
# refused (413) before they are read whole.
MAX_BODY_SIZE = 1 << 26  # Triton's OpenAI frontend's --http-max-input-size default


async def start_openai_server(
    manager,
    host: str,
    port: int,
    *,
    tokenizer: str | None = None,
    chat_template: str | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    reuse_port: bool = False,
) -> asyncio.Server:
    """Serve /v1/... for `manager` at http://host:port on the running loop. ValueError
    when `tokenizer` or `chat_template` name what cannot be read."""
    loop = asyncio.get_running_loop()
    router = OpenAIRouter(manager, Tokenizers(tokenizer, chat_template), default_max_tokens)

    def factory() -> HttpProtocol:
        return HttpProtocol(router, loop, max_body_size=MAX_BODY_SIZE)

    return await loop.create_server(
        factory, host, port, reuse_address=True, reuse_port=reuse_port or None
    )
