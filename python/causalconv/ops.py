"""Public ops, each a torch.library custom op over the C++ core.

The custom ops carry fake (meta) implementations so torch.compile and
torch.export can trace them. All argument checking happens in the core; it
raises ValueError naming the argument, what was expected and what was got.
"""

from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._views import eager_cuda, optional_view, rows_contiguous, scratch, stream_of, view, workspace

__all__ = ["causal_conv1d"]

_ACTIVATIONS = {None: 0, "silu": 1}


def _activation_code(op: str, activation: Optional[str]) -> int:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"{op}: activation: expected None or 'silu', got {activation!r}")
    return _ACTIVATIONS[activation]


def _new_output(x: torch.Tensor, channels: int) -> torch.Tensor:
    """A (B, channels, L) tensor in x's memory format: channel-last stays channel-last.

    For an x that is not 3-D (which the core rejects, naming the problem) it is empty, so
    that the core, and the fake implementation under torch.compile, still get a tensor."""
    if x.dim() != 3:
        return x.new_empty((0, 0, 0))
    batch, _, length = x.shape
    if x.stride(1) == 1 and not x.is_contiguous():
        return x.new_empty((batch, length, channels)).transpose(1, 2)
    return x.new_empty((batch, channels, length))


def _output_channels(weight: torch.Tensor) -> int:
    return weight.shape[0] if weight.dim() >= 1 else 0


def _forward(x, weight, bias, dilation: int, groups: int, activation: int, keep_x: bool = False):
    """The forward kernels, called by the custom op and by the eager route: (y, saved_x).

    keep_x: the forward also writes the copy of x that the backward's weight gradient would
    otherwise make itself (dense Hopper kernels only; as many bytes as x, held until the
    backward); saved_x is that buffer, for _backward_kernels, or None where there is none."""
    y = _new_output(x, _output_channels(weight))
    args = (view(x), view(weight), optional_view(bias), view(y), dilation, groups, activation)
    saved_x = scratch(_C.causal_conv1d_saved_x_bytes(*args), x) if keep_x else None
    saved_view = optional_view(saved_x)
    ws = workspace(_C.causal_conv1d_forward_workspace_bytes(*args, saved_view), x)
    _C.causal_conv1d_forward(*args, ws, stream_of(x), saved_view)
    return y, saved_x


# The gradients a backward call computes, as bits of `wanted`: the core skips a gradient it is
# not given (no weight-gradient pass at all for frozen weights, no dx for an input that needs
# none; dbias only with a bias).
WANT_DX, WANT_DWEIGHT, WANT_DBIAS = 1, 2, 4
WANT_ALL = WANT_DX | WANT_DWEIGHT | WANT_DBIAS


def _wanted_gradients(needs_input_grad, has_bias: bool) -> int:
    needs_x, needs_weight, needs_bias = needs_input_grad[:3]
    return (WANT_DX if needs_x else 0) | (WANT_DWEIGHT if needs_weight else 0) | (
        WANT_DBIAS if needs_bias and has_bias else 0)


def _backward_kernels(x, weight, bias, dy, dilation: int, groups: int, activation: int, wanted: int = WANT_ALL,
                      saved_x: Optional[torch.Tensor] = None):
    """The backward kernels, called by the custom op and by the eager route: (dx, dweight,
    dbias), None for a gradient not in `wanted`. saved_x: what _forward kept of this x."""
    x, dy = _backward_layout(x, weight, dy, dilation, groups)
    dx, dweight, dbias = _new_grads(x, weight, wanted)
    args = (view(x), view(weight), optional_view(bias), view(dy), optional_view(dx), optional_view(dweight),
            optional_view(dbias), dilation, groups, activation)
    saved_view = optional_view(saved_x)
    ws = workspace(_C.causal_conv1d_backward_workspace_bytes(*args, saved_view), x)
    _C.causal_conv1d_backward(*args, ws, stream_of(x), saved_view)
    return dx, dweight, dbias


@torch.library.custom_op("causalconv::causal_conv1d_fwd", mutates_args=())
def _causal_conv1d_fwd(
    x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], dilation: int, groups: int, activation: int
) -> torch.Tensor:
    return _forward(x, weight, bias, dilation, groups, activation)[0]


@_causal_conv1d_fwd.register_fake
def _(x, weight, bias, dilation, groups, activation):
    return _new_output(x, _output_channels(weight))


def _channel_last(t: torch.Tensor) -> torch.Tensor:
    """t as a (B, C, L) view of (B, L, C) storage."""
    return t if t.stride(1) == 1 else t.transpose(1, 2).contiguous().transpose(1, 2)


def _backward_layout(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, dilation: int, groups: int):
    """x and dy as the backward reads them. The core's rule (ops.h): depthwise channel-last data
    with (K-1)*dilation <= MAX_CHANNEL_LAST_BACKWARD_REACH stays channel-last (dy follows x);
    anything else is read as rows with unit stride along L."""
    channels = x.shape[1] if x.dim() == 3 else 0
    depthwise = weight.dim() == 2 or (weight.dim() == 3 and weight.shape[1] == 1 and weight.shape[0] == channels
                                      and groups in (0, channels))
    if (channels > 1 and x.stride(1) == 1 and x.shape[2] > 1 and depthwise and dy.dim() == 3
            and (weight.shape[-1] - 1) * dilation <= _C.MAX_CHANNEL_LAST_BACKWARD_REACH):
        return x, _channel_last(dy)
    return rows_contiguous(x), rows_contiguous(dy)


