# expect.sh: the checks of the cli shell tests (cli_test.sh, v3_verify_test.sh), sourced by them.
# The caller sets out (a scratch file for a command's output) and the counters pass=0, fail=0,
# and ends with: echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ].

# expect RC PATTERN DESCRIPTION -- COMMAND...: run COMMAND, check its exit code and that its
# output (stdout+stderr) matches the extended regex PATTERN ("" = no output check)
expect() {
  local rc=$1 pat=$2 what=$3; shift 4
  "$@" >"$out" 2>&1; local got=$?
  if [ "$got" -eq "$rc" ] && { [ -z "$pat" ] || grep -Eq -- "$pat" "$out"; }; then
    pass=$((pass + 1)); echo "ok    $what"
  else
    fail=$((fail + 1)); echo "FAIL  $what: exit $got (want $rc), pattern '$pat'"; sed 's/^/      | /' "$out" | tail -15
  fi
}

# check CONDITION-COMMAND DESCRIPTION: eval the condition; it must succeed
check() {
  if eval "$1"; then pass=$((pass + 1)); echo "ok    $2"; else fail=$((fail + 1)); echo "FAIL  $2 ($1)"; fi
}
