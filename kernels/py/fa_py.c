/* fa_py.c: see fa_py.h. The Python side is python/flashcheck/_bridge.py; this
 * file only starts the interpreter, builds DLPack capsules over the harness's
 * buffers and turns the bridge's (status, arg, message) answers into fa_status.
 *
 * Every libpython function is reached through a pointer looked up with dlsym
 * in the libpython dlopen()ed at run time (py_api below): the binary links no
 * libpython and is not tied to the Python it was compiled next to. Only
 * functions of the stable ABI (Py_LIMITED_API 3.8) are used, and no macro that
 * touches object internals (Py_DECREF is Py_DecRef through its pointer). */
#define _GNU_SOURCE
#define Py_LIMITED_API 0x03080000
#include <Python.h>

#include "kernels/py/fa_py.h"
#include "kernels/py/fa_py_mem.h"

#include <dlfcn.h>
#include <dlpack/dlpack.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <wchar.h>

/* ------------------------------------------------------------------------- */
/* the libpython functions used, each resolved by name                       */

#define PY_FUNCS(X)                                                                                      \
    X(Py_IsInitialized) X(Py_InitializeEx) X(Py_SetPythonHome) X(Py_SetProgramName) X(Py_DecodeLocale)  \
    X(PyEval_SaveThread) X(PyGILState_Ensure) X(PyGILState_Release) X(PyImport_ImportModule)             \
    X(PyObject_GetAttrString) X(PyObject_SetAttrString) X(PyObject_CallObject) X(PyTuple_New)            \
    X(PyTuple_SetItem) X(PyTuple_Size) X(PyTuple_GetItem) X(PyList_New) X(PyList_SetItem)                \
    X(PyLong_FromLongLong) X(PyLong_AsLongLong) X(PyFloat_FromDouble) X(PyFloat_AsDouble)                \
    X(PyUnicode_FromString) X(PyUnicode_AsUTF8String) X(PyBytes_AsString) X(PyObject_Str)               \
    X(PyCapsule_New) X(PyCapsule_IsValid) X(PyCapsule_GetPointer) X(PyErr_Occurred) X(PyErr_Fetch)      \
    X(PyErr_NormalizeException) X(PyErr_Clear) X(Py_DecRef) X(Py_IncRef) X(PyObject_IsTrue)

typedef struct {
#define PY_FIELD(name) __typeof__(&name) name;
    PY_FUNCS(PY_FIELD)
#undef PY_FIELD
    PyObject *none; /* &_Py_NoneStruct */
} py_api;

static py_api P;

/* ------------------------------------------------------------------------- */
/* the interpreter: ask it (one subprocess) for its libpython and sys.path   */

#define PY_MAX_LIBS 8
#define PY_MAX_PATH 64
typedef struct {
    char exe[1024];
    char home[1024];
    char *lib[PY_MAX_LIBS];
    int nlib;
    char *path[PY_MAX_PATH];
    int npath;
    int shared; /* Py_ENABLE_SHARED */
} py_interp;

/* Printed by the interpreter, one "key\tvalue" a line. lib: candidate files
 * of its shared libpython (LIBDIR, then base_prefix/lib, then the bare
 * soname for the loader's search path). */
static const char py_query[] =
    "import os, sys, sysconfig\n"
    "v = sysconfig.get_config_var\n"
    "print('exe\\t' + sys.executable)\n"
    "print('home\\t' + sys.base_prefix)\n"
    "print('shared\\t%d' % int(v('Py_ENABLE_SHARED') or 0))\n"
    "names = [n for n in (v('INSTSONAME'), v('LDLIBRARY')) if n and '.so' in n]\n"
    "for d in (v('LIBDIR'), os.path.join(sys.base_prefix, 'lib'), v('LIBPL')):\n"
    "    for n in names:\n"
    "        if d and os.path.exists(os.path.join(d, n)): print('lib\\t' + os.path.join(d, n))\n"
    "for n in names: print('lib\\t' + n)\n"
    "for p in sys.path: print('path\\t' + p)\n";

static void interp_free(py_interp *it) {
    for (int i = 0; i < it->nlib; i++) free(it->lib[i]);
    for (int i = 0; i < it->npath; i++) free(it->path[i]);
    memset(it, 0, sizeof *it);
}

