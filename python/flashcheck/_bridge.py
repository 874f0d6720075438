"""The Python side of the py backend (kernels/py/fa_py.c embeds the interpreter and calls
open/forward/backward below). Not a public API: kernels see only the calling convention.

Calling convention (also in python/README.md)
---------------------------------------------
forward(q, k, v, *, causal, window, window_align, scale, mask, out, lse, dtype)
    q [B, Sq, Hq, Dqk], k [B, Sk, Hkv, Dqk], v [B, Sk, Hkv, Dv], out [B, Sq, Hq, Dv] in the case's dtype;
    lse [B, Hq, Sq] float32 (natural log); mask None or [B, Hq, Sq, Sk] float32 additive (-inf hides a
    key; broadcast dims have stride 0). causal: "none" | "top_left" | "bottom_right"; window: None or
    (left, right), a negative side unbounded, around the causal diagonal, or the window_align one
    ("top_left" | "bottom_right") when causal is "none"; scale: the softmax scale (already resolved);
    dtype: "float16" | "bfloat16". Write out and lse in place, or return (o, lse) (or o alone, then
    lse must be written) and the bridge copies.
backward(q, k, v, o, do, lse, *, causal, window, window_align, scale, mask, dq, dk, dv, deterministic, dtype)
    writes dq, dk, dv (or returns them). With backward="autograd" the bridge instead calls forward with
    out=None, lse=None on tensors that require grad and runs torch.autograd.grad(o, (q, k, v), do);
    a deterministic case runs under torch.use_deterministic_algorithms(True) (a RuntimeError about a
    missing deterministic implementation is Unsupported).
Only the keyword arguments a callable names are passed, unless it takes **kwargs.
A call with nothing to write (forward: out and lse have no element, as with B = 0 or Sq = 0;
backward: dq, dk, dv have none) is answered by the bridge without calling the kernel (dsinks,
when wanted, set to 0). On a device="cuda" kernel the C side (kernels/py/fa_py_mem.h) rejects a
host pointer, named, before this module sees the call.

Contract v3 (kernels/flash_api.h fa_varlen, fa_paged, softcap, sinks), for kernels that claim a
feature with @flashcheck.kernel(varlen=True, paged=True, softcap=True, sinks=True); both calls
also get these keywords (None / 0 when the case does not use the feature):
    cu_seqlens_q  int32 [B+1] or None: q, out, do, dq (and o) are packed rows [total_q, Hq, D],
                  sequence b is rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1; lse is [Hq, total_q]
    cu_seqlens_k  int32 [B+1] or None: k, v, dk, dv are packed rows [total_k, Hkv, D]
    seqused_k     int32 [B] or None: sequence b uses only its first seqused_k[b] keys
    block_table   int32 [B, max_pages] or None: k, v, dk, dv are page pools [num_pages, page_size,
                  Hkv, D] (page_size = k.shape[1]); key j of sequence b is in page
                  block_table[b, j // page_size], slot j % page_size
    max_seqlen_q, max_seqlen_k  the maxima over sequences (Sq, Sk of a dense case)
    softcap       float, 0.0 = off: s = softcap * tanh(scale * q.k / softcap)
    sinks         float32 [Hq] or None: a per-head logit in every row's softmax denominator
    dsinks        (backward) float32 [Hq] output or None (not wanted): the sink gradient
The int32 arrays are host arrays (numpy, or torch CPU tensors) whatever the device, as in the
contract; sinks/dsinks live where the data does. A kernel that claims a feature must name its
keywords (or take **kwargs); one that does not claim it never sees a case using it (SKIP).

Arrays: on a CUDA backend, torch tensors over the harness's device buffers (torch.from_dlpack of a
DLPack capsule made in C: no copy, the case's strides, gaps and padding kept). On the host, numpy
arrays over the harness's buffers (also no copy); numpy has no bfloat16, so bf16 data is
ml_dtypes.bfloat16 when ml_dtypes is importable and otherwise uint16 bit patterns (dtype says which
format the 16-bit data is in; flashcheck.host converts). arrays="torch" gives torch CPU tensors.

Status answered to C: (0, "", "") ok; (2, arg, msg) flashcheck.Unsupported or a declared limit;
(4, "backend", msg) a CUDA fault surfacing as a torch error (the worker is then replaced);
(5, "backend", msg) any other exception: msg has the exception and its innermost frame, the full
traceback goes to stderr.
"""
import importlib
import importlib.util
import inspect
import os
import sys
import traceback

from . import _decl
from ._errors import Unsupported

FA_OK, FA_ERR_INVALID, FA_ERR_UNSUPPORTED, FA_ERR_DEVICE, FA_ERR_INTERNAL = 0, 1, 2, 4, 5
CAUSAL = _decl.CAUSAL_NAMES
ALIGN = ("top_left", "bottom_right")


