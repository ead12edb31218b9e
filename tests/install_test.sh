#!/usr/bin/env bash
# Installs the build tree into a temporary prefix and builds + runs a downstream project that uses
# find_package(Kortex) and <kortex/...> includes. Usage: install_test.sh BUILD_DIR SOURCE_DIR [Kokkos_DIR]
set -eu
BUILD="$1"; SRC="$2"; KOKKOS_DIR="${3:-}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log"
extra=()
if [ -n "$KOKKOS_DIR" ]; then extra=(-DKokkos_DIR="$KOKKOS_DIR"); fi
cmake -S "$SRC/tests/install_consumer" -B "$WORK/build" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
      -DCMAKE_BUILD_TYPE=Release "${extra[@]}" > "$WORK/configure.log"
cmake --build "$WORK/build" > "$WORK/build.log"
"$WORK/build/consumer"
