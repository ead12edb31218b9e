#!/usr/bin/env bash
# The one-way dependency rule of docs/architecture.md, checked on the includes:
#   apps -> {validation, bench} -> pipeline -> {gpu, reference_cpu, io} -> core
#   apps -> distributed -> gpu -> core (the process group; the jobs see only gpu::Communicator)
# (apps may also include pipeline and the back ends directly). A module may include itself and
# the modules to its right; gpu/ internals (*/detail/) only from gpu/ and from the tests that test
# that kernel on purpose (listed below); Eigen, OpenMP pragmas and VTK never in gpu/ headers, VTK
# only inside io/.
set -u
ROOT="${1:?usage: layering_test.sh SOURCE_DIR}"
cd "$ROOT" || exit 2
fails=0
passes=0
check_module() {
  local module="$1" allowed="$2"
  local bad
  bad=$(grep -rnoE '#include "[a-z_]+/' "$module" --include='*.hpp' --include='*.cpp' |
        sed -E 's/#include "([a-z_]+)\/$/\1/' | awk -F: -v ok="$allowed" '
          BEGIN { n = split(ok, a, " "); for (i = 1; i <= n; ++i) allow[a[i]] = 1 }
          { if (!($NF in allow)) print $1 ":" $2 " includes " $NF "/" }')
  if [ -n "$bad" ]; then
    echo "FAIL: $module/ may include only: $allowed"
    echo "$bad"
    fails=$((fails + 1))
  else
    echo "ok: $module/ includes only $allowed"
    passes=$((passes + 1))
  fi
}
check_module core "core"
check_module io "io core"
check_module reference_cpu "reference_cpu core"
check_module gpu "gpu core"
check_module distributed "distributed gpu core"
check_module pipeline "pipeline gpu reference_cpu io core"
check_module validation "validation pipeline gpu reference_cpu io core"
check_module bench "bench validation pipeline gpu reference_cpu io core"
check_module apps "apps bench validation pipeline distributed gpu reference_cpu io core"
check_module python "pipeline gpu reference_cpu io core"

# gpu/ internals: from gpu/ itself, the tuners that launch a kernel with an explicit tile
# (pipeline/Tune*.cpp), the benchmarks that time one kernel (bench/), and the tests that test
# that kernel on purpose.
detail_users=$(grep -rlE '#include "gpu/[a-z_]+/detail/|#include "gpu/detail/' --include='*.hpp' --include='*.cpp' . |
               grep -vE '^\./(gpu/|pipeline/Tune[A-Za-z]*\.cpp|bench/|tests/tst(Bilateral|Nlm|MultiresBilateral|Registration)\.cpp|build)' || true)
if [ -n "$detail_users" ]; then
  echo "FAIL: gpu detail headers included from:"; echo "$detail_users"; fails=$((fails + 1))
else
  echo "ok: gpu detail headers stay inside gpu/, the tuners, the benchmarks and the kernel tests"; passes=$((passes + 1))
fi

# Rule 7: no Eigen, OpenMP pragma or VTK in gpu/ headers; VTK only in io/.
if grep -rnE '#include <(Eigen|vtk)|#pragma omp' gpu --include='*.hpp'; then
  echo "FAIL: Eigen, VTK or an OpenMP pragma in a gpu/ header"; fails=$((fails + 1))
else
  echo "ok: no Eigen, VTK or OpenMP pragma in gpu/ headers"; passes=$((passes + 1))
fi
vtk_users=$(grep -rlE '#include <vtk' --include='*.hpp' --include='*.cpp' . | grep -vE '^\./(io/|build)' || true)
if [ -n "$vtk_users" ]; then
  echo "FAIL: VTK outside io/:"; echo "$vtk_users"; fails=$((fails + 1))
else
  echo "ok: VTK only inside io/"; passes=$((passes + 1))
fi

# Kokkos-version conditionals live in core/Compat.hpp only.
version_ifs=$(grep -rnE '#if.*(KOKKOS_VERSION|KORTEX_KOKKOS_4)' --include='*.hpp' --include='*.cpp' \
                core gpu reference_cpu io pipeline validation bench apps tests | grep -v '^core/Compat.hpp' || true)
if [ -n "$version_ifs" ]; then
  echo "FAIL: Kokkos-version #if outside core/Compat.hpp:"; echo "$version_ifs"; fails=$((fails + 1))
else
  echo "ok: Kokkos-version #ifs only in core/Compat.hpp"; passes=$((passes + 1))
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
