#!/usr/bin/env bash
# Runs Kortex's GPU checks and benchmarks on a GPU machine from binaries built with the `cuda`
# preset (Kokkos 4.x + CUDA). Nothing is built here, and Kokkos is never built by this script.
#
#   bench/run_device.sh BIN_DIR OUT_DIR check   # device facts, every test binary on every
#                                               # execution space, full validation, peers
#   bench/run_device.sh BIN_DIR OUT_DIR bench   # kortex bench ct (full), merging peers.json
#   bench/run_device.sh BIN_DIR OUT_DIR tune    # kortex tune (every tuner) -> OUT/tuning.json
#
#   bench/run_device.sh BIN_DIR OUT_DIR multires  # kortex bench multires (full: Figs 4-6, Table 2,
#                                                 # targets), merging $PEERS when given, else the
#                                                 # OpenCV peer (bench/peers/multires_opencv.py) run
#                                                 # here first when python3 has cv2
#
#   bench/run_device.sh BIN_DIR OUT_DIR register  # issue 4: tstOccupancy, tstRegistration, tstAffine
#                                                 # on every space; the PyTorch peer
#                                                 # (bench/peers/registration_torch.py); kortex bench
#                                                 # register (full, IXI target with DATA=folder); and
#                                                 # the IXI registration study (kortex validate
#                                                 # --registration-only --data $DATA)
#
#   bench/run_device.sh BIN_DIR OUT_DIR surface   # issue 5: tstSurfaceNlm, kortex bench surface (+ the
#                                                 # PyTorch kNN peer on its dumped records) and the
#                                                 # real-surface study with DATA=folder
#
#   bench/run_device.sh BIN_DIR OUT_DIR kernels   # issue 43: check, bench, multires, register and surface in
#                                                 # four lanes (LANES="0 1 2 3"): at once with a GPU per lane
#                                                 # (a share of the cores each), else one after another, then
#                                                 # bench/kernels_summary.py -> OUT/kernels_summary.json
#
#   bench/run_device.sh BIN_DIR OUT_DIR targets   # every test executable in BIN_DIR (every execution
#                                                 # space) and the four met targets: BF 2D 1024^2, multires
#                                                 # 4096^2 end to end, registration 240^3 iteration, surface
#                                                 # weights at 175k (issue 13: behaviour unchanged)
#
#   bench/run_device.sh BIN_DIR OUT_DIR greedy    # issue 14: tstFluid, tstGaussian, tstImageOps, tstGreedy,
#                                                 # tstGreedyRealData (DATA=folder) on every space; the
#                                                 # PyTorch greedy peer; kortex bench greedy; the greedy
#                                                 # study (kortex validate --greedy-only, DATA; ELASTIX=
#                                                 # the output of bench/peers/elastix_ixi.sh)
#
#   bench/run_device.sh BIN_DIR OUT_DIR scaling   # issue 16: kortex bench atlas --only Scaling under
#                                                 # mpirun, one rank per GPU (RANKS="1 2 4"), every
#                                                 # reduction path, merged by bench/atlas_scaling.py;
#                                                 # with 2+ ranks also --only Sums (sums_rK.md);
#                                                 # tstAtlas (SKIP_TESTS=1: not); DATA=folder
#
#   bench/run_device.sh BIN_DIR OUT_DIR python    # issue 17: the Python package's pytest suite on the GPU
#                                                 # build (PYDIR=<build>/python) and an NLM run from
#                                                 # Python beside the command
#
#   bench/run_device.sh BIN_DIR OUT_DIR profile # Nsight Compute reports of the kernels behind
#                                               # the NLM and BF targets and the unbiased force at
#                                               # 240^3 (needs ncu)
#
# BIN_DIR holds kortex and the test executables (tstCore tstReferenceCpu tstBilateral tstNlm
# tstMemory tstMultires tstMultiresBilateral tstTuning tstValidation). SKIP_PEERS=1 skips the CT
# peers in `check`. Results land in OUT_DIR (at most 8 files per part); commit them under
# bench/results/ with the device name.
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
  for t in tstCore tstReferenceCpu tstBilateral tstNlm tstMemory tstMultires tstMultiresBilateral tstTuning tstValidation \
           ${EXTRA_TESTS:-}; do  # EXTRA_TESTS: more test binaries of BIN_DIR
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
  if [ -z "${SKIP_PEERS:-}" ]; then  # SKIP_PEERS=1: the CT peers were measured already
    timeout 240 python3 bench/peers/run_peers.py --out "$OUT/peers.json" > "$OUT/peers.log" 2>&1 \
      || { echo "FAIL peers"; status=1; }
    tail -n 3 "$OUT/peers.log"
  fi
