"""The runner's records and the report built from them, on made-up timings (no model, no kvt): the summary's
medians and sums, and every printed section, through the CLI's `report` command as a user runs it."""
from __future__ import annotations

import json

from kvt_engine import cli
from kvt_engine.decode_worker import DecodeResult, LayerTimes
from kvt_engine.prefill_worker import PrefillResult
from kvt_engine.runner import chunk_kib_for, job_record, summarize


def _decode(progressive: bool, t_first: float, drafted: int, accepted: int, tokens: list[int]) -> DecodeResult:
    n = len(tokens)
    produced = [t_first + 0.01 * i for i in range(n)]
    return DecodeResult(
        t0=0.0, progressive=progressive, start_at=t_first - 0.005, full_at=t_first + (0.2 if progressive else 0),
        done_at=t_first + 0.21, tokens=tokens, produced_at=produced, final_at=[p + 0.2 * progressive for p in produced],
        was_draft=[progressive and i < accepted for i in range(n)], margins=[0.5] * n, drafted=drafted,
        accepted=accepted, verify_ms=[3.0] if progressive else [], verify_min_margin=[0.5] if progressive else [],
        draft_at=produced[:drafted], waited_for_full_ms=0.0,
        layers=LayerTimes([t_first - 0.01] * 2, [t_first + 0.2] * 2, [1] * 2, [2] * 2),
        full_tokens=tokens if progressive else None, full_margins=[0.5] * n if progressive else None,
        heldout_nll=20.0, heldout_count=10, draft_margins=[0.25 + i for i in range(drafted)],
        withheld_margin=0.125 if progressive else None)


def _result() -> dict:
    prefill = PrefillResult(0.001, [0.01, 0.02], 0.03, 0.5, [])
    tokens = list(range(40))
    recs = {"bf16": job_record("bf16", _decode(False, 1.5, 0, 0, tokens), prefill, 0.0),
            "int8": job_record("int8", _decode(False, 0.8, 0, 0, tokens), prefill, 0.0),
            "int4": job_record("int4", _decode(False, 0.45, 0, 0, tokens[:5] + [99] * 35), prefill, 0.0),
            "lynx": job_record("lynx", _decode(True, 0.46, 40, 36, tokens), prefill, 0.0)}
    for r in recs.values():
        r["agreement_with_bf16"] = sum(a == b for a, b in zip(r["tokens"], tokens)) / 40
    records = [{"prompt": "whatsnew/2.0.rst.txt", "prompt_tokens": 100, "schemes": recs,
                "anchor_only_ppl": {"nll": 21.0, "count": 10, "ppl": 8.2}}]
    config = {"model": "m", "device": "cpu", "prompt_tokens": 100, "kv_tokens": 99, "new_tokens": 40,
              "rate_gbps": 1.0, "prompts": 1, "prompts_asked": 1, "stopped_early": False, "heldout_tokens": 10,
              "draft_cap": 64, "decode_dtype": "float64"}
    return {"config": config, "summary": summarize(records, list(recs)), "prompts": records}


def test_records_time_tokens_from_t0_and_summarize_per_scheme():
    s = _result()["summary"]["schemes"]
    assert s["lynx"]["ttft_ms"] == 460.0 and s["lynx"]["tt32t_ms"] == 770.0
    assert s["lynx"]["acceptance"] == 0.9 and s["lynx"]["identical_to_full"] is True
    assert s["int4"]["agreement_with_bf16"] == 5 / 40
    assert "acceptance" not in s["int8"]
    lynx = _result()["prompts"][0]["schemes"]["lynx"]
    assert lynx["draft_margins"] == [0.25 + i for i in range(40)] and lynx["withheld_margin"] == 0.125


def test_report_prints_every_section(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_result()))
    assert cli.main(["report", str(path)]) == 0
    out = capsys.readouterr().out
    for needle in ["scheme", "Lynx Table 1", "[yes] lynx TTFT <= 1.1x int4's: 1.02x",
                   "[yes] lynx TTFT <= 0.6x int8's: 0.57x", "[NO ] accepted / drafted >= 0.9 over >= 20 prompts",
                   "anchor-only 8.166", "timeline of prompt 1", "lynx     |"]:
        assert needle in out, needle


def test_kvtd_chunk_scales_with_the_link_rate():
    assert chunk_kib_for(0) == 512 and chunk_kib_for(1.0) == 512
    assert chunk_kib_for(0.005) == 16 and chunk_kib_for(0.1) == 61
