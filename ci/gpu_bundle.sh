#!/usr/bin/env bash
# gpu_bundle.sh DIR: build every GPU test (target_compatible_with @local_gpu//:present) and every tool
# listed in ci/bundle_tools.txt for a GPU (platform @local_gpu//:with_gpu, so this works on a machine
# without one), statically linked (--dynamic_mode=off), and copy them with their runfiles into DIR
# together with DIR/run_all.sh, which runs each test and prints "N passed, N failed".
# Run as `bazel run //ci:gpu_bundle -- DIR` or directly from the workspace root.
set -euo pipefail
ws="${BUILD_WORKSPACE_DIRECTORY:-$(pwd)}"
cd "$ws"
[ $# -eq 1 ] || { echo "usage: bazel run //ci:gpu_bundle -- DIR   (DIR is created; it must not exist or be empty)" >&2; exit 2; }
out="$1"; case "$out" in /*) ;; *) out="$ws/$out";; esac
if [ -e "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
  echo "gpu_bundle: $out exists and is not empty; give a new or empty directory (nothing was overwritten)" >&2; exit 2
fi

flags=(--platforms=@local_gpu//:with_gpu --dynamic_mode=off)
# FLASHCHECK_BUNDLE_ARCHS=sm_90a: an H100/H200-only bundle, about half the size (default: sm_80 + sm_90a).
if [ "${FLASHCHECK_BUNDLE_ARCHS:-}" = "sm_90a" ]; then flags+=(--define=cuda_archs=sm_90a); fi
tests=$(bazel query 'attr(target_compatible_with, "local_gpu//:present", tests(//...))' 2>/dev/null | sort)
tools=$(grep -v '^#' ci/bundle_tools.txt | sed '/^\s*$/d' | while read -r t; do
  if bazel query "$t" >/dev/null 2>&1 </dev/null; then echo "$t"; fi; done)
[ -n "$tests$tools" ] || { echo "gpu_bundle: no GPU tests or tools found" >&2; exit 1; }
echo "gpu_bundle: building $(echo $tests | wc -w) GPU tests and $(echo $tools | wc -w) tools" >&2
bazel build "${flags[@]}" $tests $tools
bin=$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)

mkdir -p "$out/tests" "$out/tools"
copy_target() { # label kind
  local label=$1 kind=$2 pkg name dst
  pkg=${label#//}; pkg=${pkg%%:*}; name=${label##*:}
  dst="$out/$kind/${pkg//\//_}__$name"
  mkdir -p "$dst"
  cp -L "$bin/$pkg/$name" "$dst/$name"
  if [ -d "$bin/$pkg/$name.runfiles" ]; then
    cp -rL "$bin/$pkg/$name.runfiles" "$dst/$name.runfiles"
    # The runfiles tree holds the executable itself again: point it at the one copy instead.
    local self="$dst/$name.runfiles/flashcheck/$pkg/$name"
    if [ -f "$self" ]; then
      local up; up=$(echo "flashcheck/$pkg" | sed 's|[^/]*|..|g')
      rm -f "$self"; ln -s "$up/../$name" "$self"
    fi
  fi
  # The test's `args` as Bazel would pass them ($(location)/$(rootpath) become runfiles paths), one a line.
  bazel query --output=build "$label" 2>/dev/null </dev/null | python3 -c '
import ast, re, sys
pkg = sys.argv[1]
text = sys.stdin.read()
m = re.search(r"^  args = (\[.*?\]),$", text, re.S | re.M)
for a in (ast.literal_eval(m.group(1)) if m else []):
    def loc(mm):
        t = mm.group(2)
        if t.startswith(":"): return pkg + "/" + t[1:]
        if t.startswith("//"):
            p, _, n = t[2:].partition(":")
            return p + "/" + (n or p.split("/")[-1])
        return pkg + "/" + t
    print(re.sub(r"\$\((location|rootpath|execpath) ([^)]+)\)", loc, a))
' "$pkg" > "$dst/args"
  echo "$label $kind/${pkg//\//_}__$name/$name" >> "$out/MANIFEST"
}
: > "$out/MANIFEST"
for t in $tests; do copy_target "$t" tests; done
for t in $tools; do copy_target "$t" tools; done
# Shared libraries the GPU host may lack (MPFR, GMP, OpenMP, cJSON...): carried in DIR/lib; run_all.sh and
# DIR/env.sh put it on LD_LIBRARY_PATH. The C/C++ runtime itself (libc, libm, libstdc++, libgcc_s) is not.
mkdir -p "$out/lib"
find "$out/tests" "$out/tools" -type f -perm -u+x | while read -r f; do
  file "$f" 2>/dev/null | grep -q ELF || continue
  ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  case "$soname" in libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|ld-linux*|libdl.so*|libpthread.so*|librt.so*) continue;; esac
  cp -L "$path" "$out/lib/$soname"
done
cat > "$out/env.sh" <<'ENV'
# Source this file before running the bundled tools by hand: . DIR/env.sh
export LD_LIBRARY_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ENV
cp ci/run_all.sh "$out/run_all.sh"; chmod +x "$out/run_all.sh"
echo "gpu_bundle: wrote $out ($(du -sh "$out" | cut -f1)); on the GPU host run: $out/run_all.sh" >&2
