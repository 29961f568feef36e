"""The OpenAI-compatible frontend: `/v1/models`, `/v1/completions` and
`/v1/chat/completions` in front of decoupled text models that follow Triton's vLLM model
convention (docs/openai.md). Started by `naiad serve --openai-port PORT` (server.py) on
the server's event loop, with Naiad's HTTP protocol layer (naiad/http/protocol.py).

- errors.py          OpenAI's error body and the status Triton's frontend gives
- schema.py          request bodies checked as Triton's frontend's schema checks them
- tokenizer.py       where a model's tokenizer is, and loading it (`tokenizers`)
- chat_template.py   messages into a prompt with the tokenizer's Jinja chat template
- engine.py          the model convention: the core request, the responses back
- streaming.py       the answers and Server-Sent Events chunks, as OpenAI writes them
- routes.py          the paths and their handlers
- server.py          the listening socket
"""
