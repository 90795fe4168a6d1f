"""Depthwise forward outputs checked against the fp64 reference across filter widths, for runs
under compute-sanitizer, where the sanitizer itself may change results (docs/gpu-machine.md:
under memcheck the depthwise wgmma forward is wrong at K 130-256 and memcheck reports nothing).
Prints one line per dtype and width: how many of the repetitions gave a wrong or non-finite output.

    compute-sanitizer --tool memcheck python3 scripts/memcheck_probe.py [--length L] [K ...]

On the GPU machine, against a variant's build: `gpu-check --variant ... --then
'PYTHONPATH=/tmp/gpu-check-variant-0/site:$PYTHONPATH compute-sanitizer --tool memcheck
python3 scripts/memcheck_probe.py'`.
"""

import argparse

import torch

import causalconv


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--length", type=int, default=256, help="256: aligned rows (the wgmma form from K65)")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("widths", type=int, nargs="*", default=[65, 128, 129, 192, 193, 256])
    args = parser.parse_args()
    for dtype in (torch.float16, torch.bfloat16):
        for k in args.widths:
            wrong = 0
            for rep in range(args.reps):
                torch.manual_seed(1000 + rep)
                x = torch.randn(1, 3, args.length, device="cuda", dtype=dtype)
                w = torch.randn(3, k, device="cuda", dtype=dtype) / k**0.5
                y = causalconv.causal_conv1d(x, w)
                ref = causalconv.reference.causal_conv1d(x, w, None, 1, None, None)
                bad = ~torch.isfinite(y) | ((y.double() - ref).abs() > 0.05 + 0.01 * ref.abs())
                wrong += int(bad.any())
            print(f"{str(dtype).removeprefix('torch.')} L{args.length} K{k}: {wrong} of {args.reps} runs wrong",
                  flush=True)


if __name__ == "__main__":
    main()
