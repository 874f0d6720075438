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


def run_case(kern, c, grads=True):
    """kern (examples/numpy_attention.py) on a sweep case: its inputs, mask and options."""
    o = np.zeros(c.q.shape[:3] + (c.v.shape[3],), c.q.dtype)
    lse = np.zeros((c.q.shape[0], c.q.shape[2], c.q.shape[1]), np.float32)
    kw = dict(c.kwargs, mask=c.mask, dtype=c.dtype)
    kern.forward(c.q, c.k, c.v, out=o, lse=lse, **kw)
    if not grads:
        return o, lse
    dq, dk, dv = np.zeros_like(c.q), np.zeros_like(c.k), np.zeros_like(c.v)
    kern.__flashcheck__["backward"](c.q, c.k, c.v, o, c.do, lse, dq=dq, dk=dk, dv=dv, **kw)
    return o, lse, dq, dk, dv


def test_plugin_sweep_correct_kernel(request, flashcheck_case):
    """Every case of certify's (quick) fixed sweep, ids = the case names, passes a correct kernel."""
    c = flashcheck_case
    assert request.node.callspec.id == c.name
    o, lse, dq, dk, dv = run_case(numpy_attention.attention, c)
    c.profile = "fp32"
    c.check(o, lse, dq=dq, dk=dk, dv=dv)


def test_plugin_sweep_is_certify_sweep(request):
    """The fixture's cases are `flashcheck cases --quick`, and their inputs are the C case model's."""
    from flashcheck import _cli
    from flashcheck.pytest_plugin import load_case, sweep
    names, _ = sweep(request.config)
    d = request.config._flashcheck_sweep[1]
    out = _cli.run(["cases", "--out", os.path.join(d, "again"), "--quick"]).stdout.split()
    assert names == [n[:-5] for n in out] and len(names) > 30
    assert {n.rsplit("-", 1)[0] for n in names} == {"shapes", "causal", "window", "mask", "gqa", "layout", "values", "empty"}
    c = load_case(request.config, "mask-001")
    assert c.mask is not None and c.mask.shape == (2, 2, 97, 129) and np.isneginf(c.mask).any()
    assert c.q.shape == (2, 97, 2, 64) and c.k.shape == (2, 129, 1, 64) and c.q.dtype == np.float16
    bf = [load_case(request.config, n) for n in names if n.startswith("values-")]
    assert any(b.dtype == "bfloat16" and b.q.dtype == np.uint16 for b in bf)


@pytest.mark.parametrize("kern,cat", [("broken_causal", "causal"), ("broken_tail", "shapes"), ("broken_window", "window"),
                                      ("broken_gqa", "gqa")])
def test_plugin_sweep_finds_broken_kernel(request, kern, cat):
    """A broken kernel fails on at least one case of the exported sweep (and the correct one on none
    of the same cases: test_plugin_sweep_correct_kernel)."""
    from flashcheck.pytest_plugin import load_case, sweep
    names, _ = sweep(request.config)
    failed = []
    for n in names:
        if not n.startswith(cat + "-"):
            continue
        c = load_case(request.config, n, profile="fp32")
        o, lse = run_case(getattr(numpy_attention, kern), c, grads=False)
        try:
            c.check(o, lse)
        except AssertionError as e:
            assert "repro:" in str(e)
            failed.append(n)
    assert failed, "%s passed every %s case" % (kern, cat)


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


