"""Depthwise forward time across filter widths (bf16 B1 D4096, with a bias; --fp32: fp32), or with --b2b the
b2b_causal_conv1d forward's across mixer widths (bf16 B1 D4096, Kp 3; --fp32: fp32), for the choices between
kernels that depend on the width (e.g. the tensor-core forms' thresholds). Prints one line per
width: microseconds, the share of the device-to-device copy rate measured in the same run (bytes:
inputs read once, output written once), and the relative L2 error against the fp64 reference
(a variant that is fast and wrong shows here).

    python3 scripts/sweep_widths.py [--b2b] [--fp32] [--length L] [--batch B] [--backward] [K ...]

--backward times forward + backward instead, against its byte floor at the copy rate: five
activation passes for depthwise (x, y; x, dy, dx), eleven rows a channel for b2b (x's three and
out; x's three, dout, dx's three).

On the GPU machine, against a variant's build: `gpu-check --variant ... --then
'PYTHONPATH=/tmp/gpu-check-variant-0/site:$PYTHONPATH python3 scripts/sweep_widths.py'`.
"""

import argparse

import torch
import triton

import causalconv
from causalconv import reference


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--length", type=int, default=8192, help="8192: aligned rows; 8191: unaligned")
    parser.add_argument("widths", type=int, nargs="*", default=[9, 16, 33, 64, 65, 128, 129, 193, 256])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--backward", action="store_true", help="forward + backward instead")
    parser.add_argument("--b2b", action="store_true", help="b2b_causal_conv1d's mixer widths instead")
    parser.add_argument("--fp32", action="store_true", help="fp32 instead of bf16 (depthwise or --b2b)")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.b2b:
        sweep_b2b(args)
        return
    dtype, name, bound = (torch.float32, "fp32", 1e-5) if args.fp32 else (torch.bfloat16, "bf16", 1e-2)
    x = torch.randn(args.batch, 4096, args.length, device="cuda", dtype=dtype)
    copy_ms = triton.testing.do_bench(lambda: x.clone())
    if args.backward:
        sweep_backward(args, x, copy_ms)
        return
    for width in args.widths:
        w = torch.randn(4096, width, device="cuda", dtype=dtype) / width
        b = torch.randn(4096, device="cuda", dtype=dtype)
        y = causalconv.causal_conv1d(x, w, b).double()
        ref = reference.causal_conv1d(x.double(), w.double(), b.double())
        rel_l2 = ((y - ref).norm() / ref.norm()).item()
        del y, ref
        ms = triton.testing.do_bench(lambda: causalconv.causal_conv1d(x, w, b))
        verdict = "ok" if rel_l2 < bound else "WRONG"
        print(f"{name} B{args.batch} D4096 L{args.length} K{width:3d}: {ms * 1e3:7.1f} us"
              f"  {100 * copy_ms / ms:5.1f} % of copy  rel_l2 {rel_l2:.1e} {verdict}")


def sweep_backward(args, x, copy_ms):
    x = x.detach().requires_grad_()
    dy = torch.randn_like(x)
    for width in args.widths:
        w = (torch.randn(4096, width, device="cuda", dtype=x.dtype) / width).requires_grad_()
        b = torch.randn(4096, device="cuda", dtype=x.dtype, requires_grad=True)
        grads = torch.autograd.grad(causalconv.causal_conv1d(x, w, b), (x, w, b), dy)
        xd, wd, bd = (t.detach().double().requires_grad_() for t in (x, w, b))
        refs = torch.autograd.grad(reference.causal_conv1d(xd, wd, bd), (xd, wd, bd), dy.double())
        rel_l2 = max(((g.double() - r).norm() / r.norm()).item() for g, r in zip(grads, refs))
        del grads, refs, xd, wd, bd
        ms = triton.testing.do_bench(
            lambda: torch.autograd.grad(causalconv.causal_conv1d(x, w, b), (x, w, b), dy))
        verdict = "ok" if rel_l2 < (1e-4 if x.dtype == torch.float32 else 1e-2) else "WRONG"
        name = "fp32" if x.dtype == torch.float32 else "bf16"
        print(f"fwd+bwd {name} B{args.batch} D4096 L{args.length} K{width:3d}: {ms * 1e3:7.1f} us"
              f"  {ms / (copy_ms * 5 / 2):4.2f}x floor  rel_l2 {rel_l2:.1e} {verdict}")



def sweep_b2b(args):
    dim, kp = 4096, 3
    dtype, name, bound = (torch.float32, "fp32", 1e-5) if args.fp32 else (torch.bfloat16, "bf16", 1e-2)
    x = torch.randn(1, 3 * dim, args.length, device="cuda", dtype=dtype)
    copy_ms = triton.testing.do_bench(lambda: x.clone())
    wp = torch.randn(3 * dim, kp, device="cuda", dtype=dtype) / kp
    skip = torch.randn(dim, device="cuda", dtype=dtype)
    if args.backward:
        sweep_b2b_backward(args, x, wp, skip, copy_ms, name)
        return
    for width in args.widths:
        wm = torch.randn(dim, width, device="cuda", dtype=dtype) / width
        out = causalconv.b2b_causal_conv1d(x, wp, wm, skip).double()
        ref = reference.b2b_causal_conv1d(x.double(), wp.double(), wm.double(), skip.double())
        rel_l2 = ((out - ref).norm() / ref.norm()).item()
        del out, ref
        ms = triton.testing.do_bench(lambda: causalconv.b2b_causal_conv1d(x, wp, wm, skip))
        floor_ms = copy_ms * 4 / 6  # x read and out written: 4 rows against the clone's 3 + 3
        verdict = "ok" if rel_l2 < bound else "WRONG"
        print(f"b2b {name} B1 D{dim} L{args.length} Kp{kp} Km{width:3d}: {ms * 1e3:7.1f} us"
              f"  {100 * floor_ms / ms:5.1f} % of copy  rel_l2 {rel_l2:.1e} {verdict}")


def sweep_b2b_backward(args, x, wp, skip, copy_ms, name):
    dim = skip.shape[0]
    x, wp, skip = (t.detach().requires_grad_() for t in (x, wp, skip))
    dout = torch.randn(1, dim, args.length, device="cuda", dtype=x.dtype)
    for width in args.widths:
        wm = (torch.randn(dim, width, device="cuda", dtype=x.dtype) / width).requires_grad_()
        inputs = (x, wp, wm, skip)
        grads = torch.autograd.grad(causalconv.b2b_causal_conv1d(*inputs), inputs, dout)
        refs = reference.b2b_causal_conv1d_backward(*inputs, dout)
        rel_l2 = max(((g.double() - r).norm() / r.norm()).item() for g, r in zip(grads, refs))
        del grads, refs
        ms = triton.testing.do_bench(
            lambda: torch.autograd.grad(causalconv.b2b_causal_conv1d(*inputs), inputs, dout))
        floor_ms = copy_ms * 11 / 6  # 11 rows a channel against the clone's 3 + 3
        verdict = "ok" if rel_l2 < (1e-4 if x.dtype == torch.float32 else 1e-2) else "WRONG"
        print(f"fwd+bwd b2b {name} B1 D{dim} L{args.length} Kp{wp.shape[1]} Km{width:3d}: {ms * 1e3:7.1f} us"
              f"  {ms / floor_ms:4.2f}x floor  rel_l2 {rel_l2:.1e} {verdict}")


if __name__ == "__main__":
    main()
