"""Launch a few named cases once each (forward, and backward with `bwd`), for Nsight Compute.

    ncu --clock-control none -k regex:'depthwise|dense' --section SpeedOfLight \
        python3 scripts/profile_cases.py [bwd] CASE...

Cases: dw-k4 (bf16 B4 C4096 L8192 K4), dw-k7 (bf16 B1 C4096 L8192 K7), dw-cl (bf16 B4 C4096
L8192 K4 channel-last), dw-k128 (bf16 B1 C4096 L8192 K128), dense-seed (bf16 B32 C256->256
L8192 K4), dense-seed-fp32.
"""

import sys

import torch

import causalconv

CASES = {  # name: (dtype, batch, c_in, c_out or None for depthwise, length, width, channel_last)
    "dw-k4": (torch.bfloat16, 4, 4096, None, 8192, 4, False),
    "dw-k7": (torch.bfloat16, 1, 4096, None, 8192, 7, False),
    "dw-cl": (torch.bfloat16, 4, 4096, None, 8192, 4, True),
    "dw-k128": (torch.bfloat16, 1, 4096, None, 8192, 128, False),
    "dense-seed": (torch.bfloat16, 32, 256, 256, 8192, 4, False),
    "dense-seed-fp32": (torch.float32, 32, 256, 256, 8192, 4, False),
}

backward = "bwd" in sys.argv
for name in (a for a in sys.argv[1:] if a != "bwd"):
    dtype, batch, c_in, c_out, length, width, channel_last = CASES[name]
    shape = (batch, length, c_in) if channel_last else (batch, c_in, length)
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    x = (x.transpose(1, 2) if channel_last else x).requires_grad_(backward)
    w_shape = (c_in, width) if c_out is None else (c_out, c_in, width)
    w = (torch.randn(*w_shape, device="cuda", dtype=dtype) / width).requires_grad_(backward)
    y = causalconv.causal_conv1d(x, w)
    if backward:
        y.backward(torch.randn_like(y))
torch.cuda.synchronize()
