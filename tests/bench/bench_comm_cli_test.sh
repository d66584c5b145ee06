#!/bin/sh
# `strata bench comm` from the outside: usage errors exit 2 and say the fix; a tiny run under
# mpirun times every collective and prints one JSON document.
# usage: bench_comm_cli_test.sh <strata binary> <mpiexec>
set -u
strata="$1"
mpiexec="$2"
fail() {
  echo "FAIL: $*"
  exit 1
}

out=$("$strata" bench comm --size 12XB 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a bad --size exited $rc, not 2: $out"
echo "$out" | grep -q "fix: write it like 64MiB" || fail "no fix for a bad --size: $out"

out=$("$strata" bench comm --type float64 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "a bad --type exited $rc, not 2: $out"
echo "$out" | grep -q "fix: use float32, bfloat16" || fail "no fix for a bad --type: $out"

out=$("$strata" bench comm --size 256KiB --steps 2 2>&1)
rc=$?
[ "$rc" -eq 0 ] || fail "one process exited $rc: $out"
echo "$out" | grep -q "1 rank(s), solo backend" || fail "one process is not the solo backend: $out"

out=$("$mpiexec" --allow-run-as-root --oversubscribe -np 2 "$strata" bench comm --size 1MiB \
  --steps 2 --json 2>/dev/null)
rc=$?
[ "$rc" -eq 0 ] || fail "2 ranks exited $rc: $out"
echo "$out" | grep -q '"ranks": 2' || fail "not 2 ranks: $out"
echo "$out" | grep -q '"backend": "mpi"' || fail "not the mpi backend: $out"
for collective in all_gather reduce_scatter all_reduce broadcast; do
  echo "$out" | grep -q "\"$collective\"" || fail "no $collective figure: $out"
done
echo "PASS"
