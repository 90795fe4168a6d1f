"""The fused Hyena operator ``b2b_causal_conv1d`` as a torch.library custom op.

Forward and backward are each a custom op over the C++ core (with fake
implementations for torch.compile / torch.export); autograd connects them and
gives all four gradients. Argument checking happens in the core, which raises
ValueError naming the argument, what was expected and what was got.
"""

from __future__ import annotations

import torch

from . import _C
from ._views import eager_cuda, rows_contiguous, stream_of, view, workspace

__all__ = ["b2b_causal_conv1d"]


def _out_shape(x: torch.Tensor):
    # A well-formed output even for a malformed x: the core then names x's problem.
    if x.dim() != 3:
        return (0, 0, 0)
    return (x.shape[0], x.shape[1] // 3, x.shape[2])


def _forward(x, weight_proj, weight_mixer, skip_bias) -> torch.Tensor:
    """The forward kernel, called by the custom op and by the eager route."""
    x = rows_contiguous(x)
    out = x.new_empty(_out_shape(x))
    args = (view(x), view(weight_proj), view(weight_mixer), view(skip_bias), view(out))
    ws = workspace(_C.b2b_causal_conv1d_forward_workspace_bytes(*args), x)
    _C.b2b_causal_conv1d_forward(*args, ws, stream_of(x))
    return out


@torch.library.custom_op("causalconv::b2b_causal_conv1d_fwd", mutates_args=())
def _b2b_fwd(x: torch.Tensor, weight_proj: torch.Tensor, weight_mixer: torch.Tensor,
             skip_bias: torch.Tensor) -> torch.Tensor:
    return _forward(x, weight_proj, weight_mixer, skip_bias)


@_b2b_fwd.register_fake
def _(x, weight_proj, weight_mixer, skip_bias):
    return x.new_empty(_out_shape(x))


def _backward_kernels(x, weight_proj, weight_mixer, skip_bias, dout):
    """The backward kernels (all four gradients), called by the custom op and by the eager route."""
    x, dout = rows_contiguous(x), rows_contiguous(dout)
    dx, dwp, dwm, dskip = _new_grads(x, weight_proj, weight_mixer, skip_bias)
    args = (view(x), view(weight_proj), view(weight_mixer), view(skip_bias), view(dout),
            view(dx), view(dwp), view(dwm), view(dskip))
    ws = workspace(_C.b2b_causal_conv1d_backward_workspace_bytes(*args), x)
    _C.b2b_causal_conv1d_backward(*args, ws, stream_of(x))
    return dx, dwp, dwm, dskip


@torch.library.custom_op("causalconv::b2b_causal_conv1d_bwd", mutates_args=())
def _b2b_bwd(x: torch.Tensor, weight_proj: torch.Tensor, weight_mixer: torch.Tensor, skip_bias: torch.Tensor,
             dout: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward_kernels(x, weight_proj, weight_mixer, skip_bias, dout)


def _new_grads(x, weight_proj, weight_mixer, skip_bias):
    return (x.new_empty(x.shape), weight_proj.new_empty(weight_proj.shape),
            weight_mixer.new_empty(weight_mixer.shape), skip_bias.new_empty(skip_bias.shape))


@_b2b_bwd.register_fake
def _(x, weight_proj, weight_mixer, skip_bias, dout):
    return _new_grads(x, weight_proj, weight_mixer, skip_bias)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dout):
    return _b2b_bwd(*ctx.saved_tensors, dout)


_b2b_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerB2B(torch.autograd.Function):
    """The same kernel calls for eager CUDA data, without the custom op's dispatch (see _views.eager_cuda)."""

    @staticmethod
    def forward(ctx, x, weight_proj, weight_mixer, skip_bias):
        ctx.save_for_backward(x, weight_proj, weight_mixer, skip_bias)
        return _forward(x, weight_proj, weight_mixer, skip_bias)

    @staticmethod
    def backward(ctx, dout):
        return _backward_kernels(*ctx.saved_tensors, dout)


def b2b_causal_conv1d(x: torch.Tensor, weight_proj: torch.Tensor, weight_mixer: torch.Tensor,
                      skip_bias: torch.Tensor) -> torch.Tensor:
    """The fused Hyena operator: projection conv, gating, mixer conv with skip, gating.

    ::

        p   = causal_conv1d(x, weight_proj)              # depthwise over the 3*D channels
        x2, x1, v = p[:, 0::3], p[:, 1::3], p[:, 2::3]   # channels are interleaved
        z   = x1 * v
        h   = causal_conv1d(z, weight_mixer) + skip_bias[:, None] * z
        out = x2 * h

    Args:
        x: (B, 3*D, L) CUDA tensor, float32/float16/bfloat16. Channel 3c gates the
            output of channel c; 3c+1 and 3c+2 form its pre-gate product.
        weight_proj: (3*D, Kp), Kp in [2, 32]; same dtype and device as x.
        weight_mixer: (D, Km), Km in [2, 256].
        skip_bias: (D,).

    Returns (B, D, L) in x's dtype. One fused kernel: p, z and h never reach HBM;
    arithmetic is fp32 for every dtype. Differentiable in all four inputs; the
    backward recomputes the intermediates and its weight gradients are bitwise
    deterministic. Taps are applied unflipped (correlation, like ``F.conv1d``):
    filters from an FFT-based (true) convolution must be flipped along their last
    dim by the caller. The kernels read rows with unit stride along L, so x (and
    the output gradient) are copied to contiguous when their time stride is not 1.
    """
    if eager_cuda(x):
        return _EagerB2B.apply(x, weight_proj, weight_mixer, skip_bias)
    return _b2b_fwd(x, weight_proj, weight_mixer, skip_bias)
