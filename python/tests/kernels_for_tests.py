"""Kernels of the py backend tests: exception paths (examples/numpy_attention.py has the real ones)."""
import flashcheck


@flashcheck.kernel(device="cpu", profile="fp32")
def raises(q, k, v, *, out, lse):
    raise ZeroDivisionError("planted failure in the kernel")


@flashcheck.kernel(device="cpu", profile="fp32")
def unsupported(q, k, v, *, out, lse):
    raise flashcheck.Unsupported("this kernel implements nothing")


@flashcheck.kernel(device="cpu", profile="no-such-preset")
def bad_profile(q, k, v, *, out, lse):
    pass


@flashcheck.kernel(device="cpu", profile="fp32", name="noop")
def noop(q, k, v, *, out, lse):
    """Writes nothing: the bridge's cost alone (kernels/py/py_call_bench.c)."""
