#!/usr/bin/env bash
# CLI on real data (../shared/data or $KORTEX_DATA_DIR): an IXI volume through the whole chain, a
# truncated copy that must fail cleanly, the registration of an IXI pair and the quick surface
# study. Exits 77 (ctest: Skipped) with a message when the data is absent; any failed check
# fails the test. The synthetic CLI contract is cli_test.sh.
# Usage: cli_realdata_test.sh /path/to/kortex [DATA_DIR]
set -u
KORTEX="$1"
DATA="${2:-}"
if [ -n "${KORTEX_DATA_DIR:-}" ]; then DATA="$KORTEX_DATA_DIR"; fi
ixi="$DATA/mri/ixi_2mm/IXI012-HH-1211-T1_ds.nii.gz"
if [ -z "$DATA" ] || [ ! -f "$ixi" ]; then
  echo "skipped: real data 'mri/ixi_2mm/IXI012-HH-1211-T1_ds.nii.gz' not found in '${DATA}'" \
       "(set KORTEX_DATA_DIR or provide ../shared/data)"
  exit 77
fi
DATA="$(cd "$DATA" && pwd)"  # the checks run in a temporary folder
ixi="$DATA/mri/ixi_2mm/IXI012-HH-1211-T1_ds.nii.gz"
# shellcheck source=cli_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

# A 2D image for the "3D vs 2D" refusal.
mha good.mha 2 "16 12" "$(rep "$one" 192)"

expect_success "ixi nlm 3d" ixi_out.nii.gz "$KORTEX" denoise nlm "$ixi" ixi_out.nii.gz --patch-radius 1 --search-radius 2 --h 40
head -c 20000 "$ixi" > truncated.nii.gz
expect_error "truncated nifti.gz" out.nii "$KORTEX" denoise nlm truncated.nii.gz out.nii
gzip -dc "$ixi" | head -c 100000 > truncated.nii
expect_error "truncated nifti" out.nii "$KORTEX" denoise bilateral truncated.nii out.nii
ixi2="$DATA/mri/ixi_2mm/IXI013-HH-1212-T1_ds.nii.gz"
expect_success "register IXI pair (kokkos, 10 iterations)" rw.nii.gz "$KORTEX" register unbiased --fixed "$ixi" \
  --moving "$ixi2" --out-warped rw.nii.gz --out-field rf.nii.gz --out-affine ra.txt --backend kokkos --iterations 10 --quiet
grep -q "affine: NCC" stdout.txt || fail "register IXI: no affine report"
[ -s rf.nii.gz ] && [ -s ra.txt ] || fail "register IXI: field or affine not written"
expect_success "surface study quick (ICBM152 + IXI white matter crops)" sv.json "$KORTEX" validate --surface-only --quick \
  --data "$DATA" --json sv.json
rm -rf atlas_montages
expect_success "atlas study quick (IXI cohorts of 2 and 4, held-out labels)" av.json "$KORTEX" validate --atlas-only --quick \
  --data "$DATA" --json av.json --montages atlas_montages
