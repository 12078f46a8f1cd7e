#!/usr/bin/env python3
"""Per-block timeline of the lynx tile encoder, from a gpu_codec_benchmark run built with tile_timeline.patch
(see README.md beside this file).

Each block's thread 0 records %globaltimer and clock64 at its start, after its one barrier (rows loaded, chunk
ranges shared), after the chunk ends, after coding, after the exact-extremes tail, and at its end (for a page's
counting block, group 0 of a multi-stream scheme, after it has written the page's anchor tables). This prints:
the encoder's span, block lifetimes and phase lengths, blocks resident and blocks still loading over time (as
text bars), and how much longer the counting blocks live than the others.

  tile_timeline.py tl_lynx.bin [tl_lynx8.bin ...]   (needs python3-numpy)
"""
import argparse
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("tile_timeline.py needs numpy (Debian: apt install python3-numpy)")

ENCODER_SLOTS = 1 << 16  # g_tl rows (tile_timeline.patch); word 15 is 1 for a page's counting block
ENCODER_WORDS = 16
PHASES = ["start -> barrier (rows, chunk ranges)", "barrier -> chunk ends done", "coding",
          "exact-extremes tail", "tables written (counting blocks), exit"]


def load(path):
    raw = np.fromfile(path, dtype=np.uint64)
    want = ENCODER_SLOTS * ENCODER_WORDS
    if raw.size != want:
        sys.exit(f"{path}: {raw.size} words, want {want}: not a tile_timeline.patch dump (or one from before the "
                 "anchor tables moved into the encoder's blocks)")
    return raw.reshape(ENCODER_SLOTS, ENCODER_WORDS).astype(np.int64)


def bar(n, full, width=40):
    k = int(round(width * n / full)) if full else 0
    return "#" * k + "." * (width - k)


def report(path, step_us):
    enc = load(path)
    blocks = enc[enc[:, 5] != 0]  # rows the last launch wrote (the patch clears the arrays after each dump)
    if blocks.size == 0:
        sys.exit(f"{path}: no encoder block recorded")
    t0 = blocks[:, 0].min()
    g = (blocks[:, 0:6] - t0) / 1000.0  # microseconds
    cycles = np.diff(blocks[:, 6:12], axis=1)
    life = g[:, 5] - g[:, 0]
    span = g[:, 5].max()
    print(f"== {path}: {len(blocks)} encoder blocks on {len(set(blocks[:, 12].tolist()))} SMs")
    print(f"encoder span {span:.2f} us: last block starts at {g[:, 0].max():.2f}, first ends at {g[:, 5].min():.2f}")
    print(f"block life us: mean {life.mean():.2f}, p10 {np.percentile(life, 10):.2f}, "
          f"p50 {np.percentile(life, 50):.2f}, p90 {np.percentile(life, 90):.2f}")
    mhz = (blocks[:, 11] - blocks[:, 6]).sum() / ((blocks[:, 5] - blocks[:, 0]).sum() / 1000.0)
    print(f"| phase (warp 0 of each block) | mean us | mean cycles | p10 | p90 |  (SM clock ~{mhz:.0f} MHz)")
    print("| --- | --- | --- | --- | --- |")
    for i, name in enumerate(PHASES):
        d = g[:, i + 1] - g[:, i]
        print(f"| {name} | {d.mean():.2f} | {cycles[:, i].mean():.0f} | {np.percentile(cycles[:, i], 10):.0f} | "
              f"{np.percentile(cycles[:, i], 90):.0f} |")
    full = max(1, int(((g[:, 0] <= 1.0) & (g[:, 5] > 1.0)).sum()))
    print(f"\nresident blocks (#) and blocks still before their barrier (n), every {step_us} us; full = {full}:")
    t = 0.0
    while t <= span:
        resident = int(((g[:, 0] <= t) & (g[:, 5] > t)).sum())
        loading = int(((g[:, 0] <= t) & (g[:, 1] > t)).sum())
        print(f"{t:6.1f} us {bar(resident, full)} {resident:4d}  n {loading:4d}")
        t += step_us
    counting = blocks[:, 15] != 0
    if counting.any() and not counting.all():
        last_other = g[~counting, 5].max()
        print(f"\ncounting blocks ({int(counting.sum())}): life mean {life[counting].mean():.2f} us against "
              f"{life[~counting].mean():.2f} for the others; last ends {g[counting, 5].max() - last_other:+.2f} us "
              f"after the others' last")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dumps", nargs="+", help="tl_<scheme>.bin files written under $KVT_TL_DIR")
    ap.add_argument("--step_us", type=float, default=2.0, help="resolution of the resident-blocks bars")
    args = ap.parse_args()
    for path in args.dumps:
        report(path, args.step_us)


if __name__ == "__main__":
    main()
