"""The model's byte-level BPE tokenizer, built with the `tokenizers` package from a GGUF's `tokenizer.ggml.*`
metadata (no tokenizer.json needed). Thread-safe after construction.

    tok = Tokenizer.from_gguf_data(model.tokenizer)
    ids = tok.encode("Hello, world")
    text = tok.decode(ids)
"""
from __future__ import annotations

from typing import Sequence

from kvt_engine.gguf_loader import TokenizerData

# llama.cpp's pre-tokenizer names whose regexes are "\p{N}" (single digits) followed by GPT-2's split
# (llama-vocab.cpp: STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA).
_DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
# ... and those that use GPT-2's split alone.
_GPT2 = {"gpt2", "mpt", "olmo", "jais", "default"}

_CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
_USER_DEFINED = 4


class Tokenizer:
    """Byte-level BPE: `encode` never adds BOS/EOS (the GGUF says add_bos_token = False for SmolLM2); control
    tokens written in the text ("<|im_start|>") become their single ids."""

    def __init__(self, data: TokenizerData) -> None:
        from tokenizers import AddedToken, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as HfTokenizer

        if data.model != "gpt2":
            raise ValueError(f"tokenizer model {data.model!r} is not byte-level BPE ('gpt2')")
        if data.pre in _DIGITS_THEN_GPT2:
            pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                           pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
        elif data.pre in _GPT2:
            pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            raise ValueError(f"pre-tokenizer {data.pre!r} not implemented (known: "
                             f"{sorted(_DIGITS_THEN_GPT2 | _GPT2)})")
        vocab = {t: i for i, t in enumerate(data.tokens)}
        if len(vocab) != len(data.tokens):
            raise ValueError("tokenizer.ggml.tokens holds duplicates")
        merges = [tuple(m.split(" ", 1)) for m in data.merges]
        self._tk = HfTokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
        self._tk.pre_tokenizer = pre
        self._tk.decoder = decoders.ByteLevel()
        specials = [t for t, ty in zip(data.tokens, data.token_types) if ty in (_CONTROL, _USER_DEFINED)]
        self._tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
        self.vocab_size = len(data.tokens)
        self.bos_id = data.bos_id
        self.eos_id = data.eos_id
        self.chat_template = data.chat_template
        self._tokens = data.tokens

    @classmethod
    def from_gguf_data(cls, data: TokenizerData) -> "Tokenizer":
        return cls(data)

    def encode(self, text: str) -> list[int]:
        return self._tk.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return self._tk.decode(list(ids), skip_special_tokens=skip_special)

    def token(self, token_id: int) -> str:
        """The vocabulary entry (byte-level form, e.g. 'Ġthe')."""
        return self._tokens[token_id]

    def chat_prompt(self, user: str, system: str | None = None) -> str:
        """SmolLM2's ChatML form (the GGUF's chat_template), ending with the assistant turn's header."""
        sys = system or "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
        return (f"<|im_start|>system\n{sys}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                f"<|im_start|>assistant\n")
