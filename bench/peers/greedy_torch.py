#!/usr/bin/env python3
"""Time one greedy diffeomorphic registration step written in PyTorch (GPU), as a peer of
`kortex bench greedy`.

    python3 bench/peers/greedy_torch.py [--quick|--tiny] --out peers_greedy.json

The peer implements Kortex's core/Greedy.hpp + core/Fluid.hpp step with PyTorch's own operators
(float32), so that both do the same arithmetic:
  force    F = -(W - I1) grad W, grad by clamped central differences (replicate padding);
  solve    L v = F with L = -alpha lap + gamma (beta = 0) on the periodic grid: torch.fft.rfftn,
           division by the discrete symbol alpha sum_j 4 sin^2(theta_j / 2) + gamma, irfftn;
  step     eps = max_step / max |v| (read back to the host, as Kortex does);
  compose  u'(x) = u(x + eps v(x)) - eps v(x) by F.grid_sample(mode="bilinear",
           padding_mode="border", align_corners=True) (Kortex's clamp-extended trilinear);
  fold     min det(I - grad u') by clamped central differences, read back ("with fold check" only);
  warp     W = I0(x - u'(x)) by grid_sample.
Two timings per size: the step without the fold check (what a plain PyTorch greedy loop does) and
with it (the work Kortex's iteration does). Inputs: a smooth random phantom (sum of Gaussian blobs)
as I1 and the same phantom shifted by a smooth displacement as I0; alpha 0.01, gamma 0.001, max
step 1 voxel (the paper's defaults). Sizes: 144x192x160 (the issue's target grid) and 128^3,
192^3, 256^3 (--quick: 144x192x160 only; --tiny: 32x48x40). Warm-up, median (CUDA events).
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

from timing import Budget, time_adaptive  # noqa: E402


def make_inputs(torch, shape, dev):
    nz, ny, nx = shape
    g = torch.Generator(device="cpu").manual_seed(nx * ny)
    z, y, x = torch.meshgrid(*[torch.arange(m, dtype=torch.float32) for m in shape], indexing="ij")
    r = torch.zeros(shape)
    for _ in range(16):
        c = torch.rand(3, generator=g)
        s = (0.05 + 0.1 * torch.rand(1, generator=g).item()) * min(shape)
        r += torch.exp(-((x - (0.2 + 0.6 * c[0]) * nx) ** 2 + (y - (0.2 + 0.6 * c[1]) * ny) ** 2
                         + (z - (0.2 + 0.6 * c[2]) * nz) ** 2) / (2 * s * s))
    r /= r.max()
    u = torch.stack([2.0 * torch.sin(2 * math.pi * x / nx + k) * torch.sin(2 * math.pi * y / ny)
                     * torch.sin(2 * math.pi * z / nz + k) for k in range(3)])
    return r.to(dev), u.to(dev)


def base_grid(torch, shape, dev):
    nz, ny, nx = shape
    z, y, x = torch.meshgrid(*[torch.arange(m, dtype=torch.float32, device=dev) for m in shape], indexing="ij")
    return x, y, z


def to_grid(bx, by, bz, shape, dx, dy, dz):
    """grid_sample coordinates (align_corners=True) of the points (x + dx, y + dy, z + dz)."""
    nz, ny, nx = shape
    import torch
    return torch.stack([(bx + dx) * (2.0 / (nx - 1)) - 1.0, (by + dy) * (2.0 / (ny - 1)) - 1.0,
                        (bz + dz) * (2.0 / (nz - 1)) - 1.0], dim=-1)[None]


def central(torch, a):
    """Clamped central differences of a (C, nz, ny, nx) tensor: (d/dx, d/dy, d/dz)."""
    F = torch.nn.functional
    p = F.pad(a[None], (1, 1, 1, 1, 1, 1), mode="replicate")[0]
    dx = 0.5 * (p[:, 1:-1, 1:-1, 2:] - p[:, 1:-1, 1:-1, :-2])
    dy = 0.5 * (p[:, 1:-1, 2:, 1:-1] - p[:, 1:-1, :-2, 1:-1])
    dz = 0.5 * (p[:, 2:, 1:-1, 1:-1] - p[:, :-2, 1:-1, 1:-1])
    return dx, dy, dz


def symbol(torch, shape, alpha, gamma, dev):
    nz, ny, nx = shape
    kz = torch.arange(nz, device=dev, dtype=torch.float32)
    ky = torch.arange(ny, device=dev, dtype=torch.float32)
    kx = torch.arange(nx // 2 + 1, device=dev, dtype=torch.float32)
    w = lambda k, n: 4.0 * torch.sin(math.pi * k / n) ** 2  # noqa: E731
    W = w(kz, nz)[:, None, None] + w(ky, ny)[None, :, None] + w(kx, nx)[None, None, :]
    return alpha * W + gamma


def step(torch, state, I0, I1, sym, base, shape, max_step, fold_check):
    F = torch.nn.functional
    W, u = state["W"], state["u"]
    dx, dy, dz = central(torch, W[None])
    r = -(W - I1)
    f = torch.stack([r * dx[0], r * dy[0], r * dz[0]])
    v = torch.fft.irfftn(torch.fft.rfftn(f, dim=(1, 2, 3)) / sym, s=shape, dim=(1, 2, 3))
    m = v.norm(dim=0).max().item()
    eps = max_step / m
    bx, by, bz = base
    d = eps * v
    g = to_grid(bx, by, bz, shape, d[0], d[1], d[2])
    un = F.grid_sample(u[None], g, mode="bilinear", padding_mode="border", align_corners=True)[0] - d
    mj = None
    if fold_check:
        gx, gy, gz = central(torch, un)
        a = [[(1.0 if i == j else 0.0) - (gx, gy, gz)[j][i] for j in range(3)] for i in range(3)]
        J = (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
             + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
        mj = J.min().item()
    gw = to_grid(bx, by, bz, shape, -un[0], -un[1], -un[2])
    state["W"] = F.grid_sample(I0[None, None], gw, mode="bilinear", padding_mode="border", align_corners=True)[0, 0]
    state["u"] = un
    return mj if fold_check else m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON output path")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--tiny", action="store_true")
    ap.add_argument("--total-seconds", type=float, default=0.0, help="wall-time cap (default per mode)")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("greedy_torch: no CUDA device; nothing to time", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    if args.tiny:
        shapes = [(32, 48, 40)]
    elif args.quick:
        shapes = [(144, 192, 160)]
    else:
        shapes = [(144, 192, 160), (128, 128, 128), (192, 192, 192), (256, 256, 256)]
    total = args.total_seconds or (20 if args.tiny else (60 if args.quick else 150))
    budget = Budget(case_s=10.0, single_s=20.0, total_s=total, max_reps=200, min_reps=5)
    alpha, gamma, max_step = 0.01, 0.001, 1.0
    results = []
    for shape in shapes:
        for fold_check in (False, True):
            label = "greedy-step" + ("+fold-check" if fold_check else "")
            rec = {"peer": "torch", "algorithm": label, "dim": 3, "size": list(shape), "median_ms": None,
                   "samples_ms": [], "status": "not run", "note": "",
                   "params": {"alpha": alpha, "gamma": gamma, "max_step": max_step, "solver": "rfftn periodic"}}
            try:
                if budget.left() <= 0:
                    rec["status"], rec["note"] = "skipped", "run-time cap reached"
                else:
                    I1, u_true = make_inputs(torch, shape, dev)
                    base = base_grid(torch, shape, dev)
                    I0 = torch.nn.functional.grid_sample(
                        I1[None, None], to_grid(*base, shape, u_true[0], u_true[1], u_true[2]), mode="bilinear",
                        padding_mode="border", align_corners=True)[0, 0]
                    sym = symbol(torch, shape, alpha, gamma, dev)
                    state = {"W": I0.clone(), "u": torch.zeros(3, *shape, device=dev)}

                    def run():
                        return step(torch, state, I0, I1, sym, base, shape, max_step, fold_check)

                    median, samples, warm, out = time_adaptive(run, budget, gpu=True)
                    if not math.isfinite(float(out)):
                        raise RuntimeError("non-finite result")
                    rmse = float(((state["W"] - I1) ** 2).mean().sqrt())
                    rec.update(median_ms=median, samples_ms=samples, status="ok" if len(samples) > 1 else "single",
                               note=f"warm-up {warm}, {len(samples)} reps, RMSE after {rmse:.4g}")
                    del I0, I1, u_true, state, sym, base
                    torch.cuda.empty_cache()
            except Exception as ex:  # report, never a number
                rec["status"], rec["note"] = "error", f"{type(ex).__name__}: {ex}"
                traceback.print_exc()
            print(f"torch {label} {shape}: {rec['status']} {rec['median_ms']}", flush=True)
            results.append(rec)

    doc = {"kind": "kortex-peers", "script": "greedy_torch.py",
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": socket.gethostname(), "device": torch.cuda.get_device_name(0),
           "versions": {"python": platform.python_version(), "torch": torch.__version__,
                        "cuda": torch.version.cuda},
           "results": results}
    with open(args.out + ".tmp", "w") as fh:
        json.dump(doc, fh, indent=1)
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
