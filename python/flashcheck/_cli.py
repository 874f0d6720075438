"""Running the flashcheck command (the C engine: oracle, checks, campaigns) from Python.

The binary: $FLASHCHECK_BIN, else `flashcheck` on PATH, else bazel-bin/cli/flashcheck of the
repository this package was installed from or runs in. The py backend's worker processes embed
the interpreter running this code: FLASHCHECK_PYTHON is set to sys.executable and this package's
folder is put on PYTHONPATH for them.
"""
import os
import shutil
import subprocess
import sys

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _repo_candidates():
    here = _PKG_PARENT
    for _ in range(4):
        yield os.path.join(here, "bazel-bin", "cli", "flashcheck")
        here = os.path.dirname(here)
    origin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_repo_root.txt")
    if os.path.exists(origin):
        with open(origin) as f:
            yield os.path.join(f.read().strip(), "bazel-bin", "cli", "flashcheck")


def binary():
    """Path of the flashcheck executable; FileNotFoundError with what to do when none is found."""
    env = os.environ.get("FLASHCHECK_BIN")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise FileNotFoundError("FLASHCHECK_BIN=%s is not an executable file" % env)
        return env
    found = shutil.which("flashcheck")
    if found:
        return found
    for c in _repo_candidates():
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise FileNotFoundError("no flashcheck executable: build it (bazel build //cli:flashcheck in the flashcheck "
                            "repository) and put it on PATH or set FLASHCHECK_BIN=/path/to/flashcheck")


def env():
    e = dict(os.environ)
    e.setdefault("FLASHCHECK_PYTHON", sys.executable)
    pp = e.get("PYTHONPATH", "")
    parts = [p for p in pp.split(os.pathsep) if p]
    if _PKG_PARENT not in parts:
        parts.insert(0, _PKG_PARENT)
    e["PYTHONPATH"] = os.pathsep.join(parts)
    return e


def run(args, capture=True, timeout=None, cwd=None):
    """Run flashcheck ARGS; returns subprocess.CompletedProcess (text)."""
    cmd = [binary()] + [str(a) for a in args]
    return subprocess.run(cmd, env=env(), cwd=cwd, timeout=timeout, text=True,
                          stdout=subprocess.PIPE if capture else None,
                          stderr=subprocess.PIPE if capture else None)


def spec_of(fn):
    """The py backend spec of fn: a "py:..." string as is; "MODULE:NAME" of an importable
    callable; "FILE.py:NAME" for a callable of the __main__ script."""
    if isinstance(fn, str):
        return fn if fn.startswith("py:") else "py:" + fn
    mod = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", None)
    name = getattr(fn, "__qualname__", None)
    if name is None or "<locals>" in name:
        m = sys.modules.get(mod)
        name = next((k for k, v in vars(m).items() if v is fn), None) if m else None
    if not mod or not name:
        raise ValueError("cannot name %r for the worker processes; pass 'module:callable' or 'file.py:callable'" % (fn,))
    m = sys.modules.get(mod)
    if mod == "__main__" or (m is not None and mod.startswith("flashcheck_user_")):
        path = getattr(m, "__file__", None)
        if not path:
            raise ValueError("%r is defined in an interactive session; put it in a file" % (fn,))
        return "py:%s:%s" % (os.path.abspath(path), name)
    if m is not None and getattr(m, "__file__", None) and "." not in mod:
        # a top-level module may sit on a path only this process has: name its file
        return "py:%s:%s" % (os.path.abspath(m.__file__), name)
    return "py:%s:%s" % (mod, name)