class _Kernel:
    def __init__(self, spec, fwd, bwd, decl):
        self.spec, self.fwd, self.bwd, self.decl = spec, fwd, bwd, decl
        self.fwd_kw = _accepted(fwd)
        self.bwd_kw = _accepted(bwd) if callable(bwd) else None
        self.torch = None
        self.np = None
        self.bf16 = None  # numpy dtype used for bf16 on the host


def _accepted(fn):
    """The keyword names fn takes, or None when it takes **kwargs (everything)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    names = set()
    for p in sig.parameters.values():
        if p.kind == p.VAR_KEYWORD:
            return None
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.add(p.name)
    return names


def _filter(kw, accepted):
    return kw if accepted is None else {k: v for k, v in kw.items() if k in accepted}


def resolve(spec):
    """MODULE_OR_FILE:CALLABLE -> (callable, module). A file path (ending in .py or containing
    '/') is imported from the file; otherwise a module name on sys.path."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError("a py backend is MODULE_OR_FILE:CALLABLE, got %r" % spec)
    if target.endswith(".py") or "/" in target:
        path = os.path.abspath(target)
        if not os.path.exists(path):
            raise FileNotFoundError("no such file: %s" % path)
        name = "flashcheck_user_" + os.path.splitext(os.path.basename(path))[0]
        sys.path.insert(0, os.path.dirname(path))
        mspec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(mspec)
        sys.modules[name] = module
        mspec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(target)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj, module


def _where(exc):
    tb = traceback.extract_tb(exc.__traceback__)
    if not tb:
        return ""
    f = tb[-1]
    return " [%s:%d in %s]" % (os.path.basename(f.filename), f.lineno, f.name)


def _failure(exc, what):
    """(status, arg, msg) for an exception raised by the kernel (or while opening it)."""
    if isinstance(exc, Unsupported):
        return (FA_ERR_UNSUPPORTED, "", "unsupported: %s" % (exc,))
    device = _device_fault(exc)
    sys.stderr.write("flashcheck py backend: %s raised:\n%s" % (what, traceback.format_exc()))
    sys.stderr.flush()
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    text = "%s: %s" % (type(exc).__name__, lines[-1].strip() if lines else "")  # a compiler's last line names the error
    if device:  # a kernel fault: the CUDA context is gone, the harness restarts the worker
        return (FA_ERR_DEVICE, "backend", "python %s: CUDA fault: %s" % (what, device[:200]))
    return (FA_ERR_INTERNAL, "backend", "python %s raised %s%s" % (what, text[:180], _where(exc)))


def _device_fault(exc):
    """The CUDA error text of a device fault raised through torch (illegal address, misaligned
    address, launch failure ...), else None. Such errors leave the context unusable."""
    msg = str(exc)
    if type(exc).__name__ in ("AcceleratorError", "CudaError") or msg.startswith("CUDA error"):
        first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
        return first
    return None


def open(spec):  # noqa: A001 (the C side calls it by this name)
    """-> (status, arg, msg, handle, info); info as fill_table in kernels/py/fa_py.c reads it."""
    try:
        obj, module = resolve(spec)
        decl = _decl.declarations(obj, module)
        fwd = getattr(obj, "forward", None) if not inspect.isfunction(obj) else None
        fwd = fwd if callable(fwd) else obj
        if not callable(fwd):
            raise TypeError("%s is not callable" % spec)
        bwd = decl["backward"]
        if bwd is None and not inspect.isfunction(obj) and callable(getattr(obj, "backward", None)):
            bwd = obj.backward
        if bwd is not None and bwd != "autograd" and not callable(bwd):
            raise TypeError("backward must be a callable, 'autograd' or None, not %r" % (bwd,))
        k = _Kernel(spec, fwd, bwd, decl)
        memspace = 0
        if decl["device"] == "cuda" or decl["arrays"] == "torch" or bwd == "autograd":
            import torch
            k.torch = torch
        if decl["device"] == "cuda":
            if not k.torch.cuda.is_available():
                return (FA_ERR_UNSUPPORTED, "backend", "the kernel %s declares device='cuda' but torch sees no "
                        "CUDA device" % spec, None, None)
            memspace = 1
        if decl["arrays"] == "numpy":
            import numpy
            k.np = numpy
            try:
                import ml_dtypes
                k.bf16 = numpy.dtype(ml_dtypes.bfloat16)
            except ImportError:
                k.bf16 = numpy.dtype(numpy.uint16)
        prof = decl["profile"]
        preset, fields = None, (0.0,) * 9
        if isinstance(prof, str):
            preset = prof
        elif isinstance(prof, dict):
            fields = _decl.profile_values(prof)
        else:
            raise TypeError("profile must be a preset name or a dict of %s" % (_decl.PROFILE_FIELDS,))
        _check_v3_kwargs(k)
        limits = (int(decl["max_head_dim"]), int(decl["head_dim_multiple"]), int(bool(decl["dqk_equals_dv"])),
                  int(decl["ptr_align_bytes"]), int(bool(decl["unit_last_stride"])),
                  *(int(decl[f]) for f in _decl.V3_FEATURES))
        name = decl["name"] or ("py:" + spec)
        info = (name[:63], memspace, bwd is not None, preset, fields, limits)
        return (FA_OK, "", "", k, info)
    except BaseException as e:  # noqa: B036 (SystemExit from an import is a load failure too)
        st, arg, msg = _failure(e, "loading %s" % spec)
        return (FA_ERR_INVALID, "backend", msg, None, None)


