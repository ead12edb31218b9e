#!/usr/bin/env bash
# The atlas under MPI (issue 15): 1, 2 and 3 ranks build the same template and fields, bit for bit
# (the int64 fixed-point sums of core/Atlas.hpp), a checkpoint written by 3 ranks resumes under 2,
# a rank that fails ends the whole job with its message instead of leaving the others waiting, and
# ranks given different jobs are refused at the start, naming the rank and what differs.
# Usage: atlas_mpi_test.sh /path/to/kortex /path/to/mpiexec
set -u
KORTEX="$1"
MPIEXEC="$2"
# shellcheck source=cli_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/cli_lib.sh"
three='\x00\x00\x40\x40'
mha3() {  # mha3 NAME "DIMS" "ORIGIN" BYTES
  {
    printf 'ObjectType = Image\nNDims = 3\nDimSize = %s\nOffset = %s\nElementSpacing = 1 1 1\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n' "$2" "$3"
    printf "$4"
  } > "$1"
}
mha3 s0.mha "8 8 8" "0 0 0" "$(rep "$one$three" 256)"
mha3 s1.mha "8 8 8" "0 0 0" "$(rep "$three$one$one$three" 128)"
mha3 s2.mha "8 8 8" "0 0 0" "$(rep "$three$three$one$one" 128)"
mha3 s3.mha "8 8 8" "0 0 0" "$(rep "$one$one$three$one" 128)"
mha3 snan.mha "8 8 8" "0 0 0" "$(rep "$one$three" 100)$nan$(rep "$three" 311)"
MPI=("$MPIEXEC" --oversubscribe)
A=(atlas build s0.mha s1.mha s2.mha s3.mha --backend kokkos --iterations 3,3 --quiet)

for np in 1 2 3; do
  rm -rf "f$np" "q$np"
  expect_success "atlas under mpirun -np $np" "t$np.nii" timeout 300 "${MPI[@]}" -np "$np" "$KORTEX" "${A[@]}" \
    --out-template "t$np.nii" --out-fields "f$np" --qc "q$np"
