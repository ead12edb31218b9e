#!/usr/bin/env python3
"""Time an OpenCV multiresolution filter on the same inputs and sizes as `kortex bench multires`.

    python3 bench/peers/multires_opencv.py [--quick|--tiny] [--threads N] --out peers_multires.json

Pipeline (float32, per frame; the definitions of Kortex's core/Multires.hpp where OpenCV has them):
  decompose    g_0 = input; g_{k+1} = cv2.pyrDown(g_k) (5x5 binomial, every second sample, sizes
               ceil(n / 2), BORDER_REPLICATE = Kortex's clamp rule);
               l_k = g_k - cv2.pyrUp(g_{k+1}, dstsize = size of g_k)  (zero insertion, the same
               binomial, x4; pyrUp supports only BORDER_DEFAULT = reflect-101, Kortex clamps),
               k = 0 .. 4;
  filter       cv2.bilateralFilter(l_k, d = 5, sigmaColor = sigma_r, sigmaSpace = 2,
               BORDER_REPLICATE) on l_0 .. l_4 and on g_5. OpenCV keeps only the taps inside the
               circle of radius 2 (13 of the 25 taps of Kortex's 5x5 square) and takes the range
               weight from a table with linear interpolation over the layer's value range;
  reconstruct  g'_5 = BF(g_5); g'_k = l'_k + cv2.pyrUp(g'_{k+1}), k = 4 .. 0; the output is g'_0.
Input: the 10-bit noisy Shepp-Logan phantom of the C++ benchmark (kortex_inputs.py
noisy_phantom_10bit: the same values up to libm rounding), sigma_r = 2 sigma_n (grey levels).

Sizes 512^2 .. 8192^2 (--tiny: 64^2 and 128^2), at all threads (cv2.setNumThreads(N), default:
all cores) and at 4 threads (the paper's CPU setup). Every case: warm-up, median of the
repetitions; a per-case budget and a cost model learned from the previous (smaller) case skip
what would not fit (status "skipped" with the estimate, never a number). The output of every case
is checked finite; its PSNR against the clean phantom is recorded beside the noisy input's.

Output JSON (read by `kortex bench multires --peers FILE`), in the format of run_peers.py:
{"kind": "kortex-peers", "device", "cpu", "versions", "threads", "pipeline", "results": [{"peer":
"opencv.multires", "algorithm": "multires", "dim": 2, "size", "window": 5, "patch_radius": null,
"threads", "median_ms", "samples_ms", "status", "note", "params", "psnr_db", "psnr_noisy_db"}...]}.
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

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ inside the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kortex_inputs as ki  # noqa: E402
from run_peers import Runner, cpu_model  # noqa: E402

PAPER_THREADS = 4



def usable_cores():
    """Cores this process may run on (its affinity mask: taskset, cgroups), else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def opencv_multires(cv2, img: np.ndarray, p: dict):
    levels, d = p["levels"], 2 * p["radius"] + 1
    sr, ss = p["sigma_range"], p["sigma_spatial"]

    def bf(x):
        return cv2.bilateralFilter(x, d, sr, ss, borderType=cv2.BORDER_REPLICATE)

    def run():
        g = [img]
        for k in range(levels):
            g.append(cv2.pyrDown(g[k], borderType=cv2.BORDER_REPLICATE))
        size = [(x.shape[1], x.shape[0]) for x in g]  # (width, height) for dstsize
        lap = [g[k] - cv2.pyrUp(g[k + 1], dstsize=size[k]) for k in range(levels)]
        r = bf(g[levels])
        for k in reversed(range(levels)):
            r = bf(lap[k]) + cv2.pyrUp(r, dstsize=size[k])
        return r

    return run


def psnr(a: np.ndarray, ref: np.ndarray) -> float:
    rng = float(ref.max() - ref.min()) or float(ki.MULTIRES_MAX)
    mse = float(np.mean((a.astype(np.float64) - ref.astype(np.float64)) ** 2))
    return float("inf") if mse == 0.0 else 10.0 * np.log10(rng * rng / mse)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON output path")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smaller budgets")
    mode.add_argument("--tiny", action="store_true", help="64^2 and 128^2 only (smoke test)")
    ap.add_argument("--threads", type=int, default=usable_cores(),
                    help="OpenCV threads of the multi-threaded runs (default: the cores this process may use)")
    ap.add_argument("--total-seconds", type=float, default=0.0,
                    help="wall-time cap (default 150, quick 60, tiny 20)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        ap.error(f"cannot write {args.out}: folder {out_dir} is missing or not writable")
    try:
        import cv2
    except ImportError:
        ap.error("OpenCV (cv2) is not installed (Debian: apt-get install python3-opencv)")

    if args.total_seconds <= 0:
        args.total_seconds = 20.0 if args.tiny else (60.0 if args.quick else 150.0)
    args.quick = args.quick or args.tiny  # Runner's smaller per-case budgets
    t0 = time.perf_counter()
    r = Runner(args)
    r.log(f"Kortex multires peer ({'tiny' if args.tiny else 'quick' if args.quick else 'full'}): "
          f"CPU {cpu_model()} ({os.cpu_count()} cores), OpenCV {cv2.__version__}, "
          f"threads {args.threads} and {PAPER_THREADS}")
    sizes = [64, 128] if args.tiny else [512, 1024, 2048, 4096, 8192]
    thread_counts = [args.threads] + ([PAPER_THREADS] if PAPER_THREADS != args.threads else [])
    inputs = {}
    for threads in thread_counts:
        cv2.setNumThreads(threads)
        for n in sizes:
            if n not in inputs:
                inputs[n] = ki.noisy_phantom_10bit(n)
            noisy, clean, sigma = inputs[n]
            p = ki.multires_params(sigma)
            before = len(r.results)
            r.run_case("opencv.multires", "multires", 2, n, p["window"], None, threads, "cpu",
                       lambda p=p, noisy=noisy: opencv_multires(cv2, noisy, p), p,
                       units=float(n * n), note="float32; pyrDown/pyrUp + bilateralFilter d=5")
            if len(r.results) > before and r.results[-1]["status"] in ("ok", "single"):
                out = opencv_multires(cv2, noisy, p)()
                r.results[-1]["psnr_db"] = psnr(out, clean)
                r.results[-1]["psnr_noisy_db"] = psnr(noisy, clean)
            if n >= 4096:
                inputs.pop(n, None)

    doc = {
        "kind": "kortex-peers",
        "mode": "tiny" if args.tiny else ("quick" if args.quick else "full"),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "hostname": socket.gethostname(),
        "device": None,
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": {"opencv_multi": args.threads, "opencv_paper": PAPER_THREADS},
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "opencv": cv2.__version__},
        "inputs": "10-bit Shepp-Logan phantom + Gaussian noise at SNR 25, rounded and clamped to 0..1023, "
                  "float32 (bench/peers/kortex_inputs.py noisy_phantom_10bit); sigma_r = 2 sigma_n",
        "pipeline": "5 levels: cv2.pyrDown (BORDER_REPLICATE) / cv2.pyrUp (reflect-101), "
                    "cv2.bilateralFilter d=5 (circular window: 13 taps), sigmaSpace 2, sigmaColor 2 sigma_n, "
                    "on l_0..l_4 and g_5, float32",
        "timing": "median of repetitions after warm-up, wall clock",
        "definitions": __doc__,
        "notes": ["OpenCV's pyrUp border is reflect-101 and its bilateral window circular (13 of 25 taps): "
                  "the peer does less work per pixel than Kortex's 5x5 square window"],
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


if __name__ == "__main__":
    sys.exit(main())
