"""Declarations of a kernel: where it runs, the precision it promises, its limits.

A kernel declares them with the decorator flashcheck.kernel(...) (or by setting the attribute
__flashcheck__ to a dict, on the callable or on its module); everything has a default.
"""

CAUSAL_NAMES = ("none", "top_left", "bottom_right")
DTYPE_NAMES = ("float16", "bfloat16")

# fa_precision fields, in the order of kernels/flash_api.h
PROFILE_FIELDS = ("u_acc", "exp_rel_err", "scores_fp32", "p_rounded", "ds_rounded", "out_rounded",
                  "max_rescales", "flushes_subnormals")

# contract-v3 features a kernel may claim, and the keyword arguments each needs its forward (and
# a backward callable) to take when claimed
V3_FEATURES = ("varlen", "paged", "softcap", "sinks")
V3_KWARGS = dict(varlen=("cu_seqlens_q", "cu_seqlens_k", "seqused_k"), paged=("block_table",),
                 softcap=("softcap",), sinks=("sinks",))

DEFAULTS = dict(
    device="cpu",            # "cpu" (host arrays) or "cuda" (device tensors through DLPack)
    arrays=None,             # "numpy" or "torch"; default: numpy on cpu, torch on cuda
    profile="tensorcore",    # a preset name of fa_precision_preset, or a dict of PROFILE_FIELDS
    backward=None,           # None (forward only), a callable, or "autograd"
    max_head_dim=256,        # fa_limits
    head_dim_multiple=1,
    dqk_equals_dv=False,
    ptr_align_bytes=2,
    unit_last_stride=False,
    causal=CAUSAL_NAMES,     # causal modes it implements
    window=True,             # sliding windows
    mask=True,               # additive masks
    gqa=True,                # heads_q != heads_kv
    dtypes=DTYPE_NAMES,
    deterministic=False,     # the backward is bitwise reproducible (else deterministic cases are SKIP)
    # contract v3 (kernels/flash_api.h; fa_limits.supports_*): True claims the feature, and the
    # callable must then take its keyword arguments (python/README.md); a case using a feature a
    # kernel does not claim is SKIP (FA_ERR_UNSUPPORTED from the contract's validation), never run
    varlen=False,            # cu_seqlens_q, cu_seqlens_k, seqused_k (packed sequences)
    paged=False,             # block_table (K/V page pools)
    softcap=False,           # softcap > 0
    sinks=False,             # sinks (and dsinks in a backward)
    name=None,               # the backend's name in reports (default "py:" + spec)
)


def kernel(**decl):
    """Decorator declaring a kernel's device, precision profile and limits::

        @flashcheck.kernel(device="cuda", profile="tensorcore", max_head_dim=128,
                           causal=("none", "top_left"), backward="autograd")
        def attention(q, k, v, *, causal, window, scale, mask, out, lse, **kw): ...

    Unknown keys are an error (a typo would silently change what is checked)."""
    bad = sorted(set(decl) - set(DEFAULTS))
    if bad:
        raise TypeError("flashcheck.kernel: unknown declaration(s) %s; known: %s" % (bad, sorted(DEFAULTS)))

    def wrap(fn):
        fn.__flashcheck__ = dict(decl)
        return fn
    return wrap


def declarations(obj, module=None):
    """The full declaration dict of obj (defaults filled in)."""
    d = dict(DEFAULTS)
    for src in (getattr(module, "__flashcheck__", None), getattr(obj, "__flashcheck__", None)):
        if isinstance(src, dict):
            bad = sorted(set(src) - set(DEFAULTS))
            if bad:
                raise TypeError("__flashcheck__: unknown declaration(s) %s; known: %s" % (bad, sorted(DEFAULTS)))
            d.update(src)
    if d["device"] not in ("cpu", "cuda"):
        raise ValueError("device must be 'cpu' or 'cuda', not %r" % (d["device"],))
    if d["arrays"] is None:
        d["arrays"] = "torch" if d["device"] == "cuda" else "numpy"
    if d["arrays"] not in ("numpy", "torch"):
        raise ValueError("arrays must be 'numpy' or 'torch', not %r" % (d["arrays"],))
    for f in V3_FEATURES:
        if not isinstance(d[f], bool):
            raise TypeError("%s must be True or False, not %r" % (f, d[f]))
    for c in d["causal"]:
        if c not in CAUSAL_NAMES:
            raise ValueError("causal modes are %s, not %r" % (CAUSAL_NAMES, c))
    return d
