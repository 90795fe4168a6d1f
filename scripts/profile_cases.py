"""Run a few named cases for profiling: once each for Nsight Compute, or with `--timeline`
under torch.profiler, which shows where the time of a whole eager call goes (host and every
kernel, ours and torch's).

    ncu --clock-control none -k regex:'depthwise|dense|b2b' --section SpeedOfLight \
        python3 scripts/profile_cases.py [bwd] CASE...
    python3 scripts/profile_cases.py --timeline bwd dw-k7 dw-k4

Cases: dw-k4 (bf16 B4 C4096 L8192 K4), dw-k7 (bf16 B1 C4096 L8192 K7), dw-small (bf16 B8 C2048
L2048 K4), dw-cl (bf16 B4 C4096 L8192 K4 channel-last), dw-k33 / dw-k128 (bf16 B1 C4096 L8192 K33 / K128),
dw-k4-odd / dw-k7-odd (as dw-k4 / dw-k7 at L8191: rows that do not start 16-byte aligned),
dw-k65-fp32 (fp32 B1 C4096 L8192 K65),
dense-seed (bf16 B32 C256->256 L8192 K4), dense-seed-fp32, dense-d8 (bf16 B16 C64->64 L16000 K2
dilation 8), b2b-km7 / b2b-km128 / b2b-km256
(bf16 B1 D4096 L8192, Kp 3 / 3 / 4), b2b-km7-odd / b2b-km128-odd (as b2b-km7 / b2b-km128 at
L8191), b2b-km128-long (as b2b-km128 at L131072: the forward's steady state, 89 % of copy against 71 %
at L8192), b2b-km128-fp32 (as b2b-km128 in fp32). A "+bias" suffix on a causal_conv1d case adds a bias (as
the benchmark's cases have), "+silu" the activation (the Mamba block's call: dw-k4+bias+silu).
"""

import sys

import torch

import causalconv

CASES = {  # name: (dtype, batch, c_in, c_out or None for depthwise, length, width, channel_last[, dilation])
    "dw-k4": (torch.bfloat16, 4, 4096, None, 8192, 4, False),
    "dw-k7": (torch.bfloat16, 1, 4096, None, 8192, 7, False),
    "dw-small": (torch.bfloat16, 8, 2048, None, 2048, 4, False),
    "dw-cl": (torch.bfloat16, 4, 4096, None, 8192, 4, True),
    "dw-k33": (torch.bfloat16, 1, 4096, None, 8192, 33, False),
    "dw-k4-odd": (torch.bfloat16, 4, 4096, None, 8191, 4, False),  # rows off the 16-byte boundaries
    "dw-k7-odd": (torch.bfloat16, 1, 4096, None, 8191, 7, False),
    "dw-k128": (torch.bfloat16, 1, 4096, None, 8192, 128, False),
    "dw-k65-fp32": (torch.float32, 1, 4096, None, 8192, 65, False),  # the fp32 wgmma form's fixed cost
    "dense-seed": (torch.bfloat16, 32, 256, 256, 8192, 4, False),
    "dense-seed-fp32": (torch.float32, 32, 256, 256, 8192, 4, False),
    "dense-d8": (torch.bfloat16, 16, 64, 64, 16000, 2, False, 8),  # 0.09 ms of GPU time for 15 us of bytes
}


B2B_CASES = {  # name: (dtype, batch, dim, length, kp, km)
    "b2b-km7": (torch.bfloat16, 1, 4096, 8192, 3, 7),
    "b2b-km7-odd": (torch.bfloat16, 1, 4096, 8191, 3, 7),  # rows off the 16-byte grid (realigned)
    "b2b-km128": (torch.bfloat16, 1, 4096, 8192, 3, 128),
    "b2b-km128-odd": (torch.bfloat16, 1, 4096, 8191, 3, 128),
    "b2b-km128-long": (torch.bfloat16, 1, 4096, 131072, 3, 128),  # 32 tiles a row, against L8192's 2
    "b2b-km256": (torch.bfloat16, 1, 4096, 8192, 4, 256),
    "b2b-km128-fp32": (torch.float32, 1, 4096, 8192, 3, 128),  # issue 3's fp32 row (tf32 split three ways)
}


def make_b2b_case(name: str, backward: bool):
    dtype, batch, dim, length, kp, km = B2B_CASES[name]
    x = torch.randn(batch, 3 * dim, length, device="cuda", dtype=dtype).requires_grad_(backward)
    wp = (torch.randn(3 * dim, kp, device="cuda", dtype=dtype) / kp).requires_grad_(backward)
    wm = (torch.randn(dim, km, device="cuda", dtype=dtype) / km).requires_grad_(backward)
    skip = torch.randn(dim, device="cuda", dtype=dtype).requires_grad_(backward)
    return x, wp, wm, skip


def make_case(name: str, backward: bool):
    base, *suffixes = name.split("+")
    with_bias, activation = "bias" in suffixes, "silu" if "silu" in suffixes else None
    dtype, batch, c_in, c_out, length, width, channel_last, *dilation = CASES[base]
    shape = (batch, length, c_in) if channel_last else (batch, c_in, length)
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    x = (x.transpose(1, 2) if channel_last else x).requires_grad_(backward)
    w_shape = (c_in, width) if c_out is None else (c_out, c_in, width)
    w = (torch.randn(*w_shape, device="cuda", dtype=dtype) / width).requires_grad_(backward)
    bias = torch.randn(w_shape[0], device="cuda", dtype=dtype).requires_grad_(backward) if with_bias else None
    return x, w, bias, {"dilation": dilation[0] if dilation else 1, "activation": activation}


def run(inputs, backward: bool, dy_cache: dict):
    if isinstance(inputs[-1], dict):
        x, w, bias, options = inputs
        y = causalconv.causal_conv1d(x, w, bias, **options)
    else:
        y = causalconv.b2b_causal_conv1d(*inputs)
    if backward:  # autograd.grad, as the benchmark: no gradient accumulates across calls
        leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        # A random gradient made once: all-ones would halve the split products' work (lo = 0)
        # and the tensor cores' power, and its fill kernel would show in the timeline.
        if "dy" not in dy_cache:
            dy_cache["dy"] = torch.randn_like(y)
        torch.autograd.grad(y, leaves, dy_cache["dy"])


def main(args):
    backward, timeline = "bwd" in args, "--timeline" in args
    names = [a for a in args if a not in ("bwd", "--timeline")]
    for name in names:
        inputs = make_b2b_case(name, backward) if name in B2B_CASES else make_case(name, backward)
        dy_cache = {}
        if not timeline:
            run(inputs, backward, dy_cache)
            continue
        for _ in range(3):  # warm-up: workspace allocations, lazy initialisation
            run(inputs, backward, dy_cache)
        torch.cuda.synchronize()
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(5):
                run(inputs, backward, dy_cache)
            torch.cuda.synchronize()
        print(f"==== {name} ({'forward+backward' if backward else 'forward'}), 5 calls")
        print(prof.key_averages().table(sort_by="device_time_total", row_limit=15, max_name_column_width=90))
    torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:])
