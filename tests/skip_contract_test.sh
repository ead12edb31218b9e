#!/usr/bin/env bash
# The skip contract of the realdata executables: a skip is a skip, and a failure is never reported
# as skipped or passed. Runs tstSkipContract (one case without data, one that fails when
# KORTEX_TEST_FORCE_FAILURE=1) twice:
#   without the variable   -> exit 77 (ctest: Skipped);
#   with it                -> exit neither 0 nor 77 (ctest: Failed), although a case skipped.
# Usage: skip_contract_test.sh /path/to/tstSkipContractBinary
set -u
BIN="$1"
LOG="$(mktemp -d)"
trap 'rm -rf "$LOG"' EXIT
fails=0
passes=0

unset KORTEX_TEST_FORCE_FAILURE
"$BIN" > "$LOG/skip.log" 2>&1
rc=$?
if [ "$rc" -eq 77 ] && grep -q "skipped: real data '.*' not found" "$LOG/skip.log"; then
  echo "ok: a skipped case (with its note) and a passing case exit 77"
  passes=$((passes + 1))
else
  echo "FAIL: a skipped case and a passing case exit $rc (expected 77 and a "skipped: real data" note):"; cat "$LOG/skip.log"
  fails=$((fails + 1))
fi

KORTEX_TEST_FORCE_FAILURE=1 "$BIN" > "$LOG/fail.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
  echo "ok: a failing case beside a skipped case exits $rc (not 0, not 77)"
  passes=$((passes + 1))
else
  echo "FAIL: a failing case beside a skipped case exits $rc (expected neither 0 nor 77):"; cat "$LOG/fail.log"
  fails=$((fails + 1))
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
