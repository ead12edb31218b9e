#!/usr/bin/env bash
# elastix peer of the greedy registration study (kortex validate --greedy-only --elastix OUT):
# registers the same IXI pairs (fixed: the first subject of mri/ixi_2mm_more, moving: the next
# PAIRS subjects) with elastix as a new user would (Debian package `elastix`): an affine stage then
# a B-spline stage with an 8 mm final grid, Mattes mutual information, 4 resolutions each; then
# transformix warps the moving DLMUSE label map with nearest-neighbour interpolation onto the fixed
# grid, and writes the whole map as a deformation field (transformix -def all: an ITK world
# displacement field on the fixed grid). Writes, per pair, OUT/<moving>_to_<fixed>_labels.nii.gz,
# OUT/<moving>_to_<fixed>_field.nii.gz and OUT/<moving>_to_<fixed>.json ({"seconds": wall time of
# elastix, "threads": N}).
#
#   bench/peers/elastix_ixi.sh DATA_DIR OUT_DIR [PAIRS=10] [THREADS=2]
set -euo pipefail
DATA="$1"; OUT="$2"; PAIRS="${3:-10}"; THREADS="${4:-2}"
command -v elastix > /dev/null || { echo "elastix_ixi.sh: elastix is not installed (Debian package elastix)" >&2; exit 2; }
T1="$DATA/mri/ixi_2mm_more/t1"; LAB="$DATA/mri/ixi_2mm_more/labels"
[ -d "$T1" ] && [ -d "$LAB" ] || { echo "elastix_ixi.sh: $T1 or $LAB missing" >&2; exit 2; }
mkdir -p "$OUT"
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT

# The two stages share every setting but the transform (and the B-spline grid): elastix_common.sh.
. "$(dirname "${BASH_SOURCE[0]}")/elastix_common.sh"
elastix_affine_params > "$WORK/affine.txt"
{ elastix_params; printf '(Transform "BSplineTransform")\n(FinalGridSpacingInPhysicalUnits 8.0)\n'; } > "$WORK/bspline.txt"

mapfile -t IDS < <(ls "$T1" | sed -n 's/-T1_ds\.nii\.gz$//p' | sort)
FIXED="${IDS[0]}"
for ((k = 1; k <= PAIRS && k < ${#IDS[@]}; k++)); do
  MOVING="${IDS[$k]}"
  D="$WORK/$MOVING"; mkdir -p "$D"
  t0=$(date +%s.%N)
  elastix -f "$T1/$FIXED-T1_ds.nii.gz" -m "$T1/$MOVING-T1_ds.nii.gz" -p "$WORK/affine.txt" -p "$WORK/bspline.txt" \
    -out "$D" -threads "$THREADS" > "$D/elastix.log" 2>&1 || { echo "elastix failed on $MOVING (see $D/elastix.log)" >&2; tail -5 "$D/elastix.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  # Nearest-neighbour label warp: the final B-spline interpolation order 0 in the last parameter file.
  sed -i 's/(FinalBSplineInterpolationOrder 3)/(FinalBSplineInterpolationOrder 0)/' "$D/TransformParameters.1.txt"
  sed -i 's/(ResultImagePixelType "[a-z]*")/(ResultImagePixelType "short")/' "$D/TransformParameters.1.txt"
  grep -q ResultImagePixelType "$D/TransformParameters.1.txt" || echo '(ResultImagePixelType "short")' >> "$D/TransformParameters.1.txt"
  transformix -in "$LAB/$MOVING-T1_ds_DLMUSE.nii.gz" -tp "$D/TransformParameters.1.txt" -out "$D" > "$D/transformix.log" 2>&1 \
    || { echo "transformix failed on $MOVING" >&2; tail -5 "$D/transformix.log" >&2; exit 1; }
  mv "$D/result.nii.gz" "$OUT/${MOVING}_to_${FIXED}_labels.nii.gz"
  # The whole map (affine + B-spline) as an ITK world displacement field on the fixed grid, for the
  # study's det(Jacobian) statistics.
  mkdir -p "$D/def"
  transformix -def all -tp "$D/TransformParameters.1.txt" -out "$D/def" > "$D/def/transformix.log" 2>&1 \
    || { echo "transformix -def failed on $MOVING" >&2; tail -5 "$D/def/transformix.log" >&2; exit 1; }
  mv "$D/def/deformationField.nii.gz" "$OUT/${MOVING}_to_${FIXED}_field.nii.gz"
  secs=$(echo "$t1 - $t0" | bc -l)
  printf '{"seconds": %.3f, "threads": %d, "tool": "elastix %s"}\n' "$secs" "$THREADS" "$(elastix --version 2>/dev/null | head -n 1 | tr -d '"')" \
    > "$OUT/${MOVING}_to_${FIXED}.json"
  echo "elastix $MOVING -> $FIXED: ${secs} s"
done