def _check_v3_kwargs(k):
    """A claimed contract-v3 feature needs its keyword arguments in the forward (and in a backward
    callable; dsinks too for sinks): a kernel that silently ignored cu_seqlens or a block table
    would be judged on a problem it did not compute."""
    calls = [("forward", k.fwd_kw)] + ([("backward", k.bwd_kw)] if callable(k.bwd) else [])
    for f in _decl.V3_FEATURES:
        if not k.decl[f]:
            continue
        for what, accepted in calls:
            need = _decl.V3_KWARGS[f] + (("dsinks",) if f == "sinks" and what == "backward" else ())
            missing = [n for n in need if accepted is not None and n not in accepted]
            if missing:
                raise TypeError("declares %s=True but its %s takes no %s keyword argument" %
                                (f, what, ", ".join(missing)))


# --------------------------------------------------------------------------------------------
# arrays over the harness's buffers

_NP_DT = {"float16": "float16", 32: "float32"}


def _np_view(k, ptr, shape, strides, bits, dtype):
    np = k.np
    import ctypes
    if bits == -32:  # the contract-v3 int32 host arrays
        dt = np.dtype(np.int32)
    elif bits == 32:
        dt = np.dtype(np.float32)
    else:
        dt = np.dtype(np.float16) if dtype == "float16" else k.bf16
    if any(n == 0 for n in shape):
        return np.zeros(shape, dt)
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    buf = (ctypes.c_char * (extent * dt.itemsize)).from_address(ptr)
    return np.ndarray(shape, dt, buffer=buf, strides=[s * dt.itemsize for s in strides])


def _views(k, items, dtype, cuda):
    out = []
    for it in items:
        if it is None:
            out.append(None)
            continue
        cap, ptr, shape, strides, bits = it
        if bits == -32 and k.np is None:  # int32 arrays are host memory: torch CPU tensors
            out.append(k.torch.utils.dlpack.from_dlpack(cap))
        elif k.np is not None and (not cuda or bits == -32):
            out.append(_np_view(k, ptr, shape, strides, bits, dtype))
        else:
            out.append(k.torch.utils.dlpack.from_dlpack(cap))
    return out


def _problem_kw(k, prob):
    B, Sq, Sk, Hq, Hkv, Dqk, Dv, dt, scale, causal, wl, wr, align, softcap, _has_sinks, _page_size = prob
    dtype = _decl.DTYPE_NAMES[dt]
    d = k.decl
    causal = CAUSAL[causal]
    window = None if wl < 0 and wr < 0 else (int(wl), int(wr))
    if dtype not in d["dtypes"]:
        raise Unsupported("dtype %s (declared %s)" % (dtype, d["dtypes"]))
    if causal not in d["causal"]:
        raise Unsupported("causal=%s (declared %s)" % (causal, d["causal"]))
    if window is not None and not d["window"]:
        raise Unsupported("sliding window (declared window=False)")
    if Hq != Hkv and not d["gqa"]:
        raise Unsupported("GQA/MQA heads_q=%d heads_kv=%d (declared gqa=False)" % (Hq, Hkv))
    return dict(causal=causal, window=window, window_align=ALIGN[align], scale=float(scale), dtype=dtype,
                softcap=float(softcap), max_seqlen_q=int(Sq), max_seqlen_k=int(Sk))


_V3_NAMES = ("cu_seqlens_q", "cu_seqlens_k", "seqused_k", "block_table", "sinks")


def _copy_into(k, dst, src, what):
    if src is None:
        return
    if k.np is not None and not hasattr(dst, "copy_"):
        src = k.np.asarray(src)
        if src.shape != dst.shape:
            raise ValueError("returned %s has shape %s, expected %s" % (what, src.shape, dst.shape))
        k.np.copyto(dst, src.astype(dst.dtype, copy=False), casting="unsafe")
    else:
        if tuple(src.shape) != tuple(dst.shape):
            raise ValueError("returned %s has shape %s, expected %s" % (what, tuple(src.shape), tuple(dst.shape)))
        dst.copy_(src.detach())


