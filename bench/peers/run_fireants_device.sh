#!/usr/bin/env bash
# FireANTs peer of the greedy study (issue 28) on the GPU machine, from the repository root:
#
#   OUT=<dir> bench/peers/run_fireants_device.sh [PAIRS=20]
#
# Carried (see bench/peers/fireants_ixi.py's header for how to make them):
#   .carry/fireants   FireANTs' source (git archive of fireants/ fused_ops/ ...) + COMMIT
#   .carry/data       mri/ixi_2mm_more/{t1,labels} (22 MB)
#   .carry/ffo        optional: a fireants_fused_ops*.so built earlier on the same image (this
#                     script copies the one it builds to $OUT when under 16 MB; the sm_90 build is
#                     35 MB, so it is usually rebuilt: about 150 s on 6 of the machine's 16 cores)
# Environment: FIREANTS (.carry/fireants), DATA (.carry/data), DEST (/tmp/fireants_ixi: the per-pair
# files, fields included, for `kortex validate` in the same command), FUSED=0 (PyTorch ops only),
# EXTRA (more fireants_ixi.py options, e.g. "--preset lpba40").
# Back in $OUT: fireants_ixi.tar.gz (labels, json, logs; not the 14 MB fields), fused_ops_build.log,
# and fireants_fused_ops*.so when built here (under 16 MB).
set -u -o pipefail
PAIRS="${1:-20}"
SRC="${FIREANTS:-.carry/fireants}"; DATA="${DATA:-.carry/data}"; DEST="${DEST:-/tmp/fireants_ixi}"
OUT="${OUT:-/tmp/fireants_out}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
mkdir -p "$DEST" "$OUT"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  nvcc --version | tail -n 2; } 2>&1 | tee "$DEST/device.txt"

FFO=(--no-fused)
if [ "${FUSED:-1}" = 1 ]; then
  if ls .carry/ffo/fireants_fused_ops*.so > /dev/null 2>&1; then
    FFO=(--fused-ops .carry/ffo); echo "fused ops: carried $(ls .carry/ffo/fireants_fused_ops*.so)"
  else
    # FireANTs' README: cd fused_ops && python setup.py build_ext (&& install); here in place, sm_90 only.
    rm -rf /tmp/ffo && cp -r "$SRC/fused_ops" /tmp/ffo
    t0=$(date +%s)
    # build_ext --inplace leaves the module in the package folder (fused_ops/src), not at the top.
    so=""
    if (cd /tmp/ffo && TORCH_CUDA_ARCH_LIST="9.0" MAX_JOBS=${FFO_JOBS:-16} python3 setup.py build_ext --inplace) \
        > "$OUT/fused_ops_build.log" 2>&1; then
      so=$(find /tmp/ffo -name 'fireants_fused_ops*.so' -not -path '*/build/*' | head -n 1)
    fi
    if [ -n "$so" ]; then
      FFO=(--fused-ops "$(dirname "$so")")
      echo "fused ops built in $(( $(date +%s) - t0 )) s: $so"
      [ "$(stat -c %s "$so")" -lt 16000000 ] && cp "$so" "$OUT/"
    else
      echo "fused ops build FAILED (fused_ops_build.log); running with PyTorch ops"; tail -n 5 "$OUT/fused_ops_build.log"
    fi
  fi
fi

# shellcheck disable=SC2086
python3 bench/peers/fireants_ixi.py "$DATA" "$DEST" --pairs "$PAIRS" --fireants "$SRC" "${FFO[@]}" ${EXTRA:-} \
  2>&1 | tee "$DEST/fireants_ixi.log"
rc=${PIPESTATUS[0]}
tar -czf "$OUT/fireants_ixi.tar.gz" -C "$DEST" --exclude='*_field.nii.gz' .
exit "$rc"
