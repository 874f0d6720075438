"""Repository rule local_python: the CPython headers of Debian's python3-dev, for the py backend.

@local_python//:headers is a header-only cc_library (Python.h and friends). The py backend
(kernels/py/) compiles against the STABLE ABI (Py_LIMITED_API) and links no libpython: it
dlopen()s the libpython of the interpreter the user runs (`python3` on PATH, or
FLASHCHECK_PYTHON) at run time, so the binary built here against 3.11 headers drives a 3.12
interpreter (and its torch) on another host. The interpreter asked for the headers is
/usr/bin/python3 (ci/setup.sh installs python3-dev), overridable with FLASHCHECK_BUILD_PYTHON.
"""

def _local_python_impl(rctx):
    py = rctx.os.environ.get("FLASHCHECK_BUILD_PYTHON", "") or "/usr/bin/python3"
    r = rctx.execute([py, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"], timeout = 30)
    inc = r.stdout.strip() if r.return_code == 0 else ""
    if not inc or not rctx.path(inc + "/Python.h").exists:
        fail("local_python: no Python.h from %s (%s); install python3-dev (bash ci/setup.sh)" % (py, r.stderr.strip() or inc))
    rctx.symlink(inc, "include")
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)
""")

local_python = repository_rule(
    implementation = _local_python_impl,
    environ = ["FLASHCHECK_BUILD_PYTHON"],
    local = True,
)
