/* fa_registry.c: finding a backend: by name, by path (dlopen), or the default.
 *
 * Built twice (kernels/BUILD):
 *   //kernels:backends           with CUDA: fa_backend_cuda comes from
 *                                //kernels/cuda:cuda_backend;
 *   //kernels:backends_cpu_only  with -DFA_REGISTRY_CPU_ONLY: this file
 *                                defines fa_backend_cuda() == NULL and reports
 *                                no CUDA device.
 * Both have the py backend (kernels/py); the libFuzzer builds outside Bazel
 * (fuzz/build_fuzzers.sh, .clusterfuzzlite) compile with -DFA_REGISTRY_NO_PY:
 * sanitizer builds do not embed CPython. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "kernels/flash_api.h"
#ifndef FA_REGISTRY_NO_PY
#include "kernels/py/fa_py.h"
#endif
#ifndef FA_REGISTRY_CPU_ONLY
#include "kernels/cuda/cuda_backend.h"
#endif

// ----------------------------------------------------------------------------
// CUDA presence

#ifdef FA_REGISTRY_CPU_ONLY
const fa_backend *fa_backend_cuda(void) { return NULL; }
static int reg_cuda_device_count(void) { return 0; }
#else
static int reg_cuda_device_count(void) { return fa_cuda_device_count(); }
#endif

// ----------------------------------------------------------------------------
// loading a third-party backend

fa_status fa_backend_load(const char *path, const fa_backend **out, fa_error *err) {
    if (out == NULL) return fa_fail(err, FA_ERR_INVALID, "out", "out is NULL; pass a place for the backend.");
    *out = NULL;
    if (path == NULL || *path == '\0')
        return fa_fail(err, FA_ERR_INVALID, "path", "the backend path is empty; pass the path of a "
                                                    "shared library exporting %s.", FA_BACKEND_EXPORT_SYMBOL);
    dlerror();
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        return fa_fail(err, FA_ERR_INVALID, "path", "cannot load backend '%s': %s. Check the path "
                       "(use ./name.so for a file in the current directory).", path, why ? why : "?");
    }
    dlerror();
    void *sym = dlsym(lib, FA_BACKEND_EXPORT_SYMBOL);
    if (sym == NULL) {
        const char *why = dlerror();
        fa_status st = fa_fail(err, FA_ERR_INVALID, "path", "'%s' does not export %s (%s); a backend "
                               "library must define const fa_backend *%s(void) with C linkage.", path,
                               FA_BACKEND_EXPORT_SYMBOL, why ? why : "not found",
                               FA_BACKEND_EXPORT_SYMBOL);
        dlclose(lib);
        return st;
    }
    fa_backend_export_fn export_fn;
    memcpy(&export_fn, &sym, sizeof(export_fn)); /* object pointer -> function pointer */
    const fa_backend *b = export_fn();
    const char *problem = NULL;
    char detail[160] = "";
    if (b == NULL) problem = FA_BACKEND_EXPORT_SYMBOL "() returned NULL";
    else if (b->abi_version != FA_ABI_VERSION) {
        /* ABI 3 -> 4 appended fields to fa_problem (which opens the args structs) and to
         * fa_limits (which precedes the function pointers); 4 -> 5 appended
         * fa_precision.masked_nonfinite (fa_precision precedes fa_limits in the table): an
         * older table cannot be read nor called with these arguments, so it is rejected;
         * rebuilding needs no source change (flash_api.h, FA_ABI_VERSION). */
        snprintf(detail, sizeof(detail), "its table has abi_version %d but this flashcheck needs %d%s",
                 b->abi_version, FA_ABI_VERSION,
                 b->abi_version == 3 || b->abi_version == 4
                     ? " (ABI 5 is source compatible: recompile unchanged)" : "");
        problem = detail;
    } else if (b->name == NULL || b->name[0] == '\0') problem = "its table has no name";
    else if (b->forward == NULL) problem = "its table has a NULL forward";
    else if (b->memspace != FA_MEM_HOST && b->memspace != FA_MEM_CUDA) problem = "its table has an unknown memspace";
    if (problem) {
        fa_status st = fa_fail(err, FA_ERR_INVALID, "path", "backend '%s' is unusable: %s; rebuild the "
                               "backend against this kernels/flash_api.h.", path, problem);
        dlclose(lib);
        return st;
    }
    *out = b; /* the library stays loaded for the life of the process */
    return FA_OK;
}

// ----------------------------------------------------------------------------
// by name, default

static int reg_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

fa_status fa_backend_by_name(const char *name, const fa_backend **out, fa_error *err) {
    if (out == NULL) return fa_fail(err, FA_ERR_INVALID, "out", "out is NULL; pass a place for the backend.");
    *out = NULL;
    if (name == NULL) name = "";
    if (strcmp(name, "cpu") == 0) {
        *out = fa_backend_cpu();
        return FA_OK;
    }
    if (strcmp(name, "cuda") == 0) {
        const fa_backend *b = fa_backend_cuda();
        if (b == NULL)
            return fa_fail(err, FA_ERR_UNSUPPORTED, "backend", "backend 'cuda' is not available: this "
                           "flashcheck was built without CUDA; use 'cpu' or a .so path.");
        if (reg_cuda_device_count() <= 0)
            return fa_fail(err, FA_ERR_UNSUPPORTED, "backend", "backend 'cuda' needs a GPU but no CUDA "
                           "device is visible (check the driver and CUDA_VISIBLE_DEVICES); use 'cpu'.");
        *out = b;
        return FA_OK;
    }
    if (strncmp(name, "py:", 3) == 0) {
#ifdef FA_REGISTRY_NO_PY
        return fa_fail(err, FA_ERR_UNSUPPORTED, "backend", "this build (the sanitizer fuzz targets) has no py "
                       "backend; use the flashcheck command");
#else
        return fa_backend_py(name + 3, out, err);
#endif
    }
    if (strchr(name, '/') != NULL || reg_ends_with(name, ".so")) return fa_backend_load(name, out, err);
    return fa_fail(err, FA_ERR_INVALID, "backend", "unknown backend '%s'; choose 'cpu', 'cuda', "
                   "py:MODULE_OR_FILE:CALLABLE (a Python callable), or a path to a shared library (containing "
                   "'/' or ending in .so) exporting %s.", name,
                   FA_BACKEND_EXPORT_SYMBOL);
}

const fa_backend *fa_backend_default(void) {
    const fa_backend *cuda = fa_backend_cuda();
    if (cuda != NULL && reg_cuda_device_count() > 0) return cuda;
    return fa_backend_cpu();
}
