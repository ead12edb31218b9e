#!/usr/bin/env bash
# CLI contract test: every subcommand has --help; every bad input gives ONE error message, a
# non-zero exit and leaves no output file (nor temporary file) behind; good runs produce output.
# Synthetic inputs only: the real-data runs are cli_realdata_test.sh.
# Usage: cli_test.sh /path/to/kortex
set -u
KORTEX="$1"
# shellcheck source=cli_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"

# --- help on every subcommand -----------------------------------------------------------
for sub in "" "info" "denoise" "denoise bilateral" "denoise nlm" "denoise multires" "validate" "bench" "bench ct" "bench register" "bench surface" "bench greedy" "bench atlas" "register" "register unbiased" "register greedy" "atlas" "atlas build" "apply" "surface" "surface denoise" "reproduce" "tune"; do
  # shellcheck disable=SC2086
  if "$KORTEX" $sub --help > help.txt 2>&1 && grep -q -i "usage" help.txt; then ok; else fail "--help for '$sub'"; fi
done

expect_success "info" "" "$KORTEX" info
expect_success "--version" "" "$KORTEX" --version
grep -q "^kortex [0-9]*\.[0-9]*\.[0-9]* (git " stdout.txt && ok || fail "--version: $(cat stdout.txt)"
"$KORTEX" --help > help.txt 2>&1
grep -q "^Register images and build templates:" help.txt && [ "$(grep -n "^Register images" help.txt | cut -d: -f1)" -lt "$(grep -n "^Check and measure" help.txt | cut -d: -f1)" ] \
  && ok || fail "kortex --help: the commands are not grouped by task, the users' first"

# --- inputs ----------------------------------------------------------------------------
mha good.mha 2 "16 12" "$(rep "$one" 192)"
mha nan.mha 2 "16 12" "$(rep "$one" 100)$nan$(rep "$one" 91)"
mha inf.mha 2 "16 12" "$(rep "$one" 50)$inf$(rep "$one" 141)"
mha four.mha 4 "4 4 2 2" "$(rep "$one" 64)"
mha zero.mha 2 "0 12" ""
mha truncated.mha 2 "16 12" "$(rep "$one" 10)"
mkdir -p adir ro
chmod 555 ro
printf 'this is not an image' > garbage.nii

expect_success "bilateral cpu" out.mha "$KORTEX" denoise bilateral good.mha out.mha --backend cpu --radius 2
expect_success "bilateral kokkos naive" out.mha "$KORTEX" denoise bilateral good.mha out.mha --backend kokkos --variant naive
expect_success "nlm kokkos boxsum" out.nii.gz "$KORTEX" denoise nlm good.mha out.nii.gz --backend kokkos --variant boxsum --patch-radius 1 --search-radius 2 --h 0.1
expect_success "nlm cpu" out.vti "$KORTEX" denoise nlm good.mha out.vti --backend cpu --patch-radius 1 --search-radius 2

# --- multires (issue 3) ---------------------------------------------------------------------
three='\x00\x00\x40\x40'  # 3.0f
half='\x00\x00\x00\x3f'   # 0.5f
mha ints.mha 2 "32 24" "$(rep "$one$three$three" 256)"
mha halves.mha 2 "32 24" "$(rep "$one$half$three" 256)"
mha vol.mha 3 "8 8 3" "$(rep "$one" 192)"
expect_success "multires cpu float" out.mha "$KORTEX" denoise multires halves.mha out.mha --backend cpu --levels 3 --sigma-range 0.5
expect_success "multires kokkos integer (auto)" out.mha "$KORTEX" denoise multires ints.mha out.mha --backend kokkos --levels 3
grep -q "integer (16-bit, exact) pipeline" stdout.txt || fail "multires: integer input did not take the integer pipeline"
expect_success "multires kokkos float unfused fastmath" out.nii.gz "$KORTEX" denoise multires ints.mha out.nii.gz --backend kokkos --integer no --pyramid unfused --variant fastmath --sigma-range inf
expect_success "multires kokkos integer packed16" out.mha "$KORTEX" denoise multires ints.mha out.mha --backend kokkos --pyramid packed16 --bits 2 --sigma-range 1
expect_error "multires levels 0" out.mha "$KORTEX" denoise multires ints.mha out.mha --levels 0
expect_error "multires too many levels" out.mha "$KORTEX" denoise multires good.mha out.mha --levels 5 --sigma-range 1
expect_error "multires 3D input" out.mha "$KORTEX" denoise multires vol.mha out.mha --sigma-range 1
expect_error "multires --integer yes on fractions" out.mha "$KORTEX" denoise multires halves.mha out.mha --integer yes
expect_error "multires lut variant on float" out.mha "$KORTEX" denoise multires halves.mha out.mha --backend kokkos --variant lut
expect_error "multires packed16 on float" out.mha "$KORTEX" denoise multires halves.mha out.mha --backend kokkos --pyramid packed16
expect_error "multires bad sigma-range text" out.mha "$KORTEX" denoise multires ints.mha out.mha --sigma-range abc
expect_error "multires auto sigma on a noiseless image" out.mha "$KORTEX" denoise multires good.mha out.mha --levels 2
expect_error "multires bits above 15" out.mha "$KORTEX" denoise multires ints.mha out.mha --bits 16
expect_error "multires value above bits" out.mha "$KORTEX" denoise multires ints.mha out.mha --bits 1 --sigma-range 1
expect_error "multires variant with cpu backend" out.mha "$KORTEX" denoise multires ints.mha out.mha --backend cpu --variant naive
expect_error "multires NaN voxel" out.mha "$KORTEX" denoise multires nan.mha out.mha --sigma-range 1
expect_error "multires unknown pyramid" out.mha "$KORTEX" denoise multires ints.mha out.mha --pyramid fast

