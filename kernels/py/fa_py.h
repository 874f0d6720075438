/* fa_py.h: the py backend (prefix fa_py_): a flash-attention callable written in
 * Python (PyTorch, Triton, numpy, ...) behind the fa_backend table.
 *
 *   --backend py:MODULE_OR_FILE:CALLABLE     e.g. py:flashcheck.adapters.torch_sdpa:flash,
 *                                                 py:examples/triton_fa.py:attention
 *
 * The process embeds CPython: the interpreter is `python3` on PATH or the one
 * named by FLASHCHECK_PYTHON; its libpython is dlopen()ed with RTLD_GLOBAL at
 * the first fa_backend_py call (this code is compiled against the stable ABI and
 * links no libpython), its sys.path is copied, so a venv's packages import. The
 * module is imported once per process: the harness calls this in the worker
 * processes that isolate cases, never in the supervisor.
 *
 * The calling convention, the declarations (device, precision profile, limits)
 * and the mapping of exceptions are those of python/flashcheck/_bridge.py
 * (python/README.md): flashcheck.Unsupported -> FA_ERR_UNSUPPORTED, any other
 * exception -> FA_ERR_INTERNAL with the exception and its innermost frame in
 * fa_error.msg (the full traceback goes to stderr).
 *
 * Tensors: every fa_tensor/fa_lse/fa_mask becomes a DLPack capsule over the
 * harness's buffer (no copy; strides in elements as in the contract; the view
 * pointer is the data pointer, so padding and gaps stay where they are). */
#ifndef FLASHCHECK_FA_PY_H
#define FLASHCHECK_FA_PY_H

#include "kernels/flash_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* spec: "MODULE_OR_FILE:CALLABLE" (without the "py:" prefix). One backend per
 * process: a second call with another spec fails with FA_ERR_INVALID. */
fa_status fa_backend_py(const char *spec, const fa_backend **out, fa_error *err);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_FA_PY_H */
