"""``CausalConv1d``: a drop-in for ``nn.Conv1d`` with a causal left pad, on causalconv's kernels."""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import nn

from ..ops import causal_conv1d

__all__ = ["CausalConv1d"]


class CausalConv1d(nn.Module):
    """Causal 1-D convolution: ``nn.Conv1d`` over an input left-padded by ``(K-1)*dilation``.

    ``CausalConv1d(C_in, C_out, K, dilation=d, groups=g)(x)`` equals
    ``nn.Conv1d(C_in, C_out, K, dilation=d, groups=g)(F.pad(x, ((K-1)*d, 0)))`` (then
    ``silu`` when ``activation="silu"``): output length = input length, and output step t
    sees inputs up to t only.

    The parameters are those of ``nn.Conv1d`` — ``weight`` of shape
    ``(out_channels, in_channels // groups, kernel_size)`` and ``bias`` of shape
    ``(out_channels,)`` (or None) — with the same names, shapes and initialisation, so
    ``load_state_dict`` takes a ``nn.Conv1d``'s state dict unchanged.

    Input ``(B, in_channels, L)`` on a CUDA device, in float32, float16 or bfloat16 (the
    dtype of the parameters). Forward and backward run on causalconv's CUDA kernels.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1,
                 groups: int = 1, bias: bool = True, activation: Optional[str] = None,
                 device=None, dtype=None) -> None:
        super().__init__()
        for name, value in (("in_channels", in_channels), ("out_channels", out_channels)):
            if value % groups != 0:
                raise ValueError(f"CausalConv1d: {name}: expected a multiple of groups = {groups}, got {value}")
        if activation not in (None, "silu"):
            raise ValueError(f"CausalConv1d: activation: expected None or 'silu', got {activation!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = (kernel_size,)  # tuples, like nn.Conv1d
        self.dilation = (dilation,)
        self.groups = groups
        self.activation = activation
        factory = {"device": device, "dtype": dtype}
        self.weight = nn.Parameter(torch.empty((out_channels, in_channels // groups, kernel_size), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_channels, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # nn.Conv1d's initialisation (torch.nn.modules.conv._ConvNd.reset_parameters).
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                nn.init.uniform_(self.bias, -bound, bound)

    @classmethod
    def from_conv1d(cls, conv: nn.Conv1d, activation: Optional[str] = None) -> "CausalConv1d":
        """A CausalConv1d with ``conv``'s hyperparameters, device, dtype and a copy of its weights.

        For a ``nn.Conv1d`` used causally: on an input left-padded by ``(K-1)*dilation``
        (its own ``padding`` is ignored; the causal pad replaces it). Stride must be 1.
        """
        if conv.stride != (1,):
            raise ValueError(f"CausalConv1d.from_conv1d: conv.stride: expected (1,), got {conv.stride}")
        layer = cls(conv.in_channels, conv.out_channels, conv.kernel_size[0], dilation=conv.dilation[0],
                    groups=conv.groups, bias=conv.bias is not None, activation=activation,
                    device=conv.weight.device, dtype=conv.weight.dtype)
        layer.load_state_dict(conv.state_dict())
        return layer

    @property
    def causal_padding(self) -> int:
        """Steps of zeros the operator implicitly puts before the input: (K-1)*dilation."""
        return (self.kernel_size[0] - 1) * self.dilation[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return causal_conv1d(x, self.weight, self.bias, dilation=self.dilation[0], groups=self.groups,
                             activation=self.activation)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"dilation={self.dilation}")
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.activation is not None:
            s += f", activation={self.activation!r}"
        return s