expect_error "missing input" out.mha "$KORTEX" denoise bilateral missing.mha out.mha
expect_error "directory without DICOM slices as input" out.mha "$KORTEX" denoise bilateral adir out.mha
grep -q "holds no DICOM file" stderr.txt && ok || fail "directory as input: not the series message"
expect_error "garbage nifti" out.mha "$KORTEX" denoise nlm garbage.nii out.mha
# NIfTI pairs and faults through nifti_clib: one error line (nothing of the library's own output).
expect_success "nlm to a NIfTI pair" pair.hdr "$KORTEX" denoise nlm good.mha pair.hdr --backend cpu --patch-radius 1 --search-radius 2 --h 0.1
[ -s pair.img ] && ok || fail "NIfTI pair: pair.img not written"
expect_success "nlm from a pair's data file" out.nii "$KORTEX" denoise nlm pair.img out.nii --backend cpu --patch-radius 1 --search-radius 2 --h 0.1
head -c 300 out.nii > cuthead.nii
expect_error "NIfTI cut inside its header" out.mha "$KORTEX" denoise nlm cuthead.nii out.mha
grep -q "ends inside the 348-byte NIfTI-1 header" stderr.txt && ok || fail "cut header: not the truncation message"
rm -f pair.img
expect_error "NIfTI pair without its data file" out.nii "$KORTEX" denoise nlm pair.hdr out.nii
grep -q "data file 'pair.img' of this header/data pair is missing" stderr.txt && ok || fail "pair without data: not the pair message"
expect_error "NIfTI pair to a missing folder" nodir/p.hdr "$KORTEX" denoise nlm good.mha nodir/p.hdr
expect_error "truncated image" out.mha "$KORTEX" denoise bilateral truncated.mha out.mha
expect_error "4D input" out.mha "$KORTEX" denoise bilateral four.mha out.mha
expect_error "NaN voxel" out.mha "$KORTEX" denoise bilateral nan.mha out.mha
expect_error "Inf voxel" out.mha "$KORTEX" denoise nlm inf.mha out.mha
expect_error "zero-size image" out.mha "$KORTEX" denoise bilateral zero.mha out.mha
expect_error "negative sigma-range" out.mha "$KORTEX" denoise bilateral good.mha out.mha --sigma-range -1
expect_error "zero sigma-spatial" out.mha "$KORTEX" denoise bilateral good.mha out.mha --sigma-spatial 0
expect_error "zero h" out.mha "$KORTEX" denoise nlm good.mha out.mha --h 0
expect_error "negative h" out.mha "$KORTEX" denoise nlm good.mha out.mha --h -0.5
expect_error "radius larger than image" out.mha "$KORTEX" denoise bilateral good.mha out.mha --radius 20
expect_error "search radius larger than image" out.mha "$KORTEX" denoise nlm good.mha out.mha --search-radius 13
# Root ignores directory permissions: /proc is unwritable for everybody.
expect_error "unwritable output (/proc)" /proc/kortex-cli-test.mha "$KORTEX" denoise bilateral good.mha /proc/kortex-cli-test.mha
if [ "$(id -u)" != "0" ]; then
  expect_error "unwritable output dir" ro/out.mha "$KORTEX" denoise bilateral good.mha ro/out.mha
fi
expect_error "missing output dir" nodir/out.mha "$KORTEX" denoise bilateral good.mha nodir/out.mha
expect_error "output is a directory" "" "$KORTEX" denoise bilateral good.mha adir
expect_error "unknown output extension" out.xyz "$KORTEX" denoise bilateral good.mha out.xyz
expect_error "unknown option" out.mha "$KORTEX" denoise bilateral good.mha out.mha --radius-typo 3
expect_error "unknown variant" out.mha "$KORTEX" denoise nlm good.mha out.mha --variant fast
expect_error "unknown backend" out.mha "$KORTEX" denoise nlm good.mha out.mha --backend gpu
expect_error "missing arguments" "" "$KORTEX" denoise nlm good.mha
expect_error "unknown subcommand" "" "$KORTEX" frobnicate
expect_error "validate json to missing dir" nodir/v.json "$KORTEX" validate --quick --json nodir/v.json
expect_error "validate atlas study without data" v.json "$KORTEX" validate --atlas-only --quick --json v.json
expect_error "validate atlas study, cohort of 1" v.json "$KORTEX" validate --atlas-only --quick --data . --atlas-sizes 1,4 --json v.json
expect_error "validate atlas study, unknown metric" v.json "$KORTEX" validate --only atlas --quick --data . --atlas-metric ncc --json v.json
expect_error "validate --only unknown study" v.json "$KORTEX" validate --only nosuch --quick --json v.json
expect_error "validate --only greedy without data" v.json "$KORTEX" validate --only quality --only greedy --quick --json v.json
expect_error "validate --only registration,surface without data" v.json "$KORTEX" validate --only registration,surface --json v.json
expect_success "validate --only quality" v.json "$KORTEX" validate --only quality --quick --json v.json
grep -q '"cases": \[\]' v.json && grep -q '"filters"' v.json || fail "validate --only quality: ran the harness, or no quality results"
expect_error "bench ct --only matching no row" bo.json "$KORTEX" bench ct --tiny --only "no such row" --json bo.json

# --- tuning database: kortex tune ------------------------------------------------------------
expect_success "tune --show (no database yet)" "" "$KORTEX" tune --show
grep -q "^User database: .*user-tuning.json (absent)" stdout.txt || fail "tune --show: the absent user database is not reported"
expect_error "tune unknown kernel" tdb.json "$KORTEX" tune --kernel nosuch --db tdb.json
printf '{"schema": "kortex-tuning", "schema_version": 1, "entries": [' > corrupt.json
cp corrupt.json corrupt.orig
expect_error "tune over a corrupt database" "" "$KORTEX" tune --db corrupt.json --kernel ct.nlm.boxsum --quick --size 64
cmp -s corrupt.json corrupt.orig || fail "tune over a corrupt database: the file was modified"
expect_error "tune --show of a corrupt database" "" "$KORTEX" tune --show --db corrupt.json
expect_error "tune size below the search window" tdb.json "$KORTEX" tune --kernel ct.nlm.boxsum --quick --size 8 --db tdb.json
expect_error "tune database is a directory" "" "$KORTEX" tune --kernel ct.nlm.boxsum --quick --size 64 --db adir
expect_error "tune json to missing dir" tdb.json "$KORTEX" tune --kernel ct.nlm.boxsum --quick --size 64 --db tdb.json --json nodir/t.json
expect_error "tune --show with --quick" "" "$KORTEX" tune --show --quick
expect_success "tune nlm boxsum (tiny)" tdir/t.json "$KORTEX" tune --kernel ct.nlm.boxsum --quick --size 64 --db tdir/t.json --json tune.json
[ -s tune.json ] || fail "tune: no --json report"
# The written database is valid (kortex parses it strictly) and holds the entry.
expect_success "tune --show of the new database" "" "$KORTEX" tune --show --db tdir/t.json
grep -q "ct.nlm.boxsum .* user" stdout.txt || fail "tune --show: the new ct.nlm.boxsum entry is not listed"
# Run time: the entry is used (no "no tuning entry" notice for the kernel) ...
KORTEX_TUNING_DB=tdir/t.json expect_success "nlm boxsum with the tuned entry" out.mha \
  "$KORTEX" denoise nlm good.mha out.mha --backend kokkos --variant boxsum --patch-radius 1 --search-radius 2
if grep -q "no tuning entry for ct.nlm.boxsum" stderr.txt; then fail "nlm boxsum: the tuned entry was not used"; fi
# The NLM ScratchTiled tile goes through the same mechanism.
expect_success "tune nlm scratch (tiny, merged into the database)" "" "$KORTEX" tune --kernel ct.nlm.scratch --quick --size 64 --db tdir/t.json
KORTEX_TUNING_DB=tdir/t.json expect_success "nlm scratch with the tuned entry" out.mha \
  "$KORTEX" denoise nlm good.mha out.mha --backend kokkos --variant scratch --patch-radius 1 --search-radius 2