elif [ "$PART" = "bench" ]; then
  peers=()
  if [ -n "${PEERS:-}" ] && [ -f "$PEERS" ]; then peers=(--peers "$PEERS"); fi
  "$BIN/kortex" bench ct --json "$OUT/ct.json" --markdown "$OUT/ct.md" "${peers[@]}" \
    > "$OUT/bench.log" 2> "$OUT/bench.progress" || status=1
  tail -n 60 "$OUT/bench.log"
elif [ "$PART" = "tune" ]; then
  # Every registered tuner at its default size into OUT/tuning.json (ship entries from it in
  # core/tuning_defaults.json), all timings in OUT/tune.json.
  timeout 500 "$BIN/kortex" tune --db "$OUT/tuning.json" --json "$OUT/tune.json" > "$OUT/tune.log" 2>&1 \
    || { echo "FAIL tune"; status=1; }
  grep -E "^(==|  (best|worst|reference|default|chosen))" "$OUT/tune.log" | head -n 40
elif [ "$PART" = "multires" ]; then
  peers=()
  if [ -n "${PEERS:-}" ] && [ -f "$PEERS" ]; then
    peers=(--peers "$PEERS")
  elif python3 -c "import cv2, numpy" > /dev/null 2>&1; then
    timeout 150 python3 bench/peers/multires_opencv.py --total-seconds 100 --out "$OUT/multires_peers.json" \
      > "$OUT/multires_peers.log" 2>&1 || { echo "FAIL multires peers"; status=1; }
    tail -n 2 "$OUT/multires_peers.log"
    if [ -f "$OUT/multires_peers.json" ]; then peers=(--peers "$OUT/multires_peers.json"); fi
  else
    echo "no PEERS given and python3 has no cv2: the OpenCV peer is left out"
  fi
  timeout 430 "$BIN/kortex" bench multires --json "$OUT/multires.json" --markdown "$OUT/multires.md" \
    "${peers[@]}" > "$OUT/multires.log" 2> "$OUT/multires.progress" || status=1
  tail -n 80 "$OUT/multires.log"
elif [ "$PART" = "register" ]; then
  DATA="${DATA:-../shared/data}"
  # At most 8 files in OUT: device facts and the peer's log go into reg_tests.log.
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv \
    > "$OUT/reg_tests.log" 2>&1
  for t in tstOccupancy tstRegistration tstAffine; do
    [ -z "${SKIP_TESTS:-}" ] || break  # SKIP_TESTS=1: the benchmark only
    echo "=== $t" >> "$OUT/reg_tests.log"
    if timeout 240 "$BIN/$t" --log_level=test_suite --report_level=short >> "$OUT/reg_tests.log" 2>&1; then
      echo "PASS $t"
    else
      echo "FAIL $t"; status=1
    fi
  done
  grep -h "tstOccupancy:" "$OUT/reg_tests.log" | head -n 12
  peers=()
  if python3 -c "import torch" > /dev/null 2>&1; then
    timeout 200 python3 bench/peers/registration_torch.py --total-seconds 120 --out "$OUT/register_peers.json" \
      > "$OUT/peer.tmp" 2>&1 || { echo "FAIL registration peer"; status=1; }
    tail -n 7 "$OUT/peer.tmp"; cat "$OUT/peer.tmp" >> "$OUT/reg_tests.log"; rm -f "$OUT/peer.tmp"
    if [ -f "$OUT/register_peers.json" ]; then peers=(--peers "$OUT/register_peers.json"); fi
  fi
  timeout 300 "$BIN/kortex" bench register --data "$DATA" --json "$OUT/register.json" --markdown "$OUT/register.md" \
    "${peers[@]}" > "$OUT/register.log" 2>&1 || status=1
  tail -n 45 "$OUT/register.log"
  if [ -z "${SKIP_STUDY:-}" ]; then  # SKIP_STUDY=1: no IXI registration study
    timeout 240 "$BIN/kortex" validate --registration-only --data "$DATA" --json "$OUT/register_validate.json" \
      --markdown "$OUT/register_validate.md" > "$OUT/register_validate.log" 2>&1 || { echo "FAIL registration study"; status=1; }
    tail -n 25 "$OUT/register_validate.log"
  fi
