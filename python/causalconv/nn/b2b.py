"""``B2BCausalConv1d``: the fused Hyena operator as a layer."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..b2b import b2b_causal_conv1d

__all__ = ["B2BCausalConv1d"]


class B2BCausalConv1d(nn.Module):
    """``out = x2 * (mixer(x1 * v) + skip_bias * (x1 * v))`` with ``(x2, x1, v)`` the
    interleaved channels of a short causal projection of ``x``; see
    :func:`causalconv.b2b_causal_conv1d`.

    Input ``(B, 3*dim, L)``, output ``(B, dim, L)``, on CUDA, in the parameters' dtype.

    Args:
        dim: D, the number of output channels (the input has 3*D).
        kernel_size_proj: Kp in [2, 32], the projection filter width.
        kernel_size_mixer: Km in [2, 256], the mixer filter width.
        skip_bias: learn the per-channel skip term; when False it is a fixed zero
            (a buffer, not a parameter).

    Initialisation: both filters as ``nn.Conv1d`` initialises a depthwise conv of
    their width, uniform in ``[-1/sqrt(K), 1/sqrt(K)]`` (the output of each conv
    keeps roughly the scale of its input); ``skip_bias`` at zero, so at start the
    mixer alone carries the signal and the skip path is learned from there.
    """

    def __init__(self, dim: int, kernel_size_proj: int, kernel_size_mixer: int, skip_bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.dim = dim
        self.kernel_size_proj = kernel_size_proj
        self.kernel_size_mixer = kernel_size_mixer
        self.weight_proj = nn.Parameter(torch.empty(3 * dim, kernel_size_proj, **factory))
        self.weight_mixer = nn.Parameter(torch.empty(dim, kernel_size_mixer, **factory))
        if skip_bias:
            self.skip_bias = nn.Parameter(torch.empty(dim, **factory))
        else:
            self.register_buffer("skip_bias", torch.empty(dim, **factory), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for w in (self.weight_proj, self.weight_mixer):
                bound = 1.0 / math.sqrt(w.shape[-1])
                w.uniform_(-bound, bound)
            self.skip_bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return b2b_causal_conv1d(x, self.weight_proj, self.weight_mixer, self.skip_bias)

    def extra_repr(self) -> str:
        learned = isinstance(self.skip_bias, nn.Parameter)
        return (f"dim={self.dim}, kernel_size_proj={self.kernel_size_proj}, "
                f"kernel_size_mixer={self.kernel_size_mixer}, skip_bias={learned}")