if grep -q "no tuning entry for ct.nlm.scratch" stderr.txt; then fail "nlm scratch: the tuned entry was not used"; fi
grep -q "ct.nlm.boxsum" tdir/t.json || fail "tune: merging the ct.nlm.scratch entry lost the ct.nlm.boxsum entry"
# ... and an unusable one (tile not a multiple of the 8x4 strips) gives one warning, the default
# and a normal run.
sed 's/"x": [0-9]*/"x": 12/' tdir/t.json > bad-tile.json
KORTEX_TUNING_DB=bad-tile.json expect_success "nlm boxsum with an unusable tuned tile" out.mha \
  "$KORTEX" denoise nlm good.mha out.mha --backend kokkos --variant boxsum --patch-radius 1 --search-radius 2
[ "$(grep -c "kortex: warning: tuning entry ct.nlm.boxsum" stderr.txt)" -eq 1 ] || fail "unusable tuned tile: expected one warning"; 
if grep -q -i "error" stderr.txt; then fail "unusable tuned tile: an error line"; fi
# A corrupt user database never stops a filter: one warning, then the defaults.
KORTEX_TUNING_DB=corrupt.json expect_success "bilateral with a corrupt tuning database" out.mha \
  "$KORTEX" denoise bilateral good.mha out.mha --backend kokkos --radius 2
[ "$(grep -c "kortex: warning: tuning database 'corrupt.json' ignored" stderr.txt)" -eq 1 ] || fail "corrupt tuning database: expected one warning"
if grep -q -i "error" stderr.txt; then fail "corrupt tuning database: an error line"; fi

# --- register unbiased (issue 4) ---------------------------------------------------------------
# 3D MetaImage with an extra header line (Offset), for the "no overlap" case.
mha3() {
  local name="$1" dims="$2" offset="$3" bytes="$4"
  {
    printf 'ObjectType = Image\nNDims = 3\nDimSize = %s\nOffset = %s\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n' "$dims" "$offset"
    printf "$bytes"
  } > "$name"
}
mha3 va.mha "8 8 8" "0 0 0" "$(rep "$one$three" 256)"
mha3 vb.mha "8 8 8" "0 0 0" "$(rep "$three$one$one$three" 128)"
mha3 vfar.mha "8 8 8" "5000 5000 5000" "$(rep "$one$three" 256)"
mha3 vconst.mha "8 8 8" "0 0 0" "$(rep "$one" 512)"
mha3 vnan.mha "8 8 8" "0 0 0" "$(rep "$one$three" 100)$nan$(rep "$three" 311)"
R=("$KORTEX" register unbiased --fixed va.mha)
expect_error "register lambda 0" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii --lambda 0
expect_error "register negative lambda" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii --lambda -1
expect_error "register 2D input" w.nii "$KORTEX" register unbiased --fixed good.mha --moving good.mha --out-warped w.nii
expect_error "register constant moving image" w.nii "${R[@]}" --moving vconst.mha --out-warped w.nii
expect_error "register NaN voxel" w.nii "${R[@]}" --moving vnan.mha --out-warped w.nii
expect_error "register no overlap" w.nii "${R[@]}" --moving vfar.mha --out-warped w.nii --no-affine
expect_error "register missing moving" w.nii "${R[@]}" --moving nosuch.mha --out-warped w.nii
expect_error "register field not NIfTI" f.mha "${R[@]}" --moving vb.mha --out-warped w.nii --out-field f.mha
expect_error "register same output twice" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii --out-jacobian w.nii
expect_error "register output over an input" "" "${R[@]}" --moving vb.mha --out-warped va.mha
expect_error "register variant with cpu backend" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii --backend cpu --variant reuse
expect_error "register unknown variant" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii --backend kokkos --variant fast
expect_error "register sigma 0" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii --sigma 0
expect_error "register missing output dir" nodir/w.nii "${R[@]}" --moving vb.mha --out-warped nodir/w.nii
expect_success "register tiny (cpu, no affine)" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii --out-field f.nii.gz \
  --out-jacobian j.nii --backend cpu --no-affine --iterations 5
[ -s f.nii.gz ] && [ -s j.nii ] || fail "register: field or Jacobian not written"
expect_success "register tiny (kokkos recompute, no affine)" w.nii "${R[@]}" --moving vb.mha --out-warped w.nii \
  --backend kokkos --variant recompute --no-affine --iterations 5
expect_success "bench register --tiny" br.json "$KORTEX" bench register --tiny --json br.json

# --- register greedy (issue 14) ---------------------------------------------------------------
G=("$KORTEX" register greedy --fixed va.mha)
expect_error "greedy alpha 0" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --alpha 0
expect_error "greedy negative gamma" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --gamma -1
expect_error "greedy negative beta" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --beta -0.1
expect_error "greedy scales not integers" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --scales 2,x
expect_error "greedy scales increasing" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --scales 1,2
expect_error "greedy scales vs iterations" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --scales 2,1
expect_error "greedy unknown solver" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --solver multigrid
expect_error "greedy SOR with beta" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --solver sor --beta 0.1
expect_error "greedy max step 0" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --max-step 0
expect_error "greedy 2D input" w.nii "$KORTEX" register greedy --fixed good.mha --moving good.mha --out-warped w.nii
expect_error "greedy constant moving image" w.nii "${G[@]}" --moving vconst.mha --out-warped w.nii
expect_error "greedy NaN voxel" w.nii "${G[@]}" --moving vnan.mha --out-warped w.nii
expect_error "greedy no overlap" w.nii "${G[@]}" --moving vfar.mha --out-warped w.nii --no-affine
expect_error "greedy field not NIfTI" f.mha "${G[@]}" --moving vb.mha --out-warped w.nii --out-field f.mha
expect_error "greedy no output named" "" "${G[@]}" --moving vb.mha --scales 2,1 --iterations 3,3
expect_success "greedy field only (no warped image)" fo.nii.gz "${G[@]}" --moving vb.mha --out-field fo.nii.gz \
  --json fo.json --backend cpu --no-affine --scales 2,1 --iterations 3,3
grep -q '"method": "greedy"' fo.json && grep -q 'fo.nii.gz' fo.json && ok || fail "greedy --json: the report lacks the job or its files"
# The QC report (issue 42): written with the outputs; a folder that is a file, --qc without a folder
# name outside a cohort, label maps without a report or off their grid are refused before any work.
rm -rf qcd
expect_success "greedy --qc" qcd/index.html "${G[@]}" --moving vb.mha --qc qcd --backend cpu --no-affine --scales 2,1 \
  --iterations 3,3