@torch.library.custom_op("causalconv::causal_conv1d_bwd", mutates_args=())
def _causal_conv1d_bwd(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    dy: torch.Tensor,
    dilation: int,
    groups: int,
    activation: int,
    wanted: int = WANT_ALL,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # A custom op returns tensors: an empty one stands for a gradient not wanted.
    return _placeholders(x, _backward_kernels(x, weight, bias, dy, dilation, groups, activation, wanted))


def _placeholders(x: torch.Tensor, grads):
    return tuple(x.new_empty((0,)) if g is None else g for g in grads)


def _new_grads(x: torch.Tensor, weight: torch.Tensor, wanted: int = WANT_ALL):
    """dx in the layout the kernels read x in (channel-last stays channel-last), dweight, dbias;
    None for those not in `wanted`."""
    return (_new_output(x, x.shape[1]) if wanted & WANT_DX else None,
            torch.empty_like(weight) if wanted & WANT_DWEIGHT else None,
            weight.new_empty((weight.shape[0],)) if wanted & WANT_DBIAS else None)


@_causal_conv1d_bwd.register_fake
def _(x, weight, bias, dy, dilation, groups, activation, wanted=WANT_ALL):
    x, _ = _backward_layout(x, weight, dy, dilation, groups)
    return _placeholders(x, _new_grads(x, weight, wanted))


def _setup_context(ctx, inputs, output):
    x, weight, bias, dilation, groups, activation = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.options = (dilation, groups, activation)


def _gradients(ctx, dy, backward_op):
    x, weight, bias = ctx.saved_tensors[:3]
    wanted = _wanted_gradients(ctx.needs_input_grad, bias is not None)
    dx, dweight, dbias = backward_op(x, weight, bias, dy, *ctx.options, wanted, *ctx.saved_tensors[3:])
    return (dx if wanted & WANT_DX else None, dweight if wanted & WANT_DWEIGHT else None,
            dbias if wanted & WANT_DBIAS and bias is not None else None, None, None, None)


def _backward(ctx, dy):
    return _gradients(ctx, dy, _causal_conv1d_bwd)


_causal_conv1d_fwd.register_autograd(_backward, setup_context=_setup_context)


class _EagerCausalConv1d(torch.autograd.Function):
    """The same kernel calls for eager CUDA data (see _views.eager_cuda): on meta tensors a
    forward+backward through the custom op costs 360 us of host time, through this 175 us.
    When the weight needs a gradient the forward keeps its copy of x for the backward
    (_forward's keep_x), which the custom op route does not do yet."""

    @staticmethod
    def forward(ctx, x, weight, bias, dilation, groups, activation):
        y, saved_x = _forward(x, weight, bias, dilation, groups, activation, keep_x=ctx.needs_input_grad[1])
        ctx.save_for_backward(x, weight, bias, saved_x)
        ctx.options = (dilation, groups, activation)
        return y

    @staticmethod
    def backward(ctx, dy):
        return _gradients(ctx, dy, _backward_kernels)


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    *,
    dilation: int = 1,
    groups: Optional[int] = None,
    activation: Optional[str] = None,
) -> torch.Tensor:
    """Causal 1-D convolution (correlation over a left-padded input), then an optional silu.

    ``y[b,o,t] = bias[o] + sum_{i in group(o)} sum_{k<K} weight[o,i,k] * x[b,i,t-(K-1-k)*dilation]``.

    Args:
        x: (B, C_in, L) CUDA tensor, float32/float16/bfloat16; channel-first or
            channel-last (stride(1) == 1); any other strides work too.
        weight: (C, K) for depthwise, or (C_out, C_in/groups, K); same dtype as x.
        bias: optional (C_out,).
        dilation: spacing of the taps, >= 1.
        groups: None infers C_in / weight.shape[1] (depthwise for a 2-D weight); for a
            3-D weight, 1 is dense and any other divisor of C_in (and C_out) is grouped.
        activation: None or "silu".

    Returns (B, C_out, L) in x's dtype and memory format. Taps are applied
    unflipped: weights from an FFT (true convolution) must be flipped by the caller.
    float32 is computed accurately (fp32-level results, checked against fp64 at
    allclose(1e-4, 1e-4)) whatever ``torch.backends.*.allow_tf32`` says: the dense
    tensor-core path splits each fp32 operand into two bf16 halves.
    Differentiable in x, weight and bias (deterministic weight gradients). The
    depthwise backward reads channel-last data in place while (K-1)*dilation <= 255;
    otherwise x and dy are copied to rows with unit stride along L first.
    """
    code = _activation_code("causal_conv1d", activation)
    if groups is not None and int(groups) < 1:  # 0 would mean "infer" to the core
        raise ValueError(f"causal_conv1d: groups: expected a positive integer or None, got {groups}")
    args = (x, weight, bias, int(dilation), 0 if groups is None else int(groups), code)
    if eager_cuda(x):
        return _EagerCausalConv1d.apply(*args)
    return _causal_conv1d_fwd(*args)
