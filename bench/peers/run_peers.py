#!/usr/bin/env python3
"""Time the peers of Kortex's CT filters on the same inputs and sizes as `kortex bench ct`.

    python3 bench/peers/run_peers.py [--quick] [--threads N] [--selfcheck] --out peers.json

Peers (see peers_impl.py for how their definitions differ from Kortex's):
  OpenCV  cv2.bilateralFilter (float32) and cv2.fastNlMeansDenoising (uint8), 2D, at N threads
          (cv2.setNumThreads(N), default: all cores) and at 1 thread;
  scikit-image  restoration.denoise_nl_means(fast_mode=True), 2D and 3D, single-threaded;
  PyTorch (GPU, CUDA events)  unfold bilateral (2D), shift-and-accumulate bilateral (2D/3D),
          box-sum NLM with separable avg_pool (2D/3D).
Sizes: 256^2, 512^2, 1024^2 and 64^3, 128^3, 256^3 (quick: no 256^3), windows 7/11/17; NLM patch
7x7 in 2D (Table II) and 5^3 / 7^3 in 3D. Inputs: Shepp-Logan + SNR-25 noise, bit-for-bit the
C++ benchmark's up to libm rounding (kortex_inputs.py).

Every case is timed with warm-up and the median of its repetitions; a per-case budget and a
cost model learned from the previous (smaller) case skip what would not fit - such cases are
listed with status "skipped" and the estimate, never with a number. Full mode stays under about
4 minutes of wall time (--total-seconds); scikit-image 3D is far too slow beyond 64^3.

Output JSON (read by `kortex bench ct --peers FILE`): {"kind": "kortex-peers", "device",
"cpu", "versions", "threads", "results": [{"peer", "algorithm", "dim", "size", "window",
"patch_radius", "threads", "median_ms", "samples_ms", "status", "note", "params"}...]}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import sys
import time
import traceback

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ inside the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kortex_inputs as ki  # noqa: E402
import peers_impl as pi  # noqa: E402
from timing import Budget, CostModel, plan, time_adaptive  # noqa: E402



def usable_cores():
    """Cores this process may run on (its affinity mask: taskset, cgroups), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Runner:
    def __init__(self, args):
        self.args = args
        self.results = []
        self.cost = CostModel()
        self.inputs = {}
        self.quick = args.quick
        total = args.total_seconds if args.total_seconds > 0 else (90.0 if args.quick else 220.0)
        self.host_budget = Budget(case_s=1.5 if args.quick else 4.0, single_s=3.0 if args.quick else 10.0,
                                  total_s=total, max_reps=5 if args.quick else 10, min_reps=3)
        self.gpu_budget = Budget(case_s=1.0 if args.quick else 3.0, single_s=3.0 if args.quick else 8.0,
                                 total_s=total, max_reps=10 if args.quick else 20, min_reps=3)
        self.gpu_budget.start = self.host_budget.start

    def log(self, s):
        print(s, flush=True)

    def input(self, dim, n):
        key = (dim, n)
        if key not in self.inputs:
            self.inputs[key] = ki.noisy_phantom(dim, n)
        return self.inputs[key]

    def run_case(self, peer, algorithm, dim, n, window, patch_radius, threads, device, make_fn, params,
                 gpu=False, units=None, note=None):
        """make_fn() -> callable timed; returns nothing, appends a result."""
        entry = {"peer": peer, "algorithm": algorithm, "dim": dim, "size": n, "window": window,
                 "patch_radius": patch_radius, "threads": threads, "device": device,
                 "params": params}
        if note:
            entry["note"] = note
        units = units if units is not None else float(n ** dim) * float(window ** dim)
        key = (peer, threads, dim)
        est = self.cost.estimate(key, units)
        budget = self.gpu_budget if gpu else self.host_budget
        why = plan(est, budget)
        label = f"{peer} [{threads} thr] {algorithm} {dim}D {n}^{dim} w{window}" + \
            (f" p{2 * patch_radius + 1}" if patch_radius is not None else "")
        if why is not None:
            entry.update(status="skipped", note=why)
            if est is not None:
                entry["estimated_s_per_run"] = est
            self.results.append(entry)
            self.log(f"  {label}: skipped ({why})")
            return
        try:
            fn = make_fn()
            median, samples, warmup, out = time_adaptive(fn, budget, gpu)
            reps = len(samples)
            arr = out.detach().float().cpu().numpy() if gpu else np.asarray(out)
            if not np.all(np.isfinite(arr)):
                raise RuntimeError("non-finite output")
            entry.update(status="ok" if warmup > 0 else "single", median_ms=median,
                         min_ms=min(samples), samples_ms=samples, warmup=warmup, repetitions=reps)
            if warmup == 0:
                entry["note"] = (entry.get("note", "") + "; " if entry.get("note") else "") + \
                    "1 run, no warm-up (longer than the case budget allows repeating)"
            if est is not None:
                entry["estimated_s_per_run"] = est
            self.cost.learn(key, units, median * 1e-3)
            self.log(f"  {label}: {median:.4g} ms ({reps} reps, {warmup} warm-up)")
        except Exception as e:  # a peer that fails is reported, the others go on
            entry.update(status="error", note=f"{type(e).__name__}: {e}")
            self.log(f"  {label}: ERROR {e}")
            if self.args.verbose:
                traceback.print_exc()
        self.results.append(entry)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON output path")
    ap.add_argument("--quick", action="store_true", help="smaller budgets, no 256^3")
    ap.add_argument("--threads", type=int, default=usable_cores(),
                    help="OpenCV threads for the multi-threaded runs (default: the cores this process may use)")
    ap.add_argument("--total-seconds", type=float, default=0.0, help="wall-time cap (default 220, quick 90)")
    ap.add_argument("--selfcheck", action="store_true",
                    help="first check the PyTorch peers against a NumPy float64 reference on tiny images")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)

    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        ap.error(f"cannot write {args.out}: folder {out_dir} is missing or not writable")

    t0 = time.perf_counter()
    versions = {"python": platform.python_version(), "numpy": np.__version__}
    try:
        import cv2
        versions["opencv"] = cv2.__version__
    except ImportError:
        cv2 = None
    try:
        import skimage
        versions["scikit-image"] = skimage.__version__
    except ImportError:
        skimage = None
    try:
        import torch
        versions["torch"] = torch.__version__
        has_cuda = torch.cuda.is_available()
        if has_cuda:
            versions["cuda"] = torch.version.cuda
    except ImportError:
        torch = None
        has_cuda = False

    r = Runner(args)
    gpu_name = torch.cuda.get_device_name(0) if has_cuda else None
    r.log(f"Kortex peers ({'quick' if args.quick else 'full'}): CPU {cpu_model()} ({os.cpu_count()} cores), "
          f"GPU {gpu_name}, OpenCV threads {args.threads} and 1")

    selfcheck = None
    if args.selfcheck and torch is not None:
        selfcheck = run_selfcheck(torch, "cuda" if has_cuda else "cpu")
        r.log(f"  self-check (max |torch - numpy float64|): {selfcheck}")

    sizes2 = [256, 512, 1024]
    sizes3 = [64, 128] if args.quick else [64, 128, 256]
    windows = [7, 11, 17]
    notes = []

    # 1. OpenCV at N threads (the "20x faster than OpenCV on 16 cores" comparison).
    def opencv_pass(threads):
        cv2.setNumThreads(threads)
        for n in sizes2:
            img, sigma = r.input(2, n)
            u8, scale = pi.to_uint8(img)
            for w in windows:
                p = ki.bilateral_params(w, sigma)
                r.run_case("opencv.bilateralFilter", "bilateral", 2, n, w, None, threads, "cpu",
                           lambda p=p: pi.opencv_bilateral(cv2, img, p), p)
            for w in windows:
                p = ki.nlm_params(w, sigma, 3)
                pu = dict(p, h_uint8=p["h"] * scale)
                r.run_case("opencv.fastNlMeansDenoising", "nlm", 2, n, w, 3, threads, "cpu",
                           lambda p=p: pi.opencv_nlm(cv2, u8, scale, p), pu, note="uint8 input")

    if cv2 is not None:
        opencv_pass(args.threads)
    else:
        notes.append("OpenCV (cv2) not installed: skipped")

    # 2. PyTorch on the GPU.
    if torch is not None and has_cuda:
        with torch.no_grad():
            for n in sizes2:
                img, sigma = r.input(2, n)
                x = torch.from_numpy(img).cuda()
                for w in windows:
                    p = ki.bilateral_params(w, sigma)
                    r.run_case("torch.bilateral_unfold", "bilateral", 2, n, w, None, None, gpu_name,
                               lambda p=p: pi.torch_bilateral_unfold(torch, x, p), p, gpu=True)
                for w in windows:
                    p = ki.nlm_params(w, sigma, 3)
                    r.run_case("torch.nlm_boxsum", "nlm", 2, n, w, 3, None, gpu_name,
                               lambda p=p: pi.torch_nlm_boxsum(torch, x, p), p, gpu=True)
                del x
            for n in sizes3:
                img, sigma = r.input(3, n)
                x = torch.from_numpy(img).cuda()
                for w in windows:
                    p = ki.bilateral_params(w, sigma)
                    r.run_case("torch.bilateral_shift", "bilateral", 3, n, w, None, None, gpu_name,
                               lambda p=p: pi.torch_bilateral_shift(torch, x, p), p, gpu=True)
                for pr in (2, 3):
                    for w in windows:
                        p = ki.nlm_params(w, sigma, pr)
                        r.run_case(f"torch.nlm_boxsum", "nlm", 3, n, w, pr, None, gpu_name,
                                   lambda p=p: pi.torch_nlm_boxsum(torch, x, p), p, gpu=True,
                                   units=float(n ** 3) * float(w ** 3) * (2 * pr + 1))
                del x
                torch.cuda.empty_cache()
    else:
        notes.append("PyTorch with CUDA not available: GPU peers skipped")

    # 3. OpenCV at 1 thread.
    if cv2 is not None and args.threads != 1:
        opencv_pass(1)

    # 4. scikit-image (single-threaded; 3D only where it fits the budget).
    if skimage is not None:
        for n in sizes2:
            img, sigma = r.input(2, n)
            for w in windows:
                p = ki.nlm_params(w, sigma, 3)
                r.run_case("skimage.denoise_nl_means", "nlm", 2, n, w, 3, 1, "cpu",
                           lambda p=p: pi.skimage_nlm(img, p), p)
        for n in sizes3:
            img, sigma = r.input(3, n)
            for pr in (2, 3):
                for w in windows:
                    p = ki.nlm_params(w, sigma, pr)
                    r.run_case("skimage.denoise_nl_means", "nlm", 3, n, w, pr, 1, "cpu",
                               lambda p=p: pi.skimage_nlm(img, p), p,
                               units=float(n ** 3) * float(w ** 3))
        notes.append("scikit-image denoise_nl_means is single-threaded; its 3D mode is very slow, "
                     "so most 3D sizes are skipped by the budget (see each entry's note)")
    else:
        notes.append("scikit-image not installed: skipped")
    notes.append("OpenCV has no 3D bilateral or NLM")

    doc = {
        "kind": "kortex-peers",
        "mode": "quick" if args.quick else "full",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "hostname": socket.gethostname(),
        "device": gpu_name,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": {"opencv_multi": args.threads, "opencv_single": 1, "skimage": 1},
        "versions": versions,
        "inputs": "Shepp-Logan phantom + Gaussian noise at SNR 25, the C++ benchmark's images "
                  "(bench/peers/kortex_inputs.py); BF sigma_s = r/2, sigma_r = 2 sigma_n; NLM h = sigma_n",
        "timing": "median of repetitions after warm-up; CPU peers wall clock, GPU peers CUDA events "
                  "with data resident on the GPU",
        "definitions": pi.__doc__,
        "selfcheck_max_abs_diff": selfcheck,
        "notes": notes,
        "wall_seconds": time.perf_counter() - t0,
        "results": r.results,
    }
    tmp = args.out + f".tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, args.out)
    ok = sum(1 for e in r.results if e["status"] in ("ok", "single"))
    sk = sum(1 for e in r.results if e["status"] == "skipped")
    er = sum(1 for e in r.results if e["status"] == "error")
    r.log(f"wrote {args.out}: {ok} measured, {sk} skipped, {er} errors, {doc['wall_seconds']:.1f} s")
    return 1 if er else 0


def run_selfcheck(torch, device):
    """Max |torch peer - NumPy float64 Kortex definition| on tiny 2D/3D images."""
    res = {}
    with torch.no_grad():
        for dim, n in ((2, 19), (3, 9)):
            img, sigma = ki.noisy_phantom(dim, n)
            x = torch.from_numpy(img).to(device)
            bp = ki.bilateral_params(5, sigma)
            ref = pi.numpy_bilateral(img, bp)
            got = pi.torch_bilateral_shift(torch, x, bp)().cpu().numpy()
            res[f"bilateral_shift_{dim}d"] = float(np.max(np.abs(got - ref)))
            if dim == 2:
                got = pi.torch_bilateral_unfold(torch, x, bp)().cpu().numpy()
                res["bilateral_unfold_2d"] = float(np.max(np.abs(got - ref)))
            npar = ki.nlm_params(5 if dim == 2 else 3, sigma, 1 if dim == 3 else 2)
            ref = pi.numpy_nlm(img, npar)
            got = pi.torch_nlm_boxsum(torch, x, npar)().cpu().numpy()
            res[f"nlm_boxsum_{dim}d"] = float(np.max(np.abs(got - ref)))
    return res


if __name__ == "__main__":
    sys.exit(main())
