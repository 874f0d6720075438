"""flashcheck for Python: check attention kernels against the flashcheck oracle's per-element
error bounds, and run the flashcheck engine (certify, fuzz, repro, shrink) on kernels written in
Python. Everything numerical is the flashcheck C engine (the `flashcheck` command, found as
flashcheck._cli.binary() says); this package converts arrays and arguments, nothing else.

    import flashcheck
    v = flashcheck.verify(q, k, v, o, lse, causal="top_left")          # any torch/numpy/JAX arrays
    flashcheck.assert_attention_close(q, k, v, o, lse, causal=True)    # AssertionError with details
    flashcheck.certify("examples/triton_fa.py:attention", quick=True)  # whole certification
    flashcheck.fuzz(my_kernel, seconds=60)                             # a campaign on a callable

Kernels for the py backend (`--backend py:MODULE_OR_FILE:CALLABLE`): the calling convention is in
flashcheck._bridge's docstring and python/README.md; declare device/profile/limits with
@flashcheck.kernel(...); raise flashcheck.Unsupported for cases a kernel does not implement.
"""
import json
import os
import re
import shutil
import tempfile

from . import _cli
from ._decl import kernel
from ._errors import Unsupported

__all__ = ["Unsupported", "kernel", "verify", "assert_attention_close", "Verdict", "TensorVerdict", "certify",
           "fuzz", "repro", "shrink", "CampaignResult"]
__version__ = "0.1.0"

_CAUSAL = {None: "none", False: "none", True: "top_left", "none": "none", "top_left": "top_left",
           "bottom_right": "bottom_right"}


class TensorVerdict:
    """One output tensor: elements checked, elements outside their bound (failed), the worst
    |got - ref| / bound, max |got - ref|, the first failing (b, s, h, d) index (None if none) and
    the worst element's got/ref/bound."""

    def __init__(self, name, d):
        self.name = name
        self.checked = int(d["checked"])
        self.failed = int(d["failed"])
        self.worst_ratio = float(d["worst_ratio"])
        self.max_err = float(d["max_err"])
        ff = d.get("first_fail", [-1, -1, -1, -1])
        self.first_fail = tuple(ff) if ff and ff[0] >= 0 else None
        self.worst_got, self.worst_ref, self.worst_bound = (d.get("worst_got"), d.get("worst_ref"),
                                                            d.get("worst_bound"))

    def __repr__(self):
        return ("TensorVerdict(%s: checked=%d failed=%d worst_ratio=%.4g first_fail=%s)"
                % (self.name, self.checked, self.failed, self.worst_ratio, self.first_fail))


class Verdict:
    """The result of verify(): passed, tensors {name: TensorVerdict}, the engine's report text,
    and repro: a command that replays the check on the saved arrays (kept in repro_dir when the
    check failed or keep=True)."""

    def __init__(self, passed, tensors, text, repro, repro_dir):
        self.passed, self.tensors, self.text, self.repro, self.repro_dir = passed, tensors, text, repro, repro_dir

    def __bool__(self):
        return self.passed

    def __repr__(self):
        return "Verdict(%s, %s)" % ("PASS" if self.passed else "FAIL", list(self.tensors.values()))

    def explain(self):
        lines = ["flashcheck: %s" % ("PASS" if self.passed else "FAIL: elements outside their error bound")]
        for t in self.tensors.values():
            line = "  %-4s checked %d, failed %d, worst |err|/bound %.4g" % (t.name, t.checked, t.failed, t.worst_ratio)
            if t.first_fail is not None:
                line += ", first failure at (b, s, h, d) = %s; worst: got %r, ref %r, bound %r" % (
                    t.first_fail, t.worst_got, t.worst_ref, t.worst_bound)
            lines.append(line)
        lines.append("repro: " + self.repro)
        return "\n".join(lines)


def _to_numpy(x, name, float32=False):
    """Host numpy copy of a torch / JAX / numpy array; bfloat16 as uint16 bit patterns."""
    import numpy as np
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch
        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    a = np.asarray(x)
    if a.dtype.name == "bfloat16":  # JAX / ml_dtypes
        return np.ascontiguousarray(a).view(np.uint16)
    if a.dtype not in (np.float16, np.float32, np.uint16):
        if float32:
            return a.astype(np.float32)
        raise TypeError("%s has dtype %s; flashcheck checks float16 and bfloat16 attention (outputs may also be "
                        "float32 holding exact 16-bit values)" % (name, a.dtype))
    return a