def test_dict_profile_masked_nonfinite():
    """fa_precision.masked_nonfinite (ABI 5) through a dict profile: optional (0, the contract, when
    absent), 0/1 or "isolated"/"propagates"; the bridge hands it to the C side as the 9th field."""
    from flashcheck import _bridge, _decl
    spec = os.path.join(HERE, "kernels_for_tests.py")
    st, _, msg, _, info = _bridge.open(spec + ":dict_profile")
    assert st == 0, msg
    assert info[3] is None and len(info[4]) == 9 and info[4][8] == 0
    st, _, msg, _, info = _bridge.open(spec + ":dict_profile_propagates")
    assert st == 0, msg
    assert info[4][8] == 1 and info[4][0] == 2.0 ** -24 and info[4][5] == 1
    base = dict(u_acc=2.0 ** -24, exp_rel_err=2.0 ** -23, scores_fp32=1, p_rounded=0, ds_rounded=0,
                out_rounded=1, max_rescales=0, flushes_subnormals=0)
    assert _decl.profile_values(dict(base, masked_nonfinite=1))[8] == 1
    assert _decl.profile_values(dict(base, masked_nonfinite="isolated"))[8] == 0
    for bad, words in ((dict(base, masked_nonfinite=2), "masked_nonfinite must be 0"),
                       (dict(base, masked_nonfinite="sometimes"), "masked_nonfinite must be one of"),
                       (dict(base, masked_nonfinit=1), "unknown field"),
                       ({"u_acc": 1e-7}, "lacks")):
        with pytest.raises(ValueError, match=words):
            _decl.profile_values(bad)


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


# --- contract v3 (cu_seqlens, seqused_k, block_table, softcap, sinks): verify's keywords --------
sys.path.insert(0, HERE)
import kernels_for_tests  # noqa: E402


def v3_problem(seed=16):
    """packed q (3 sequences, one empty) over a paged cache (page size 8, 9 pages shuffled, page 5
    shared, page 8 unused), seqused_k, softcap 20, sinks; the v3 numpy kernel's forward and backward"""
    r = np.random.default_rng(seed)
    f = lambda *s: r.standard_normal(s).astype(np.float16)  # noqa: E731
    cu_q = np.array([0, 6, 6, 13], np.int32)
    table = np.array([[3, 5, 0, 7], [2, 6, 1, 4], [5, 1, 4, 2]], np.int32)
    used = np.array([27, 5, 13], np.int32)
    Hq, Hkv, D = 4, 2, 32
    q, k, v, do = f(13, Hq, D), f(9, 8, Hkv, D), f(9, 8, Hkv, D), f(13, Hq, D)
    sinks = r.standard_normal(Hq).astype(np.float32)
    kern = kernels_for_tests.v3_attention
    kw = dict(causal="bottom_right", window=None, window_align="top_left", scale=D ** -0.5, mask=None,
              dtype="float16", cu_seqlens_q=cu_q, cu_seqlens_k=None, seqused_k=used, block_table=table,
              max_seqlen_q=7, max_seqlen_k=27, softcap=20.0, sinks=sinks)
    o, lse = np.zeros_like(q), np.zeros((Hq, 13), np.float32)
    kern.forward(q, k, v, out=o, lse=lse, **kw)
    dq, dk, dv, dsinks = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v), np.zeros(Hq, np.float32)
    kern.backward(q, k, v, o, do, lse, dq=dq, dk=dk, dv=dv, dsinks=dsinks, **kw)
    arrays = (q, k, v, o, lse, do, dq, dk, dv)
    v3 = dict(cu_seqlens_q=cu_q, seqused_k=used, block_table=table, softcap=20.0, sinks=sinks, dsinks=dsinks,
              causal="bottom_right", profile="fp32")
    return arrays, v3


def test_verify_v3_packed_paged_softcap_sinks():
    arrays, v3 = v3_problem()
    res = flashcheck.verify(*arrays, **v3)
    assert res.passed, res.explain()
    assert set(res.tensors) == {"o", "lse", "dq", "dk", "dv", "dsinks"}
    assert res.tensors["dk"].checked > 0 and res.tensors["dsinks"].checked == 4
    # int64 index arrays (torch's default) are converted when their values fit int32
    assert flashcheck.verify(*arrays[:5], **dict(v3, dsinks=None, cu_seqlens_q=v3["cu_seqlens_q"].astype(np.int64))).passed


