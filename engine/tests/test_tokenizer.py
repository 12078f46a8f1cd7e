"""The tokenizer built from the GGUF's metadata: control tokens, known ids, lossless round trips, and the BPE
merges checked against a plain-Python reference of GPT-2's merge loop. Needs the real model file."""
from __future__ import annotations

import pytest

from kvt_engine.tokenizer import Tokenizer

TEXT = ("The tutorial's 3rd section (\"Control Flow\") covers if-statements, for-loops and range(10);\n"
        "    def f(x):  return x ** 2  # indented code\n\n\tTabs, naïve café, 日本語 and emoji 🙂 too.")


@pytest.fixture(scope="module")
def tok(smollm2) -> Tokenizer:
    return Tokenizer(smollm2.tokenizer)


def _reference_bpe(word: str, ranks: dict[tuple[str, str], int]) -> list[str]:
    parts = list(word)
    while len(parts) > 1:
        pairs = [(ranks.get((a, b), 1 << 30), i) for i, (a, b) in enumerate(zip(parts, parts[1:]))]
        best, _ = min(pairs)
        if best == 1 << 30:
            break
        a, b = next((parts[i], parts[i + 1]) for r, i in pairs if r == best)
        merged, i = [], 0
        while i < len(parts):
            if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                merged.append(a + b)
                i += 2
            else:
                merged.append(parts[i])
                i += 1
        parts = merged
    return parts


def test_control_tokens_are_single_ids_and_match_the_metadata(tok, smollm2):
    assert tok.bos_id == 1 and tok.eos_id == 2
    assert tok.encode("<|im_start|>user\nHi<|im_end|>") == [1, 4093, 198, 26843, 2]
    assert tok.token(0) == "<|endoftext|>"


def test_known_words_and_single_digits(tok):
    # SmolLM2 splits numbers into single digits ("\p{N}" pre-split, llama.cpp's 'smollm' pre-tokenizer).
    ids = tok.encode("Hello, world! 2024")
    assert [tok.token(i) for i in ids] == ["Hello", ",", "Ġworld", "!", "Ġ", "2", "0", "2", "4"]
    assert ids[0] == 19556


def test_decode_inverts_encode(tok):
    assert tok.decode(tok.encode(TEXT)) == TEXT


def test_merges_match_a_plain_python_bpe(tok, smollm2):
    data = smollm2.tokenizer
    ranks = {tuple(m.split(" ", 1)): i for i, m in enumerate(data.merges)}
    vocab = {t: i for i, t in enumerate(data.tokens)}
    want: list[int] = []
    for word, _ in tok._tk.pre_tokenizer.pre_tokenize_str(TEXT):
        want.extend(vocab[p] for p in _reference_bpe(word, ranks))
    assert tok.encode(TEXT) == want


def test_chat_prompt_uses_the_chatml_markers(tok):
    ids = tok.encode(tok.chat_prompt("Hi"))
    assert ids[0] == 1 and ids.count(2) == 2 and tok.decode(ids).endswith("<|im_start|>assistant\n")
