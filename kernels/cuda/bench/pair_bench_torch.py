"""pair_bench_torch.py: PyTorch SDPA on pair_bench.c's problems (B = 2, H = 16, bf16, Dqk/Dv
192/128 and the equal 128/128, 192/192, S in --s, causal 0/1), each SDPA backend that accepts the
call (flash, efficient, cudnn, math), forward and forward + backward timed apart (backward = the
difference), median of --iters after warm-up. Same flop convention as pair_bench.c. Prints the
backends that decline a problem as `declined`."""
import argparse
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

warnings.filterwarnings("ignore")
ap = argparse.ArgumentParser()
ap.add_argument("--s", default="1024,4096")
ap.add_argument("--iters", type=int, default=20)
args = ap.parse_args()
B, H = 2, 16
backends = [("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]


def timed(fn, iters):
    ts = []
    for i in range(iters + 3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        if i >= 3:
            ts.append(e0.elapsed_time(e1))
    ts.sort()
    return ts[len(ts) // 2]


print(f"{'backend':10s} {'pass':4s} {'Dqk/Dv':8s} {'S':>6s} {'causal':>6s} {'ms':>9s} {'TFLOP/s':>8s}")
for S in [int(x) for x in args.s.split(",")]:
    for dqk, dv in [(192, 128), (128, 128), (192, 192)]:
        for causal in (0, 1):
            q = torch.randn(B, H, S, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(B, H, S, dqk, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            v = torch.randn(B, H, S, dv, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            g = torch.randn(B, H, S, dv, device="cuda", dtype=torch.bfloat16)
            for name, be in backends:
                if name == "math" and S > 2048:
                    continue
                try:
                    with sdpa_kernel(be):
                        out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                        out.backward(g)
                        torch.cuda.synchronize()

                        def fwd():
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))

                        def both():
                            F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)).backward(g)

                        tf = timed(fwd, args.iters)
                        tb = timed(both, args.iters) - tf
                except Exception as ex:  # noqa: BLE001 (a backend that declines the problem)
                    print(f"{name:10s} both {dqk:3d}/{dv:<4d} {S:6d} {causal:6d}  declined: {str(ex).splitlines()[0][:60]}")
                    continue
                for pname, t, fl in (("fwd", tf, dqk + dv), ("bwd", tb, 3 * dqk + 2 * dv)):
                    flops = 2.0 * B * H * S * S * fl * (0.5 if causal else 1.0)
                    print(f"{name:10s} {pname:4s} {dqk:3d}/{dv:<4d} {S:6d} {causal:6d} {t:9.3f} {flops / (t * 1e-3) / 1e12:8.1f}")
            del q, k, v, g
            torch.cuda.empty_cache()