def test_verify_v3_finds_swapped_rows_wrong_page_and_dropped_options():
    (q, k, v, o, lse, do, dq, dk, dv), v3 = v3_problem()
    fwd = dict(v3, dsinks=None)
    sw = o.copy()
    sw[[8, 11]] = sw[[11, 8]]  # two rows of sequence 2 (packed rows 6..12)
    res = flashcheck.verify(q, k, v, sw, lse, **fwd)
    assert not res.passed and res.tensors["o"].first_fail[:2] == (2, 2)  # (sequence, position inside it)
    table = v3["block_table"].copy()
    table[0, 1] = 8  # a used entry naming another (valid, unused) page
    assert not flashcheck.verify(q, k, v, o, lse, **dict(fwd, block_table=table)).passed
    assert not flashcheck.verify(q, k, v, o, lse, **dict(fwd, softcap=None)).passed
    assert not flashcheck.verify(q, k, v, o, lse, **dict(fwd, sinks=None)).passed
    assert not flashcheck.verify(q, k, v, o, lse, **dict(fwd, seqused_k=None)).passed
    res = flashcheck.verify(q, k, v, o, lse, do, dq, dk, dv, **dict(v3, dsinks=-v3["dsinks"]))
    assert not res.passed and res.tensors["dsinks"].failed > 0 and res.tensors["dq"].failed == 0


@pytest.mark.parametrize("change,err,words", [
    (dict(cu_seqlens_q=np.array([0, 8, 6, 13], np.int32)), ValueError, ("cu_seqlens_q.npy", "decreases at sequence 1")),
    (dict(cu_seqlens_q=np.array([0, 6, 13], np.int32)), ValueError, ("seqused_k.npy has 3 entries; expected 2",)),
    (dict(block_table=np.array([[3, 5, 0, 9], [2, 6, 1, 4], [5, 1, 4, 2]], np.int32)), ValueError,
     ("block_table.npy", "block_table[0][3] is 9", "num_pages = 9")),
    (dict(seqused_k=np.array([27, 5, 33], np.int32)), ValueError, ("block_table.npy", "seqlen_k = 33")),
    (dict(sinks=np.zeros(3, np.float32)), ValueError, ("sinks.npy must be float32 [Hq] = [4]",)),
    (dict(softcap=-2.0), ValueError, ("--softcap: softcap is -2",)),
    (dict(cu_seqlens_q=np.array([0, 6, 6, 13], np.float32)), TypeError, ("cu_seqlens_q has dtype float32",)),
    (dict(seqused_k=np.array([27, 5, 2 ** 40])), ValueError, ("seqused_k has values outside int32",)),
])
def test_verify_v3_rejects_bad_index_arrays(change, err, words):
    (q, k, v, o, lse, *_), v3 = v3_problem()
    with pytest.raises(err) as e:
        flashcheck.verify(q, k, v, o, lse, **dict(v3, dsinks=None, **change))
    for w in words:
        assert w in str(e.value), str(e.value)


def test_bridge_passes_v3_limits_and_checks_keywords():
    from flashcheck import _bridge
    spec = os.path.join(HERE, "kernels_for_tests.py")
    st, _, msg, handle, info = _bridge.open(spec + ":v3_attention")
    assert st == 0, msg
    assert info[5][5:] == (1, 1, 1, 1)  # supports_varlen, paged, softcap, sinks
    st, _, msg, _, info = _bridge.open(spec + ":raises")
    assert st == 0 and info[5][5:] == (0, 0, 0, 0)  # a kernel that claims nothing: v3 cases are SKIP
    st, _, msg, _, _ = _bridge.open(spec + ":v3_undeclared_kwargs")
    assert st == 1 and "declares varlen=True but its forward takes no cu_seqlens_q" in msg
    with pytest.raises(TypeError, match="unknown declaration"):
        flashcheck.kernel(varlen_q=True)


def test_adapter_refusals():
    """The adapters' decline classification (flashcheck.adapters._refusals, no torch needed): the
    implementation's own checks before launch are declines; a device fault or any other error is not."""
    from flashcheck.adapters._refusals import refusal
    assert refusal("No available kernel. Aborting execution.") == "No available kernel. Aborting execution."
    assert refusal("cutlassF: no kernel found to launch!") == "cutlassF: no kernel found to launch!"
    assert refusal("cutlassB: no kernel found to launch!") is not None
    assert refusal("\nquery is not correctly aligned (strideH)\nmore") == "query is not correctly aligned (strideH)"
    assert refusal("CUDA error: misaligned address\nCUDA kernel errors might be asynchronously reported") is None
    assert refusal("cannot reshape tensor of 0 elements into shape [0, 2, -1]") is None
    assert refusal(RuntimeError("Expected query, key, and value to have the same dtype")) is None
