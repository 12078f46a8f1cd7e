"""End to end through two real kvtd processes: a 512-token prompt of real text, 16 new tokens, lynx over a
link slow enough that the decode worker drafts on anchor KV before the residual lands. The progressive output
must equal, token for token, the same engine's output decoded afterwards from the same full-precision blocks.
Needs the real model and kvtd (both skipped with a message when absent)."""
from __future__ import annotations

import tempfile

from kvt_engine.runner import EngineRun, RunOptions


def test_progressive_lynx_output_equals_decoding_from_the_full_kv(real_model_path, kvtd_path):
    with tempfile.TemporaryDirectory(prefix="kvt-e2e-", dir="/tmp") as work:  # short unix socket paths
        result = EngineRun(RunOptions(
            model_path=str(real_model_path), device="cpu", prompt_tokens=512, new_tokens=16, schemes=("lynx",),
            # 511 tokens of lynx KV are ~51 Mbit: ~10 s at 5 Mbit/s, the anchors (~26 Mbit) first, so the decode
            # worker drafts for seconds whatever the prefill's speed on a loaded 2-core machine.
            rate_gbps=0.005, prompts=1, heldout_tokens=0, ppl_prompts=0, anchor_ppl=False, warmup=False,
            kvtd=kvtd_path, work_dir=work, deadline_s=240.0)).run()
    rec = result["prompts"][0]["schemes"]["lynx"]
    assert rec["progressive"]
    assert rec["output_tokens"] == 16
    assert rec["drafted"] > 0, "no drafts: the residual landed before generation started; the test proves nothing"
    assert rec["anchor_ready_ms"] < rec["full_ready_ms"]
    assert rec["identical_to_full"], rec.get("first_difference")
    assert rec["tokens"] == rec["full_tokens"]
