#!/usr/bin/env python3
"""Time one unbiased-atlas iteration written in PyTorch (GPU), batched over subjects, as the peer
of `kortex bench atlas`.

    python3 bench/peers/atlas_torch.py [--quick|--tiny] --out peers_atlas.json

The iteration of core/Atlas.hpp with PyTorch's own operators (float32; the step pieces are those
of greedy_torch.py, batched over B subjects):
  template T = mean over subjects of W_i (float sum);
  force    F_i = -(W_i - T) grad W_i (clamped central differences);
  solve    L v_i = F_i, L = -alpha lap + gamma, periodic: rfftn over the batch, symbol, irfftn;
  step     eps_i = max_step / max |v_i| (one read-back of the B maxima);
  compose  u_i' = u_i(x + eps_i v_i) - eps_i v_i (grid_sample, border, align_corners=True);
  fold     min det(I - grad u_i') per subject (one read-back) - refusals are not retried;
  centring ubar = mean u_i', u_i <- u_i(x + ubar) - ubar (grid_sample) and its det check;
  warp     W_i = I_i(x - u_i).
Subjects: a smooth random phantom under B seeded smooth displacements, at 144x192x160 (--tiny:
32x48x40). The batch is B subjects (16; --tiny 4); the time per subject is the batch time / B,
and the 315-subject iteration is reported as 315 times that (the subjects' work is independent
but for the two means). Warm-up, median (CUDA events).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import socket
import sys
import traceback

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from greedy_torch import base_grid, central, make_inputs, symbol, to_grid  # noqa: E402
from timing import Budget, time_adaptive  # noqa: E402


def min_det(torch, u):
    """min over each subject of det(I - grad u), u (B, 3, nz, ny, nx)."""
    out = []
    for b in range(u.shape[0]):
        gx, gy, gz = central(torch, u[b])
        a = [[(1.0 if i == j else 0.0) - (gx, gy, gz)[j][i] for j in range(3)] for i in range(3)]
        J = (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
             + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
        out.append(J.amin())
    return torch.stack(out)


def grid_b(torch, base, shape, d):
    """grid_sample coordinates of x + d for a batch d (B, 3, nz, ny, nx)."""
    nz, ny, nx = shape
    bx, by, bz = base
    return torch.stack([(bx + d[:, 0]) * (2.0 / (nx - 1)) - 1.0, (by + d[:, 1]) * (2.0 / (ny - 1)) - 1.0,
                        (bz + d[:, 2]) * (2.0 / (nz - 1)) - 1.0], dim=-1)


def iteration(torch, st, I, sym, base, shape, max_step):
    F = torch.nn.functional
    W, u = st["W"], st["u"]
    T = W.mean(0)
    p = F.pad(W[:, None], (1, 1, 1, 1, 1, 1), mode="replicate")[:, 0]
    dx = 0.5 * (p[:, 1:-1, 1:-1, 2:] - p[:, 1:-1, 1:-1, :-2])
    dy = 0.5 * (p[:, 1:-1, 2:, 1:-1] - p[:, 1:-1, :-2, 1:-1])
    dz = 0.5 * (p[:, 2:, 1:-1, 1:-1] - p[:, :-2, 1:-1, 1:-1])
    r = -(W - T)
    f = torch.stack([r * dx, r * dy, r * dz], dim=1)
    v = torch.fft.irfftn(torch.fft.rfftn(f, dim=(2, 3, 4)) / sym, s=shape, dim=(2, 3, 4))
    m = v.norm(dim=1).amax(dim=(1, 2, 3))
    eps = (max_step / m).view(-1, 1, 1, 1, 1)
    d = eps * v
    un = F.grid_sample(u, grid_b(torch, base, shape, d), mode="bilinear", padding_mode="border", align_corners=True) - d
    j1 = min_det(torch, un).min().item()
    ubar = un.mean(0, keepdim=True).expand_as(un)
    uc = F.grid_sample(un, grid_b(torch, base, shape, ubar), mode="bilinear", padding_mode="border",
                       align_corners=True) - ubar
    j2 = min_det(torch, uc).min().item()
    st["W"] = F.grid_sample(I[:, None], grid_b(torch, base, shape, -uc), mode="bilinear", padding_mode="border",
                            align_corners=True)[:, 0]
    st["u"] = uc
    return min(j1, j2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON output path")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--tiny", action="store_true")
    ap.add_argument("--batch", type=int, default=0, help="subjects per batch (default 16; --tiny 4)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("atlas_torch: no CUDA device; nothing to time", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    shape = (32, 48, 40) if args.tiny else (144, 192, 160)
    B = args.batch or (4 if args.tiny else 16)
    budget = Budget(case_s=15.0, single_s=20.0, total_s=30 if args.tiny else 90, max_reps=50, min_reps=5)
    alpha, gamma, max_step = 0.1, 0.001, 1.0  # core/Greedy.hpp's defaults (kortex bench atlas uses them)
    rec = {"peer": "torch", "algorithm": "atlas-iteration", "dim": 3, "size": list(shape), "batch": B,
           "median_ms": None, "per_subject_ms": None, "iteration_315_ms": None, "samples_ms": [],
           "status": "not run", "note": "",
           "params": {"alpha": alpha, "gamma": gamma, "max_step": max_step, "solver": "rfftn periodic"}}
    try:
        I1, _ = make_inputs(torch, shape, dev)
        base = base_grid(torch, shape, dev)
        g = torch.Generator(device="cpu").manual_seed(15)
        nz, ny, nx = shape
        bx, by, bz = base
        imgs = []
        for b in range(B):
            ph = torch.rand(3, generator=g) * 6.283
            amp = 1.0 + 1.5 * torch.rand(1, generator=g).item()
            d = torch.stack([amp * torch.sin(2 * math.pi * by / ny + ph[k]) * torch.sin(2 * math.pi * bz / nz + ph[k])
                             for k in range(3)])
            imgs.append(torch.nn.functional.grid_sample(I1[None, None], to_grid(bx, by, bz, shape, d[0], d[1], d[2]),
                                                        mode="bilinear", padding_mode="border",
                                                        align_corners=True)[0, 0])
        I = torch.stack(imgs)
        sym = symbol(torch, shape, alpha, gamma, dev)
        st = {"W": I.clone(), "u": torch.zeros(B, 3, *shape, device=dev)}

        def run():
            return iteration(torch, st, I, sym, base, shape, max_step)

        median, samples, warm, out = time_adaptive(run, budget, gpu=True)
        if not math.isfinite(float(out)):
            raise RuntimeError("non-finite result")
        rec.update(median_ms=median, per_subject_ms=median / B, iteration_315_ms=315.0 * median / B,
                   samples_ms=samples, status="ok" if len(samples) > 1 else "single",
                   note=f"warm-up {warm}, {len(samples)} reps, batch {B}, min det {out:.3g}")
    except Exception as ex:  # report, never a number
        rec["status"], rec["note"] = "error", f"{type(ex).__name__}: {ex}"
        traceback.print_exc()
    print(f"torch atlas iteration {shape} batch {B}: {rec['status']} {rec['median_ms']} ms", flush=True)
    doc = {"kind": "kortex-peers", "script": "atlas_torch.py",
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": socket.gethostname(), "device": torch.cuda.get_device_name(0),
           "versions": {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda},
           "results": [rec]}
    with open(args.out + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
