#!/usr/bin/env bash
# Runs Kortex's GPU checks and benchmarks on a GPU machine from binaries built with the `cuda`
# preset (Kokkos 4.x + CUDA). Nothing is built here, and Kokkos is never built by this script.
#
#   bench/run_device.sh BIN_DIR OUT_DIR check   # device facts, every test binary on every
#                                               # execution space, full validation, peers
#   bench/run_device.sh BIN_DIR OUT_DIR bench   # kortex bench ct (full), merging peers.json
#
# BIN_DIR holds kortex and the test executables (tstCore tstReferenceCpu tstBilateral tstNlm
# tstValidation). Results land in OUT_DIR; commit them under bench/results/ with the device name.
set -u -o pipefail
BIN="$1"; OUT="$2"; PART="${3:-check}"
mkdir -p "$OUT"
export OMP_PROC_BIND=false OMP_PLACES=cores
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
status=0

if [ "$PART" = "check" ]; then
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
    nproc; lscpu | grep -E "Model name|Socket|Core"
  } > "$OUT/device.txt" 2>&1
  "$BIN/kortex" info --json "$OUT/info.json" > /dev/null || status=1
  for t in tstCore tstReferenceCpu tstBilateral tstNlm tstValidation; do
    echo "=== $t" >> "$OUT/tests.log"
    if timeout 300 "$BIN/$t" --log_level=test_suite --report_level=short >> "$OUT/tests.log" 2>&1; then
      echo "PASS $t"
    else
      echo "FAIL $t"; status=1
    fi
  done
  timeout 300 "$BIN/kortex" validate --json "$OUT/validate.json" --markdown "$OUT/validate.md" \
    > "$OUT/validate.log" 2>&1 || { echo "FAIL validate"; status=1; }
  tail -n 5 "$OUT/validate.log"
  timeout 240 python3 bench/peers/run_peers.py --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1 \
    || { echo "FAIL peers"; status=1; }
  tail -n 3 "$OUT/peers.log"
elif [ "$PART" = "bench" ]; then
  peers=()
  if [ -n "${PEERS:-}" ] && [ -f "$PEERS" ]; then peers=(--peers "$PEERS"); fi
  "$BIN/kortex" bench ct --json "$OUT/ct.json" --markdown "$OUT/ct.md" "${peers[@]}" \
    > "$OUT/bench.log" 2> "$OUT/bench.progress" || status=1
  tail -n 60 "$OUT/bench.log"
else
  echo "unknown part '$PART' (check|bench)"; exit 2
fi
exit $status
