"""Pure-torch fp64 reference of every op: the executable spec on the Python side.

Each function upcasts its inputs to float64, runs the op as a composite of
``F.pad`` + ``F.conv1d`` and the gating, and returns float64 results on the
inputs' device. Gradients come from ``*_backward`` helpers built on autograd
in fp64. These are for checking, not for speed.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

__all__ = [
    "causal_conv1d",
    "causal_conv1d_backward",
    "b2b_causal_conv1d",
    "b2b_causal_conv1d_backward",
]


def _as_conv_weight(weight: torch.Tensor) -> torch.Tensor:
    # A rank-2 weight (C, K) is the depthwise form of (C, 1, K).
    return weight.unsqueeze(1) if weight.dim() == 2 else weight


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    dilation: int = 1,
    groups: Optional[int] = None,
    activation: Optional[str] = None,
) -> torch.Tensor:
    """y = act(bias + causal correlation of x (B, C_in, L) with weight), in fp64.

    ``groups=None`` infers it from the shapes: C_in / weight.shape[1] (depthwise
    for a rank-2 weight).
    """
    w = _as_conv_weight(weight).double()
    if groups is None:
        groups = x.shape[1] // w.shape[1]
    k = w.shape[-1]
    xp = F.pad(x.double(), ((k - 1) * dilation, 0))
    y = F.conv1d(xp, w, None if bias is None else bias.double(), dilation=dilation, groups=groups)
    if activation == "silu":
        y = F.silu(y)
    elif activation is not None:
        raise ValueError(f"activation: expected None or 'silu', got {activation!r}")
    return y


def causal_conv1d_backward(x, weight, bias, dy, dilation=1, groups=None, activation=None):
    """Returns (dx, dweight, dbias) in fp64 (dbias is None when bias is None)."""
    xd = x.detach().double().requires_grad_(True)
    wd = weight.detach().double().requires_grad_(True)
    bd = None if bias is None else bias.detach().double().requires_grad_(True)
    y = causal_conv1d(xd, wd, bd, dilation, groups, activation)
    inputs = [xd, wd] + ([bd] if bd is not None else [])
    grads = torch.autograd.grad(y, inputs, dy.double())
    return grads[0], grads[1], (grads[2] if bd is not None else None)


def b2b_causal_conv1d(x, weight_proj, weight_mixer, skip_bias):
    """The fused Hyena operator as an unfused fp64 composite; returns (B, D, L)."""
    p = causal_conv1d(x, weight_proj)
    x2, x1, v = p[:, 0::3], p[:, 1::3], p[:, 2::3]
    z = x1 * v
    h = causal_conv1d(z, weight_mixer) + skip_bias.double()[:, None] * z
    return x2 * h


def b2b_causal_conv1d_backward(x, weight_proj, weight_mixer, skip_bias, dout):
    """Returns (dx, dweight_proj, dweight_mixer, dskip_bias) in fp64."""
    inputs = [t.detach().double().requires_grad_(True) for t in (x, weight_proj, weight_mixer, skip_bias)]
    out = b2b_causal_conv1d(*inputs)
    return torch.autograd.grad(out, inputs, dout.double())
