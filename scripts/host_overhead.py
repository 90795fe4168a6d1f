"""Host (CPU) time of one eager call: what small shapes pay whatever the kernels do.

Shapes here are tiny (a few microseconds of GPU work a call), so the GPU never paces the
host: the time is the front end's, torch's and the driver's. For each op, forward and
forward+backward: the host microseconds per call of ours, Dao's (when importable) and
PyTorch's eager composite, then a cProfile of ours sorted by own time, then the pieces of
our front end timed alone.

    python3 scripts/host_overhead.py [--profile]
"""

import cProfile
import pstats
import sys
import time

import torch
import torch.nn.functional as F

import causalconv
from causalconv import _C, _views

CALLS = 2000


def host_us(fn, calls=CALLS):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def forward_backward(fn, inputs, dout):
    return lambda: torch.autograd.grad(fn(*inputs), inputs, dout)


def depthwise_runners():
    x = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(64, 4, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dout = torch.randn_like(x)
    fns = {"ours": lambda x, w, b: causalconv.causal_conv1d(x, w, b, activation="silu"),
           "torch": lambda x, w, b: F.silu(F.conv1d(F.pad(x, (3, 0)), w.unsqueeze(1), b, groups=64))}
    try:
        from causal_conv1d import causal_conv1d_fn
        fns["dao"] = lambda x, w, b: causal_conv1d_fn(x, w, b, activation="silu")
    except (ImportError, OSError):
        pass
    return "depthwise bf16 B2 C64 L256 K4 bias silu", fns, (x, w, b), dout


def dense_runners():
    x = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(64, 64, 4, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    fns = {"ours": lambda x, w, b: causalconv.causal_conv1d(x, w, b),
           "torch": lambda x, w, b: F.conv1d(F.pad(x, (3, 0)), w, b)}
    return "dense bf16 B2 C64->64 L256 K4 bias", fns, (x, w, b), torch.randn_like(x)


def b2b_runners():
    d = 64
    x = torch.randn(1, 3 * d, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    wp = torch.randn(3 * d, 3, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    wm = torch.randn(d, 7, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    skip = torch.randn(d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    fns = {"ours": causalconv.b2b_causal_conv1d}
    return "b2b bf16 B1 D64 L256 Kp3 Km7", fns, (x, wp, wm, skip), torch.randn(1, d, 256, device="cuda",
                                                                             dtype=torch.bfloat16)


def pieces():
    x = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 4, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    args = (_views.view(x), _views.view(w), None, _views.view(y), 1, 0, 0)
    stream = _views.stream_of(x)

    class Nothing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)

        @staticmethod
        def backward(ctx, g):
            return g

    xg = x.detach().requires_grad_(True)
    timed = {
        "view(x)": lambda: _views.view(x),
        "stream_of(x)": lambda: _views.stream_of(x),
        "torch.cuda.current_stream(x.device).cuda_stream": lambda: torch.cuda.current_stream(x.device).cuda_stream,
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "x.new_empty(shape)": lambda: x.new_empty((2, 64, 256)),
        "forward_workspace_bytes": lambda: _C.causal_conv1d_forward_workspace_bytes(*args),
        "_C.causal_conv1d_forward (views ready)": lambda: _C.causal_conv1d_forward(*args, None, stream),
        "Function.apply of a no-op": lambda: Nothing.apply(xg),
        "no-op apply + autograd.grad": lambda: torch.autograd.grad(Nothing.apply(xg), [xg], x),
    }
    print("\n## pieces (host us per call)")
    for name, fn in timed.items():
        print(f"{host_us(fn):8.2f}  {name}")


def main(profile: bool):
    print(f"# host microseconds per call ({CALLS} calls enqueued back to back, tiny shapes)")
    for make in (depthwise_runners, dense_runners, b2b_runners):
        title, fns, inputs, dout = make()
        print(f"\n## {title}")
        for name, fn in fns.items():
            plain = [t.detach() for t in inputs]
            fwd = host_us(lambda: fn(*plain))
            both = host_us(forward_backward(fn, inputs, dout))
            print(f"{name:>6}: forward {fwd:7.1f}   forward+backward {both:7.1f}")
        if profile:
            profiler = cProfile.Profile()
            run = forward_backward(fns["ours"], inputs, dout)
            profiler.enable()
            for _ in range(500):
                run()
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(14)
    pieces()


if __name__ == "__main__":
    main("--profile" in sys.argv[1:])
