"""Turns EngineRun's result into what `./kvt engine` prints: the per-scheme table (the columns of issue 34,
beside Lynx Table 1's TTFT and TT32T), the held-out perplexity per KV precision, and a timeline of the first
prompt's requests."""
from __future__ import annotations

from typing import Any, Optional


def _f(x: Optional[float], nd: int = 1) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def table(result: dict[str, Any]) -> str:
    cfg, summ = result["config"], result["summary"]
    lines = [f"{cfg['model']} on {cfg['device']}: {cfg['prompts']} prompt(s) of {cfg['prompt_tokens']} tokens "
             f"({cfg['kv_tokens']} sent as KV), {cfg['new_tokens']} new tokens, link {cfg['rate_gbps']:g} Gbit/s, "
             f"decode in {cfg['decode_dtype']}, draft cap {cfg['draft_cap']}"
             + (f", drafts stop below margin {cfg['draft_min_margin']:g}"
                if cfg.get("draft_min_margin") and cfg.get("sampling", {}).get("greedy", True) else "")
             + "; medians over prompts",
             ""]
    if cfg.get("stopped_early"):
        lines.insert(1, f"(time budget spent: {cfg['prompts']} of {cfg['prompts_asked']} prompts run)")
    head = (f"{'scheme':<10} {'ttft_ms':>9} {'tt32t_ms':>9} {'anchor_ms':>9} {'full_ms':>9} {'out':>5} "
            f"{'drafted':>7} {'accepted':>8} {'identical':>9} {'agree_bf16':>10} {'ppl':>7}")
    lines += [head, "-" * len(head)]
    schemes = summ["schemes"]
    for s, r in schemes.items():
        ident = "-" if not r["progressive"] else (
            f"{r['identical_prompts']}/{r['prompts']}" if r.get("identical_to_full") is not None else "n/a")
        lines.append(f"{s:<10} {_f(r['ttft_ms']):>9} {_f(r['tt32t_ms']):>9} {_f(r['anchor_ready_ms']):>9} "
                     f"{_f(r['full_ready_ms']):>9} {r['output_tokens']:>5} {r['drafted']:>7} {r['accepted']:>8} "
                     f"{ident:>9} {_f(r.get('agreement_with_bf16'), 3):>10} {_f(r['heldout_ppl'], 3):>7}")
    base = schemes.get("int8")
    if base and base["ttft_ms"]:
        lines.append("")
        for s, r in schemes.items():
            if s == "int8" or r["ttft_ms"] is None:
                continue
            parts = [f"ttft {r['ttft_ms'] / base['ttft_ms']:.2f}x int8"]
            if r["tt32t_ms"] and base["tt32t_ms"]:
                parts.append(f"tt32t {r['tt32t_ms'] / base['tt32t_ms']:.2f}x int8")
            if "int4" in schemes and schemes["int4"]["ttft_ms"]:
                parts.append(f"ttft {r['ttft_ms'] / schemes['int4']['ttft_ms']:.2f}x int4")
            lines.append(f"{s:<10} " + ", ".join(parts))
    ppl = summ["heldout_perplexity"]
    if ppl:
        lines.append("")
        lines.append(f"held-out perplexity ({cfg['heldout_tokens']} tokens after each prompt) by the KV it saw: "
                     + ", ".join(f"{k} {v:.3f}" for k, v in ppl.items()))
    lines.append("")
    lines.append("ttft/tt32t: from the decode side's Expect to the 1st/32nd output token; an accepted draft counts "
                 "when it was drafted (Lynx's TTKT). *_final_ms in --json: when each token was known final.")
    return "\n".join(lines)


def criteria(result: dict[str, Any], progressive: str = "lynx") -> str:
    """Issue 34's GPU criteria, each with the measured medians (ratios of medians over prompts)."""
    sch = result["summary"]["schemes"]
    lx, i4, i8 = sch.get(progressive), sch.get("int4"), sch.get("int8")
    if not (lx and i4 and i8) or not (lx["ttft_ms"] and i4["ttft_ms"] and i8["ttft_ms"]):
        return ""
    rows = []

    def row(ok: bool, text: str) -> None:
        rows.append(f"  [{'yes' if ok else 'NO '}] {text}")

    r = lx["ttft_ms"] / i4["ttft_ms"]
    row(r <= 1.1, f"{progressive} TTFT <= 1.1x int4's: {r:.2f}x ({lx['ttft_ms']:.0f} / {i4['ttft_ms']:.0f} ms)")
    r = lx["ttft_ms"] / i8["ttft_ms"]
    row(r <= 0.6, f"{progressive} TTFT <= 0.6x int8's: {r:.2f}x ({lx['ttft_ms']:.0f} / {i8['ttft_ms']:.0f} ms)")
    if lx["tt32t_ms"] and i8["tt32t_ms"]:
        r = lx["tt32t_ms"] / i8["tt32t_ms"]
        row(r <= 1.0, f"{progressive} TT32T <= int8's: {r:.2f}x ({lx['tt32t_ms']:.0f} / {i8['tt32t_ms']:.0f} ms); "
                      f"known final: {_f(lx['tt32t_final_ms'], 0)} ms")
    acc = lx.get("acceptance")
    row(acc is not None and acc >= 0.9 and lx["prompts"] >= 20,
        f"accepted / drafted >= 0.9 over >= 20 prompts: {lx['accepted']} / {lx['drafted']} = {_f(acc, 3)} "
        f"over {lx['prompts']} prompts")
    row(lx.get("identical_to_full") is True,
        f"identical_to_full on every prompt: {lx.get('identical_prompts')} of {lx['prompts']}")
    return "issue 34's criteria (GPU; medians over prompts):\n" + "\n".join(rows)


