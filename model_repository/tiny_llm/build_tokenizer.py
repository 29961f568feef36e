"""Builds tokenizer/tokenizer.json of tiny_llm from corpus.txt with the `tokenizers`
package: a byte-level BPE (GPT-2's scheme), so that any prompt encodes without unknown
tokens and decoding gives back the exact text. Run it again after editing corpus.txt:

    python model_repository/tiny_llm/build_tokenizer.py

tokenizer/tokenizer_config.json (the chat template, bos/eos tokens) is written by hand.
"""

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent
# The end of a paragraph, which the model may generate to finish; and the chat
# template's role markers, kept whole by the tokenizer.
SPECIAL_TOKENS = ["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
VOCAB_SIZE = 800


def build() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(HERE / "corpus.txt")], trainer)
    return tokenizer


if __name__ == "__main__":
    build().save(str(HERE / "tokenizer" / "tokenizer.json"))