[ "$(ls qcd/*.png | wc -l)" -eq 12 ] && grep -q '<img src="after_axial.png"' qcd/index.html && ok || fail "greedy --qc: the report is incomplete"
rm -rf qcu
expect_success "unbiased --qc" qcu/index.html "$KORTEX" register unbiased --fixed va.mha --moving vb.mha --qc qcu --backend cpu \
  --no-affine --iterations 3
[ "$(ls qcu/*.png | wc -l)" -eq 12 ] && grep -q 'energy' qcu/index.html && ok || fail "unbiased --qc: the report is incomplete"
# A cohort: --qc without a folder writes each subject's report and the cohort's page; with a folder it is refused.
rm -rf qcc
expect_success "cohort --qc" qcc/qc.html "${G[@]}" --moving vb.mha va.mha --out-dir qcc --qc --backend cpu --no-affine \
  --scales 2,1 --iterations 3,3
[ -f qcc/vb_qc/index.html ] && [ -f qcc/va_qc/index.html ] && grep -q 'vb_qc/index.html' qcc/qc.html && ok || \
  fail "cohort --qc: a subject's report or the page is missing"
expect_error "cohort --qc with a folder name" "" "${G[@]}" --moving vb.mha va.mha --out-dir qcc2 --qc named --scales 2,1 \
  --iterations 3,3
[ ! -e qcc2 ] && ok || fail "cohort --qc NAME: the output folder was made"
touch qcfile
expect_error "greedy --qc over a file" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --qc qcfile --scales 2,1 --iterations 3,3
expect_error "greedy --qc without a folder" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --qc --scales 2,1 --iterations 3,3
expect_error "greedy --qc-labels without --qc" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --qc-labels vb.mha \
  --scales 2,1 --iterations 3,3
expect_error "greedy --qc-labels off the moving grid" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --qc qce \
  --qc-labels good.mha --scales 2,1 --iterations 3,3
[ ! -e qce ] && ok || fail "greedy --qc-labels off its grid: the QC folder was made"
# Temporaries a killed run left in an output folder (no such pid) are swept by the next job writing there.
mkdir -p od/.kortex-tmp-2147480000-stage-x && touch od/.kortex-tmp-2147480002-w.nii
expect_success "greedy sweeps a killed run's temporaries" od/w.nii "${G[@]}" --moving vb.mha --out-warped od/w.nii \
  --backend cpu --no-affine --scales 2,1 --iterations 3,3
[ -z "$(ls -A od | grep kortex-tmp)" ] && ok || fail "register: stale temporaries left in the output folder: $(ls -A od)"
mkdir -p od/.kortex-tmp-2147480003-stage-y
expect_success "apply sweeps a killed run's temporaries" od/a.nii "$KORTEX" apply --input vb.mha --reference va.mha \
  --transform fo.nii.gz --out od/a.nii --quiet
[ -z "$(ls -A od | grep kortex-tmp)" ] && ok || fail "apply: stale temporaries left in the output folder: $(ls -A od)"
expect_success "greedy tiny (cpu, no affine)" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --out-field f.nii.gz \
  --out-jacobian j.nii --backend cpu --no-affine --scales 2,1 --iterations 3,3
[ -s f.nii.gz ] && [ -s j.nii ] || fail "greedy: field or Jacobian not written"
# The inverse (issue 28): written on the moving grid with its report; refused onto another output.
expect_success "greedy inverse field (kokkos, no affine)" fi.nii.gz "${G[@]}" --moving vb.mha --out-warped w.nii \
  --out-inverse-field fi.nii.gz --backend kokkos --no-affine --scales 2,1 --iterations 3,3
grep -q "inverse consistency" stdout.txt && ok || fail "greedy inverse field: no inverse consistency in the report"
expect_error "greedy inverse field onto the field" f2.nii.gz "${G[@]}" --moving vb.mha --out-warped w.nii --out-field f2.nii.gz \
  --out-inverse-field f2.nii.gz --no-affine --scales 2,1 --iterations 3,3
expect_error "greedy inverse field not NIfTI" fi.mha "${G[@]}" --moving vb.mha --out-warped w2.nii --out-inverse-field fi.mha
expect_success "greedy tiny (kokkos hybrid-sor, no affine)" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii \
  --backend kokkos --solver hybrid-sor --no-affine --scales 2,1 --iterations 3,3
# LNCC (issue 28): the metric by name, its radius checked; 8^3 images are padded to hold one window
# at the coarse scale.
expect_error "greedy unknown metric" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --metric foo
grep -q -- "--metric" stderr.txt && grep -q "ssd|lncc" stderr.txt || fail "greedy unknown metric: the message names neither the flag nor the choices"
expect_error "greedy LNCC radius 0" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --metric lncc --lncc-radius 0
grep -q "LNCC window radius" stderr.txt || fail "greedy LNCC radius 0: wrong message"
expect_success "greedy tiny lncc (cpu, no affine)" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --metric lncc \
  --backend cpu --no-affine --scales 2,1 --iterations 3,3
expect_success "greedy tiny lncc (kokkos, no affine)" w.nii "${G[@]}" --moving vb.mha --out-warped w.nii --metric lncc \
  --lncc-radius 1 --backend kokkos --no-affine --scales 2,1 --iterations 3,3

