#!/usr/bin/env python3
"""Brute-force k-nearest-neighbour patch search in PyTorch (GPU), as the peer of the neighbour
search of `kortex bench surface`.

    python3 bench/peers/surface_torch.py --records DIR --out surface_peers.json

DIR is what `kortex bench surface --dump DIR` writes for its largest band: records.f32 (N x p
float32 patches in Kortex's record order), neighbours.i32 (N x m Kortex's exact neighbour sets,
int32) and meta.json ({"n", "patch_voxels", "m"}).

The peer is the usual GPU kNN: for chunks of queries Q, D = |Q|^2 + |X|^2 - 2 Q X^T (one float32
matmul; TF32 is turned off, so the products are full float32), the diagonal (self) set to +inf,
then torch.topk(m, largest=False). It is timed end to end on the device (records already on the
GPU, CUDA synchronised), warm-up then the median of the repetitions. Agreement with Kortex:
fraction of Kortex's exact neighbours the peer also returns, and fraction of rows whose sets are
identical (the GEMM form loses precision by cancellation; ties also count as disagreements here).

Output JSON (read by `kortex bench surface --peers FILE`):
{"kind": "kortex-peers", "device", "versions", "results": [{"name", "n", "m", "median_s",
"samples_s", "agreement", "rows_identical_sets", "chunk"}]}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", required=True, help="folder written by kortex bench surface --dump")
    ap.add_argument("--out", required=True, help="JSON output")
    ap.add_argument("--chunk", type=int, default=4096, help="queries per matmul chunk")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import numpy as np
    import torch

    if not torch.cuda.is_available():
        print("surface_torch.py: no CUDA device", file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(os.path.join(args.records, "meta.json")) as f:
        meta = json.load(f)
    n, p, m = int(meta["n"]), int(meta["patch_voxels"]), int(meta["m"])
    rec = np.fromfile(os.path.join(args.records, "records.f32"), dtype=np.float32)
    if rec.size != n * p:
        print(f"records.f32 has {rec.size} floats, expected {n} x {p}", file=sys.stderr)
        return 1
    exact = np.fromfile(os.path.join(args.records, "neighbours.i32"), dtype=np.int32).reshape(n, m)
    dev = torch.device("cuda")
    x = torch.from_numpy(rec.reshape(n, p)).to(dev)

    def knn():
        sq = (x * x).sum(1)
        out = torch.empty((n, m), dtype=torch.int64, device=dev)
        for b in range(0, n, args.chunk):
            e = min(n, b + args.chunk)
            q = x[b:e]
            d = sq[b:e, None] + sq[None, :] - 2.0 * (q @ x.T)
            idx = torch.arange(b, e, device=dev)
            d[idx - b, idx] = float("inf")
            out[b:e] = torch.topk(d, m, dim=1, largest=False, sorted=True).indices
        return out

    res = knn()  # warm-up
    torch.cuda.synchronize()
    samples = []
    for _ in range(args.reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = knn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    got = np.sort(res.cpu().numpy().astype(np.int64), axis=1)
    want = np.sort(exact.astype(np.int64), axis=1)
    # Agreement: |peer set ∩ exact set| / m per row, averaged.
    hits = 0
    identical = 0
    for j in range(n):
        common = np.intersect1d(got[j], want[j], assume_unique=True).size
        hits += common
        identical += common == m
    result = {"name": "torch matmul+topk (float32, TF32 off)", "n": n, "m": m, "chunk": args.chunk,
              "median_s": statistics.median(samples), "samples_s": samples,
              "agreement": hits / (n * m), "rows_identical_sets": identical / n}
    doc = {"kind": "kortex-peers", "device": torch.cuda.get_device_name(0),
           "versions": {"torch": torch.__version__, "cuda": torch.version.cuda, "numpy": np.__version__},
           "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "results": [result]}
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"torch kNN N={n} m={m}: {result['median_s']:.3f} s, agreement {100 * result['agreement']:.3f}%, "
          f"identical rows {100 * result['rows_identical_sets']:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
