#!/usr/bin/env python3
"""apply_mutant.py MUTANT OUTDIR FILE...: write a patched copy of each FILE (a path under the
workspace root, read from the current directory) to OUTDIR/FILE, applying the hunks of MUTANT.

A mutant file (kernels/cuda/tests/mutants/*.mutant) is text:
    # comment lines (what it breaks, the bug class, what should kill it)
    observable-by: race_probe        (optional header, before the first `file:` line)
    file: kernels/cuda/fwd/fwd_sm90.cu
    <<<<<<< original
    ...exact lines of the shipped source...
    =======
    ...the lines that replace them...
    >>>>>>> mutant
    (more `file:` + hunk blocks)
Each original snippet must occur exactly once in its file, and the files named in MUTANT must be
exactly the FILE arguments (the BUILD rule's `files`): anything else fails the build with a message,
so a mutant whose anchor moved in the shipped source is never silently a copy of the correct kernel.
Files named but without a hunk are an error too. The `observable-by:` header names the evidence
tool that may class the mutant "unobservable on this device" when certify does not kill it
(mutation_test.sh reads it; BUILD says when a mutant may carry it); the only value is race_probe,
anything else, a second header or a header after a `file:` line is an error here.
Exit 0 on success, 1 with a message otherwise."""
import os
import sys

OBSERVABLE_BY = ("race_probe",)


def fail(msg):
    sys.stderr.write("apply_mutant: %s\n" % msg)
    sys.exit(1)


def parse(path):
    hunks = []  # (file, original, replacement)
    cur_file = None
    state = None
    orig, repl = [], []
    observable = None
    with open(path) as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if state is None:
            if line.startswith("#") or not line.strip():
                continue
            if line.startswith("observable-by:"):
                value = line[len("observable-by:"):].strip()
                if cur_file is not None or observable is not None:
                    fail("%s:%d: the observable-by header must come once, before the first 'file:' line" % (path, n))
                if value not in OBSERVABLE_BY:
                    fail("%s:%d: observable-by %r: the only evidence tool is %s" % (path, n, value, ", ".join(OBSERVABLE_BY)))
                observable = value
                continue
            if line.startswith("file:"):
                cur_file = line[5:].strip()
                continue
            if line == "<<<<<<< original":
                if cur_file is None:
                    fail("%s:%d: a hunk before any 'file:' line" % (path, n))
                state, orig, repl = "orig", [], []
                continue
            fail("%s:%d: unexpected line %r" % (path, n, line))
        elif state == "orig":
            if line == "=======":
                state = "repl"
            else:
                orig.append(line)
        elif state == "repl":
            if line == ">>>>>>> mutant":
                if not orig:
                    fail("%s:%d: empty original snippet" % (path, n))
                hunks.append((cur_file, "\n".join(orig) + "\n", "\n".join(repl) + ("\n" if repl else "")))
                state = None
            else:
                repl.append(line)
    if state is not None:
        fail("%s: unterminated hunk" % path)
    if not hunks:
        fail("%s: no hunks" % path)
    return hunks


def main():
    if len(sys.argv) < 4:
        fail("usage: apply_mutant.py MUTANT OUTDIR FILE...")
    mutant, outdir, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    hunks = parse(mutant)
    named = sorted(set(h[0] for h in hunks))
    if named != sorted(set(files)):
        fail("%s patches %s but its BUILD rule declares files %s" % (mutant, named, sorted(set(files))))
    for path in files:
        with open(path) as f:
            text = f.read()
        for (fname, orig, repl) in hunks:
            if fname != path:
                continue
            count = text.count(orig)
            if count != 1:
                fail("%s: the original snippet occurs %d times in %s (must be exactly once); the shipped "
                     "source changed: update the mutant.\n--- snippet ---\n%s" % (mutant, count, path, orig))
            text = text.replace(orig, repl)
        dst = os.path.join(outdir, path)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