/* Run `python -c py_query`, parse its lines. 0, or -1 with msg. */
static int interp_query(const char *python, py_interp *it, char *msg, size_t msglen) {
    memset(it, 0, sizeof *it);
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(msg, msglen, "pipe() failed: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(msg, msglen, "fork() failed: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execlp(python, python, "-c", py_query, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[4200];
    while (f && fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        char *tab = strchr(line, '\t');
        if (!tab) continue;
        *tab = '\0';
        const char *val = tab + 1;
        if (strcmp(line, "exe") == 0) snprintf(it->exe, sizeof it->exe, "%s", val);
        else if (strcmp(line, "home") == 0) snprintf(it->home, sizeof it->home, "%s", val);
        else if (strcmp(line, "shared") == 0) it->shared = atoi(val);
        else if (strcmp(line, "lib") == 0 && it->nlib < PY_MAX_LIBS) it->lib[it->nlib++] = strdup(val);
        else if (strcmp(line, "path") == 0 && it->npath < PY_MAX_PATH) it->path[it->npath++] = strdup(val);
    }
    if (f) fclose(f);
    else close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !it->exe[0]) {
        snprintf(msg, msglen, "could not run the Python interpreter '%s' (exit status %d); put python3 on PATH "
                 "or set FLASHCHECK_PYTHON=/path/to/python", python, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        interp_free(it);
        return -1;
    }
    return 0;
}

static int api_load(void *lib, char *msg, size_t msglen) {
#define PY_LOAD(name)                                                                                    \
    {                                                                                                    \
        void *s = dlsym(lib, #name);                                                                     \
        if (!s) {                                                                                        \
            snprintf(msg, msglen, "libpython lacks %s", #name);                                          \
            return -1;                                                                                   \
        }                                                                                                \
        memcpy(&P.name, &s, sizeof s);                                                                   \
    }
    PY_FUNCS(PY_LOAD)
#undef PY_LOAD
    P.none = (PyObject *)dlsym(lib, "_Py_NoneStruct");
    if (!P.none) {
        snprintf(msg, msglen, "libpython lacks _Py_NoneStruct");
        return -1;
    }
    return 0;
}

/* Load libpython, start the interpreter with the query's home and sys.path,
 * release the GIL. 0, or -1 with msg. */
static int interp_start(char *msg, size_t msglen) {
    const char *python = getenv("FLASHCHECK_PYTHON");
    if (!python || !*python) python = "python3";
    py_interp it;
    if (interp_query(python, &it, msg, msglen)) return -1;
    void *lib = NULL;
    char why[512] = "";
    for (int i = 0; i < it.nlib && !lib; i++) {
        lib = dlopen(it.lib[i], RTLD_NOW | RTLD_GLOBAL);
        if (!lib) snprintf(why, sizeof why, "%s", dlerror());
    }
    if (!lib) {
        snprintf(msg, msglen, "the interpreter %.300s has no loadable shared libpython (%s%.200s); the py backend embeds "
                 "CPython: use an interpreter built with --enable-shared (Debian/Ubuntu: apt install libpython3-dev) "
                 "via FLASHCHECK_PYTHON", it.exe, it.shared ? "" : "built without --enable-shared; ", why);
        interp_free(&it);
        return -1;
    }
    if (api_load(lib, msg, msglen)) {
        interp_free(&it);
        return -1;
    }
    if (!P.Py_IsInitialized()) {
        /* home and program name before initialization: the interpreter finds its
           own standard library; the venv's site-packages come with sys.path below */
        wchar_t *home = P.Py_DecodeLocale(it.home, NULL);
        wchar_t *prog = P.Py_DecodeLocale(it.exe, NULL);
        if (home) P.Py_SetPythonHome(home); /* kept alive: Python stores the pointer */
        if (prog) P.Py_SetProgramName(prog);
        P.Py_InitializeEx(0); /* 0: no signal handlers; the harness owns SIGINT/SIGTERM */
    } else {
        PyGILState_STATE g = P.PyGILState_Ensure();
        (void)g; /* already running (an embedding host): keep its GIL state */
    }
    int rc = 0;
    PyObject *sys = P.PyImport_ImportModule("sys");
    PyObject *path = sys ? P.PyList_New(it.npath) : NULL;
    for (int i = 0; path && i < it.npath; i++) P.PyList_SetItem(path, i, P.PyUnicode_FromString(it.path[i]));
    PyObject *exe = P.PyUnicode_FromString(it.exe);
    PyObject *argv = P.PyList_New(1);
    if (argv) P.PyList_SetItem(argv, 0, P.PyUnicode_FromString("flashcheck"));
    if (!sys || !path || !exe || !argv || P.PyObject_SetAttrString(sys, "path", path) ||
        P.PyObject_SetAttrString(sys, "executable", exe) || P.PyObject_SetAttrString(sys, "argv", argv)) {
        snprintf(msg, msglen, "could not set sys.path of the embedded interpreter");
        P.PyErr_Clear();
        rc = -1;
    }
    if (argv) P.Py_DecRef(argv);
    if (exe) P.Py_DecRef(exe);
    if (path) P.Py_DecRef(path);
    if (sys) P.Py_DecRef(sys);
    interp_free(&it);
    P.PyEval_SaveThread();
    return rc;
}

/* ------------------------------------------------------------------------- */
/* errors                                                                    */

static void take_text(PyObject *o, char *out, size_t outlen) {
    out[0] = '\0';
    if (!o) return;
    PyObject *s = P.PyObject_Str(o);
    PyObject *b = s ? P.PyUnicode_AsUTF8String(s) : NULL;
    const char *c = b ? P.PyBytes_AsString(b) : NULL;
    if (c) snprintf(out, outlen, "%s", c);
    if (b) P.Py_DecRef(b);
    if (s) P.Py_DecRef(s);
    P.PyErr_Clear();
}

/* A Python exception that escaped the bridge (a bug of the bridge or of the
 * package's install): FA_ERR_INTERNAL with the exception's text. */
static fa_status fail_from_python(fa_error *err, const char *what) {
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    P.PyErr_Fetch(&type, &value, &tb);
    P.PyErr_NormalizeException(&type, &value, &tb);
    char tname[96], text[200];
    PyObject *tn = type ? P.PyObject_GetAttrString(type, "__name__") : NULL;
    take_text(tn ? tn : type, tname, sizeof tname);
    if (tn) P.Py_DecRef(tn);
    take_text(value, text, sizeof text);
    if (type) P.Py_DecRef(type);
    if (value) P.Py_DecRef(value);
    if (tb) P.Py_DecRef(tb);
    return fa_fail(err, FA_ERR_INTERNAL, "backend", "py backend: %s: %s: %s", what, tname, text);
}

/* ------------------------------------------------------------------------- */
/* the backend                                                               */

static struct {
    int started;
    char spec[512];
    char name[64];
    PyObject *bridge, *handle, *fwd, *bwd;
    fa_backend table;
} S;

static PyObject *py_int(int64_t x) { return P.PyLong_FromLongLong((long long)x); }

static void dl_deleter(DLManagedTensor *m) { free(m); }

/* A capsule that nobody consumed still owns its tensor. */
static void capsule_free(PyObject *cap) {
    if (P.PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = (DLManagedTensor *)P.PyCapsule_GetPointer(cap, "dltensor");
        if (m && m->deleter) m->deleter(m);
    }
}

typedef struct {
    DLManagedTensor m;
    int64_t shape[4];
    int64_t strides[4];
} py_dl;

/* Element kinds of a view: the problem dtype (16 bits), fp32, or int32 (the
 * contract-v3 host arrays: cu_seqlens, seqused_k, block_table). */
enum { PY_DATA = 16, PY_F32 = 32, PY_I32 = -32 };

/* (capsule, address, shape, strides, bits) for a view: bits 16 = the problem
 * dtype, 32 = fp32, -32 = int32. The capsule's device is CUDA device 0 (the
 * worker's only visible device) or the CPU. ptr NULL gives None. New reference. */
static PyObject *view_obj(const void *ptr, int ndim, const int64_t *shape, const int64_t *stride, int bits,
                          fa_dtype dt, int cuda) {
    if (!ptr) {
        P.Py_IncRef(P.none);
        return P.none;
    }
    py_dl *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    for (int i = 0; i < ndim; i++) {
        d->shape[i] = shape[i];
        d->strides[i] = stride[i];
    }
    DLTensor *t = &d->m.dl_tensor;
    t->data = (void *)ptr;
    t->device.device_type = cuda ? kDLCUDA : kDLCPU;
    t->device.device_id = 0;
    t->ndim = ndim;
    t->dtype.code = bits == PY_I32 ? kDLInt : bits == PY_F32 ? kDLFloat : (dt == FA_BF16 ? kDLBfloat : kDLFloat);
    t->dtype.bits = (uint8_t)(bits < 0 ? -bits : bits);
    t->dtype.lanes = 1;
    t->shape = d->shape;
    t->strides = d->strides;
    t->byte_offset = 0;
    d->m.deleter = dl_deleter;
    PyObject *cap = P.PyCapsule_New(&d->m, "dltensor", capsule_free);
    if (!cap) {
        free(d);
        return NULL;
    }
    PyObject *sh = P.PyTuple_New(ndim), *st = P.PyTuple_New(ndim), *tup = P.PyTuple_New(5);
    if (!sh || !st || !tup) return NULL; /* the bridge reports the MemoryError */
    for (int i = 0; i < ndim; i++) {
        P.PyTuple_SetItem(sh, i, py_int(shape[i]));
        P.PyTuple_SetItem(st, i, py_int(stride[i]));
    }
    P.PyTuple_SetItem(tup, 0, cap);
    P.PyTuple_SetItem(tup, 1, P.PyLong_FromLongLong((long long)(uintptr_t)ptr));
    P.PyTuple_SetItem(tup, 2, sh);
    P.PyTuple_SetItem(tup, 3, st);
    P.PyTuple_SetItem(tup, 4, py_int(bits));
    return tup;
}

static PyObject *tensor_obj(const fa_tensor *x, int64_t b, int64_t s, int64_t h, int64_t d, fa_dtype dt, int cuda) {
    const int64_t shape[4] = {b, s, h, d};
    return view_obj(x->ptr, 4, shape, x->stride, PY_DATA, dt, cuda);
}

/* Contract v3: which side of the call is packed or paged (fa_varlen, fa_paged). */
typedef struct {
    const int32_t *cu_q, *cu_k, *used, *table;
    int64_t rows_q, rows_k; /* cu[B]: packed rows */
    int64_t page_size, num_pages, max_pages, table_stride;
} py_geom;

static py_geom geom_of(const fa_problem *p, const fa_varlen *vl, const fa_paged *pg) {
    py_geom g;
    memset(&g, 0, sizeof g);
    g.cu_q = vl->cu_seqlens_q;
    g.cu_k = p->page_size >= 1 ? NULL : vl->cu_seqlens_k;
    g.used = vl->seqused_k;
    if (g.cu_q) g.rows_q = g.cu_q[p->batch];
    if (g.cu_k) g.rows_k = g.cu_k[p->batch];
    if (p->page_size >= 1) {
        g.table = pg->block_table;
        g.page_size = p->page_size;
        g.num_pages = pg->num_pages;
        g.max_pages = pg->max_pages_per_seq;
        g.table_stride = pg->table_stride;
    }
    return g;
}

/* Q-side tensor (q, o, do, dq): [B, Sq, Hq, D], or packed rows [total_q, Hq, D]. */
static PyObject *qside_obj(const fa_tensor *x, const fa_problem *p, const py_geom *g, int64_t d, int cuda) {
    if (!g->cu_q) return tensor_obj(x, p->batch, p->seqlen_q, p->heads_q, d, p->dtype, cuda);
    const int64_t shape[3] = {g->rows_q, p->heads_q, d};
    return view_obj(x->ptr, 3, shape, x->stride + 1, PY_DATA, p->dtype, cuda);
}

/* K-side tensor (k, v, dk, dv): [B, Sk, Hkv, D], packed rows [total_k, Hkv, D], or the
 * page pool [num_pages, page_size, Hkv, D]. */
static PyObject *kside_obj(const fa_tensor *x, const fa_problem *p, const py_geom *g, int64_t d, int cuda) {
    if (g->table) return tensor_obj(x, g->num_pages, g->page_size, p->heads_kv, d, p->dtype, cuda);
    if (!g->cu_k) return tensor_obj(x, p->batch, p->seqlen_k, p->heads_kv, d, p->dtype, cuda);
    const int64_t shape[3] = {g->rows_k, p->heads_kv, d};
    return view_obj(x->ptr, 3, shape, x->stride + 1, PY_DATA, p->dtype, cuda);
}

/* LSE: [B, Hq, Sq], or [Hq, total_q] when Q is packed. */
static PyObject *lse_obj(const fa_lse *x, const fa_problem *p, const py_geom *g, int cuda) {
    if (g->cu_q) {
        const int64_t shape[2] = {p->heads_q, g->rows_q};
        return view_obj(x->ptr, 2, shape, x->stride + 1, PY_F32, p->dtype, cuda);
    }
    const int64_t shape[3] = {p->batch, p->heads_q, p->seqlen_q};
    return view_obj(x->ptr, 3, shape, x->stride, PY_F32, p->dtype, cuda);
}

/* The v3 host int32 arrays (always host memory: the contract) and the [Hq] fp32 sinks /
 * dsinks (backend memory); None when absent: cu_seqlens_q [B+1], cu_seqlens_k [B+1],
 * seqused_k [B], block_table [B, max_pages] (row stride table_stride), sinks, dsinks. */
static void v3_objs(const fa_problem *p, const py_geom *g, const fa_varlen *vl, const float *sinks, const float *dsinks,
                    int cuda, PyObject **out, int with_dsinks) {
    const int64_t one = 1, nb1 = p->batch + 1, nb = p->batch, nh = p->heads_q;
    const int64_t tshape[2] = {p->batch, g->max_pages}, tstride[2] = {g->table_stride, 1};
    out[0] = view_obj(vl->cu_seqlens_q, 1, &nb1, &one, PY_I32, p->dtype, 0);
    out[1] = view_obj(g->cu_k, 1, &nb1, &one, PY_I32, p->dtype, 0);
    out[2] = view_obj(vl->seqused_k, 1, &nb, &one, PY_I32, p->dtype, 0);
    out[3] = view_obj(g->table, 2, tshape, tstride, PY_I32, p->dtype, 0);
    out[4] = view_obj(p->has_sinks ? sinks : NULL, 1, &nh, &one, PY_F32, p->dtype, cuda);
    if (with_dsinks) out[5] = view_obj(p->has_sinks ? dsinks : NULL, 1, &nh, &one, PY_F32, p->dtype, cuda);
}

static PyObject *mask_obj(const fa_mask *x, const fa_problem *p, int cuda) {
    const int64_t shape[4] = {p->batch, p->heads_q, p->seqlen_q, p->seqlen_k};
    return view_obj(x->ptr, 4, shape, x->stride, PY_F32, p->dtype, cuda);
}

/* (B, Sq, Sk, Hq, Hkv, Dqk, Dv, dtype, scale, causal, window_left, window_right, window_align,
 *  softcap, has_sinks, page_size) */
static PyObject *problem_obj(const fa_problem *p) {
    PyObject *t = P.PyTuple_New(16);
    if (!t) return NULL;
    const int64_t iv[8] = {p->batch, p->seqlen_q, p->seqlen_k, p->heads_q, p->heads_kv, p->head_dim_qk, p->head_dim_v,
                           (int64_t)p->dtype};
    for (int i = 0; i < 8; i++) P.PyTuple_SetItem(t, i, py_int(iv[i]));
    P.PyTuple_SetItem(t, 8, P.PyFloat_FromDouble((double)fa_effective_scale(p)));
    P.PyTuple_SetItem(t, 9, py_int(p->causal));
    P.PyTuple_SetItem(t, 10, py_int(p->window_left));
    P.PyTuple_SetItem(t, 11, py_int(p->window_right));
    P.PyTuple_SetItem(t, 12, py_int(p->window_align));
    P.PyTuple_SetItem(t, 13, P.PyFloat_FromDouble((double)p->softcap));
    P.PyTuple_SetItem(t, 14, py_int(p->has_sinks));
    P.PyTuple_SetItem(t, 15, py_int(p->page_size));
    return t;
}

/* The bridge answers (status, arg, message); anything else is the bridge's bug. */
static fa_status answer(PyObject *res, fa_error *err) {
    if (!res) return fail_from_python(err, "the bridge raised");
    fa_status st = FA_ERR_INTERNAL;
    char arg[32] = "", text[256] = "the bridge returned something other than (status, arg, message)";
    if (P.PyTuple_Size(res) == 3) {
        st = (fa_status)P.PyLong_AsLongLong(P.PyTuple_GetItem(res, 0));
        take_text(P.PyTuple_GetItem(res, 1), arg, sizeof arg);
        take_text(P.PyTuple_GetItem(res, 2), text, sizeof text);
    }
    P.Py_DecRef(res);
    P.PyErr_Clear();
    if (st == FA_OK) return FA_OK;
    if (st < FA_OK || st > FA_ERR_INTERNAL) st = FA_ERR_INTERNAL;
    return fa_fail(err, st, arg, "%s", text);
}

/* Call fn(handle, tensors, problem, flag); steals the references to tensors'
 * items. NULL items (out of memory) become a MemoryError of the bridge. */
static fa_status call_bridge(PyObject *fn, PyObject **items, int n, const fa_problem *p, int flag, fa_error *err) {
    PyObject *tensors = P.PyTuple_New(n);
    for (int i = 0; i < n; i++) {
        if (!items[i]) {
            P.Py_IncRef(P.none);
            items[i] = P.none;
        }
        if (tensors) P.PyTuple_SetItem(tensors, i, items[i]);
        else P.Py_DecRef(items[i]);
    }
    PyObject *args = P.PyTuple_New(4);
    PyObject *prob = problem_obj(p);
    if (!tensors || !args || !prob) {
        if (tensors) P.Py_DecRef(tensors);
        if (args) P.Py_DecRef(args);
        if (prob) P.Py_DecRef(prob);
        P.PyErr_Clear();
        return fa_fail(err, FA_ERR_NOMEM, "", "py backend: out of memory building the call");
    }
    P.Py_IncRef(S.handle);
    P.PyTuple_SetItem(args, 0, S.handle);
    P.PyTuple_SetItem(args, 1, tensors);
    P.PyTuple_SetItem(args, 2, prob);
    P.PyTuple_SetItem(args, 3, py_int(flag));
    PyObject *res = P.PyObject_CallObject(fn, args);
    P.Py_DecRef(args);
    return answer(res, err);
}

static fa_status py_forward(const fa_fwd_args *a, fa_error *err) {
    fa_status st = fa_validate_fwd(a, &S.table.limits, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    int cuda = S.table.memspace == FA_MEM_CUDA;
    /* a device kernel gets device tensors only: a host pointer is rejected here, named,
       before anything is wrapped (fa_py_mem.h) */
    if (cuda && (st = fa_py_mem_check_fwd(a, fa_py_mem_cuda_space, NULL, err)) != FA_OK) return st;
    const py_geom gm = geom_of(p, &a->varlen, &a->paged);
    PyGILState_STATE g = P.PyGILState_Ensure();
    PyObject *items[11] = {
        qside_obj(&a->q, p, &gm, p->head_dim_qk, cuda),
        kside_obj(&a->k, p, &gm, p->head_dim_qk, cuda),
        kside_obj(&a->v, p, &gm, p->head_dim_v, cuda),
        mask_obj(&a->mask, p, cuda),
        qside_obj(&a->o, p, &gm, p->head_dim_v, cuda),
        lse_obj(&a->lse, p, &gm, cuda),
    };
    v3_objs(p, &gm, &a->varlen, a->sinks, NULL, cuda, items + 6, 0);
    st = call_bridge(S.fwd, items, 11, p, 0, err);
    P.PyGILState_Release(g);
    return st;
}

static fa_status py_backward(const fa_bwd_args *a, fa_error *err) {
    fa_status st = fa_validate_bwd(a, &S.table.limits, err);
    if (st != FA_OK) return st;
    const fa_problem *p = &a->p;
    int cuda = S.table.memspace == FA_MEM_CUDA;
    if (cuda && (st = fa_py_mem_check_bwd(a, fa_py_mem_cuda_space, NULL, err)) != FA_OK) return st;
    const py_geom gm = geom_of(p, &a->varlen, &a->paged);
    PyGILState_STATE g = P.PyGILState_Ensure();
    PyObject *items[16] = {
        qside_obj(&a->q, p, &gm, p->head_dim_qk, cuda),
        kside_obj(&a->k, p, &gm, p->head_dim_qk, cuda),
        kside_obj(&a->v, p, &gm, p->head_dim_v, cuda),
        qside_obj(&a->o, p, &gm, p->head_dim_v, cuda),
        qside_obj(&a->dout, p, &gm, p->head_dim_v, cuda),
        lse_obj(&a->lse, p, &gm, cuda),
        mask_obj(&a->mask, p, cuda),
        qside_obj(&a->dq, p, &gm, p->head_dim_qk, cuda),
        kside_obj(&a->dk, p, &gm, p->head_dim_qk, cuda),
        kside_obj(&a->dv, p, &gm, p->head_dim_v, cuda),
    };
    v3_objs(p, &gm, &a->varlen, a->sinks, a->dsinks, cuda, items + 10, 1);
    st = call_bridge(S.bwd, items, 16, p, a->deterministic, err);
    P.PyGILState_Release(g);
    return st;
}

static double item_f(PyObject *t, int i) { return P.PyFloat_AsDouble(P.PyTuple_GetItem(t, i)); }
static int64_t item_i(PyObject *t, int i) { return (int64_t)P.PyLong_AsLongLong(P.PyTuple_GetItem(t, i)); }

/* The bridge's open(spec) returns
 *   (name, memspace, has_backward, preset or None, (u_acc, exp_rel_err, scores_fp32, p_rounded,
 *    ds_rounded, out_rounded, max_rescales, flushes_subnormals),
 *    (max_head_dim, head_dim_multiple, dqk_must_equal_dv, ptr_align_bytes, unit_last_stride,
 *     supports_varlen, supports_paged, supports_softcap, supports_sinks)). */
static fa_status fill_table(PyObject *info, fa_error *err) {
    fa_backend *b = &S.table;
    memset(b, 0, sizeof *b);
    if (P.PyTuple_Size(info) != 6) return fa_fail(err, FA_ERR_INTERNAL, "backend", "py backend: bad open() answer");
    char nm[64];
    take_text(P.PyTuple_GetItem(info, 0), nm, sizeof nm);
    snprintf(S.name, sizeof S.name, "%s", nm);
    b->abi_version = FA_ABI_VERSION;
    b->name = S.name;
    b->memspace = item_i(info, 1) == 1 ? FA_MEM_CUDA : FA_MEM_HOST;
    b->forward = py_forward;
    b->backward = P.PyObject_IsTrue(P.PyTuple_GetItem(info, 2)) == 1 ? py_backward : NULL;
    PyObject *preset = P.PyTuple_GetItem(info, 3);
    if (preset && preset != P.none) {
        /* "a|b|...": the first preset this flashcheck knows (a kernel can name its own
           preset and a generic one for older builds) */
        char pn[128];
        take_text(preset, pn, sizeof pn);
        fa_status st = FA_ERR_INVALID;
        for (char *save = NULL, *one = strtok_r(pn, "|", &save); one && st != FA_OK; one = strtok_r(NULL, "|", &save))
            st = fa_precision_preset(one, &b->precision, err);
        if (st != FA_OK) return st;
        if (err) memset(err, 0, sizeof *err);
    } else {
        PyObject *f = P.PyTuple_GetItem(info, 4);
        if (!f || P.PyTuple_Size(f) != 9)
            return fa_fail(err, FA_ERR_INVALID, "profile", "py backend: the profile needs 9 fields");
        b->precision.u_acc = item_f(f, 0);
        b->precision.exp_rel_err = item_f(f, 1);
        b->precision.scores_fp32 = (int)item_i(f, 2);
        b->precision.p_rounded = (int)item_i(f, 3);
        b->precision.ds_rounded = (int)item_i(f, 4);
        b->precision.out_rounded = (int)item_i(f, 5);
        b->precision.max_rescales = (int)item_i(f, 6);
        b->precision.flushes_subnormals = (int)item_i(f, 7);
        b->precision.masked_nonfinite = (int)item_i(f, 8); /* _decl.profile_values: 0 or 1 */
    }
    PyObject *l = P.PyTuple_GetItem(info, 5);
    if (!l || P.PyTuple_Size(l) != 9) return fa_fail(err, FA_ERR_INVALID, "limits", "py backend: limits need 9 fields");
    b->limits.max_head_dim = item_i(l, 0);
    b->limits.head_dim_multiple = item_i(l, 1);
    b->limits.dqk_must_equal_dv = (int)item_i(l, 2);
    b->limits.ptr_align_bytes = item_i(l, 3);
    b->limits.unit_last_stride = (int)item_i(l, 4);
    b->limits.supports_varlen = (int)item_i(l, 5);
    b->limits.supports_paged = (int)item_i(l, 6);
    b->limits.supports_softcap = (int)item_i(l, 7);
    b->limits.supports_sinks = (int)item_i(l, 8);
    if (P.PyErr_Occurred()) return fail_from_python(err, "reading the declarations");
    return FA_OK;
}

static fa_status py_open(const char *spec, fa_error *err) {
    char msg[900];
    if (interp_start(msg, sizeof msg)) return fa_fail(err, FA_ERR_INVALID, "backend", "py backend: %s", msg);
    PyGILState_STATE g = P.PyGILState_Ensure();
    fa_status st = FA_OK;
    S.bridge = P.PyImport_ImportModule("flashcheck._bridge");
    if (!S.bridge) {
        fa_error why;
        memset(&why, 0, sizeof why);
        fail_from_python(&why, "import flashcheck._bridge"); /* "...: ModuleNotFoundError: No module ..." */
        st = fa_fail(err, FA_ERR_INVALID, "backend", "py backend: %.110s; pip install ./python (flashcheck "
                     "repository) for that interpreter, or put python/ on PYTHONPATH",
                     why.msg + strlen("py backend: import flashcheck._bridge: "));
        goto out;
    }
    S.fwd = P.PyObject_GetAttrString(S.bridge, "forward");
    S.bwd = P.PyObject_GetAttrString(S.bridge, "backward");
    PyObject *open = P.PyObject_GetAttrString(S.bridge, "open");
    PyObject *args = P.PyTuple_New(1);
    if (!S.fwd || !S.bwd || !open || !args) {
        st = fail_from_python(err, "the bridge module is incomplete");
        goto out;
    }
    P.PyTuple_SetItem(args, 0, P.PyUnicode_FromString(spec));
    PyObject *res = P.PyObject_CallObject(open, args);
    P.Py_DecRef(args);
    P.Py_DecRef(open);
    /* res: (status, arg, message, handle, info) */
    if (!res || P.PyTuple_Size(res) != 5) {
        st = res ? fa_fail(err, FA_ERR_INTERNAL, "backend", "py backend: bad open() answer")
                 : fail_from_python(err, "open() raised");
        if (res) P.Py_DecRef(res);
        goto out;
    }
    st = (fa_status)P.PyLong_AsLongLong(P.PyTuple_GetItem(res, 0));
    if (st != FA_OK) {
        char arg[32], text[256];
        take_text(P.PyTuple_GetItem(res, 1), arg, sizeof arg);
        take_text(P.PyTuple_GetItem(res, 2), text, sizeof text);
        st = fa_fail(err, st == FA_ERR_UNSUPPORTED ? st : FA_ERR_INVALID, arg, "%s", text);
        P.Py_DecRef(res);
        goto out;
    }
    S.handle = P.PyTuple_GetItem(res, 3);
    P.Py_IncRef(S.handle);
    st = fill_table(P.PyTuple_GetItem(res, 4), err);
    P.Py_DecRef(res);
out:
    P.PyGILState_Release(g);
    return st;
}

fa_status fa_backend_py(const char *spec, const fa_backend **out, fa_error *err) {
    if (out == NULL) return fa_fail(err, FA_ERR_INVALID, "out", "out is NULL; pass a place for the backend.");
    *out = NULL;
    if (spec == NULL || strchr(spec, ':') == NULL)
        return fa_fail(err, FA_ERR_INVALID, "backend", "a py backend is named py:MODULE_OR_FILE:CALLABLE "
                       "(e.g. py:flashcheck.adapters.torch_sdpa:flash or py:examples/my_kernel.py:attention); "
                       "got 'py:%s'", spec ? spec : "");
    if (S.started) {
        if (strcmp(S.spec, spec) != 0)
            return fa_fail(err, FA_ERR_INVALID, "backend", "this process already runs the py backend 'py:%s'; one "
                           "py backend per process", S.spec);
        if (!S.table.forward) return fa_fail(err, FA_ERR_INVALID, "backend", "the py backend 'py:%s' failed to load",
                                             spec);
        *out = &S.table;
        return FA_OK;
    }
    S.started = 1;
    snprintf(S.spec, sizeof S.spec, "%s", spec);
    fa_status st = py_open(spec, err);
    if (st != FA_OK) {
        S.table.forward = NULL;
        return st;
    }
    *out = &S.table;
    return FA_OK;
}
