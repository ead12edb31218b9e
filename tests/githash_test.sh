#!/usr/bin/env bash
# cmake/GitHash.cmake records a source folder's own commit, never that of a repository the folder
# happens to sit in, and honours an explicit hash.
set -u
SCRIPT="${1:?usage: githash_test.sh path/to/GitHash.cmake}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passes=0; fails=0
hash_of() { cmake -DSOURCE_DIR="$1" -DOUTPUT="$work/out.cpp" ${2:+-DHASH=$2} -P "$SCRIPT" >/dev/null 2>&1 &&
            sed -n 's/.*return "\(.*\)";.*/\1/p' "$work/out.cpp"; rm -f "$work/out.cpp"; }
check() { if [ "$2" = "$3" ]; then echo "ok: $1 ($2)"; passes=$((passes + 1)); else echo "FAIL: $1: got '$2', expected '$3'"; fails=$((fails + 1)); fi; }
git -C "$work" init -q outer && git -C "$work/outer" -c user.email=t@t -c user.name=t commit -q --allow-empty -m outer
outer=$(git -C "$work/outer" rev-parse --short=12 HEAD)
mkdir -p "$work/outer/unpacked" && echo x > "$work/outer/unpacked/file"
check "a tree unpacked inside another repository" "$(hash_of "$work/outer/unpacked")" "unknown"
check "the repository itself" "$(hash_of "$work/outer")" "$outer"
mkdir -p "$work/plain"
check "a folder outside any repository" "$(hash_of "$work/plain")" "unknown"
check "an explicit hash" "$(hash_of "$work/outer/unpacked" abc123)" "abc123"
echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