elif [ "$PART" = "surface" ]; then
  # Issue 5: tstSurfaceNlm on every space, kortex bench surface (Figs 4, 5, CPU check, 175k target)
  # with the records of its largest band dumped for the PyTorch kNN peer, then the peer, and the
  # real-surface study (kortex validate --surface-only --data $DATA) when DATA is given.
  DATA="${DATA:-../shared/data}"
  DUMP="$(mktemp -d)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv \
    > "$OUT/surface_tests.log" 2>&1
  for t in tstSurfaceNlm tstSurfaceNlmReference; do
    [ -z "${SKIP_TESTS:-}" ] && [ -x "$BIN/$t" ] || continue  # SKIP_TESTS=1: none
    echo "=== $t" >> "$OUT/surface_tests.log"
    if timeout 200 "$BIN/$t" --log_level=message --report_level=short >> "$OUT/surface_tests.log" 2>&1; then
      echo "PASS $t"
    else
      echo "FAIL $t"; status=1
    fi
  done
  grep -E "Cuda" "$OUT/surface_tests.log" | head -n 20
  timeout 420 "$BIN/kortex" bench surface ${SURFACE_BENCH_ARGS:-} --dump "$DUMP" --json "$OUT/surface.json" \
    --markdown "$OUT/surface.md" > "$OUT/surface.log" 2>&1 || status=1
  tail -n 40 "$OUT/surface.log"
  if python3 -c "import torch" > /dev/null 2>&1 && [ -f "$DUMP/meta.json" ]; then
    timeout 200 python3 bench/peers/surface_torch.py --records "$DUMP" --out "$OUT/surface_peers.json" \
      >> "$OUT/surface_tests.log" 2>&1 || { echo "FAIL surface peer"; status=1; }
    tail -n 1 "$OUT/surface_tests.log"
  fi
  rm -rf "$DUMP"
  if [ -z "${SKIP_STUDY:-}" ] && [ -d "$DATA/mri" ]; then
    timeout 300 "$BIN/kortex" validate --surface-only --data "$DATA" --json "$OUT/surface_validate.json" \
      --markdown "$OUT/surface_validate.md" > "$OUT/surface_validate.log" 2>&1 || { echo "FAIL surface study"; status=1; }
    tail -n 25 "$OUT/surface_validate.log"
  fi
