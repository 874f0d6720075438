"""Declarations of a kernel: where it runs, the precision it promises, its limits.

A kernel declares them with the decorator flashcheck.kernel(...) (or by setting the attribute
__flashcheck__ to a dict, on the callable or on its module); everything has a default.
"""

CAUSAL_NAMES = ("none", "top_left", "bottom_right")
DTYPE_NAMES = ("float16", "bfloat16")

# fa_precision fields, in the order of kernels/flash_api.h
PROFILE_FIELDS = ("u_acc", "exp_rel_err", "scores_fp32", "p_rounded", "ds_rounded", "out_rounded",
                  "max_rescales", "flushes_subnormals")
# optional in a dict profile, with their defaults (the contract's value): masked_nonfinite
# (fa_masked_nonfinite, ABI 5): 0 or "isolated", 1 or "propagates" (a NaN/Inf of a masked pair may
# reach outputs as NaN through an exact-zero weight, as FlashAttention-2 and PyTorch's SDPA
# kernels do). A preset given by name carries its own value (kernels/api/fa_profile.c).
PROFILE_OPTIONAL = (("masked_nonfinite", 0),)
MASKED_NONFINITE_NAMES = ("isolated", "propagates")


def profile_values(prof):
    """The values a dict profile gives, in the order the bridge hands them to kernels/py/fa_py.c:
    PROFILE_FIELDS (all required), then PROFILE_OPTIONAL (defaults when absent)."""
    known = set(PROFILE_FIELDS) | {k for k, _ in PROFILE_OPTIONAL}
    missing = [f for f in PROFILE_FIELDS if f not in prof]
    if missing:
        raise ValueError("profile dict lacks %s" % missing)
    bad = sorted(set(prof) - known)
    if bad:
        raise ValueError("profile dict: unknown field(s) %s; known: %s" % (bad, sorted(known)))
    vals = [float(prof[f]) if i < 2 else int(prof[f]) for i, f in enumerate(PROFILE_FIELDS)]
    mnf = prof.get("masked_nonfinite", 0)
    if isinstance(mnf, str):
        if mnf not in MASKED_NONFINITE_NAMES:
            raise ValueError("masked_nonfinite must be one of %s (or 0, 1), not %r" % (MASKED_NONFINITE_NAMES, mnf))
        mnf = MASKED_NONFINITE_NAMES.index(mnf)
    if mnf not in (0, 1) or isinstance(mnf, float):
        raise ValueError("masked_nonfinite must be 0 (isolated) or 1 (propagates), not %r" % (mnf,))
    vals.append(int(mnf))
    return tuple(vals)

# contract-v3 features a kernel may claim, and the keyword arguments each needs its forward (and
# a backward callable) to take when claimed
V3_FEATURES = ("varlen", "paged", "softcap", "sinks")
V3_KWARGS = dict(varlen=("cu_seqlens_q", "cu_seqlens_k", "seqused_k"), paged=("block_table",),
                 softcap=("softcap",), sinks=("sinks",))

DEFAULTS = dict(
    device="cpu",            # "cpu" (host arrays) or "cuda" (device tensors through DLPack)
    arrays=None,             # "numpy" or "torch"; default: numpy on cpu, torch on cuda
    profile="tensorcore",    # a preset name of fa_precision_preset, or a dict of PROFILE_FIELDS
                             # (and PROFILE_OPTIONAL: masked_nonfinite)
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
