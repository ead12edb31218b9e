#!/usr/bin/env python3
"""Merges the reports of `kortex bench atlas --only Scaling` run under 1, 2, 4 ... ranks (one rank per
GPU) into one scaling table: time per whole atlas and per iteration, its split (set-up, compute, sums
over ranks), speed-up and strong-scaling efficiency against the 1-rank run, the run-time model of
core/Atlas.hpp against the measurement, and whether every template equals the 1-rank one (FNV-1a of
its bytes; with --dump, the largest voxel difference as well). Also extrapolates the model to
--predict ranks from the largest run's dry-run costs and sums (said so in the report).

  python3 bench/atlas_scaling.py --out-md scaling.md --out-json scaling.json [--dump DIR] r1.json r2.json r4.json
"""
import argparse
import json
import math
import os
import sys


def even(n, k):
    base, extra = divmod(n, k)
    return [base + (1 if r < extra else 0) for r in range(k)]


def predict(model, counts):
    its = model["iterations"]
    gpu = cpu = 0.0
    for r, c in enumerate(model["ranks"]):
        rr = model["ranks"][r % len(model["ranks"])]
        g = sum(it * (rr["fixed_s"][s] + counts[r] * rr["per_subject_s"][s]) for s, it in enumerate(its))
        gpu = max(gpu, g)
        cpu = max(cpu, counts[r] * rr["setup_per_subject_s"])
    net = sum(it * model["network_per_iteration_s"][s] for s, it in enumerate(its))
    return gpu, cpu, net


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--dump", help="folder of the runs' templates (kortex bench atlas --dump)")
    ap.add_argument("--predict", type=int, default=8, help="ranks to extrapolate the model to")
    ap.add_argument("--device-kind", default="", help="the machine kind, for the title")
    a = ap.parse_args()

    runs = []
    for path in a.reports:
        try:
            with open(path) as f:
                j = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f"atlas_scaling.py: cannot read {path}: {e}")
        if "scaling" not in j:
            sys.exit(f"atlas_scaling.py: {path} has no Scaling section (kortex bench atlas --only Scaling)")
        runs.append(j)
    runs.sort(key=lambda j: j["scaling"]["ranks"])
    if runs[0]["scaling"]["ranks"] != 1:
        sys.exit("atlas_scaling.py: the 1-rank report is needed as the baseline")

    env = runs[0].get("environment", {})
    rows = []
    for j in runs:
        for r in j["scaling"]["rows"]:
            if r.get("available"):
                rows.append(dict(r, group=j["scaling"]["group"]))
    base = {r["subjects"]: r for r in rows if r["ranks"] == 1}
    fails = []

    def voxel_diff(r):
        if not a.dump:
            return None
        try:
            import numpy as np
        except ImportError:
            return None
        f0 = os.path.join(a.dump, f"atlas_template_{r['subjects']}_ranks1_none.f32")
        f1 = os.path.join(a.dump, f"atlas_template_{r['subjects']}_ranks{r['ranks']}_{r['path']}.f32")
        if not (os.path.exists(f0) and os.path.exists(f1)):
            return None
        x0, x1 = np.fromfile(f0, dtype=np.float32), np.fromfile(f1, dtype=np.float32)
        return float(np.max(np.abs(x0.astype(np.float64) - x1))) if x0.size == x1.size else float("inf")

    md = [f"# Atlas scaling over GPUs{' (' + a.device_kind + ')' if a.device_kind else ''}\n",
          f"Device: {env.get('device', '?')}, git {env.get('git_hash', '?')}, grid {runs[0]['scaling']['grid']}, "
          f"schedule {runs[0]['scaling']['schedule']}. One MPI rank per GPU (OpenMPI, `mpirun -np K`); "
          "every rank holds its block of subjects on its GPU. Times are the max over ranks; 'sums' includes waiting "
          "for the slowest rank. Efficiency = T(1) / (K T(K)). Model: T_GPU + T_CPU + T_network (core/Atlas.hpp) "
          "from each run's dry run.\n"]
    out_rows = []
    for n in sorted({r["subjects"] for r in rows}):
        b = base.get(n)
        md.append(f"\n## {n} subjects\n")
        md.append("| GPUs | sums path | seconds | set-up s | compute s | sums s | iteration ms (x1) | speed-up | efficiency "
                  "| model s | model error | template = 1 GPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in sorted((r for r in rows if r["subjects"] == n), key=lambda r: (r["ranks"], r["path"])):
            sp = b["seconds"] / r["seconds"] if b else float("nan")
            eff = sp / r["ranks"]
            m = r["model"]["total_s"]
            err = (m - r["seconds"]) / r["seconds"]
            same = b is not None and r["template_fnv1a"] == b["template_fnv1a"]
            d = voxel_diff(r)
            same_txt = ("yes (same bits)" if same else "**NO**") + ("" if d is None else f", max diff {d:.3g}")
            if not same:
                fails.append(f"{n} subjects, {r['ranks']} ranks, {r['path']}: template differs from 1 GPU")
            md.append(f"| {r['ranks']} | {r['path']} | {r['seconds']:.2f} | {r['setup_s']:.2f} | {r['compute_s']:.2f} | "
                      f"{r['reduce_s']:.2f} | {1e3 * r['iteration_s_per_scale'][-1]:.1f} | {sp:.2f}x | {100 * eff:.0f} % | "
                      f"{m:.2f} | {100 * err:+.0f} % | {same_txt} |")
            out_rows.append({"subjects": n, "ranks": r["ranks"], "path": r["path"], "seconds": r["seconds"],
                             "setup_s": r["setup_s"], "compute_s": r["compute_s"], "reduce_s": r["reduce_s"],
                             "iteration_s": r["iteration_s_per_scale"][-1], "speedup": sp, "efficiency": eff,
                             "model_s": m, "model": r["model"], "template_equal": same, "max_voxel_diff": d,
                             "per_rank": r["per_rank"]})
        # Extrapolation from the largest run's costs (its ranks' dry runs cycled, its sums' time).
        big = max((r for r in rows if r["subjects"] == n), key=lambda r: (r["ranks"], -r["seconds"]))
        k = a.predict
        if k > big["ranks"] and n >= k:
            g, c, net = predict(big["model"], even(n, k))
            md.append(f"\nModel extrapolated to {k} GPUs from the {big['ranks']}-GPU run's dry-run costs and its measured "
                      f"sums ({big['path']}; the sums of {k} ranks are not measured): {g + c + net:.2f} s "
                      f"(GPU {g:.2f} + CPU {c:.2f} + network {net:.2f})"
                      + (f", efficiency {100 * b['seconds'] / (k * (g + c + net)):.0f} % against the measured 1 GPU." if b else "."))
            out_rows.append({"subjects": n, "ranks": k, "path": big["path"], "extrapolated_model_s": g + c + net,
                             "model_split_s": [g, c, net]})
    md.append("")
    if fails:
        md.append("**FAILED:** " + "; ".join(fails))
    with open(a.out_md, "w") as f:
        f.write("\n".join(md) + "\n")
    with open(a.out_json, "w") as f:
        json.dump({"kind": "kortex-atlas-scaling", "environment": env, "rows": out_rows, "failed": fails}, f, indent=2)
    print("\n".join(md))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
