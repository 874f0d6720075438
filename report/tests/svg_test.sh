#!/usr/bin/env bash
# svg_test.sh SVG_DEMO SVG_CHECK: writes SVGs with known data and checks them with python3's XML parser.
set -euo pipefail
out=${TEST_TMPDIR:-$(mktemp -d)}/svg
rm -rf "$out"; mkdir -p "$out"
"$1" "$out"
/usr/bin/python3 "$2" "$out"
