"""Where a model's tokenizer is, and loading it.

As Triton's OpenAI frontend, one `--tokenizer` serves every model: Triton's takes a
Hugging Face id or a local folder (transformers' AutoTokenizer); Naiad's takes a local
folder holding `tokenizer.json` (or that file itself), read with the `tokenizers`
package, and nothing is downloaded. Without the flag, a model's own `tokenizer/` folder
beside its config.pbtxt is used, if it has one (model_repository/tiny_llm/tokenizer/).
`tokenizer_config.json` in the same folder gives the chat template and the bos/eos
tokens, as in a Hugging Face tokenizer folder; `--chat-template FILE` overrides the
template.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

log = logging.getLogger("naiad.openai")

MODEL_TOKENIZER_FOLDER = "tokenizer"
MISSING_PACKAGE = "the tokenizer needs the tokenizers package: pip install 'naiad[openai]'"


class TextTokenizer:
    """A tokenizer and its chat settings."""

    def __init__(self, location: str | Path, chat_template: str | None = None):
        path = Path(location)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise ValueError(f"no tokenizer.json at '{location}'")
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ValueError(MISSING_PACKAGE) from None
        try:
            self.tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # the package's own parse errors
            raise ValueError(f"cannot read the tokenizer '{file}': {exc}") from None
        settings = {}
        config = file.parent / "tokenizer_config.json"
        if config.is_file():
            try:
                settings = json.loads(config.read_text())
            except ValueError as exc:
                raise ValueError(f"cannot read '{config}': {exc}") from None
        self.chat_template = chat_template or settings.get("chat_template")
        self.bos_token = _token_text(settings.get("bos_token"))
        self.eos_token = _token_text(settings.get("eos_token"))
        self.location = str(file)

    def count(self, text: str) -> int:
        """The number of tokens of `text` (no special tokens added)."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _token_text(token) -> str:
    # Hugging Face writes a token either as its text or as {"content": text, ...}.
    if isinstance(token, dict):
        return str(token.get("content", ""))
    return token or ""


class Tokenizers:
    """The tokenizer of each model: `--tokenizer` for all, else the model's own."""

    def __init__(self, tokenizer: str | None = None, chat_template_file: str | None = None):
        """Raises ValueError when the flags name what cannot be read (a start-up error)."""
        self.chat_template = None
        if chat_template_file:
            try:
                self.chat_template = Path(chat_template_file).read_text()
            except OSError as exc:
                raise ValueError(
                    f"cannot read --chat-template '{chat_template_file}': {exc}"
                ) from None
        self.shared = TextTokenizer(tokenizer, self.chat_template) if tokenizer else None
        self._by_folder: dict[str, TextTokenizer | None] = {}

    def for_model(self, model) -> TextTokenizer | None:
        if self.shared is not None:
            return self.shared
        folder = Path(getattr(model, "path", "")) / MODEL_TOKENIZER_FOLDER
        key = str(folder)
        if key not in self._by_folder:
            tokenizer = None
            if folder.is_dir():
                try:
                    tokenizer = TextTokenizer(folder, self.chat_template)
                except ValueError as exc:
                    log.warning("model '%s': tokenizer not used: %s", model.name, exc)
            self._by_folder[key] = tokenizer
        return self._by_folder[key]