def _sync(k, cuda):
    if cuda:
        k.torch.cuda.synchronize()


def _no_element(items):
    """True when none of the views (capsule, ptr, shape, strides, bits) has an element."""
    for it in items:
        if it is not None and all(n > 0 for n in it[2]):
            return False
    return True


def _zero(x):
    if hasattr(x, "zero_"):
        x.zero_()
    else:
        x[...] = 0


def forward(k, items, prob, _flag):
    cuda = k.decl["device"] == "cuda"
    try:
        kw = _problem_kw(k, prob)
        if _no_element(items[4:6]):
            # an empty problem (B = 0, no query rows, no heads): O and LSE have no element, so
            # there is nothing to compute or write; the kernel is not called (flash_api.h: "Sq = 0
            # writes nothing"), as the cpu and cuda backends return at once
            return (FA_OK, "", "")
        q, kk, v, mask, o, lse, *v3 = _views(k, items, kw["dtype"], cuda)
        if mask is not None and not k.decl["mask"]:
            raise Unsupported("additive mask (declared mask=False)")
        kw.update(mask=mask, out=o, lse=lse, **dict(zip(_V3_NAMES, v3)))
        ret = k.fwd(q, kk, v, **_filter(kw, k.fwd_kw))
        if ret is not None:
            ro, rl = (ret if isinstance(ret, (tuple, list)) else (ret, None))[:2]
            if ro is not None and ro is not o:
                _copy_into(k, o, ro, "out")
            if rl is not None and rl is not lse:
                _copy_into(k, lse, rl, "lse")
        _sync(k, cuda)
        return (FA_OK, "", "")
    except BaseException as e:  # noqa: B036
        return _failure(e, "forward")


def backward(k, items, prob, deterministic):
    cuda = k.decl["device"] == "cuda"
    try:
        kw = _problem_kw(k, prob)
        if deterministic and not k.decl["deterministic"]:
            raise Unsupported("deterministic backward (declared deterministic=False)")
        if _no_element(items[7:10]):
            # dQ, dK, dV have no element (B = 0, or no query rows and no key rows): nothing to
            # compute; only dsinks, when wanted, is written: a sum over no row, 0
            if _no_element(items[15:16]):
                return (FA_OK, "", "")
            _zero(_views(k, items[15:16], kw["dtype"], cuda)[0])
            _sync(k, cuda)
            return (FA_OK, "", "")
        q, kk, v, o, do, lse, mask, dq, dk, dv, *v3 = _views(k, items, kw["dtype"], cuda)
        if mask is not None and not k.decl["mask"]:
            raise Unsupported("additive mask (declared mask=False)")
        kw["mask"] = mask
        kw.update(zip(_V3_NAMES, v3[:5]))
        dsinks = v3[5]
        if k.bwd == "autograd":
            torch = k.torch
            qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, kk, v))
            wrt = [qg, kg, vg]
            if kw["sinks"] is not None and dsinks is not None:  # the sink gradient through autograd too
                kw["sinks"] = kw["sinks"].detach().requires_grad_(True)
                wrt.append(kw["sinks"])
            fkw = dict(kw, out=None, lse=None)
            was = torch.are_deterministic_algorithms_enabled()
            try:
                torch.use_deterministic_algorithms(bool(deterministic) or was)
                with torch.enable_grad():
                    ret = k.fwd(qg, kg, vg, **_filter(fkw, k.fwd_kw))
                    og = ret[0] if isinstance(ret, (tuple, list)) else ret
                    grads = torch.autograd.grad(og, wrt, do)
                    if len(grads) == 4:
                        _copy_into(k, dsinks, grads[3], "dsinks")
                        grads = grads[:3]
            except RuntimeError as e:
                if deterministic and "deterministic" in str(e):
                    raise Unsupported("torch has no deterministic implementation: %s" % str(e).splitlines()[0])
                raise
            finally:
                torch.use_deterministic_algorithms(was)
        else:
            kw.update(dq=dq, dk=dk, dv=dv, dsinks=dsinks, deterministic=bool(deterministic))
            grads = k.bwd(q, kk, v, o, do, lse, **_filter(kw, k.bwd_kw))
        if grads is not None:
            for dst, src, name in zip((dq, dk, dv), grads, ("dq", "dk", "dv")):
                if src is not None and src is not dst:
                    _copy_into(k, dst, src, name)
        _sync(k, cuda)
        return (FA_OK, "", "")
    except BaseException as e:  # noqa: B036
        return _failure(e, "backward")
