"""One depthwise forward and backward launch per dtype, for Nsight Compute (ncu).

    ncu --clock-control none --section SpeedOfLight ... python3 scripts/profile_depthwise.py
"""

import sys

import torch

import causalconv

batch, channels, length, width = 4, 4096, 8192, 4
for dtype in (torch.bfloat16, torch.float32):
    x = torch.randn(batch, channels, length, device="cuda", dtype=dtype, requires_grad="bwd" in sys.argv)
    w = torch.randn(channels, width, device="cuda", dtype=dtype, requires_grad="bwd" in sys.argv)
    y = causalconv.causal_conv1d(x, w)
    if "bwd" in sys.argv:
        y.backward(torch.randn_like(y))
torch.cuda.synchronize()
