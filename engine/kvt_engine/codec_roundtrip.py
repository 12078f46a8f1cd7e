"""kvt's codec on a dense KV file, as a transfer between two kvtd would code it: `kvtctl codec roundtrip --scheme
lynx` paged and chunked as the daemons plan the request (docs/DAEMON.md), writing the anchor (stage 0) and full
decodes beside `prefix`. Used for the anchor-KV perplexity (runner.py) and the draft study (draft_study.py)."""
from __future__ import annotations

import math
import subprocess

LYNX_CHUNK_TOKENS = 16  # lynx's own chunk (docs/CODEC.md, version 4)


def kvtd_chunk_tokens(device: str, block_tokens: int) -> int:
    """The chunk kvtd codes a request of this engine with: lynx's own on host memory; on a GPU region widened to
    its least common multiple with the engine block."""
    return math.lcm(LYNX_CHUNK_TOKENS, block_tokens) if device.startswith("cuda") else LYNX_CHUNK_TOKENS


def roundtrip(kvtctl: str, src: str, prefix: str, page_tokens: str, chunk_tokens: int) -> tuple[str, str]:
    """Codes `src` (a .npy of dense KV) and returns the paths of its anchor and full decodes; RuntimeError with
    kvtctl's message if it fails."""
    cmd = [kvtctl, "codec", "roundtrip", "--scheme", "lynx", "--page-tokens", page_tokens, "--chunk-tokens",
           str(chunk_tokens), "--in", src, "--out-prefix", prefix]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return f"{prefix}.stage0.npy", f"{prefix}.full.npy"
