"""Layers (``torch.nn.Module``) over the causalconv ops."""

from .b2b import B2BCausalConv1d
from .conv import CausalConv1d

__all__ = ["B2BCausalConv1d", "CausalConv1d"]
