#!/usr/bin/env python3
"""Time one iteration of the unbiased fluid registration written in PyTorch (GPU), as a peer of
`kortex bench register`.

    python3 bench/peers/registration_torch.py [--quick|--tiny] --out peers_register.json

The peer implements the discrete method of Kortex's core/Registration.hpp with PyTorch's own
operators, so that both run the same arithmetic per iteration:
  energy   E = 1/2 sum (T(x - u) - R)^2 + lambda sum (J - 1) log J, J = det(I - grad u), grad u by
           central differences on the replicate-padded field (Kortex's clamp rule), T(x - u) by
           F.grid_sample(mode="bilinear", padding_mode="border", align_corners=True), which is
           Kortex's clamp-extended trilinear interpolant;
  force    f = -dE/du by autograd (backward through grid_sample and the determinant), i.e. the
           exact gradient of the same discrete energy that Kortex derives by hand;
  smooth   v = G_sigma * f, three separable conv3d passes with zero padding (Kortex's zero
           boundary; radius ceil(3 sigma), normalised weights);
  update   rate = v - H v with H = grad u by upwind differences on the replicate-padded field
           (backward where v_j > 0, forward where v_j < 0), m = max max(|rate|, |v|_1 / 2) (read
           back to the host, as Kortex does to choose the step), u' = u + (delta / m) rate.
One timed iteration = energy + backward at u, smoothing, rate, max, update: the kernel sequence of
one accepted iteration of Kortex (Kortex evaluates the candidate's energy and force in one pass,
which is the next iteration's first step). Inputs: a smooth random phantom (sum of Gaussian blobs)
as R and the same phantom deformed by a smooth displacement of amplitude 3 voxels as T; the
timing does not depend on the content. lambda = 0.05, sigma = 1 voxel, delta = 0.5 voxel, float32.

Sizes 128^3, 160^3, 192^3, 224^3, 240^3, 256^3 (--quick: 128^3, 240^3; --tiny: 32^3, 48^3). Every
case: warm-up, median of the repetitions (CUDA events); a per-case budget skips what would not
fit (status "skipped", never a number).

Output JSON (read by `kortex bench register --peers FILE`), in the format of run_peers.py:
{"kind": "kortex-peers", "device", "versions", "results": [{"peer": "torch.autograd",
"algorithm": "registration-iteration", "dim": 3, "size", "median_ms", "samples_ms", "status",
"note", "params"}...]}.
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


def make_inputs(torch, n, dev):
    g = torch.Generator(device="cpu").manual_seed(n)
    z, y, x = torch.meshgrid(*[torch.arange(n, dtype=torch.float32)] * 3, indexing="ij")
    r = torch.zeros(n, n, n)
    for _ in range(12):
        c = torch.rand(3, generator=g) * n * 0.6 + n * 0.2
        s = (0.05 + 0.1 * torch.rand(1, generator=g).item()) * n
        r += torch.exp(-((x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2) / (2 * s * s))
    r /= r.max()
    u_true = torch.stack([3.0 * torch.sin(2 * math.pi * x / n) * torch.sin(2 * math.pi * y / n + k)
                          * torch.sin(2 * math.pi * z / n + 2 * k) for k in range(3)])
    return r.to(dev), u_true.to(dev)


def grid_of(torch, u):
    """Normalised grid_sample coordinates of x - u(x) (align_corners=True: index i -> 2i/(n-1)-1)."""
    _, nz, ny, nx = u.shape
    z, y, x = torch.meshgrid(*[torch.arange(m, dtype=u.dtype, device=u.device) for m in (nz, ny, nx)],
                             indexing="ij")
    px = (x - u[0]) * (2.0 / (nx - 1)) - 1.0
    py = (y - u[1]) * (2.0 / (ny - 1)) - 1.0
    pz = (z - u[2]) * (2.0 / (nz - 1)) - 1.0
    return torch.stack([px, py, pz], dim=-1)[None]


def sample(torch, img, u):
    F = torch.nn.functional
    return F.grid_sample(img[None, None], grid_of(torch, u), mode="bilinear", padding_mode="border",
                         align_corners=True)[0, 0]


def grad_u(torch, u):
    """G[i][j] = D_j u_i, clamped central differences: list of 3 lists of 3 tensors."""
    F = torch.nn.functional
    p = F.pad(u[None], (1, 1, 1, 1, 1, 1), mode="replicate")[0]
    dx = 0.5 * (p[:, 1:-1, 1:-1, 2:] - p[:, 1:-1, 1:-1, :-2])
    dy = 0.5 * (p[:, 1:-1, 2:, 1:-1] - p[:, 1:-1, :-2, 1:-1])
    dz = 0.5 * (p[:, 2:, 1:-1, 1:-1] - p[:, :-2, 1:-1, 1:-1])
    return [[dx[i], dy[i], dz[i]] for i in range(3)]


def energy(torch, T, R, u, lam):
    tw = sample(torch, T, u)
    e_data = 0.5 * ((tw - R) ** 2).sum()
    G = grad_u(torch, u)
    a = [[(1.0 if i == j else 0.0) - G[i][j] for j in range(3)] for i in range(3)]
    J = (a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) - a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0])
         + a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]))
    e_reg = ((J - 1.0) * torch.log(J)).sum()
    return e_data + lam * e_reg


def smooth(torch, f, sigma):
    F = torch.nn.functional
    r = int(math.ceil(3 * sigma))
    k = torch.exp(-torch.arange(-r, r + 1, dtype=f.dtype, device=f.device) ** 2 / (2 * sigma * sigma))
    k = k / k.sum()
    x = f[:, None]
    x = F.conv3d(x, k.view(1, 1, 1, 1, -1), padding=(0, 0, r))
    x = F.conv3d(x, k.view(1, 1, 1, -1, 1), padding=(0, r, 0))
    x = F.conv3d(x, k.view(1, 1, -1, 1, 1), padding=(r, 0, 0))
    return x[:, 0]


def upwind_u(torch, u, v):
    """H[i][j]: upwind difference of u_i along axis j (backward where v_j > 0, forward where
    v_j < 0, 0 where v_j == 0), on the replicate-padded field."""
    F = torch.nn.functional
    p = F.pad(u[None], (1, 1, 1, 1, 1, 1), mode="replicate")[0]
    c = p[:, 1:-1, 1:-1, 1:-1]
    minus = [p[:, 1:-1, 1:-1, :-2], p[:, 1:-1, :-2, 1:-1], p[:, :-2, 1:-1, 1:-1]]
    plus = [p[:, 1:-1, 1:-1, 2:], p[:, 1:-1, 2:, 1:-1], p[:, 2:, 1:-1, 1:-1]]
    H = [[None] * 3 for _ in range(3)]
    for j in range(3):
        back, fwd = c - minus[j], plus[j] - c
        d = torch.where(v[j] > 0, back, torch.where(v[j] < 0, fwd, torch.zeros_like(c)))
        for i in range(3):
            H[i][j] = d[i]
    return H


def iteration(torch, T, R, u, lam, sigma, delta):
    u = u.detach().requires_grad_(True)
    e = energy(torch, T, R, u, lam)
    (g,) = torch.autograd.grad(e, u)
    f = -g
    with torch.no_grad():
        v = smooth(torch, f, sigma)
        H = upwind_u(torch, u, v)
        rate = torch.stack([v[i] - (H[i][0] * v[0] + H[i][1] * v[1] + H[i][2] * v[2]) for i in range(3)])
        m = torch.maximum(rate.norm(dim=0), 0.5 * v.abs().sum(dim=0)).max().item()
        return (u + (delta / m) * rate).detach(), e.detach()


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
        print("registration_torch: no CUDA device; nothing to time", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    sizes = [32, 48] if args.tiny else ([128, 240] if args.quick else [128, 160, 192, 224, 240, 256])
    total = args.total_seconds or (20 if args.tiny else (60 if args.quick else 150))
    budget = Budget(case_s=10.0, single_s=20.0, total_s=total, max_reps=30, min_reps=3)
    lam, sigma, delta = 0.05, 1.0, 0.5
    results = []
    for n in sizes:
        rec = {"peer": "torch.autograd", "algorithm": "registration-iteration", "dim": 3, "size": n,
               "window": None, "patch_radius": None, "threads": None, "median_ms": None,
               "samples_ms": [], "status": "not run", "note": "",
               "params": {"lambda": lam, "sigma": sigma, "delta": delta}}
        try:
            if budget.left() <= 0:
                rec["status"], rec["note"] = "skipped", "run-time cap reached"
            else:
                R, u_true = make_inputs(torch, n, dev)
                T = sample(torch, R, -u_true)  # T(x) = R(x + u_true(x)) approximately
                state = {"u": torch.zeros(3, n, n, n, device=dev)}

                def run():
                    state["u"], e = iteration(torch, T, R, state["u"], lam, sigma, delta)
                    return e

                median, samples, warm, e = time_adaptive(run, budget, gpu=True)
                if not math.isfinite(float(e)):
                    raise RuntimeError("non-finite energy")
                rec.update(median_ms=median, samples_ms=samples, status="ok" if len(samples) > 1 else "single",
                           note=f"warm-up {warm}, {len(samples)} reps, energy {float(e):.6g}")
                del R, u_true, T, state
                torch.cuda.empty_cache()
        except Exception as ex:  # report, never a number
            rec["status"], rec["note"] = "error", f"{type(ex).__name__}: {ex}"
            traceback.print_exc()
        print(f"torch registration iteration {n}^3: {rec['status']} {rec['median_ms']}", flush=True)
        results.append(rec)

    doc = {"kind": "kortex-peers", "script": "registration_torch.py",
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "host": socket.gethostname(), "device": torch.cuda.get_device_name(0),
           "versions": {"python": platform.python_version(), "torch": torch.__version__,
                        "cuda": torch.version.cuda},
           "results": results}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
