# Shared by the CLI tests (cli_test.sh, cli_realdata_test.sh); source it after setting KORTEX.
# Sets up a temporary working folder (removed on exit) and the check helpers; end the script with
# `finish` (prints "N passed, N failed" and returns non-zero on any failure).
: "${KORTEX:?set KORTEX to the kortex executable before sourcing cli_lib.sh}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
# Never the user's own tuning database (kortex tune, run-time lookups).
export KORTEX_TUNING_DB="$WORK/user-tuning.json"
# Notices must be visible here: some checks look for (the absence of) "no tuning entry" lines.
unset KORTEX_TUNING_QUIET
fails=0
passes=0

ok()   { passes=$((passes + 1)); }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect_error NAME OUTFILE CMD...: non-zero exit, exactly one "error" line on stderr,
# nothing on OUTFILE, no temporary files in the folder.
expect_error() {
  local name="$1" outfile="$2"; shift 2
  rm -f "$outfile"
  "$@" > stdout.txt 2> stderr.txt
  local rc=$?
  local nerr
  nerr=$(grep -c -i "error" stderr.txt)
  if [ $rc -eq 0 ]; then fail "$name: exit 0"; return; fi
  if [ "$nerr" -ne 1 ]; then fail "$name: expected one error line, got $nerr:"; cat stderr.txt; return; fi
  if [ -n "$outfile" ] && [ -e "$outfile" ]; then fail "$name: output '$outfile' left behind"; return; fi
  if ls -a | grep -q "kortex-tmp"; then fail "$name: temporary file left behind"; return; fi
  echo "ok: $name -> $(head -n 1 stderr.txt)"
  ok
}

expect_success() {
  local name="$1" outfile="$2"; shift 2
  rm -f "$outfile"
  if ! "$@" > stdout.txt 2> stderr.txt; then fail "$name: non-zero exit"; cat stderr.txt; return; fi
  if [ -n "$outfile" ] && [ ! -s "$outfile" ]; then fail "$name: no output '$outfile'"; return; fi
  echo "ok: $name"
  ok
}

# MetaImage writer in pure bash: mha NAME NDIMS "DIMS" then float32 little-endian bytes via printf.
mha() {
  local name="$1" ndims="$2" dims="$3" bytes="$4"
  {
    printf 'ObjectType = Image\nNDims = %s\nDimSize = %s\nElementType = MET_FLOAT\nElementDataFile = LOCAL\n' "$ndims" "$dims"
    printf "$bytes"
  } > "$name"
}
one='\x00\x00\x80\x3f'   # 1.0f
nan='\x00\x00\xc0\x7f'   # NaN
inf='\x00\x00\x80\x7f'   # +Inf
rep() { local s=""; for _ in $(seq 1 "$2"); do s="$s$1"; done; printf '%s' "$s"; }

# The last line of every CLI test: the counts, and the exit status.
finish() {
  echo "$passes passed, $fails failed"
  [ "$fails" -eq 0 ]
}
