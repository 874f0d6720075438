"""pytest plugin (entry point pytest11 "flashcheck"): oracle-bounded attention checks instead of
atol/rtol.

    def test_my_kernel(assert_attention_close):
        o, lse = my_kernel(q, k, v, causal=True)
        assert_attention_close(q, k, v, o, lse, causal=True)

    def test_grid(flashcheck_case):                    # one test per case of the grid below
        c = flashcheck_case                            # c.q, c.k, c.v, c.do (numpy, [B, S, H, D])
        o, lse = my_kernel(c.q, c.k, c.v, **c.kwargs)  # kwargs: causal, window, scale
        c.check(o, lse)                                # or c.check(o, lse, dq=..., dk=..., dv=...)

A failure raises AssertionError with the per-tensor report (elements outside their bound, worst
|err|/bound, first failing index) and the repro: a `flashcheck verify` command over the saved
arrays. Options: --flashcheck-profile NAME (default tensorcore), --flashcheck-dtype float16|bfloat16.

The grid: awkward shapes a flash kernel gets wrong (sequence lengths at tile sizes +-1, primes,
1, Sq != Sk under both causal alignments, a sliding window, GQA/MQA, head dims 64/80/128, a key
length that is not a multiple of the block). Inputs are seeded Gaussian values; the full sweep
(layouts, masks, special values, the property suite, fuzzing) is `flashcheck certify` on the
kernel as a py backend.
"""
import pytest

import flashcheck

# (name, B, Sq, Sk, Hq, Hkv, D, causal, window)
GRID = [
    ("tiny", 1, 1, 1, 1, 1, 64, "none", None),
    ("tile", 1, 128, 128, 2, 2, 64, "none", None),
    ("tile_minus1", 1, 127, 127, 2, 2, 64, "none", None),
    ("tile_plus1", 2, 129, 129, 2, 2, 128, "none", None),
    ("primes", 1, 67, 131, 3, 3, 80, "none", None),
    ("ragged_keys", 1, 64, 200, 2, 2, 64, "none", None),
    ("causal", 1, 97, 97, 2, 2, 64, "top_left", None),
    ("causal_tl_sq_lt_sk", 1, 33, 161, 2, 2, 64, "top_left", None),
    ("causal_br_sq_lt_sk", 1, 33, 161, 2, 2, 64, "bottom_right", None),
    ("causal_br_sq_gt_sk", 1, 150, 70, 2, 2, 64, "bottom_right", None),
    ("window", 1, 150, 150, 2, 2, 64, "top_left", (31, 0)),
    ("gqa", 1, 100, 100, 8, 2, 64, "none", None),
    ("mqa", 2, 65, 65, 4, 1, 128, "top_left", None),
    ("decode", 3, 1, 257, 4, 2, 128, "bottom_right", None),
]


class Case:
    """One grid case: inputs q, k, v, do (numpy [B, S, H, D] in the dtype; bfloat16 as uint16 bits),
    kwargs for the kernel (causal, window, scale) and check()."""

    def __init__(self, name, B, Sq, Sk, Hq, Hkv, D, causal, window, dtype, profile, seed):
        import numpy as np
        rng = np.random.default_rng(seed)
        self.name, self.dtype, self.profile = name, dtype, profile
        self.shape = dict(B=B, Sq=Sq, Sk=Sk, Hq=Hq, Hkv=Hkv, D=D)

        def gen(*shape):
            x = rng.standard_normal(shape, dtype=np.float32)
            if dtype == "float16":
                return x.astype(np.float16)
            from flashcheck.host import from_float
            return from_float(x, "bfloat16", np.zeros(0, np.uint16))
        self.q, self.k, self.v, self.do = gen(B, Sq, Hq, D), gen(B, Sk, Hkv, D), gen(B, Sk, Hkv, D), gen(B, Sq, Hq, D)
        self.kwargs = dict(causal=causal, window=window, scale=D ** -0.5)

    def torch(self, device="cuda"):
        """(q, k, v, do) as torch tensors on device, [B, S, H, D]."""
        import torch
        out = []
        for a in (self.q, self.k, self.v, self.do):
            t = torch.from_numpy(a.copy())
            out.append((t.view(torch.bfloat16) if self.dtype == "bfloat16" else t).to(device))
        return tuple(out)

    def check(self, o, lse=None, dq=None, dk=None, dv=None, layout="bshd"):
        grads = dq is not None or dk is not None or dv is not None
        return flashcheck.assert_attention_close(self.q, self.k, self.v, o, lse, self.do if grads else None,
                                                 dq, dk, dv, profile=self.profile, layout=layout, **self.kwargs)

    def __repr__(self):
        return "Case(%s, %s, %s)" % (self.name, self.shape, self.kwargs)


def pytest_addoption(parser):
    g = parser.getgroup("flashcheck")
    g.addoption("--flashcheck-profile", default="tensorcore",
                help="precision preset the kernel under test promises (flashcheck.verify profile)")
    g.addoption("--flashcheck-dtype", default="float16", choices=("float16", "bfloat16"),
                help="dtype of the flashcheck_case inputs")


def pytest_generate_tests(metafunc):
    if "flashcheck_case" in metafunc.fixturenames:
        metafunc.parametrize("flashcheck_case", GRID, ids=[g[0] for g in GRID], indirect=True)


@pytest.fixture
def flashcheck_case(request):
    name, B, Sq, Sk, Hq, Hkv, D, causal, window = request.param
    seed = sum(ord(c) for c in name)
    return Case(name, B, Sq, Sk, Hq, Hkv, D, causal, window, request.config.getoption("--flashcheck-dtype"),
                request.config.getoption("--flashcheck-profile"), seed)


@pytest.fixture
def assert_attention_close(request):
    """flashcheck.assert_attention_close with the session's --flashcheck-profile as default."""
    profile = request.config.getoption("--flashcheck-profile")

    def check(*args, **kw):
        kw.setdefault("profile", profile)
        return flashcheck.assert_attention_close(*args, **kw)
    return check