def _to_int32(x, name):
    """Host int32 copy of an integer index array (cu_seqlens, seqused_k, block_table): int32 as is,
    other integer types when every value fits int32 (TypeError / ValueError otherwise)."""
    import numpy as np
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype == np.int32:
        return a
    if a.dtype.kind not in "iu":
        raise TypeError("%s has dtype %s; it must be an integer array (int32, as the contract's fa_varlen / fa_paged)"
                        % (name, a.dtype))
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise ValueError("%s has values outside int32" % name)
    return a.astype(np.int32)


def _to_float32(x, name):
    """Host float32 copy of sinks / dsinks (fp16 and bf16 widen exactly)."""
    import numpy as np
    if type(x).__module__.startswith("torch"):
        return x.detach().float().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        raise TypeError("%s has dtype %s; sinks are float32 [Hq]" % (name, a.dtype))
    return a.astype(np.float32)


def _loads(text):
    # the engine prints non-finite numbers as nan/inf
    return json.loads(re.sub(r'(?<![\w."])(-?)(nan|inf)(?![\w"])',
                             lambda m: ("-Infinity" if m.group(1) else "Infinity") if m.group(2) == "inf" else "NaN",
                             text))


def verify(q, k, v, o, lse=None, do=None, dq=None, dk=None, dv=None, *, causal="none", window=None,
           window_align="top_left", scale=None, mask=None, profile="tensorcore", layout="bshd", keep=False,
           cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, block_table=None, softcap=None, sinks=None,
           dsinks=None):
    """Check an attention forward (o, lse) and backward (dq, dk, dv for the given do) against the
    oracle's per-element bounds. Arrays: torch tensors (any device; copied to the host), numpy or
    JAX arrays, in `layout` "bshd" ([batch, seq, heads, dim], FlashAttention) or "bhsd" (SDPA).
    causal: "none" | "top_left" (True, PyTorch is_causal) | "bottom_right"; window: None or
    (left, right); scale: None for 1/sqrt(head_dim); mask: additive float32 [B|1, Hq|1, Sq, Sk];
    profile: a precision preset name (the precision the implementation promises; "tensorcore"
    for GPU kernels, "fp32" for fp32 math). lse=None: the backward is judged against any LSE a
    correct forward may give (the backend's own LSE, when it has one, gives tighter gradient bounds).
    Contract v3 (kernels/flash_api.h; `flashcheck verify --help`), as FlashAttention's varlen and
    paged-KV APIs take them: cu_seqlens_q / cu_seqlens_k int32 [B+1] (q, o, do, dq / k, v, dk, dv
    are then packed rows [total, H, D], lse is [Hq, total_q]); seqused_k int32 [B]; block_table
    int32 [B, max_pages] (k, v, dk, dv are then page pools [num_pages, page_size, Hkv, D]);
    softcap (0 or None: off); sinks float32 [Hq]; dsinks float32 [Hq] (the sink gradient, with do).
    Integer arrays of another integer type are converted when their values fit int32. The engine
    validates them with the contract's own validation; a rejection raises ValueError naming the
    array. Returns a Verdict (truthy when it passed)."""
    import numpy as np
    if causal not in _CAUSAL:
        raise ValueError("causal must be one of %s" % sorted(k for k in _CAUSAL if isinstance(k, str)))
    d = tempfile.mkdtemp(prefix="flashcheck-verify-")
    arrays = dict(q=q, k=k, v=v, o=o, lse=lse, do=do, dq=dq, dk=dk, dv=dv, mask=mask)
    index = dict(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k, block_table=block_table)
    try:
        for name, x in arrays.items():
            if x is not None:
                np.save(os.path.join(d, name + ".npy"), _to_numpy(x, name, float32=name in ("lse", "mask")))
        for name, x in index.items():
            if x is not None:
                np.save(os.path.join(d, name + ".npy"), _to_int32(x, name))
        for name, x in (("sinks", sinks), ("dsinks", dsinks)):
            if x is not None:
                np.save(os.path.join(d, name + ".npy"), _to_float32(x, name))
    except BaseException:
        shutil.rmtree(d, ignore_errors=True)
        raise
    args = ["verify", "--dir", d, "--json", os.path.join(d, "result.json"), "--layout", layout,
            "--causal", _CAUSAL[causal], "--window-align", window_align, "--profile", str(profile)]
    if window is not None:
        args += ["--window", int(window[0]), int(window[1])]
    if scale is not None:
        args += ["--scale", repr(float(scale))]
    if softcap:
        args += ["--softcap", repr(float(softcap))]
    r = _cli.run(args)
    repro = " ".join([_cli.binary()] + [str(a) for a in args])
    if r.returncode not in (0, 1, 5):  # 5: overflow-sensitive (flashcheck verify --help)
        shutil.rmtree(d, ignore_errors=True)
        raise ValueError("flashcheck verify rejected the arrays: %s" % (r.stderr.strip() or r.stdout.strip()))
    with open(os.path.join(d, "result.json")) as f:
        res = _loads(f.read())
    tensors = {n: TensorVerdict(n, t) for n, t in res["tensors"].items()}
    # OVERFLOW-SENSITIVE: no element outside its bound, but NaN/Inf where the profile's own
    # intermediates may overflow (oracle/BOUNDS.md 11): not a failure, never silent
    overflow = res["result"] == "OVERFLOW-SENSITIVE" and r.returncode == 5
    passed = (res["result"] == "PASS" and r.returncode == 0) or overflow
    if overflow:
        import warnings
        warnings.warn("flashcheck: NaN/Inf where the profile's intermediates may overflow for these magnitudes "
                      "(overflow-sensitive, not a failure); repro: " + repro)
    if passed and not keep and not overflow:
        shutil.rmtree(d, ignore_errors=True)
        d = None
    v = Verdict(passed, tensors, r.stdout, repro, d)
    v.overflow_sensitive = overflow
    return v


