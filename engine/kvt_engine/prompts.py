"""Prompts of real English text: windows of the Python 3.11 documentation's reST sources (Debian's
python3.11-doc), each followed by held-out text from the same document for perplexity. Deterministic: the same
folder, tokenizer and sizes give the same prompts.

    prompts = make_prompts(tok, count=20, prompt_tokens=8192, heldout_tokens=256)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from kvt_engine.tokenizer import Tokenizer

DEBIAN_DOCS = Path("/usr/share/doc/python3.11/html/_sources")
# Prose first: release notes, the language reference, how-tos, FAQs, the tutorial; then the library reference.
FOLDERS = ("whatsnew", "reference", "howto", "faq", "tutorial", "library")


@dataclasses.dataclass(frozen=True)
class Prompt:
    name: str  # the document's path under the docs folder
    ids: list[int]  # prompt tokens (the prefill side gets all but the last; see generation.py)
    heldout: list[int]  # the text that follows in the document


def documents(root: Path = DEBIAN_DOCS) -> list[Path]:
    """Candidate documents in a fixed order: by folder preference, then by name."""
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no documentation folder (apt-get install python3.11-doc)")
    out = []
    for folder in FOLDERS:
        out.extend(sorted((root / folder).glob("*.rst.txt")))
    return out


def make_prompts(tok: Tokenizer, count: int, prompt_tokens: int, heldout_tokens: int,
                 root: Optional[Path] = None, skip: int = 0) -> list[Prompt]:
    """The first `count` documents (after `skip`) long enough for prompt + held-out tokens, each cut at its
    start. Raises ValueError when the folder has too few."""
    root = root or DEBIAN_DOCS
    need = prompt_tokens + heldout_tokens
    out: list[Prompt] = []
    seen = 0
    for path in documents(root):
        text = path.read_text(encoding="utf-8", errors="replace")
        if len(text) < need * 2:  # cheap filter: English reST runs ~4 characters a token
            continue
        ids = tok.encode(text)
        if len(ids) < need:
            continue
        seen += 1
        if seen <= skip:
            continue
        out.append(Prompt(name=str(path.relative_to(root)), ids=ids[:prompt_tokens],
                          heldout=ids[prompt_tokens:need]))
        if len(out) == count:
            return out
    raise ValueError(f"{root}: only {len(out)} documents hold {need} tokens, {count} wanted")