# --- apply (issue 28) ---------------------------------------------------------------------------
# NIfTI-1 files (.nii; float32 or a label type) compared with the standard library only: prints max |a - b|.
nii_maxdiff() {
  python3 - "$1" "$2" <<'PYEOF'
import struct, sys
def load(p):
    b = open(p, 'rb').read()
    dim = struct.unpack_from('<8h', b, 40)
    code = {16: 'f', 2: 'B', 4: 'h', 512: 'H', 8: 'i'}[struct.unpack_from('<h', b, 70)[0]]  # float32 or a label type
    off = int(struct.unpack_from('<f', b, 108)[0])
    n = dim[1] * dim[2] * dim[3]
    return [float(v) for v in struct.unpack_from('<%d%s' % (n, code), b, off)]
a, c = load(sys.argv[1]), load(sys.argv[2])
print(max(abs(x - y) for x, y in zip(a, c)) if len(a) == len(c) else 'sizes differ')
PYEOF
}
# A NIfTI-1 vector field by hand (intent 1007, float32, unit spacing): nii_field NAME NX NY NZ NC [nan]
nii_field() {
  python3 - "$@" <<'PYEOF'
import struct, sys
name, nx, ny, nz, nc = sys.argv[1], *map(int, sys.argv[2:6])
h = bytearray(352)
struct.pack_into('<i', h, 0, 348)
struct.pack_into('<8h', h, 40, 5, nx, ny, nz, 1, nc, 1, 1)
struct.pack_into('<3h', h, 68, 1007, 16, 32)
struct.pack_into('<8f', h, 76, 1, 1, 1, 1, 1, 1, 1, 1)
struct.pack_into('<2f', h, 108, 352.0, 1.0)
h[123] = 2
h[344:348] = b'n+1\0'
v = [0.25] * (nx * ny * nz * nc)
if len(sys.argv) > 6: v[7] = float('nan')
open(name, 'wb').write(bytes(h) + struct.pack('<%df' % len(v), *v))
PYEOF
}
itk_affine() {  # itk_affine NAME TYPE "12 PARAMETERS"
  printf '#Insight Transform File V1.0\n#Transform 0\nTransform: %s\nParameters: %s\nFixedParameters: 1 2 3\n' "$2" "$3" > "$1"
}
AP=("$KORTEX" apply --input vb.mha --reference va.mha)
# The field of register greedy (its deformable part) then its affine, applied to its moving image in
# ANTs' order (-t field -t affine), give its --out-warped image: the field is stored in float32
# (2^-24 of |d| <= 8 mm), the interpolant's slope is <= 3 x the range 2 per voxel: 1e-5 bounds that
# with the float32 result's rounding to spare.
expect_success "apply: greedy field to register" gw.nii "${G[@]}" --moving vb.mha --out-warped gw.nii --out-field gf.nii \
  --out-affine ga.txt --backend cpu --scales 2,1 --iterations 3,3
for b in cpu kokkos; do
  expect_success "apply greedy field then affine ($b)" ap.nii "${AP[@]}" --transform gf.nii --transform ga.txt --out ap.nii --backend $b
  d=$(nii_maxdiff ap.nii gw.nii)
  python3 -c "import sys; sys.exit(0 if float('$d') <= 1e-5 else 1)" 2>/dev/null && ok || fail "apply ($b): field -> warped differs by $d"
done
# An affine and its inverse ([FILE,1]) in one run: the identity; nearest gives the input back exactly.
itk_affine ident.txt AffineTransform_float_3_3 "1 0 0 0 1 0 0 0 1 0 0 0"
expect_success "apply affine then its inverse" id.nii "$KORTEX" apply --input va.mha --reference va.mha \
  --transform "[ga.txt,0]" --transform "[ga.txt,1]" --interpolation nearest --out id.nii --quiet
expect_success "apply identity (label)" va.nii "$KORTEX" apply --input va.mha --reference va.mha --transform ident.txt \
  --interpolation label --out va.nii --quiet
[ "$(nii_maxdiff id.nii va.nii)" = "0.0" ] && ok || fail "apply: affine + inverse is not the identity"
expect_success "apply label interpolation (kokkos)" al.nii "${AP[@]}" --transform gf.nii --transform ga.txt --out al.nii \
  --interpolation label --backend kokkos
# A label map comes out in an integer type (issue 39): the float32 input's values 1 and 3 fit uint8 (NIfTI datatype 2).
[ "$(python3 -c "import struct; print(struct.unpack_from('<h', open('al.nii','rb').read(), 70)[0])")" = "2" ] && ok \
  || fail "apply label: the output is not uint8"
# Refusals: one message, no output.
mha3 vhalf.mha "8 8 8" "0 0 0" "$(rep "$one$half" 256)"
itk_affine euler.txt Euler3DTransform_double_3_3 "0 0 0 0 0 0"
itk_affine singular.txt AffineTransform_double_3_3 "1 0 0 0 1 0 0 0 0 0 0 0"
itk_affine nanaff.txt AffineTransform_double_3_3 "1 0 0 0 1 0 0 0 nan 0 0 0"
itk_affine eleven.txt AffineTransform_double_3_3 "1 0 0 0 1 0 0 0 1 0 0"
nii_field two.nii 8 8 8 2
nii_field flat.nii 8 8 1 3
nii_field nanfield.nii 8 8 8 3 nan
cp vb.mha vb.keep
expect_error "apply no --transform" ap.nii "${AP[@]}" --out ap.nii
expect_error "apply missing transform" ap.nii "${AP[@]}" --transform nosuch.txt --out ap.nii
expect_error "apply unreadable transform" ap.nii "${AP[@]}" --transform garbage.nii --out ap.nii
expect_error "apply unknown transform type" ap.nii "${AP[@]}" --transform euler.txt --out ap.nii
grep -q "Euler3DTransform_double_3_3" stderr.txt && ok || fail "apply: the refusal does not name the transform type"
expect_error "apply unknown transform extension" ap.nii "${AP[@]}" --transform vb.mha --out ap.nii
expect_error "apply singular affine" ap.nii "${AP[@]}" --transform singular.txt --out ap.nii
expect_error "apply NaN affine" ap.nii "${AP[@]}" --transform nanaff.txt --out ap.nii
expect_error "apply 11 affine parameters" ap.nii "${AP[@]}" --transform eleven.txt --out ap.nii
expect_error "apply 2-component field" ap.nii "${AP[@]}" --transform two.nii --out ap.nii
expect_error "apply 2D field" ap.nii "${AP[@]}" --transform flat.nii --out ap.nii
expect_error "apply NaN in a field" ap.nii "${AP[@]}" --transform nanfield.nii --out ap.nii
expect_error "apply inverse of a field" ap.nii "${AP[@]}" --transform "[gf.nii,1]" --out ap.nii
expect_error "apply label on a float image" ap.nii "$KORTEX" apply --input vhalf.mha --reference va.mha --transform ga.txt \
  --interpolation label --out ap.nii
expect_error "apply unknown interpolation" ap.nii "${AP[@]}" --transform ga.txt --interpolation cubic --out ap.nii
expect_error "apply 2D input" ap.nii "$KORTEX" apply --input good.mha --reference va.mha --transform ga.txt --out ap.nii
expect_error "apply output over the input" "" "${AP[@]}" --transform ga.txt --out vb.mha
cmp -s vb.mha vb.keep && ok || { fail "apply: the input was overwritten"; cp vb.keep vb.mha; }
cp gf.nii gf.keep
expect_error "apply output over a transform" "" "${AP[@]}" --transform gf.nii --out gf.nii
grep -q "would overwrite the input transform 1" stderr.txt && cmp -s gf.nii gf.keep && ok || fail "apply: output over a transform"
expect_error "apply output into a missing folder" nodir/ap.nii "${AP[@]}" --transform ga.txt --out nodir/ap.nii

