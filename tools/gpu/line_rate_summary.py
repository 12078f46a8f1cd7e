#!/usr/bin/env python3
"""Tables from `kvtctl demo --json` sweeps (tools/gpu/run_line_rate.sh): per file and rate, int8's time to full
and full/link, lynx's time to anchor and to full over int8's, the end-to-end goodput against the data plane
alone, when each stage last ended on both daemons (ms since the request started there), and each daemon's
busiest threads.

  python3 tools/gpu/line_rate_summary.py out/*.json
"""
import json
import os
import sys


def stage(run, side, name, field="last_ms"):
    s = run.get("stages", {}).get(side, {}).get(name)
    return s[field] if s else None


def fmt(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def summarize(path):
    with open(path) as f:
        doc = json.load(f)
    name = os.path.basename(path)[:-5]
    dp = doc.get("data_plane") or {}
    print(f"\n## {name}: {doc['tokens']} tokens x {doc['layers']} layers, {doc['transport']}, gpu={doc.get('gpu')}")
    if dp:
        print(f"data plane alone: {dp['goodput_gbps']:.2f} Gbit/s ({dp['ucx_workers']} workers, {dp['bytes'] >> 20} MiB)")
    print("| Gbit/s | scheme | anchor ms | full ms | full/link | anchor/int8 | full/int8 | e2e Gbit/s | e2e/data plane "
          "| encode end | anchors land | residuals land | anchor dec. end | full dec. end | identical |")
    print("|" + " --- |" * 15)
    for r in doc["runs"]:
        link = r["full_ms"] / r["ideal_full_ms"] if r.get("ideal_full_ms") else None
        print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["rate_gbps"] or "unlim.", r["scheme"], fmt(r["anchor_ms"]), fmt(r["full_ms"]), fmt(link, "{:.2f}"),
            fmt(r.get("anchor_over_int8_full"), "{:.2f}"), fmt(r.get("full_over_int8_full"), "{:.2f}"),
            fmt(r.get("goodput_gbps"), "{:.2f}"), fmt(r.get("goodput_over_data_plane"), "{:.2f}"),
            fmt(stage(r, "prefill", "encode")), fmt(stage(r, "decode", "arrive_anchor")),
            fmt(stage(r, "decode", "arrive_residual")), fmt(stage(r, "decode", "decode_anchor")),
            fmt(stage(r, "decode", "decode_full")), r.get("verified_identical")))
    print("busiest threads (CPU-seconds per second; ~1.0 = that thread bounds the run):")
    for r in doc["runs"]:
        threads = r.get("busiest_threads") or {}
        sides = []
        for side in ("prefill", "decode"):
            top = ", ".join(f"{t['name']} {t['utilization']:.2f}" for t in threads.get(side, [])[:4])
            sides.append(f"{side}: {top}")
        print(f"  {r['rate_gbps'] or 'unlim.'} {r['scheme']}: " + "; ".join(sides))
    for v in doc.get("verdicts", []):
        print(f"verdict at {v['rate_gbps']} Gbit/s: lynx anchor {v['lynx_anchor_over_int8_full']:.2f} x int8 full, "
              f"full {v['lynx_full_over_int8_full']:.2f} x" + ("" if v["judged"] else f" (not judged: {v['not_judged_because'] or 'no rate'})"))


def main():
    for path in sys.argv[1:]:
        try:
            summarize(path)
        except (OSError, ValueError, KeyError) as e:
            print(f"\n## {path}: unreadable ({e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
