"""Depthwise forward time across filter widths (bf16 B1 D4096, with a bias), for the choice
between kernels that depends on K (e.g. the tensor-core forms' threshold). Prints one line per
width: microseconds, the share of the device-to-device copy rate measured in the same run, and
the relative L2 error against the fp64 reference (a variant that is fast and wrong shows here).

    python3 scripts/sweep_widths.py [--length L] [K ...]

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
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(1, 4096, args.length, device="cuda", dtype=torch.bfloat16)
    copy_ms = triton.testing.do_bench(lambda: x.clone())
    for width in args.widths:
        w = torch.randn(4096, width, device="cuda", dtype=torch.bfloat16) / width
        b = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
        y = causalconv.causal_conv1d(x, w, b).double()
        ref = reference.causal_conv1d(x.double(), w.double(), b.double())
        rel_l2 = ((y - ref).norm() / ref.norm()).item()
        del y, ref
        ms = triton.testing.do_bench(lambda: causalconv.causal_conv1d(x, w, b))
        verdict = "ok" if rel_l2 < 1e-2 else "WRONG"
        print(f"bf16 B1 D4096 L{args.length} K{width:3d}: {ms * 1e3:7.1f} us  {100 * copy_ms / ms:5.1f} % of copy"
              f"  rel_l2 {rel_l2:.1e} {verdict}")


if __name__ == "__main__":
    main()
