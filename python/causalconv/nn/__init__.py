"""``nn.Module`` wrappers of the causalconv operators."""

from .conv import CausalConv1d

__all__ = ["CausalConv1d"]