elif [ "$PART" = "kernels" ]; then
  # Issue 43's set in one session. Four lanes:
  #   lane 0: the check part (tests + EXTRA_TESTS, validation) without its peers, then the CT peers
  #   lane 1: kortex bench ct, without peers (kernels_summary.py --ct-peers merges lane 0's)
  #   lane 2: the multires part (its OpenCV peer first)
  #   lane 3: the register part, then the surface part (both without tests and real-data studies)
  # LANES (default "0 1 2 3") picks some. With a GPU per lane they run at once, each pinned to one GPU and
  # an equal share of the cores (taskset; OMP_NUM_THREADS and the peers' default thread counts follow it),
  # i.e. each lane a single-GPU machine of a share of this host. With fewer GPUs they run one after another
  # on GPU 0 with every core: on the single-GPU kind, whose calls are limited in time, run the lanes over
  # several calls (measured on an H200 host of 16 cores, git 41b7214: LANES=1 425 s, LANES="2 3" 373 s,
  # LANES=0 ~180 s + its CT peers ~150 s; a fresh build of everything 380 s) and merge the folders with
  # bench/kernels_summary.py as below.
  # Lane k's log: OUT/laneK.log; its files: OUT/check, OUT/ct, OUT/multires, OUT/register, OUT/surface.
  # PACK=1 packs those folders into OUT/kernels_lanes.tar.gz (a call brings back a limited number of
  # files: lanes 2 and 3 together write 15). When all four lanes ran: bench/kernels_summary.py ->
  # OUT/kernels_summary.json.
  LANES="${LANES:-0 1 2 3}"
  nlanes=$(echo $LANES | wc -w)
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
  self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
  if [ "$ngpu" -ge "$nlanes" ]; then q=$(( $(nproc) / nlanes )); else q=$(nproc); fi
  slot=0
  lane() {  # lane GPU_SLOT COMMAND...: GPU and cores of that slot
    local k=$1; shift
    CUDA_VISIBLE_DEVICES=$k OMP_NUM_THREADS=$q taskset -c $((k * q))-$((k * q + q - 1)) "$@"
  }
  runLane() {  # runLane LANE SLOT
    local k=$1 g=$2 r=0
    case $k in
      0) lane $g env SKIP_PEERS=1 EXTRA_TESTS="${EXTRA_TESTS:-tstSurfaceNlm tstRegistration tstValidation tstMultiresBilateral}" \
           bash "$self" "$BIN" "$OUT/check" check || r=1
         lane $g timeout 240 python3 bench/peers/run_peers.py --out "$OUT/check/peers.json" > "$OUT/check/peers.log" 2>&1 \
           || { echo "FAIL CT peers"; r=1; }
         tail -n 3 "$OUT/check/peers.log" ;;
      1) lane $g bash "$self" "$BIN" "$OUT/ct" bench || r=1 ;;
      2) lane $g bash "$self" "$BIN" "$OUT/multires" multires || r=1 ;;
      3) lane $g env SKIP_TESTS=1 SKIP_STUDY=1 bash "$self" "$BIN" "$OUT/register" register || r=1
         lane $g env SKIP_TESTS=1 SKIP_STUDY=1 bash "$self" "$BIN" "$OUT/surface" surface || r=1 ;;
      *) echo "kernels: no lane $k (0-3)"; r=1 ;;
    esac
    echo "lane $k ended after $SECONDS s"; return $r
  }
  SECONDS=0
  pids=()
  for k in $LANES; do
    if [ "$ngpu" -ge "$nlanes" ]; then
      runLane $k $slot > "$OUT/lane$k.log" 2>&1 &
      pids+=($!); slot=$((slot + 1))
    else
      runLane $k 0 > "$OUT/lane$k.log" 2>&1 || status=1
    fi
  done
  for p in "${pids[@]}"; do wait $p || status=1; done
  grep -h "lane . ended\|FAIL" "$OUT"/lane?.log
  if [ "$nlanes" -eq 4 ]; then
    python3 bench/kernels_summary.py --ct "$OUT/ct/ct.json" --ct-peers "$OUT/check/peers.json" \
      --multires "$OUT/multires/multires.json" --register "$OUT/register/register.json" \
      --surface "$OUT/surface/surface.json" --surface-peers "$OUT/surface/surface_peers.json" \
      --out "$OUT/kernels_summary.json" || status=1
  fi
  if [ -n "${PACK:-}" ]; then
    packed=$(cd "$OUT" && ls -d check ct multires register surface 2>/dev/null)
    if [ -n "$packed" ]; then
      (cd "$OUT" && tar czf kernels_lanes.tar.gz $packed && rm -rf $packed) || status=1
    fi
  fi