# --- atlas build (issue 15) -------------------------------------------------------------------
mha3 vc.mha "8 8 8" "0 0 0" "$(rep "$three$three$one$one" 128)"
mha3 v10.mha "10 10 10" "0 0 0" "$(rep "$one$three" 500)"
A=("$KORTEX" atlas build --iterations 2,2 --no-affine --quiet)
expect_error "atlas one subject" t.nii "${A[@]}" va.mha --out-template t.nii
expect_error "atlas NaN subject" t.nii "${A[@]}" va.mha vb.mha vnan.mha --out-template t.nii
expect_error "atlas unreadable subject" t.nii "${A[@]}" va.mha vb.mha garbage.nii --out-template t.nii
expect_error "atlas missing subject" t.nii "${A[@]}" va.mha vb.mha nosuch.mha --out-template t.nii
expect_error "atlas 2D subject" t.nii "${A[@]}" va.mha good.mha --out-template t.nii
expect_error "atlas constant subject" t.nii "${A[@]}" va.mha vconst.mha --out-template t.nii
expect_error "atlas subject twice" t.nii "${A[@]}" va.mha vb.mha va.mha --out-template t.nii
expect_error "atlas NaN memory cap" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --max-memory nan
grep -q "memory cap must be a finite number" stderr.txt && ok || fail "atlas NaN memory cap: $(cat stderr.txt)"
expect_error "atlas memory budget" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --backend kokkos --max-memory 0.01
grep -q "per subject" stderr.txt || fail "atlas memory budget: the message does not state the bytes per subject"
expect_error "atlas labels count" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --labels va.mha --out-warped wd
expect_error "atlas resume without checkpoint" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --resume
expect_error "atlas cpu with checkpoint" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --backend cpu --checkpoint ck
expect_success "atlas template into a missing folder (made)" newdir/deeper/t.nii "${A[@]}" va.mha vb.mha --out-template newdir/deeper/t.nii
rm -rf newdir
touch afile
expect_error "atlas template under a file" afile/t.nii "${A[@]}" va.mha vb.mha --out-template afile/t.nii
expect_error "atlas scales not ending with 1" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --scales 1,2
expect_error "atlas empty list" t.nii "${A[@]}" va.mha --list /dev/null --out-template t.nii
expect_success "atlas cpu, grids differ (resampled)" t.nii "${A[@]}" va.mha vb.mha v10.mha --out-template t.nii --backend cpu
expect_success "atlas kokkos with outputs" t.nii "${A[@]}" va.mha vb.mha vc.mha --out-template t.nii --backend kokkos \
  --out-fields fd --out-warped wd --labels va.mha vb.mha vc.mha
[ -s fd/vb_field.nii.gz ] && [ -s fd/vb_inverse_field.nii.gz ] && [ -s wd/vc_warped.nii.gz ] && [ -s wd/va_labels.nii.gz ] || fail "atlas: fields, warped images or labels not written"
# The commit is all or none (issue 39): a later subject's field name taken by a folder refuses the whole
# commit; the template that was there stays, and no field lands.
rm -rf fx; mkdir -p fx/vb_field.nii.gz; cp t.nii t_before.nii
expect_error "atlas field name taken by a folder" "" "${A[@]}" va.mha vb.mha --out-template t.nii --backend cpu --out-fields fx
cmp -s t.nii t_before.nii && [ ! -e fx/va_field.nii.gz ] && ok || fail "atlas: a failed commit changed the template or left fields: $(ls fx)"
expect_success "atlas kokkos lncc" t.nii "${A[@]}" va.mha vb.mha vc.mha --out-template t.nii --backend kokkos --metric lncc
expect_error "atlas unknown metric" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --metric foo
# Checkpoint / resume: a run resumed from its last checkpoint ends with the same template bits.
printf 'va.mha\n# a comment\nvb.mha\n\nvc.mha\n' > cohort.txt
A=("$KORTEX" atlas build --iterations 3,4 --no-affine --quiet)
expect_success "atlas with checkpoints" t_full.nii "${A[@]}" --list cohort.txt --out-template t_full.nii --backend kokkos \
  --checkpoint ck --checkpoint-every 3
[ -f ck/current/state.json ] || fail "atlas: no checkpoint written"
expect_success "atlas resumed" t_resumed.nii "${A[@]}" --list cohort.txt --out-template t_resumed.nii --backend kokkos \
  --checkpoint ck --resume
cmp -s t_full.nii t_resumed.nii || fail "atlas: the resumed template differs from the uninterrupted one"
# A damaged current/state.json (issue 39): the run resumes from previous/ (the same bits), and says so.
[ -f ck/previous/state.json ] || fail "atlas: no previous checkpoint to fall back to"
printf '{"format": "trunc' > ck/current/state.json
expect_success "atlas resumed past a damaged state.json" t_fallback.nii "${A[@]}" --list cohort.txt --out-template t_fallback.nii \
  --backend kokkos --checkpoint ck --resume
cmp -s t_full.nii t_fallback.nii && ok || fail "atlas: resumed from previous/, the template differs from the uninterrupted one"
grep -q "is damaged (not valid JSON); resumed from .*previous" stderr.txt && ok || { fail "atlas: the fallback is not reported"; cat stderr.txt; }
expect_error "atlas resume another cohort" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --backend kokkos \
  --checkpoint ck --resume
grep -q "another cohort" stderr.txt || fail "atlas resume another cohort: wrong message"
# --- atlas build: refused at the start, inputs never overwritten, outputs all or none (issue 26) ---
A=("$KORTEX" atlas build --iterations 2,2 --no-affine --quiet)
# The same without --quiet: a refusal must come before the first "subject ... aligned" / "atlas scale" line.
P=("$KORTEX" atlas build --iterations 2,2 --no-affine)
before_work() {  # before_work NAME: the last command was refused before any image was aligned
  if grep -q "aligned\|atlas scale" stderr.txt; then fail "$1: refused only after the work"; cat stderr.txt; else ok; fi
}
kept() {  # kept FILE COPY NAME: the input still has its bytes (restored for the next cases if not)
  cmp -s "$1" "$2" && ok || { fail "$3: the input $1 was overwritten"; cp "$2" "$1"; }
}
said() {  # said PATTERN NAME
  grep -q "$1" stderr.txt && ok || { fail "$2: the message does not say '$1'"; cat stderr.txt; }
}
cp va.mha la.mha; cp vb.mha lb.mha; cp vc.mha lc.mha
for f in va vb vc la lb lc; do cp "$f.mha" "$f.keep"; done
expect_error "atlas template over a subject" "" "${A[@]}" va.mha vb.mha --out-template vb.mha
kept vb.mha vb.keep "atlas template over a subject"; said "would overwrite the input image" "atlas template over a subject"
expect_error "atlas template over the reference" "" "${A[@]}" va.mha vb.mha --reference vc.mha --out-template vc.mha
kept vc.mha vc.keep "atlas template over the reference"; said "input reference" "atlas template over the reference"
expect_error "atlas template over a label map" "" "${A[@]}" va.mha vb.mha vc.mha --labels la.mha lb.mha lc.mha --out-warped wl \
  --out-template lb.mha
