#!/usr/bin/env python3
"""Issue 43's summary of the papers' own kernels from ONE device session's full benchmark reports:
`kortex bench ct --peers ct_peers.json`, `kortex bench multires --peers multires_peers.json`,
`kortex bench register` (its PyTorch column) and `kortex bench surface` (+ the PyTorch kNN peer's JSON).
Writes bench/results/kernels_summary_<device>.json: each kernel's figure, the best peer of the same
session beside it, the goal, met or missed; the device and git hash, which must be the same in every
report (the script refuses reports of different sessions' builds or devices).

  python3 bench/kernels_summary.py --ct ct.json --multires multires.json --register register.json \
      --surface surface.json --surface-peers surface_peers.json --out kernels_summary_nvidia-h200.json
"""
import argparse
import json
import sys

# Issue 43's goals on an H200 (an H100's are scaled by its bandwidth ratio, not here).
GOALS = {
    "bf2d_ms": ("<=", 0.07),
    "nlm2d_ms": ("<=", 0.35),
    "nlm3d_ms": ("<=", 30.0),
    "multires4096_fps": (">=", 2000.0),
    "unbiased240_iteration_ms": ("<=", 1.5),
    "surface175k_s": ("<=", 0.1),
}


def load(path):
    with open(path) as f:
        return json.load(f)


def target(report, prefix, what):
    targets = report.get("targets")
    rows = targets if isinstance(targets, list) else []
    for t in rows:
        if str(t.get("name", "")).startswith(prefix):
            return t
    sys.exit(f"kernels_summary: the {what} report has no target '{prefix}...' (run the full benchmark)")


def best_ct_peer(peers, algorithm, dim, size, window, patch_radius=None):
    """The fastest CT peer (bench/peers/run_peers.py's results; "single": one timed run within its budget) on
    the goal's problem (any device, any threads)."""
    best = None
    for r in (peers or {}).get("results", []):
        if r.get("status") not in ("ok", "single") or r.get("algorithm") != algorithm or r.get("dim") != dim:
            continue
        if r.get("size") != size or r.get("window") != window:
            continue
        if patch_radius is not None and r.get("patch_radius") != patch_radius:
            continue
        if best is None or r["median_ms"] < best["median_ms"]:
            best = r
    if best is None:
        return None
    return {"peer": best["peer"], "device": best.get("device"), "threads": best.get("threads"), "ms": best["median_ms"]}


def best_checked_multires(mr, size):
    """The fastest end-to-end configuration at `size` among those whose output passed its checks at every
    size of Table 2 (every configuration is checked against the CPU reference at the smallest size): the
    same rule as the benchmark's own targets, applied here too so that a report of a build without it
    cannot put a failed configuration forward."""
    rows = mr.get("table2") or []
    failed = {name for r in rows for name, e in (r.get("kokkos") or {}).items() if e.get("status") == "check failed"}
    row = next((r for r in rows if r.get("size") == size), None)
    if row is None:
        sys.exit(f"kernels_summary: the multires report has no {size}^2 row in Table 2 (run the full benchmark)")
    ok = [(e["median_ms"], name) for name, e in (row.get("kokkos") or {}).items()
          if name not in failed and e.get("status") in ("ok", "single") and e.get("median_ms")]
    if not ok:
        sys.exit(f"kernels_summary: no configuration at {size}^2 passed its checks")
    ms, name = min(ok)
    return {"fps": 1000.0 / ms, "configuration": name, "excluded": sorted(failed)}


def best_multires_peer(mr, size):
    best = None
    for r in (mr.get("peers") or {}).get("results", []):
        if r.get("status") == "ok" and r.get("size") == size and (best is None or r["median_ms"] < best["median_ms"]):
            best = r
    if best is None:
        return None
    return {"peer": best["peer"], "threads": best.get("threads"), "fps": 1000.0 / best["median_ms"]}