# Lynx Table 1 (Qwen 32B, MMLU-Pro, 16K context): TTFT and TT32T in seconds, accuracy in %.
LYNX_TABLE1 = {
    "bf16": ("None", "Monolithic", 4.4, 5.9, "85.25%"),
    "int8": ("INT8", "Monolithic", 2.3, 3.8, "85.06%"),
    "int4": ("INT4", "Monolithic", 1.4, 2.9, "76.46%"),
    "lynx": ("Split-Stream", "Pipelined", 1.6, 3.4, "85.20%"),
}


def table1(result: dict[str, Any]) -> str:
    """Our rows beside Lynx Table 1's, each also as a ratio to its own bf16 row (the two set-ups differ in
    model, context and link, so the ratios are what compares). Quality here: held-out perplexity and agreement
    with bf16's greedy output."""
    schemes = result["summary"]["schemes"]
    mine_bf16 = schemes.get("bf16")
    lines = [f"{'scheme':<6} | {'Lynx Table 1: TTFT s':>20} {'TT32T s':>8} {'quality':>8} | "
             f"{'here: TTFT ms':>13} {'TT32T ms':>9} {'ppl':>7} {'agree':>6} | "
             f"{'TTFT/bf16 paper':>15} {'here':>5} | {'TT32T/bf16 paper':>16} {'here':>5}"]
    lines.append("-" * len(lines[0]))
    _, _, paper_bf16_ttft, paper_bf16_tt32t, _ = LYNX_TABLE1["bf16"]
    for s, (quant, proto, ttft, tt32t, acc) in LYNX_TABLE1.items():
        r = schemes.get(s)
        if r is None:
            continue
        rel_ttft = rel_tt32t = None
        if mine_bf16 and mine_bf16["ttft_ms"] and r["ttft_ms"]:
            rel_ttft = r["ttft_ms"] / mine_bf16["ttft_ms"]
        if mine_bf16 and mine_bf16["tt32t_ms"] and r["tt32t_ms"]:
            rel_tt32t = r["tt32t_ms"] / mine_bf16["tt32t_ms"]
        lines.append(f"{s:<6} | {ttft:>20.1f} {tt32t:>8.1f} {acc:>8} | {_f(r['ttft_ms'], 0):>13} "
                     f"{_f(r['tt32t_ms'], 0):>9} {_f(r['heldout_ppl'], 2):>7} "
                     f"{_f(r.get('agreement_with_bf16'), 3):>6} | "
                     f"{ttft / paper_bf16_ttft:>15.2f} {_f(rel_ttft, 2):>5} | "
                     f"{tt32t / paper_bf16_tt32t:>16.2f} {_f(rel_tt32t, 2):>5}")
    return "\n".join(lines)


def timeline(result: dict[str, Any], width: int = 72) -> str:
    """One row per scheme of the first prompt: '.' waiting for KV, 'd' drafting on anchor KV, '_' drafts done
    (the cap or --new-tokens reached) and waiting for full precision, 'V' the verification pass, '=' decoding on
    final KV; 'A' every layer anchor-ready, 'F' every layer full-ready (on their own row)."""
    rec = result["prompts"][0]["schemes"]
    end = max(max(r["final_ms"][-1] or 0, r["full_ready_ms"] or 0) for r in rec.values()) * 1.02 or 1.0
    scale = width / end

    def col(t: Optional[float]) -> Optional[int]:
        return None if t is None else min(width - 1, int(t * scale))

    out = [f"timeline of prompt 1 ({result['prompts'][0]['prompt']}), 0 .. {end:.0f} ms, "
           f"{end / width:.1f} ms per character"]
    for s, r in rec.items():
        row = ["."] * width
        decode_from = col(r["start_ms"]) or 0
        if r["progressive"] and r["draft_ms"]:
            first, last = col(r["draft_ms"][0]) or 0, col(r["draft_ms"][-1]) or 0
            verified = max(last, col(r["final_ms"][0]) or 0)  # the first token is final when verified
            for i in range(first, last + 1):
                row[i] = "d"
            for i in range(last + 1, verified):
                row[i] = "_"
            decode_from = verified
        for i in range(decode_from, (col(r["final_ms"][-1]) or decode_from) + 1):
            row[i] = "="
        if r["progressive"] and r["draft_ms"]:
            row[decode_from] = "V"
        marks = [" "] * width
        for t, ch in ((r["anchor_ready_ms"], "A"), (r["full_ready_ms"], "F")):
            c = col(t)
            if c is not None:
                marks[c] = ch
        out.append(f"{s:<8} |{''.join(row)}|")
        out.append(f"{'':<8} |{''.join(marks)}|")
    out.append("'.' waiting for KV  'd' drafts on anchor KV  '_' drafts done, waiting for full  'V' verification  "
               "'=' decoding  A/F every layer anchor/full-ready")
    return "\n".join(out)
