# numpy stand-in for the parts of torch that probe_cudnn.py uses: a CPU dry run of its decision logic
# (probe_dryrun_test.sh), never a measurement of a kernel
import numpy as np
__version__ = "fake"
float16, bfloat16, float64, float32 = "f16", "bf16", "f64", "f32"
class _C:
    @staticmethod
    def is_available(): return True
    @staticmethod
    def synchronize(): pass
    @staticmethod
    def get_device_name(i): return "numpy"
cuda = _C()
class backends:
    class cudnn:
        @staticmethod
        def version(): return 0
def _rd(a, dt):
    if dt == "f16": return a.astype(np.float16).astype(np.float64)
    if dt == "bf16":
        f = a.astype(np.float32); u = f.view(np.uint32).astype(np.uint64)
        u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    if dt == "f32": return a.astype(np.float32).astype(np.float64)
    return a.astype(np.float64)
class Tensor:
    def __init__(s, a, dt="f64"): s.a = np.asarray(a, dtype=np.float64); s.dtype = dt; s.grad = None
    shape = property(lambda s: s.a.shape)
    def to(s, dt): return Tensor(_rd(s.a, dt), dt)
    def double(s): return Tensor(s.a, "f64")
    def float(s): return Tensor(_rd(s.a, "f32"), "f32")
    def detach(s): return s
    def clone(s): return Tensor(s.a.copy(), s.dtype)
    def contiguous(s): return s
    def requires_grad_(s, b=True): return s
    def __matmul__(s, o): return Tensor(s.a @ o.a)
    def _b(o): return o.a if isinstance(o, Tensor) else o
    def __mul__(s, o): return Tensor(s.a * Tensor._b(o))
    __rmul__ = __mul__
    def __add__(s, o): return Tensor(s.a + Tensor._b(o))
    __radd__ = __add__
    def __sub__(s, o): return Tensor(s.a - Tensor._b(o))
    def __rsub__(s, o): return Tensor(Tensor._b(o) - s.a)
    def __neg__(s): return Tensor(-s.a)
    def __truediv__(s, o): return Tensor(s.a / Tensor._b(o))
    def __lt__(s, o): return Tensor(s.a < Tensor._b(o))
    def __getitem__(s, i): return Tensor(s.a[i], s.dtype)
    def __setitem__(s, i, v): s.a[i] = Tensor._b(v)
    def transpose(s, i, j): return Tensor(np.swapaxes(s.a, i, j))
    def repeat_interleave(s, g, dim): return Tensor(np.repeat(s.a, g, axis=dim))
    def sum(s, dim=None, keepdim=False): return Tensor(s.a.sum(axis=dim, keepdims=keepdim))
    def abs(s): return Tensor(np.abs(s.a))
    def norm(s): return Tensor(np.sqrt((s.a ** 2).sum()))
    def item(s): return float(s.a)
    def reshape(s, *sh): return Tensor(s.a.reshape(sh))
    def flatten(s): return Tensor(s.a.reshape(-1))
    def tolist(s): return s.a.tolist()
    def all(s): return Tensor(np.all(s.a))
    def __bool__(s): return bool(s.a)
    def backward(s, g): _BW[0](g)
_BW = [None]
class Generator:
    def __init__(s, device=None): s.r = np.random.default_rng(0)
    def manual_seed(s, x): s.r = np.random.default_rng(x)
def _sh(a): return a[0] if len(a) == 1 and isinstance(a[0], tuple) else a
def randn(*shape, generator=None, device=None, dtype="f64"):
    r = generator.r if generator else np.random.default_rng(1)
    return Tensor(r.standard_normal(_sh(shape))).to(dtype)
def rand(*shape, generator=None, device=None, dtype="f64"):
    r = generator.r if generator else np.random.default_rng(1)
    return Tensor(r.random(_sh(shape))).to(dtype)
def zeros(*shape, device=None, dtype="f64"): return Tensor(np.zeros(_sh(shape)), dtype)
def zeros_like(x): return Tensor(np.zeros_like(x.a))
def where(c, a, b): return Tensor(np.where(c.a, a.a, b.a))
def cat(ts, d): return Tensor(np.concatenate([t.a for t in ts], axis=d))
def softmax(x, dim): e = np.exp(x.a - x.a.max(axis=dim, keepdims=True)); return Tensor(e / e.sum(axis=dim, keepdims=True))
def isfinite(x): return Tensor(np.isfinite(x.a))
class _Ops:
    class aten:
        @staticmethod
        def _scaled_dot_product_cudnn_attention(*a): raise RuntimeError("fake: no op")
        @staticmethod
        def _scaled_dot_product_efficient_attention(q, k, v, bias, *a):
            return (q, Tensor(np.where(np.isinf(bias.a[:, :, :, 0]), 0.0, 1.0)))
ops = _Ops()
