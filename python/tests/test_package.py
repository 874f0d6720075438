"""flashcheck.verify / assert_attention_close / the pytest plugin's fixtures, on numpy arrays,
with examples/numpy_attention.py as the kernel (a correct one and a broken one)."""
import os
import sys

import numpy as np
import pytest

import flashcheck
from flashcheck.host import from_float, to_float

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
import numpy_attention  # noqa: E402


def run(kern, q, k, v, do=None, causal="none", window=None, dtype="float16"):
    B, Sq, Hq, D = q.shape
    Sk = k.shape[1]
    o = np.zeros((B, Sq, Hq, v.shape[3]), q.dtype)
    lse = np.zeros((B, Hq, Sq), np.float32)
    kw = dict(causal=causal, window=window, window_align="top_left", scale=D ** -0.5, mask=None, dtype=dtype)
    kern.forward(q, k, v, out=o, lse=lse, **kw)
    if do is None:
        return o, lse
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    kern.__flashcheck__["backward"](q, k, v, o, do, lse, dq=dq, dk=dk, dv=dv, **kw)
    return o, lse, dq, dk, dv


def inputs(B=1, Sq=37, Sk=53, Hq=4, Hkv=2, D=32, seed=0):
    r = np.random.default_rng(seed)
    f = lambda *s: r.standard_normal(s).astype(np.float16)  # noqa: E731
    return f(B, Sq, Hq, D), f(B, Sk, Hkv, D), f(B, Sk, Hkv, D), f(B, Sq, Hq, D)


def test_verify_passes_correct_forward_and_backward():
    q, k, v, do = inputs()
    o, lse, dq, dk, dv = run(numpy_attention.attention, q, k, v, do, causal="bottom_right")
    res = flashcheck.verify(q, k, v, o, lse, do, dq, dk, dv, causal="bottom_right", profile="fp32")
    assert res.passed, res.explain()
    assert set(res.tensors) == {"o", "lse", "dq", "dk", "dv"}
    assert all(t.checked > 0 and t.failed == 0 and t.first_fail is None for t in res.tensors.values())
    assert res.repro_dir is None  # nothing kept on success


def test_verify_finds_broken_gqa_with_index_and_repro():
    q, k, v, _ = inputs()
    o, lse = run(numpy_attention.broken_gqa, q, k, v)
    res = flashcheck.verify(q, k, v, o, lse, profile="fp32")
    assert not res.passed
    t = res.tensors["o"]
    assert t.failed > 0 and t.worst_ratio > 1 and t.first_fail is not None
    assert "verify --dir" in res.repro and os.path.isdir(res.repro_dir)
    assert os.path.exists(os.path.join(res.repro_dir, "q.npy"))


def test_assert_attention_close_message():
    q, k, v, _ = inputs(seed=3)
    o, lse = run(numpy_attention.broken_causal, q, k, v, causal="bottom_right")
    with pytest.raises(AssertionError) as e:
        flashcheck.assert_attention_close(q, k, v, o, lse, causal="bottom_right", profile="fp32")
    msg = str(e.value)
    assert "first failure at (b, s, h, d)" in msg and "repro:" in msg


def test_verify_bf16_as_uint16_bits():
    q, k, v, _ = inputs(seed=5)
    z = np.zeros(0, np.uint16)
    qb, kb, vb = (from_float(to_float(x, "float16"), "bfloat16", z) for x in (q, k, v))
    o, lse = run(numpy_attention.attention, qb, kb, vb, dtype="bfloat16")
    assert o.dtype == np.uint16
    assert flashcheck.verify(qb, kb, vb, o, lse, profile="fp32").passed
    o[0, 3, 1, 5] ^= 0x40  # one element off by many ulps
    res = flashcheck.verify(qb, kb, vb, o, lse, profile="fp32")
    assert not res.passed and res.tensors["o"].failed == 1 and res.tensors["o"].first_fail == (0, 3, 1, 5)


def test_verify_rejects_bad_arrays_with_message():
    q, k, v, _ = inputs()
    with pytest.raises(ValueError, match="verify rejected"):
        flashcheck.verify(q, k[:, :, :, :16], v, np.zeros((1, 37, 4, 32), np.float16))


def test_plugin_fixture_checks(assert_attention_close):
    q, k, v, _ = inputs(seed=7)
    o, lse = run(numpy_attention.attention, q, k, v, causal="top_left")
    assert_attention_close(q, k, v, o, lse, causal=True, profile="fp32")


def test_plugin_grid_correct_kernel(flashcheck_case):
    c = flashcheck_case
    o, lse, dq, dk, dv = run(numpy_attention.attention, c.q, c.k, c.v, c.do, **{
        "causal": c.kwargs["causal"], "window": c.kwargs["window"]})
    c.profile = "fp32"
    c.check(o, lse, dq=dq, dk=dk, dv=dv)


@pytest.mark.parametrize("case", ["causal_br_sq_lt_sk", "ragged_keys"])
def test_plugin_grid_finds_broken_tail_or_causal(request, case):
    from flashcheck.pytest_plugin import GRID, Case
    g = next(x for x in GRID if x[0] == case)
    c = Case(*g, "float16", "fp32", 1)
    kern = numpy_attention.broken_causal if case.startswith("causal") else numpy_attention.broken_tail
    o, lse = run(kern, c.q, c.k, c.v, causal=c.kwargs["causal"], window=c.kwargs["window"])
    with pytest.raises(AssertionError, match="repro:"):
        c.check(o, lse)


REG = os.path.join(HERE, "..", "..", "fuzz", "regressions", "fwd", "causal_bottom_right_sq_gt_sk.case")


def test_spec_of_names_files_and_modules():
    from flashcheck import _cli
    assert _cli.spec_of(numpy_attention.attention) == "py:%s:attention" % os.path.abspath(numpy_attention.__file__)
    assert _cli.spec_of("mod:fn") == "py:mod:fn"
    from flashcheck.adapters import __name__ as adapters  # noqa: F401 (a package module keeps its name)


def test_repro_wrapper_runs_callables_through_the_py_backend():
    good = flashcheck.repro(REG, numpy_attention.attention)
    assert good.ok, good.stdout + good.stderr
    bad = flashcheck.repro(REG, numpy_attention.broken_causal)
    assert bad.returncode == 1 and "numpy-broken-causal" in bad.stdout


def test_bridge_maps_exceptions():
    from flashcheck import _bridge

    class AcceleratorError(RuntimeError):  # torch's type for CUDA faults
        pass
    for exc, status in ((flashcheck.Unsupported("no"), 2), (AcceleratorError("CUDA error: misaligned address\nx"), 4),
                        (ZeroDivisionError("planted"), 5)):
        try:
            raise exc
        except BaseException as e:  # noqa: B036
            st, _, msg = _bridge._failure(e, "forward")
        assert st == status, (exc, st, msg)
    assert "misaligned address" in _bridge._failure(AcceleratorError("CUDA error: misaligned address"), "f")[2]


def test_bf16_rounding_is_correct_rounding_of_float64():
    r = np.random.default_rng(11)
    x = r.standard_normal(2000000) * np.exp(r.standard_normal(2000000) * 4)
    z = np.zeros(0, np.uint16)
    b = from_float(x, "bfloat16", z)
    got = to_float(b, "bfloat16").astype(np.float64)
    for step in (1, -1):  # no bf16 neighbour is nearer (ties: the even one)
        nb = to_float((b.astype(np.int32) + step).astype(np.uint16), "bfloat16").astype(np.float64)
        assert np.all(np.abs(got - x) <= np.abs(nb - x))
