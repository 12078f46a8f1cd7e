"""Where lynx full's attention error comes from, layer by layer (lynx_model.py): K and V each through lynx with the
other through int8; lynx with exact chunk ends, a 23-bit end grid or 32-token chunks; version 4 with only K's
chunk extremes (each 16-token chunk-channel's least and greatest value) put back exactly or to 1/16 of an end
grid step, and int8 with its own (32-token) ones put back, the control: all as ratios to int8's attention vNMSE. Then, for one layer's K, the squared error by channel class (mean 16-token chunk range over the
page-channel frame).

    NQ=128 GROUP=1 PAGE=1024 python3 attribution.py ho_nosinks.npy [LAYER]

NQ queries per query head (lynx_model.make_queries), GROUP query heads per KV head, PAGE tokens a page.
"""
import os
import sys

import numpy as np

import lynx_model as m

NQ = int(os.environ.get("NQ", "128"))
GROUP = int(os.environ.get("GROUP", "1"))
PAGE = int(os.environ.get("PAGE", "1024"))
TODAY = dict(chunk=16, grid=179, frame_spikes=3, spike_rule="range")  # version 4
VARIANTS = {"v4": TODAY, "exact ends": dict(TODAY, exact_ends=True), "23-bit ends": dict(TODAY, grid=4095),
            "32-token chunks": dict(TODAY, chunk=32)}


def nmse(a, b):
    return float(np.sum((a - b) ** 2) / np.sum(b ** 2))


def with_chunk_extremes(Q, X, n=16):
    """Q with each n-token chunk-channel's least and greatest value of X put back exactly."""
    Q = Q.copy()
    m_ = X.shape[0] // n * n
    Y, Z = X[:m_].reshape(-1, n, X.shape[1]), Q[:m_].reshape(-1, n, X.shape[1])
    for at in (Y.argmax(1), Y.argmin(1)):
        np.put_along_axis(Z, at[:, None, :], np.take_along_axis(Y, at[:, None, :], 1), 1)
    Q[:m_] = Z.reshape(m_, -1)
    return Q


def with_refined_extremes(Q, X, levels, n=16):
    """Q with each n-token chunk-channel's least and greatest value of X to a resolution of 1 / levels of the
    page-channel frame's end grid step (frame / 178: a 14-bit pair's grid), as refinement bits would carry them."""
    Q = Q.copy()
    m_ = X.shape[0] // n * n
    for p0 in range(0, m_, PAGE):
        p1 = min(p0 + PAGE, m_)
        q = np.ptp(X[p0:p0 + PAGE], axis=0) / 178.0 / levels
        Y, Z = X[p0:p1].reshape(-1, n, X.shape[1]), Q[p0:p1].reshape(-1, n, X.shape[1])
        for at in (Y.argmax(1), Y.argmin(1)):
            v = np.take_along_axis(Y, at[:, None, :], 1)
            r = np.where(q > 0, np.round(v / np.where(q > 0, q, 1)) * q, v)
            np.put_along_axis(Z, at[:, None, :], r, 1)
        Q[p0:p1] = Z.reshape(p1 - p0, -1)
    return Q


def layer_row(x, l):
    _, _, T, H, D = x.shape
    K3, V3 = np.array(x[l, 0]), np.array(x[l, 1])
    K, V = K3.reshape(T, -1), V3.reshape(T, -1)
    Qs = m.make_queries(K3, nq_per_head=NQ, group=GROUP, seed=l)
    sh = lambda A: A.reshape(T, H, D)
    err = lambda k, v: m.vnmse(K3, V3, sh(k), sh(v), Qs, group=GROUP)
    k8, v8 = m.intq(K, 8), m.intq(V, 8)
    e8 = err(k8, v8)
    row, full = [], {}
    for name, kw in VARIANTS.items():
        _, kf = m.lynx(K, page=PAGE, **kw)
        _, vf = m.lynx(V, page=PAGE, **kw)
        full[name] = (kf, vf)
        row.append(err(kf, vf) / e8)
    kf, vf = full["v4"]
    row += [err(with_chunk_extremes(kf, K), vf) / e8, err(with_refined_extremes(kf, K, 16), vf) / e8,
            err(with_chunk_extremes(k8, K, 32), v8) / e8, err(kf, v8) / e8,
            err(k8, vf) / e8, nmse(kf, K) / nmse(k8, K), nmse(vf, V) / nmse(v8, V)]
    return row, K, kf, full["exact ends"][0], k8


def main():
    x = np.load(sys.argv[1], mmap_mode="r")
    detail = int(sys.argv[2]) if len(sys.argv) > 2 else None
    cols = list(VARIANTS) + ["v4, K's chunk extremes exact", "v4, K's chunk extremes to 1/16 of a grid step",
                             "int8, K's 32-token chunk extremes exact",
                             "K lynx, V int8", "K int8, V lynx", "K nmse / int8", "V nmse / int8"]
    print("| layer | " + " | ".join(cols) + " |")
    print("| ---: |" + " ---: |" * len(cols))
    for l in range(x.shape[0]):
        row, K, kf, ke, k8 = layer_row(x, l)
        print("| %d | " % l + " | ".join("%.3f" % v for v in row) + " |")
        if l != detail:
            continue
        e, ee, e8 = (((a - K) ** 2).sum(0) for a in (kf, ke, k8))
        n = K.shape[0] // 16 * 16
        r16 = np.ptp(K[:n].reshape(-1, 16, K.shape[1]), axis=1).mean(0) / np.maximum(np.ptp(K, axis=0), 1e-30)
        detail_rows = []
        for lo, hi in [(0, 0.1), (0.1, 0.2), (0.2, 0.4), (0.4, 1.01)]:
            s = (r16 >= lo) & (r16 < hi)
            detail_rows.append("  chunk range / frame in [%.1f, %.1f): %d channels, K squared error v4 %.3g, exact "
                               "ends %.3g, int8 %.3g" % (lo, hi, s.sum(), e[s].sum(), ee[s].sum(), e8[s].sum()))
        print("\n".join(detail_rows))


if __name__ == "__main__":
    main()
