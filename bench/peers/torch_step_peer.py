#!/usr/bin/env python3
"""Run the reference PyTorch greedy step (a script given by path, e.g. ../shared/peers/greedy_torch_step.py:
force, periodic FFT Helmholtz solve, composition and warp by grid_sample, fp32, no fold check) and write its
timings as the peers JSON of `kortex bench greedy` (batch 1: "greedy-step") and `kortex bench atlas` (the
largest batch, per subject: "atlas-iteration").

    python3 bench/peers/torch_step_peer.py STEP_SCRIPT --greedy-out G.json --atlas-out A.json

The step script prints one line per batch size:
  "greedy step torch fp32, 144x192x160, batch B: X ms total, Y ms per subject -> ..."
after a first line "<device name> <torch version>". Its grid is z, y, x = 160, 192, 144.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("script")
    ap.add_argument("--greedy-out", required=True)
    ap.add_argument("--atlas-out", required=True)
    args = ap.parse_args()
    run = subprocess.run([sys.executable, args.script], capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        sys.stderr.write(run.stdout + run.stderr)
        return 1
    lines = run.stdout.strip().splitlines()
    if not lines:
        sys.stderr.write("the step script printed nothing\n")
        return 1
    head = lines[0].rsplit(" ", 1)
    device, torch_version = (head[0], head[1]) if len(head) == 2 else (lines[0], "?")
    pat = re.compile(r"(\d+)x(\d+)x(\d+), batch (\d+): ([0-9.]+) ms total, ([0-9.]+) ms per subject")
    rows = []
    for line in lines[1:]:
        m = pat.search(line)
        if m:
            nx, ny, nz, b, total, per = m.groups()
            rows.append({"size": [int(nz), int(ny), int(nx)], "batch": int(b), "median_ms": float(total),
                         "per_subject_ms": float(per)})
    if not rows:
        sys.stderr.write("no timing line in the step script's output:\n" + run.stdout)
        return 1
    common = {"device": device, "versions": {"torch": torch_version}, "source": args.script, "raw": lines}
    single = min(rows, key=lambda r: r["batch"])
    largest = max(rows, key=lambda r: r["batch"])
    greedy = dict(common, results=[{"algorithm": "greedy-step", "size": single["size"], "median_ms": single["median_ms"],
                                    "batch": single["batch"]}])
    atlas = dict(common, results=[dict(largest, algorithm="atlas-iteration")])
    with open(args.greedy_out, "w") as f:
        json.dump(greedy, f, indent=1)
    with open(args.atlas_out, "w") as f:
        json.dump(atlas, f, indent=1)
    print(f"greedy step batch {single['batch']}: {single['median_ms']:.3f} ms; batch {largest['batch']}: "
          f"{largest['per_subject_ms']:.3f} ms per subject ({device}, torch {torch_version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