done
for np in 2 3; do
  cmp -s t1.nii "t$np.nii" && ok || fail "the template of $np ranks differs from 1 rank's"
  for f in f1/*.nii.gz; do
    cmp -s "$f" "f$np/$(basename "$f")" && ok || fail "$np ranks: field $(basename "$f") differs from 1 rank's"
  done
  # The QC report: every picture (the maps summed in fixed point, each subject's thumbnail drawn by its
  # rank) the same bytes; the page is there (its times and rank count differ).
  [ -f "q$np/index.html" ] && [ "$(ls q1/*.png | wc -l)" -eq 15 ] && ok || fail "$np ranks: the QC report is incomplete"
  for f in q1/*.png; do
    cmp -s "$f" "q$np/$(basename "$f")" && ok || fail "$np ranks: QC picture $(basename "$f") differs from 1 rank's"
  done
done
# The sums as on several nodes (KORTEX_RANKS_PER_NODE: nodes of 2 ranks and of 1 rank: the node
# leaders sum over MPI and the node copies its leader's): the same bits; a bad value is refused.
for per in 2 1; do
  rm -rf "fn$per"
  expect_success "atlas under mpirun -np 3, $per rank(s) per node" "tn$per.nii" env KORTEX_RANKS_PER_NODE=$per timeout 300 \
    "${MPI[@]}" -x KORTEX_RANKS_PER_NODE -np 3 "$KORTEX" "${A[@]}" --out-template "tn$per.nii" --out-fields "fn$per"
  cmp -s t1.nii "tn$per.nii" && ok || fail "the template with $per rank(s) per node differs from 1 rank's"
  for f in f1/*.nii.gz; do
    cmp -s "$f" "fn$per/$(basename "$f")" && ok || fail "$per rank(s) per node: field $(basename "$f") differs from 1 rank's"
  done
done
rm -f tnx.nii
KORTEX_RANKS_PER_NODE=two timeout 300 "${MPI[@]}" -x KORTEX_RANKS_PER_NODE -np 2 "$KORTEX" "${A[@]}" --out-template tnx.nii \
  > stdout.txt 2> stderr.txt
if [ $? -ne 0 ] && grep -q "KORTEX_RANKS_PER_NODE must be a positive integer, not 'two'" stderr.txt && [ ! -e tnx.nii ]; then
  ok
else
  fail "a bad KORTEX_RANKS_PER_NODE was not refused"; cat stderr.txt
fi
# A checkpoint of 3 ranks resumed by 2 (the files are per subject).
rm -rf ck
expect_success "atlas checkpoints, 3 ranks" tc.nii timeout 300 "${MPI[@]}" -np 3 "$KORTEX" "${A[@]}" --out-template tc.nii \
  --checkpoint ck --checkpoint-every 4
expect_success "atlas resumed by 2 ranks" tr.nii timeout 300 "${MPI[@]}" -np 2 "$KORTEX" "${A[@]}" --out-template tr.nii \
  --checkpoint ck --resume
cmp -s t1.nii tr.nii && ok || fail "the template resumed by 2 ranks differs"
# Subject 3 (NaN) belongs to rank 2 of 3 only: that rank fails, the job ends (no hang), no template.
rm -f tf.nii
timeout 300 "${MPI[@]}" -np 3 "$KORTEX" atlas build s0.mha s1.mha snan.mha --backend kokkos --iterations 3,3 --quiet \
  --out-template tf.nii > stdout.txt 2> stderr.txt
rc=$?
if [ $rc -eq 124 ]; then
  fail "a failing rank left the job hanging"
elif [ $rc -eq 0 ]; then
  fail "a failing rank: exit 0"
elif ! grep -q "rank 2 of 3: .*NaN" stderr.txt; then
  fail "a failing rank: its message is missing"; cat stderr.txt
elif [ -e tf.nii ]; then
  fail "a failing rank: template written"
else
  echo "ok: a failing rank ends the job -> $(grep "rank 2 of 3" stderr.txt | head -n 1)"
  ok
fi
# Ranks given different jobs (an MPMD command line: rank 0 runs A, rank 1 other arguments) are
# refused at the start on every rank, naming rank 1 and what differs: no raw MPI error (a heap
# corrupted in MPI_Allreduce, MPI_ERR_TRUNCATE), no hang, no mixed template, no output.
mismatch() {  # mismatch NAME PART RANK-1-ARGS...
  local name="$1" part="$2"; shift 2
  rm -f tm.nii
  timeout 120 "${MPI[@]}" -np 1 "$KORTEX" "${A[@]}" --out-template tm.nii : -np 1 "$KORTEX" "$@" --out-template tm.nii \
    > stdout.txt 2> stderr.txt
  local rc=$?
  if [ $rc -eq 124 ]; then
    fail "$name: the job hung"
  elif [ $rc -eq 0 ]; then
    fail "$name: exit 0"
  elif [ -e tm.nii ]; then
    fail "$name: template written"
  elif grep -q -i "MPI_ERR\|double free\|corrupt\|signal" stderr.txt; then
    fail "$name: a raw failure instead of the refusal"; cat stderr.txt
  elif ! grep -q "rank 1 differs from rank 0 in: [a-z ,]*$part" stderr.txt; then
    fail "$name: the message does not name rank 1 and the $part"; cat stderr.txt
  else
    echo "ok: $name -> $(grep -m 1 "differs" stderr.txt)"
    ok
  fi
}
mismatch "ranks given other scales" "scales" atlas build s0.mha s1.mha s2.mha s3.mha --backend kokkos --scales 1 --iterations 3 --quiet
mismatch "ranks given other iterations" "iterations" atlas build s0.mha s1.mha s2.mha s3.mha --backend kokkos --iterations 3,4 --quiet
mismatch "ranks given other subject counts" "number of images" atlas build s0.mha s1.mha s2.mha --backend kokkos --iterations 3,3 --quiet
mismatch "ranks given another alpha" "alpha" atlas build s0.mha s1.mha s2.mha s3.mha --backend kokkos --iterations 3,3 --alpha 0.2 --quiet
mismatch "ranks given other files" "images" atlas build s0.mha s1.mha s3.mha s2.mha --backend kokkos --iterations 3,3 --quiet
# Issue 39: the subject-label folder is part of the job; and with no --reference, every rank checks
# the contents of the first image (the reference) it reads: two machines seeing different files
# behind one path are refused instead of building a mixed template.
mismatch "ranks given other subject-label folders" "out subject labels" atlas build s0.mha s1.mha s2.mha s3.mha \
  --backend kokkos --iterations 3,3 --quiet --labels s0.mha s1.mha s2.mha s3.mha --out-subject-labels other-labels
rm -rf rank1 && mkdir rank1 && cp s1.mha s2.mha s3.mha rank1/ && cp s3.mha rank1/s0.mha
rm -f tm.nii rank1/tm.nii
timeout 120 "${MPI[@]}" -np 1 "$KORTEX" "${A[@]}" --out-template tm.nii : -np 1 bash -c "cd rank1 && exec \"$KORTEX\" ${A[*]} --out-template tm.nii" \
  > stdout.txt 2> stderr.txt
rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ ! -e tm.nii ] && [ ! -e rank1/tm.nii ] && grep -q "rank 1 reads other contents for the reference 's0.mha' (the first image)" stderr.txt; then
  echo "ok: ranks reading different first images -> $(grep -m 1 "other contents" stderr.txt)"; ok
else
  fail "ranks reading different first images (rc $rc)"; cat stderr.txt
fi
# The scaling benchmark (kortex bench atlas --only Scaling) under 1 and 2 ranks: the two cohorts'
# templates have the same hashes whatever the rank count; under 2 ranks the other sections refuse.
for np in 1 2; do
  rm -f "sc$np.json"
  if timeout 300 "${MPI[@]}" -np "$np" "$KORTEX" bench atlas --tiny --only Scaling --json "sc$np.json" > "sc$np.out" 2>&1 \
      && [ -s "sc$np.json" ]; then
    ok
  else
    fail "bench atlas --only Scaling under $np ranks"; tail -n 20 "sc$np.out"
  fi
done
h1=$(grep -o '"template_fnv1a": *"[0-9a-f]*"' sc1.json | tr -d ' ')
h2=$(grep -o '"template_fnv1a": *"[0-9a-f]*"' sc2.json | tr -d ' ')
if [ -n "$h1" ] && [ "$(echo "$h1" | wc -l)" -eq 2 ] && [ "$h1" = "$h2" ]; then
  echo "ok: scaling templates equal under 1 and 2 ranks ($(echo $h1 | tr '\n' ' '))"; ok
else
  fail "scaling templates differ: 1 rank [$h1] vs 2 ranks [$h2]"
fi
grep -q '"ranks": 2' sc2.json && ok || fail "the 2-rank scaling report does not say 2 ranks"
timeout 300 "${MPI[@]}" -np 2 "$KORTEX" bench atlas --tiny --only Whole > stdout.txt 2> stderr.txt
if [ $? -ne 0 ] && grep -q 'only the "Scaling" or the "Sums over ranks" section runs' stderr.txt; then ok; else fail "bench atlas Whole under 2 ranks was not refused"; cat stderr.txt; fi
# The sums benchmark under 3 ranks: one row per path, the group named.
rm -f su3.json
if timeout 300 "${MPI[@]}" -np 3 "$KORTEX" bench atlas --tiny --only Sums --json su3.json > su3.out 2>&1 && [ -s su3.json ] \
    && grep -q '"seconds_per_iteration"' su3.json && grep -q '"ranks": 3' su3.json; then
  ok
else
  fail "bench atlas --only Sums under 3 ranks"; tail -n 20 su3.out
fi
rm -rf ck f1 f2 f3 fn1 fn2 sc1.json sc2.json sc1.out sc2.out su3.json su3.out
finish