elif [ "$PART" = "targets" ]; then
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
    nproc; lscpu | grep -E "Model name|Socket|Core"
  } > "$OUT/device.txt" 2>&1
  "$BIN/kortex" info --json "$OUT/info.json" > /dev/null || status=1
  for t in "$BIN"/tst*; do  # SKIP_TESTS=1: the benchmarks only
    [ -z "${SKIP_TESTS:-}" ] && [ -x "$t" ] && [ -f "$t" ] || continue
    name=$(basename "$t")
    case "$name" in tstSkipContractBinary) continue ;; esac
    echo "=== $name" >> "$OUT/tests.log"
    timeout 300 "$t" --log_level=test_suite --report_level=short >> "$OUT/tests.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then echo "PASS $name"; elif [ $rc -eq 77 ]; then echo "SKIP $name (no data)";
    else echo "FAIL $name ($rc)"; status=1; fi
  done
  # The four targets, each its own run (--only), JSON + Markdown per benchmark (ONLY_TESTS=1: none).
  [ -n "${ONLY_TESTS:-}" ] && exit $status
  timeout 240 "$BIN/kortex" bench ct --only "BF 2D 1024^2 window 17" --json "$OUT/ct_targets.json" \
    --markdown "$OUT/ct_targets.md" > "$OUT/ct_targets.log" 2>&1 || { echo "FAIL bench ct"; status=1; }
  timeout 240 "$BIN/kortex" bench multires --only "Table2 4096^2" --json "$OUT/multires_targets.json" \
    --markdown "$OUT/multires_targets.md" > "$OUT/multires_targets.log" 2>&1 || { echo "FAIL bench multires"; status=1; }
  timeout 240 "$BIN/kortex" bench register --only "Fig2 240^3" --json "$OUT/register_targets.json" \
    --markdown "$OUT/register_targets.md" > "$OUT/register_targets.log" 2>&1 || { echo "FAIL bench register"; status=1; }
  timeout 300 "$BIN/kortex" bench surface --only "Pruned 175000" --json "$OUT/surface_targets.json" \
    --markdown "$OUT/surface_targets.md" > "$OUT/surface_targets.log" 2>&1 || { echo "FAIL bench surface"; status=1; }
  grep -hE "^\| (BF 2D 1024|multires 4096|175258)|240\^3 iteration|Target|target" "$OUT"/*_targets.md | head -n 20
elif [ "$PART" = "greedy" ]; then
  # Issue 14: the affine, fluid, Gaussian and greedy test binaries on every execution space (the real-data
  # one with DATA), the PyTorch greedy-step peer, kortex bench greedy (with the IXI pair when DATA is
  # given) and the greedy validation study (GREEDY_PAIRS pairs of mri/ixi_2mm_more, GREEDY_CPU_PAIRS
  # of them also on the CPU reference, default 1).
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
    nproc; lscpu | grep -E "Model name|Socket|Core"
  } > "$OUT/device.txt" 2>&1
  if [ -z "${SKIP_TESTS:-}" ]; then
    for name in tstAffine tstFluid tstGaussian tstImageOps tstGreedy tstGreedyRealData; do
      echo "=== $name" >> "$OUT/tests.log"
      KORTEX_DATA_DIR="${DATA:-}" timeout 300 "$BIN/$name" --log_level=test_suite --report_level=short >> "$OUT/tests.log" 2>&1
      rc=$?
      if [ $rc -eq 0 ]; then echo "PASS $name"; elif [ $rc -eq 77 ]; then echo "SKIP $name (no data)";
      else echo "FAIL $name ($rc)"; status=1; fi
    done
  fi
  [ -n "${ONLY_TESTS:-}" ] && exit $status
  HERE="$(cd "$(dirname "$0")" && pwd)"
  if [ -z "${SKIP_BENCH:-}" ]; then
    timeout 200 python3 "$HERE/peers/greedy_torch.py" --out "$OUT/peers_greedy.json" > "$OUT/peers_greedy.log" 2>&1 \
      || echo "peer greedy_torch.py failed (see peers_greedy.log)"
    peers=(); [ -f "$OUT/peers_greedy.json" ] && peers=(--peers "$OUT/peers_greedy.json")
    data=(); [ -n "${DATA:-}" ] && data=(--data "$DATA")
    timeout 400 "$BIN/kortex" bench greedy "${peers[@]}" "${data[@]}" --json "$OUT/bench_greedy.json" \
      --markdown "$OUT/bench_greedy.md" > "$OUT/bench_greedy.log" 2>&1 || { echo "FAIL bench greedy"; status=1; }
  fi
  if [ -n "${DATA:-}" ] && [ -z "${SKIP_STUDY:-}" ]; then
    elastix=(); [ -n "${ELASTIX:-}" ] && elastix=(--elastix "$ELASTIX")
    timeout 500 "$BIN/kortex" validate --greedy-only --data "$DATA" --greedy-pairs "${GREEDY_PAIRS:-10}" \
      --greedy-cpu-pairs "${GREEDY_CPU_PAIRS:-1}" "${elastix[@]}" \
      --json "$OUT/validate_greedy.json" --markdown "$OUT/validate_greedy.md" > "$OUT/validate_greedy.log" 2>&1 \
      || { echo "FAIL validate greedy"; status=1; }
  fi
  grep -hE "Target|target|mean" "$OUT"/bench_greedy.md "$OUT"/validate_greedy.md 2>/dev/null | head -n 20
elif [ "$PART" = "scaling" ]; then
  # Issue 16: the atlas over several GPUs of one host, one MPI rank per GPU: kortex bench atlas
  # --only Scaling under mpirun -np K for K in $RANKS (default 1 2 4 ... up to the GPU count), each
  # with every reduction path the group can take (host-staged, NCCL, CUDA-aware MPI), the
  # templates dumped and compared by bench/atlas_scaling.py; then tstAtlas on every space (one GPU)
  # unless SKIP_TESTS=1. NCCL is found by KORTEX_NCCL_LIBRARY, else in the CUDA toolkit or
  # PyTorch's wheels. NVLink multicast stays off in every process.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  DATA="${DATA:-../shared/data}"
  gpus=$(nvidia-smi -L | grep -c "^GPU")
  if [ -z "${RANKS:-}" ]; then RANKS=1; k=2; while [ $k -le "$gpus" ]; do RANKS="$RANKS $k"; k=$((k * 2)); done; fi
  if [ -z "${KORTEX_NCCL_LIBRARY:-}" ]; then
    KORTEX_NCCL_LIBRARY=$(ls /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2 2>/dev/null | head -n 1)
    [ -z "$KORTEX_NCCL_LIBRARY" ] && KORTEX_NCCL_LIBRARY=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
    export KORTEX_NCCL_LIBRARY
  fi
  {
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv
    nvidia-smi topo -m
    nproc; lscpu | grep -E "Model name|Socket|Core"; free -g | head -n 2
    echo "NCCL library: ${KORTEX_NCCL_LIBRARY:-none}"; mpirun --version | head -n 1
    ompi_info --parsable --all 2>/dev/null | grep -i "mpi_built_with_cuda_support:value" || true
    echo "ranks: $RANKS"
  } > "$OUT/scaling_device.txt" 2>&1
  cat "$OUT/scaling_device.txt"
  DUMP="$(mktemp -d)"
  data=(); [ -d "$DATA/mri" ] && data=(--data "$DATA")
  reports=()
  for K in $RANKS; do
    echo "=== $K ranks" >> "$OUT/scaling.log"
    OMP_NUM_THREADS=$(( $(nproc) / K )) timeout "${SCALING_TIMEOUT:-300}" mpirun --allow-run-as-root --bind-to none -np "$K" \
      -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x KORTEX_NCCL_LIBRARY \
      -x LD_LIBRARY_PATH -x OMP_NUM_THREADS -x OMP_PROC_BIND -x OMP_PLACES \
      "$BIN/kortex" bench atlas --only Scaling "${data[@]}" --dump "$DUMP" --json "$OUT/scaling_r$K.json" \
      --markdown "$DUMP/scaling_r$K.md" >> "$OUT/scaling.log" 2>&1 || { echo "FAIL scaling $K ranks"; status=1; }
    [ -f "$OUT/scaling_r$K.json" ] && reports+=("$OUT/scaling_r$K.json")
    grep -E "^\| [0-9]+ \| $K \|" "$DUMP/scaling_r$K.md" 2>/dev/null
    if [ "$K" -gt 1 ]; then  # one iteration's sums per reduction path, the host-staged chunk sweep (issue 29)
      OMP_NUM_THREADS=$(( $(nproc) / K )) timeout 120 mpirun --allow-run-as-root --bind-to none -np "$K" \
        -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x KORTEX_NCCL_LIBRARY \
        -x LD_LIBRARY_PATH -x OMP_NUM_THREADS "$BIN/kortex" bench atlas --only Sums --json "$OUT/sums_r$K.json" \
        --markdown "$OUT/sums_r$K.md" >> "$OUT/scaling.log" 2>&1 || { echo "FAIL sums $K ranks"; status=1; }
      grep -E "^\| $K \||^Goal" "$OUT/sums_r$K.md" 2>/dev/null
    fi
  done
  if [ ${#reports[@]} -gt 0 ]; then
    python3 "$(dirname "$0")/atlas_scaling.py" --dump "$DUMP" --device-kind "${KIND:-}" --out-md "$OUT/atlas_scaling.md" \
      --out-json "$OUT/atlas_scaling.json" "${reports[@]}" > /dev/null || { echo "FAIL scaling report"; status=1; }
  fi
  rm -rf "$DUMP"
  if [ -z "${SKIP_TESTS:-}" ]; then
    echo "=== tstAtlas" >> "$OUT/scaling_device.txt"
    if timeout "${TEST_TIMEOUT:-240}" "$BIN/tstAtlas" --log_level=test_suite --report_level=short >> "$OUT/scaling_device.txt" 2>&1; then
      echo "PASS tstAtlas"; else echo "FAIL tstAtlas"; status=1; fi
  fi
elif [ "$PART" = "python" ]; then
  # Issue 17: the kortex Python package on the GPU: PYTHONPATH=$PYDIR (the build's python/ folder),
  # the pytest suite (every job against the command, bit for bit, Cuda as the kokkos back end),
  # then NLM 3D 128^3 from Python and from the command, each timed by its own report.
  PYDIR="${PYDIR:?PYDIR=<build>/python}"
  KORTEX_EXE="$BIN/kortex" KORTEX_DATA_DIR="${DATA:-}" PYTHONPATH="$PYDIR" timeout 300 python3 -m pytest -q -rs -p no:cacheprovider \
    "$(dirname "$0")/../python/tests" > "$OUT/python_tests.txt" 2>&1 || { echo "FAIL python tests"; status=1; }
  tail -n 3 "$OUT/python_tests.txt"
  PYTHONPATH="$PYDIR" KORTEX_EXE="$BIN/kortex" timeout 200 python3 - > "$OUT/python_gpu.txt" 2>&1 <<'PY' || { echo "FAIL python gpu run"; status=1; }
import os, subprocess, tempfile, time
import numpy as np
import kortex
print("execution space:", kortex.execution_space, "GPU back end:", kortex.has_gpu_backend)
rng = np.random.default_rng(0)
z, y, x = np.meshgrid(*[np.linspace(-1, 1, 128)] * 3, indexing="ij")
vol = (np.exp(-(x**2 + y**2 / 0.5 + z**2 / 0.7) * 3) + 0.05 * rng.standard_normal(x.shape)).astype(np.float32)
d = tempfile.mkdtemp()
kortex.write(os.path.join(d, "in.nii"), vol)
kortex.denoise_nlm(vol, patch_radius=2, search_radius=5, h=0.05, backend="kokkos")  # warm-up
t = []
for _ in range(5):
    t0 = time.perf_counter(); out = kortex.denoise_nlm(vol, patch_radius=2, search_radius=5, h=0.05, backend="kokkos"); t.append(time.perf_counter() - t0)
print("python denoise_nlm 128^3 patch 2 search 5, wall per call (median of 5, incl. transfers): %.1f ms" % (1e3 * sorted(t)[2]))
p = subprocess.run([os.environ["KORTEX_EXE"], "denoise", "nlm", os.path.join(d, "in.nii"), os.path.join(d, "out.nii"),
                    "--patch-radius", "2", "--search-radius", "5", "--h", "0.05", "--backend", "kokkos"], capture_output=True, text=True)
print("command:", p.stdout.strip())
same = np.array_equal(out, kortex.read(os.path.join(d, "out.nii"))["array"])
print("python result == command result:", same)
assert same
PY
  cat "$OUT/python_gpu.txt"
elif [ "$PART" = "profile" ]; then
  NCU="$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1)"
  if [ -z "$NCU" ]; then echo "no ncu on this machine"; exit 1; fi
  # One launch of each BoxSum kernel at the target size (after the warm-up launches), with the
  # sections that show what bounds it: throughput, issue/pipe use, stalls, occupancy, source hot spots.
  sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
            --section WarpStateStats --section Occupancy --section LaunchStats --section SourceCounters)
  # (the 3D row needs the full mode: --quick skips it by budget); the last row is the unbiased
  # registration's default force (Recompute) at 240^3, issue 43's iteration size.
  for spec in "nlm2d|BoxSum2DKernel|ct|NLM 2D 1024^2 patch 7 window 17|--quick" \
              "nlm3d|BoxSumKernel<\\(int\\)3|ct|NLM 3D 256^3 patch 5 window 11|" \
              "bf2d|ScratchTiledFunctor|ct|BF 2D 1024^2 window 17|--quick" \
              "force240|RecomputeForceFunctor|register|Fig1 240^3|--quick"; do
    IFS='|' read -r name kernel section row mode <<< "$spec"
    timeout 280 "$NCU" --kernel-name-base demangled -k "regex:$kernel" --launch-skip 2 --launch-count 1 \
      "${sections[@]}" -o "$OUT/ncu_$name" -f \
      "$BIN/kortex" bench "$section" $mode --only "$row" > "$OUT/ncu_$name.log" 2>&1 || { echo "FAIL ncu $name"; status=1; }
    "$NCU" -i "$OUT/ncu_$name.ncu-rep" --page details > "$OUT/ncu_$name.txt" 2>&1 || status=1
    grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc Active|Achieved Occupancy" \
      "$OUT/ncu_$name.txt" | head -n 8
  done
else
  echo "unknown part '$PART' (check|bench|tune|multires|register|surface|targets|greedy|scaling|python|profile)"; exit 2
fi
exit $status
