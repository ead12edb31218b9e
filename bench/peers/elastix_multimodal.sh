#!/usr/bin/env bash
# elastix peer of the multi-modal study (kortex validate --only multimodal --multimodal-elastix OUT):
# elastix's affine stage with AdvancedMattesMutualInformation (32 bins, 4 resolutions, 500 iterations,
# as bench/peers/elastix_ixi.sh's affine stage) registers each second-contrast moving image that the
# study wrote (kortex validate --only multimodal --multimodal-images IMAGES) to the fixed subject's T1
# (the first subject of mri/ixi_2mm_more); transformix warps the moving DLMUSE label map with
# nearest-neighbour interpolation onto the fixed grid. Writes, per pair,
# OUT/<moving>_to_<fixed>_labels.nii.gz and OUT/<moving>_to_<fixed>.json ({"seconds": wall time of
# elastix, "threads": N}).
#
#   bench/peers/elastix_multimodal.sh IMAGES_DIR DATA_DIR OUT_DIR [THREADS=2]
set -euo pipefail
IMAGES="$1"; DATA="$2"; OUT="$3"; THREADS="${4:-2}"
command -v elastix > /dev/null || { echo "elastix_multimodal.sh: elastix is not installed (Debian package elastix)" >&2; exit 2; }
T1="$DATA/mri/ixi_2mm_more/t1"; LAB="$DATA/mri/ixi_2mm_more/labels"
[ -d "$T1" ] && [ -d "$LAB" ] || { echo "elastix_multimodal.sh: $T1 or $LAB missing" >&2; exit 2; }
ls "$IMAGES"/*_contrast.nii.gz > /dev/null 2>&1 || { echo "elastix_multimodal.sh: no <moving>_contrast.nii.gz in $IMAGES" >&2; exit 2; }
mkdir -p "$OUT"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
# elastix_ixi.sh's affine stage (elastix_common.sh).
. "$(dirname "${BASH_SOURCE[0]}")/elastix_common.sh"
elastix_affine_params > "$WORK/affine.txt"
FIXED=$(ls "$T1" | sed -n 's/-T1_ds\.nii\.gz$//p' | sort | head -n 1)
for IMG in "$IMAGES"/*_contrast.nii.gz; do
  MOVING=$(basename "$IMG" _contrast.nii.gz)
  D="$WORK/$MOVING"; mkdir -p "$D"
  t0=$(date +%s.%N)
  elastix -f "$T1/$FIXED-T1_ds.nii.gz" -m "$IMG" -p "$WORK/affine.txt" -out "$D" -threads "$THREADS" > "$D/elastix.log" 2>&1 \
    || { echo "elastix failed on $MOVING (see $D/elastix.log)" >&2; tail -5 "$D/elastix.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  sed -i 's/(FinalBSplineInterpolationOrder 3)/(FinalBSplineInterpolationOrder 0)/' "$D/TransformParameters.0.txt"
  sed -i 's/(ResultImagePixelType "[a-z]*")/(ResultImagePixelType "short")/' "$D/TransformParameters.0.txt"
  grep -q ResultImagePixelType "$D/TransformParameters.0.txt" || echo '(ResultImagePixelType "short")' >> "$D/TransformParameters.0.txt"
  transformix -in "$LAB/$MOVING-T1_ds_DLMUSE.nii.gz" -tp "$D/TransformParameters.0.txt" -out "$D" > "$D/transformix.log" 2>&1 \
    || { echo "transformix failed on $MOVING" >&2; tail -5 "$D/transformix.log" >&2; exit 1; }
  mv "$D/result.nii.gz" "$OUT/${MOVING}_to_${FIXED}_labels.nii.gz"
  secs=$(echo "$t1 - $t0" | bc -l)
  printf '{"seconds": %.3f, "threads": %d, "tool": "elastix %s"}\n' "$secs" "$THREADS" "$(elastix --version 2>/dev/null | head -n 1 | tr -d '"')" \
    > "$OUT/${MOVING}_to_${FIXED}.json"
  echo "elastix $MOVING -> $FIXED: ${secs} s"
done