grep -q '"atlas"' av.json && grep -q '"held_out_dice"' av.json || fail "atlas study: no atlas report in the JSON"
ls atlas_montages/atlas_templates.* > /dev/null 2>&1 || fail "atlas study: no montage"
# The greedy study, quick, one pair, with a peer folder in the elastix/FireANTs file convention made
# by Kortex itself (register greedy's field, apply's nearest-label warp, a JSON with "seconds").
more="$DATA/mri/ixi_2mm_more"
if [ -d "$more/t1" ]; then
  mapfile -t ids < <(ls "$more/t1" | sed -n 's/-T1_ds\.nii\.gz$//p' | sort)
  fx="${ids[0]}"; mv="${ids[1]}"; stem="${mv}_to_${fx}"
  rm -rf peer && mkdir peer
  expect_success "mock peer: register greedy" peer/${stem}_field.nii.gz "$KORTEX" register greedy \
    --fixed "$more/t1/$fx-T1_ds.nii.gz" --moving "$more/t1/$mv-T1_ds.nii.gz" --out-warped peer_w.nii.gz \
    --out-field peer/${stem}_field.nii.gz --out-affine peer_a.txt --scales 2,1 --iterations 5,5 --backend kokkos --quiet
  expect_success "mock peer: apply labels" peer/${stem}_labels.nii.gz "$KORTEX" apply \
    --input "$more/labels/$mv-T1_ds_DLMUSE.nii.gz" --reference "$more/t1/$fx-T1_ds.nii.gz" \
    --transform peer/${stem}_field.nii.gz --transform peer_a.txt --interpolation nearest --out peer/${stem}_labels.nii.gz
  echo '{"seconds": 1000.0, "tool": "mock peer"}' > peer/${stem}.json
  expect_success "greedy study quick (1 pair, SSD + LNCC, mock FireANTs folder)" gv.json "$KORTEX" validate --only greedy \
    --quick --data "$DATA" --greedy-pairs 1 --skip-unbiased --fireants peer --json gv.json --markdown gv.md
  for key in '"greedy_ssd"' '"greedy_lncc"' '"fireants"' '"fold_share_all"' '"fold_share_head"' '"min_head"' \
             '"inverse_consistency"' '"cpu_vs_kokkos"' '"dice_vs_fireants"' '"speedup_vs_fireants"' '"best_greedy"'; do
    grep -q "$key" gv.json || fail "greedy study: no $key in the JSON"
  done
  # The peer's field was read (det statistics) and its seconds taken from its JSON.
  grep -A3 '"fireants"' gv.json | grep -q '"dice"' || fail "greedy study: the FireANTs column is empty"
  grep -q '"seconds": 1000.0' gv.json || fail "greedy study: the peer's seconds were not read"
  grep -q "Inverse consistency" gv.md && grep -q "Goals of issue 28" gv.md && grep -q "greedy LNCC" gv.md \
    || fail "greedy study: a table is missing from the Markdown"
  expect_error "greedy study: --fireants not a folder" gv2.json "$KORTEX" validate --only greedy --quick \
    --data "$DATA" --fireants peer/${stem}.json --json gv2.json
  # The multi-modal study (issue 41): its second-contrast images written for peers, and a mock elastix
  # folder whose "warped" labels are the fixed subject's own (Dice 1) read back with its seconds.
  rm -rf mmi mel && mkdir mel
  cp "$more/labels/$fx-T1_ds_DLMUSE.nii.gz" mel/${stem}_labels.nii.gz
  echo '{"seconds": 7.5, "tool": "mock elastix"}' > mel/${stem}.json
  expect_success "multimodal study quick (1 pair, mock elastix folder)" mm.json "$KORTEX" validate --only multimodal \
    --quick --data "$DATA" --greedy-pairs 1 --multimodal-images mmi --multimodal-elastix mel --json mm.json --markdown mm.md
  [ -s mmi/${mv}_contrast.nii.gz ] || fail "multimodal study: the second-contrast image was not written"
  grep -q '"dice_elastix_affine_mi": 1.0' mm.json || fail "multimodal study: the elastix labels were not read"
  grep -q '"seconds_elastix_affine_mi": 7.5' mm.json || fail "multimodal study: the elastix seconds were not read"
  for key in '"dice_affine_ncc"' '"dice_affine_mi"' '"dice_greedy_mi"' '"dice_greedy_lncc"' '"dice_t1_greedy_lncc"' \
             '"dice_greedy_mi_bias_corrected"' '"dice_greedy_mi_cpu"'; do
    grep -q "$key" mm.json || fail "multimodal study: no $key in the JSON"
  done
  grep -q "elastix's affine AdvancedMattesMutualInformation" mm.md || fail "multimodal study: no elastix table"
  expect_error "multimodal study: --multimodal-elastix not a folder" mm2.json "$KORTEX" validate --only multimodal \
    --quick --data "$DATA" --multimodal-elastix mel/${stem}.json --json mm2.json
fi
# Atlas labels carried back onto each subject (issue 28): the majority of the DLMUSE maps in template
# space, through each subject's inverse field; label interpolation keeps the label set. Refused for
# float "label maps" and without label maps.
LAB="$DATA/mri/ixi_2mm_labels"
S3=(IXI012-HH-1211 IXI013-HH-1212 IXI014-HH-1236)
IM=(); LB=(); for s in "${S3[@]}"; do IM+=("$DATA/mri/ixi_2mm/$s-T1_ds.nii.gz"); LB+=("$LAB/$s-T1_ds_DLMUSE.nii.gz"); done
rm -rf sublab; mkdir -p sublab
expect_success "atlas subject labels (kokkos)" sublab/IXI013-HH-1212-T1_ds_atlas_labels.nii.gz "$KORTEX" atlas build \
  "${IM[@]}" --labels "${LB[@]}" --out-template at.nii.gz --out-subject-labels sublab --out-fields sublab \
  --iterations 4,4 --backend kokkos --quiet
[ -s sublab/IXI014-HH-1236-T1_ds_atlas_labels.nii.gz ] && [ -s sublab/IXI012-HH-1211-T1_ds_inverse_field.nii.gz ] \
  || fail "atlas subject labels: a subject's labels or inverse field not written"
expect_error "atlas subject labels without label maps" at2.nii.gz "$KORTEX" atlas build "${IM[@]}" --out-template at2.nii.gz \
  --out-subject-labels sublab2 --iterations 2,2 --quiet
expect_error "atlas subject labels from float maps" at2.nii.gz "$KORTEX" atlas build "${IM[@]}" --labels "${IM[@]}" \
  --out-template at2.nii.gz --out-subject-labels sublab --iterations 2,2 --quiet
grep -q "integer labels" stderr.txt && ok || fail "atlas subject labels from float maps: wrong message"
# The head CT slices were acquired with an 18.5 degree gantry tilt: the folder is refused as a
# series, with one message, and nothing is written.
expect_error "tilted CT series (folder)" ct_out.nii.gz "$KORTEX" denoise nlm "$DATA/ct/head_ge" ct_out.nii.gz
grep -q "gantry tilt" stderr.txt && ok || fail "tilted CT series: not the gantry-tilt message"
expect_error "register IXI vs 2D" rw.nii.gz "$KORTEX" register unbiased --fixed "$ixi" --moving good.mha --out-warped rw.nii.gz

finish
