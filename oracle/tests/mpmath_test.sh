#!/bin/sh
# Independent cross-check of the oracle against mpmath at 60 digits.
# /usr/bin/python3 (Debian: python3-mpmath, python3-numpy), not the pyenv python3.
set -eu
out="${TEST_TMPDIR:-/tmp}/mpmath_cases.txt"
oracle/mpmath_dump "$out"
exec /usr/bin/python3 oracle/tests/mpmath_check.py "$out"