def assert_attention_close(q, k, v, o, lse=None, do=None, dq=None, dk=None, dv=None, **kw):
    """verify(...) and raise AssertionError with the per-tensor report and the repro command when
    an element is outside its error bound. Returns the Verdict when it passed."""
    res = verify(q, k, v, o, lse, do, dq, dk, dv, **kw)
    if not res.passed:
        raise AssertionError(res.explain())
    return res


class CampaignResult:
    """certify/fuzz/repro/shrink: returncode (the command's exit status, see `flashcheck CMD --help`),
    ok (exit 0), the command line, its output, and for certify the report directory."""

    def __init__(self, cmd, proc, out_dir=None):
        self.cmd, self.returncode, self.stdout, self.stderr, self.out_dir = (cmd, proc.returncode, proc.stdout or "",
                                                                             proc.stderr or "", out_dir)
        self.ok = proc.returncode == 0

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return "CampaignResult(exit %d: %s)" % (self.returncode, " ".join(self.cmd))


def _engine(args, capture, timeout=None):
    cmd = [_cli.binary()] + [str(a) for a in args]
    proc = _cli.run(args, capture=capture, timeout=timeout)
    return cmd, proc


def certify(fn, *, quick=False, out=None, fuzz_seconds=None, jobs=None, timeout=None, capture=True):
    """`flashcheck certify --backend py:SPEC` on a kernel: fn is a callable (importable, or defined
    in the running script), 'module:callable', 'file.py:callable' or 'py:...'."""
    args = ["certify", "--backend", _cli.spec_of(fn)]
    if quick:
        args.append("--quick")
    if out is None:
        out = tempfile.mkdtemp(prefix="flashcheck-certify-")
        os.rmdir(out)
    args += ["--out", out]
    if fuzz_seconds is not None:
        args += ["--fuzz-seconds", fuzz_seconds]
    if jobs is not None:
        args += ["--jobs", jobs]
    cmd, proc = _engine(args, capture, timeout)
    return CampaignResult(cmd, proc, out)


def fuzz(fn, seconds=60, *, jobs=None, findings=None, corpus=None, max_seq=None, max_dim=None, seed=None,
         forward_only=False, extra=(), capture=True):
    """`flashcheck fuzz --backend py:SPEC --time seconds`; returncode 1 means new findings (in
    `findings`, default ./findings)."""
    args = ["fuzz", "--backend", _cli.spec_of(fn), "--time", seconds, "--quiet"]
    for opt, val in (("--jobs", jobs), ("--findings", findings), ("--corpus", corpus), ("--max-seq", max_seq),
                     ("--max-dim", max_dim), ("--seed", seed)):
        if val is not None:
            args += [opt, val]
    if forward_only:
        args.append("--forward-only")
    args += list(extra)
    cmd, proc = _engine(args, capture)
    return CampaignResult(cmd, proc)


def repro(path, fn, capture=True):
    """`flashcheck repro FILE --backend py:SPEC` (exit 1: the failure reproduces)."""
    cmd, proc = _engine(["repro", path, "--backend", _cli.spec_of(fn)], capture)
    return CampaignResult(cmd, proc)


def shrink(path, fn, capture=True):
    """`flashcheck shrink FILE --backend py:SPEC`: writes FILE.min."""
    cmd, proc = _engine(["shrink", path, "--backend", _cli.spec_of(fn)], capture)
    return CampaignResult(cmd, proc)