def verdict(key, value):
    op, goal = GOALS[key]
    if value is None:
        return {"goal": f"{op} {goal}", "met": None}
    return {"goal": f"{op} {goal}", "met": value <= goal if op == "<=" else value >= goal}


def session_of(report):
    env = report.get("environment") or {}
    return env.get("git_hash"), env.get("device")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ct", required=True)
    ap.add_argument("--multires", required=True)
    ap.add_argument("--register", required=True)
    ap.add_argument("--surface", required=True)
    ap.add_argument("--surface-peers", help="bench/peers/surface_torch.py's JSON of the same session")
    ap.add_argument("--ct-peers", help="bench/peers/run_peers.py's JSON of the same session, when the CT report was "
                    "run without --peers (the peers ran beside it)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    reports = {"ct": load(a.ct), "multires": load(a.multires), "register": load(a.register), "surface": load(a.surface)}
    sessions = {k: session_of(r) for k, r in reports.items()}
    if len(set(sessions.values())) != 1:
        sys.exit("kernels_summary: the reports come from different builds or devices: " + json.dumps(sessions))
    git, device = next(iter(sessions.values()))
    ct, mr, reg, surf = reports["ct"], reports["multires"], reports["register"], reports["surface"]

    out = {"kind": "kortex-kernels-summary", "device": device, "git_hash": git, "kernels": {}}
    k = out["kernels"]
    ct_peers = ct.get("peers")
    if a.ct_peers:
        if ct_peers:
            sys.exit("kernels_summary: the CT report holds merged peers already; --ct-peers is for a report without")
        ct_peers = load(a.ct_peers)
    bf = target(ct, "BF 2D 1024^2", "ct")
    k["bf2d_ms"] = {"value": bf["best_ms"], "variant": bf.get("variant"),
                    "peer": best_ct_peer(ct_peers, "bilateral", 2, 1024, 17)}
    n2 = target(ct, "NLM 2D 1024^2", "ct")
    k["nlm2d_ms"] = {"value": n2["best_ms"], "variant": n2.get("variant"),
                     "peer": best_ct_peer(ct_peers, "nlm", 2, 1024, 17, 3)}
    n3 = target(ct, "NLM 3D 256^3", "ct")
    k["nlm3d_ms"] = {"value": n3.get("best_ms"), "variant": n3.get("variant"),
                     "peer": best_ct_peer(ct_peers, "nlm", 3, 256, 11, 2)}
    m = best_checked_multires(mr, 4096)
    k["multires4096_fps"] = {"value": m["fps"], "configuration": m["configuration"],
                             "excluded_failed_checks": m["excluded"], "peer": best_multires_peer(mr, 4096)}
    rt = reg.get("targets") or {}
    torch = next((r.get("torch_ms_per_iteration") for r in reg.get("fig2", []) if r.get("size") == 240), None)
    k["unbiased240_iteration_ms"] = {"value": rt.get("iteration_240_ms"),
                                     "peer": {"peer": "torch (bench/peers/registration_torch.py)", "ms": torch}
                                     if torch is not None else None}
    st = surf.get("targets") or {}
    peer = None
    if a.surface_peers:
        sp = load(a.surface_peers)
        res = [r for r in sp.get("results", []) if "median_s" in r]
        if res:
            r = min(res, key=lambda r: r["median_s"])
            peer = {"peer": r["name"], "device": sp.get("device"), "s": r["median_s"]}
    k["surface175k_s"] = {"value": st.get("weights_175k_s"), "variant": st.get("variant"), "peer": peer}
    for key, entry in k.items():
        entry.update(verdict(key, entry["value"]))
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    for key, entry in k.items():
        state = "not measured" if entry["met"] is None else ("met" if entry["met"] else "missed")
        print(f"{key}: {entry['value']} (goal {entry['goal']}: {state}); peer {entry['peer']}")


if __name__ == "__main__":
    main()