kept lb.mha lb.keep "atlas template over a label map"; said "input label map" "atlas template over a label map"
expect_error "atlas report over a subject" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --json va.mha
kept va.mha va.keep "atlas report over a subject"; said "the report 'va.mha' would overwrite" "atlas report over a subject"
cp wd/va_warped.nii.gz va_warped.keep
expect_error "atlas warped image over an input" t.nii "${A[@]}" va.mha vb.mha wd/va_warped.nii.gz --out-template t.nii --out-warped wd
kept wd/va_warped.nii.gz va_warped.keep "atlas warped image over an input"; said "warped image" "atlas warped image over an input"
cp fd/vb_field.nii.gz vb_field.keep
expect_error "atlas template on a field output" "" "${A[@]}" va.mha vb.mha --out-template fd/vb_field.nii.gz --out-fields fd
kept fd/vb_field.nii.gz vb_field.keep "atlas template on a field output"; said "two outputs are the same file" "atlas template on a field output"
expect_error "atlas report on the template" t.nii "${A[@]}" va.mha vb.mha --out-template t.nii --json ./t.nii
ln va.mha hl.mha
expect_error "atlas template over a hard link of a subject" "" "${A[@]}" va.mha vb.mha --out-template hl.mha
kept va.mha va.keep "atlas template over a hard link"; rm -f hl.mha
expect_error "register output over an input (shared check)" "" "$KORTEX" register greedy --fixed va.mha --moving vb.mha \
  --out-warped vb.mha --no-affine --iterations 2,2
kept vb.mha vb.keep "register output over an input"
expect_error "denoise output over its input" "" "$KORTEX" denoise bilateral va.mha ./va.mha --radius 1
kept va.mha va.keep "denoise output over its input"; said "would overwrite the input image" "denoise output over its input"
expect_error "surface denoise output over its input" "" "$KORTEX" surface denoise va.mha va.mha --input phi
kept va.mha va.keep "surface denoise output over its input"; said "would overwrite" "surface denoise output over its input"
# Every output location and every label map is checked before the first image is aligned; with
# labels or a report nothing at all is written when one of them fails.
expect_error "atlas report under a file" t.nii "${P[@]}" va.mha vb.mha --out-template t.nii --json afile/r.json
before_work "atlas report under a file"
expect_error "atlas template under a file, before the work" afile/t.nii "${P[@]}" va.mha vb.mha --out-template afile/t.nii
before_work "atlas template under a file"
rm -rf wl
expect_error "atlas missing label map" t.nii "${P[@]}" va.mha vb.mha vc.mha --labels la.mha lb.mha nosuch.mha --out-warped wl \
  --out-template t.nii
before_work "atlas missing label map"
[ -z "$(ls -A wl 2>/dev/null)" ] && ok || fail "atlas missing label map: files left in the warped folder: $(ls wl)"
expect_error "atlas label map on another grid" t.nii "${A[@]}" va.mha vb.mha vc.mha --labels la.mha lb.mha v10.mha \
  --out-warped wl --out-template t.nii --json r.json
said "not on the grid of its image" "atlas label map on another grid"
[ -z "$(ls -A wl 2>/dev/null)" ] && [ ! -e r.json ] && ok || fail "atlas label map on another grid: outputs left: $(ls wl r.json 2>&1)"
expect_error "atlas iterations above the maximum" t.nii timeout 60 "$KORTEX" atlas build va.mha vb.mha --no-affine --quiet \
  --out-template t.nii --iterations 2,1000000
said "100000" "atlas iterations above the maximum"
# Resume keys on the inputs' contents and checks every checkpoint file's checksum.
rm -rf rs rck; mkdir rs; cp va.mha rs/c1.mha; cp vb.mha rs/c2.mha; cp vc.mha rs/c3.mha
R=("$KORTEX" atlas build rs/c1.mha rs/c2.mha rs/c3.mha --iterations 3,4 --no-affine --quiet --backend kokkos)
expect_success "atlas uninterrupted" rfull.nii "${R[@]}" --out-template rfull.nii
expect_success "atlas checkpointed" rt.nii "${R[@]}" --out-template rt.nii --checkpoint rck --checkpoint-every 3
cp rs/c3.mha c3.keep
mha3 rs/c3.mha "8 8 8" "0 0 0" "$(rep "$three$three$one$three" 128)"
expect_error "atlas resume, an input rewritten in place" rt2.nii "${R[@]}" --out-template rt2.nii --checkpoint rck --resume
said "image 3 'rs/c3.mha' does not have the contents it had" "atlas resume, an input rewritten"
before_work "atlas resume, an input rewritten"
cp c3.keep rs/c3.mha
mv rs/c1.mha rs/tmp.mha; mv rs/c2.mha rs/c1.mha; mv rs/tmp.mha rs/c2.mha
expect_error "atlas resume, two inputs swapped" rt2.nii "${R[@]}" --out-template rt2.nii --checkpoint rck --resume
said "swapped" "atlas resume, two inputs swapped"
mv rs/c1.mha rs/tmp.mha; mv rs/c2.mha rs/c1.mha; mv rs/tmp.mha rs/c2.mha
flip() {  # flip FILE OFFSET: one bit of one byte
  local b; b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  printf "\\x$(printf %02x $((b ^ 4)))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2> /dev/null
}
for f in subject-1.bin template.bin state.json; do
  cp "rck/current/$f" ck.keep
  if [ "$f" = state.json ]; then sed -i '0,/"iteration": \([0-9]\)/s//"iteration": 1\1/' "rck/current/$f"; else flip "rck/current/$f" 300; fi
  cmp -s "rck/current/$f" ck.keep && fail "atlas resume: $f was not changed by the test"
  if [ "$f" = state.json ]; then  # every rank reads it: the run falls back to previous/ and says so
    expect_success "atlas resume, $f damaged: previous/" rt2.nii "${R[@]}" --out-template rt2.nii --checkpoint rck --resume
    said "$f is damaged (its checksum does not match its contents); resumed from" "atlas resume, $f damaged"
    cmp -s rfull.nii rt2.nii && ok || fail "atlas: resumed from previous/, the template differs"
    mv rck/previous rck/previous.keep  # with no whole checkpoint left, the damage is the error
    expect_error "atlas resume, $f damaged, no previous/" rt2.nii "${R[@]}" --out-template rt2.nii --checkpoint rck --resume
    said "$f is damaged" "atlas resume, $f damaged, no previous/"
    mv rck/previous.keep rck/previous
  else
    expect_error "atlas resume, $f damaged" rt2.nii "${R[@]}" --out-template rt2.nii --checkpoint rck --resume
    said "$f is damaged" "atlas resume, $f damaged"
  fi
  cp ck.keep "rck/current/$f"
