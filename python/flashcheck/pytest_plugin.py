"""pytest plugin (entry point pytest11 "flashcheck"): oracle-bounded attention checks instead of
atol/rtol.

    def test_my_kernel(assert_attention_close):
        o, lse = my_kernel(q, k, v, causal=True)
        assert_attention_close(q, k, v, o, lse, causal=True)

    def test_sweep(flashcheck_case):                   # one test per case of certify's fixed sweep
        c = flashcheck_case                            # c.q, c.k, c.v, c.do (numpy, [B, S, H, D])
        if c.mask is not None:                         # a kernel without an additive-mask argument
            pytest.skip("additive mask")
        o, lse = my_kernel(c.q, c.k, c.v, **c.kwargs)  # kwargs: causal, window, window_align, scale
        c.check(o, lse)                                # or c.check(o, lse, dq=..., dk=..., dv=...)

A failure raises AssertionError with the per-tensor report (elements outside their bound, worst
|err|/bound, first failing index) and the repro: a `flashcheck verify` command over the saved
arrays. Options: --flashcheck-profile NAME (default tensorcore), --flashcheck-sweep quick|full
(default quick), --flashcheck-category C (repeatable; default all).

The cases ARE the fixed sweep of `flashcheck certify` (categories shapes, causal, window, mask,
gqa, layout, values, empty): the engine writes them once per session (`flashcheck cases`), the
pytest ids are their names (CATEGORY-NNN), and each case's inputs are the C case model's values
(`flashcheck inputs`: the same values a backend run of that case gets). Nothing is generated in
Python. The arrays are dense [B, S, H, D] in C order (verify's --layout bshd): the layout cases'
permuted, padded and offset storage is not reproduced (c.case_layout says "strided" for those;
their values and outputs are the same problem). Inputs are in the case's dtype: float16, or
bfloat16 as uint16 bit patterns (c.dtype; c.torch() gives torch tensors). c.mask is None or the
additive float32 mask [B, Hq, Sq, Sk]: a kernel that takes no mask must skip those cases (check()
passes the mask to the oracle, so ignoring it fails). Empty cases (Sq or Sk = 0) are in the sweep;
skip them if your kernel does not take empty sequences. The property suite, API misuse, fuzzing and
the strided layouts themselves are `flashcheck certify` on the kernel as a py backend.
"""
import json
import os
import shutil
import tempfile

import pytest

import flashcheck
from flashcheck import _cli


def _engine(args):
    r = _cli.run(args)
    if r.returncode != 0:
        raise RuntimeError("flashcheck %s failed (exit %d): %s" % (" ".join(str(a) for a in args), r.returncode,
                                                                  (r.stderr or r.stdout).strip()))
    return r.stdout