done
# One run per checkpoint folder: a folder locked by another process is refused (flock(1) holds it here).
expect_error "atlas checkpoint folder in use" rt2.nii flock rck/lock "${R[@]}" --out-template rt2.nii --checkpoint rck --resume
said "in use by another run" "atlas checkpoint folder in use"
# Temporaries of killed runs (no such pid) are removed from the job's folders; a live process's stay.
mkdir -p .kortex-tmp-2147480000-stage-abc rck/.kortex-tmp-2147480001-x ".kortex-tmp-$$-live"
touch .kortex-tmp-2147480000-stage-abc/rt3.nii
expect_success "atlas resumed after the refusals" rt3.nii "${R[@]}" --out-template rt3.nii --checkpoint rck --resume
cmp -s rfull.nii rt3.nii && ok || fail "atlas: the resumed template differs from the uninterrupted one"
[ ! -e .kortex-tmp-2147480000-stage-abc ] && [ ! -e rck/.kortex-tmp-2147480001-x ] && ok || fail "atlas: stale temporaries left"
[ -d ".kortex-tmp-$$-live" ] && ok || fail "atlas: a live process's temporary folder was removed"
rm -rf ".kortex-tmp-$$-live" .kortex-tmp-2147480000-stage-abc
rm -rf rs rck wl la.mha lb.mha lc.mha ./*.keep rfull.nii rt.nii rt3.nii r.json
rm -rf ck fd wd t_full.nii t_resumed.nii

# Surface denoising (issue 5): a 16^3 mask holding the cube [4, 12)^3, built line by line.
zero='\x00\x00\x00\x00'
two='\x00\x00\x00\x40'
five='\x00\x00\xa0\x40'
cubeline="$(rep "$zero" 4)$(rep "$one" 8)$(rep "$zero" 4)"
emptyline="$(rep "$zero" 16)"
cube=""
for z in $(seq 0 15); do
  for y in $(seq 0 15); do
    if [ "$z" -ge 4 ] && [ "$z" -lt 12 ] && [ "$y" -ge 4 ] && [ "$y" -lt 12 ]; then cube="$cube$cubeline"; else cube="$cube$emptyline"; fi
  done
done
mha cube.mha 3 "16 16 16" "$cube"
mha nonbinary.mha 3 "16 16 16" "$two${cube:16}"
mha far.mha 3 "8 8 8" "$(rep "$five" 512)"
mha tiny.mha 3 "8 8 8" "$(rep "$zero" 200)$one$(rep "$zero" 311)"
# A closed cube mesh (ASCII STL, 12 triangles, edge 8) and the same with one triangle missing.
stl_cube() {
  local drop="$1"
  local -a v=("0 0 0" "8 0 0" "8 8 0" "0 8 0" "0 0 8" "8 0 8" "8 8 8" "0 8 8")
  local -a t=("0 2 1" "0 3 2" "4 5 6" "4 6 7" "0 1 5" "0 5 4" "1 2 6" "1 6 5" "2 3 7" "2 7 6" "3 0 4" "3 4 7")
  echo "solid cube"
  local i=0
  for tri in "${t[@]}"; do
    i=$((i + 1))
    [ "$i" -eq "$drop" ] && continue
    set -- $tri
    printf 'facet normal 0 0 0\nouter loop\nvertex %s\nvertex %s\nvertex %s\nendloop\nendfacet\n' "${v[$1]}" "${v[$2]}" "${v[$3]}"
  done
  echo "endsolid cube"
}
stl_cube 0 > cube.stl
stl_cube 5 > open.stl
SD=("$KORTEX" surface denoise)
expect_success "surface --help" "" "${SD[@]}" --help
expect_success "surface mask kokkos" sd.nii "${SD[@]}" cube.mha sd.nii --neighbors 32 --iterations 3 --backend kokkos --quiet
expect_success "surface mask cpu" sd.mha "${SD[@]}" cube.mha sd.mha --neighbors 32 --iterations 3 --backend cpu
expect_success "surface label kokkos global" sd.nii "${SD[@]}" nonbinary.mha sd.nii --label 1 --neighbors 16 --backend kokkos --variant global --quiet
expect_success "surface phi input" sd2.nii "${SD[@]}" sd.nii sd2.nii --input phi --neighbors 16 --iterations 2 --backend kokkos --variant scratch --quiet
expect_error "surface non-binary mask" sd.nii "${SD[@]}" nonbinary.mha sd.nii
expect_error "surface empty band" sd.nii "${SD[@]}" far.mha sd.nii --input phi
expect_error "surface band above memory" sd.nii "${SD[@]}" cube.mha sd.nii --max-memory 1 --backend kokkos
expect_error "surface band above memory (cpu)" sd.nii "${SD[@]}" cube.mha sd.nii --max-memory 1 --backend cpu
expect_error "surface m >= N" sd.nii "${SD[@]}" tiny.mha sd.nii --band 0.5
expect_error "surface even patch" sd.nii "${SD[@]}" cube.mha sd.nii --patch 4
expect_error "surface variant with cpu" sd.nii "${SD[@]}" cube.mha sd.nii --backend cpu --variant global
expect_error "surface unknown variant" sd.nii "${SD[@]}" cube.mha sd.nii --variant texture
expect_error "surface label and threshold" sd.nii "${SD[@]}" cube.mha sd.nii --label 1 --threshold 0.5
expect_error "surface mesh as OUT" sd.stl "${SD[@]}" cube.mha sd.stl
expect_error "surface missing input" sd.nii "${SD[@]}" nothere.mha sd.nii
expect_error "surface NaN memory cap" sd.nii "${SD[@]}" cube.mha sd.nii --max-memory nan
grep -q "memory cap must be a finite number" stderr.txt && ok || fail "surface NaN memory cap: $(cat stderr.txt)"

if "${SD[@]}" cube.stl probe.nii --neighbors 32 --iterations 1 --quiet > /dev/null 2> probe.txt; then
  expect_success "surface closed mesh in, mesh out" sdm.nii "${SD[@]}" cube.stl sdm.nii --out-mesh sdm.vtp --neighbors 32 --iterations 2 --quiet
  [ -s sdm.vtp ] || fail "surface: --out-mesh not written"
  expect_error "surface open mesh" sd.nii "${SD[@]}" open.stl sd.nii
  expect_error "surface bad mesh extension" sd.nii "${SD[@]}" cube.mha sd.nii --out-mesh sd.ply
  expect_error "surface mesh into a missing folder" sd.nii "${SD[@]}" cube.mha sd.nii --out-mesh nodir/sd.vtp
elif grep -qi "VTK" probe.txt; then
  echo "ok: surface mesh cases skipped (this kortex has no VTK: $(head -n 1 probe.txt))"
else
  fail "surface closed mesh: $(cat probe.txt)"
fi

chmod 755 ro

finish