class Case:
    """One case of certify's fixed sweep: inputs q, k, v, do (numpy [B, S, H, D] in the case's dtype;
    bfloat16 as uint16 bits), mask (None or float32 [B, Hq, Sq, Sk]), kwargs for the kernel
    (causal, window, window_align, scale), check(). path is the case file (`flashcheck repro`)."""

    def __init__(self, name, path, inputs_dir, profile):
        import numpy as np
        self.name, self.path, self.profile = name, path, profile
        with open(os.path.join(inputs_dir, "case.json")) as f:
            meta = json.load(f)
        self.meta = meta
        self.dtype = meta["dtype"]
        self.shape = meta["shape"]
        self.backward = meta["backward"]
        self.case_layout = meta["case_layout"]
        load = lambda n: np.load(os.path.join(inputs_dir, n + ".npy"))  # noqa: E731
        self.q, self.k, self.v, self.do = load("q"), load("k"), load("v"), load("do")
        self.mask = load("mask") if meta["mask"] else None
        w = meta["window"]
        self.kwargs = dict(causal=meta["causal"], window=None if w is None else (int(w[0]), int(w[1])),
                           window_align=meta["window_align"], scale=meta["scale"])
        assert meta["layout"] == "bshd"

    def torch(self, device="cuda"):
        """(q, k, v, do) as torch tensors on device, [B, S, H, D]."""
        import torch
        out = []
        for a in (self.q, self.k, self.v, self.do):
            t = torch.from_numpy(a.copy())
            out.append((t.view(torch.bfloat16) if self.dtype == "bfloat16" else t).to(device))
        return tuple(out)

    def check(self, o, lse=None, dq=None, dk=None, dv=None, layout="bshd"):
        """assert_attention_close over this case's inputs, mask and options (verify --layout: the
        layout of o, dq, dk, dv; the inputs are always the bshd arrays above)."""
        grads = dq is not None or dk is not None or dv is not None
        q, k, v, do = self.q, self.k, self.v, self.do
        if layout == "bhsd":
            q, k, v, do = (a.transpose(0, 2, 1, 3) for a in (q, k, v, do))
        return flashcheck.assert_attention_close(q, k, v, o, lse, do if grads else None, dq, dk, dv,
                                                 mask=self.mask, profile=self.profile, layout=layout, **self.kwargs)

    def __repr__(self):
        return "Case(%s, %s, %s%s)" % (self.name, self.shape, self.kwargs, ", mask" if self.mask is not None else "")


def sweep(config):
    """(names, dir) of the session's exported sweep: `flashcheck cases` run once, into a temporary
    directory removed at the end of the session."""
    st = getattr(config, "_flashcheck_sweep", None)
    if st is None:
        d = tempfile.mkdtemp(prefix="flashcheck-cases-")
        args = ["cases", "--out", os.path.join(d, "cases")]
        if config.getoption("--flashcheck-sweep") == "quick":
            args.append("--quick")
        names = [n[:-len(".case")] for n in _engine(args).split()]
        cats = config.getoption("--flashcheck-category")
        if cats:
            names = [n for n in names if n.rsplit("-", 1)[0] in cats]
        st = config._flashcheck_sweep = (names, d)
    return st


def load_case(config, name, profile=None):
    """The Case NAME of the session's sweep; its inputs are written by `flashcheck inputs` once."""
    names, d = sweep(config)
    path = os.path.join(d, "cases", name + ".case")
    inp = os.path.join(d, "inputs", name)
    if not os.path.exists(os.path.join(inp, "case.json")):
        _engine(["inputs", path, "--out", inp])
    return Case(name, path, inp, profile or config.getoption("--flashcheck-profile"))


def pytest_addoption(parser):
    g = parser.getgroup("flashcheck")
    g.addoption("--flashcheck-profile", default="tensorcore",
                help="precision preset the kernel under test promises (flashcheck.verify profile)")
    g.addoption("--flashcheck-sweep", default="quick", choices=("quick", "full"),
                help="flashcheck_case runs certify's fixed sweep: quick (certify --quick) or full")
    g.addoption("--flashcheck-category", action="append", default=[],
                choices=("shapes", "causal", "window", "mask", "gqa", "layout", "values", "empty"),
                help="only this category of the sweep (repeatable; default all)")


def pytest_generate_tests(metafunc):
    if "flashcheck_case" in metafunc.fixturenames:
        names, _ = sweep(metafunc.config)
        metafunc.parametrize("flashcheck_case", names, ids=names, indirect=True)


def pytest_unconfigure(config):
    st = getattr(config, "_flashcheck_sweep", None)
    if st is not None:
        shutil.rmtree(st[1], ignore_errors=True)


@pytest.fixture
def flashcheck_case(request):
    return load_case(request.config, request.param)


@pytest.fixture
def assert_attention_close(request):
    """flashcheck.assert_attention_close with the session's --flashcheck-profile as default."""
    profile = request.config.getoption("--flashcheck-profile")

    def check(*args, **kw):
        kw.setdefault("profile", profile)
        return flashcheck.assert_attention_close(*args, **kw)
    return check
