"""The pure-torch fp64 reference agrees with the C++ fp64 reference (through the binding)."""

import pytest
import torch

import causalconv
from causalconv import _C
from causalconv._views import optional_view, view
from causalconv.ops import _ACTIVATIONS as ACTIVATION_CODES


def cpp_conv_forward(x, w, bias, dilation, groups, activation):
    c_out = w.shape[0]
    y = torch.full((x.shape[0], c_out, x.shape[2]), float("nan"), dtype=torch.float64)
    _C.reference_causal_conv1d_forward(
        view(x), view(w), optional_view(bias), view(y), dilation, groups or 0, ACTIVATION_CODES[activation]
    )
    return y


def cpp_conv_backward(x, w, bias, dy, dilation, groups, activation):
    dx = torch.full_like(x, float("nan"))
    dw = torch.full_like(w, float("nan"))
    db = None if bias is None else torch.full_like(bias, float("nan"))
    _C.reference_causal_conv1d_backward(
        view(x), view(w), optional_view(bias), view(dy), view(dx), view(dw), optional_view(db),
        dilation, groups or 0, ACTIVATION_CODES[activation],
    )
    return dx, dw, db


# (B, C_in, C_out, L, K, dilation, groups, weight rank)
CONV_SHAPES = [
    (2, 5, 5, 17, 4, 1, None, 2),  # depthwise, 2-D weight
    (1, 3, 3, 1, 4, 2, None, 3),  # depthwise (C, 1, K), L = 1
    (3, 4, 6, 9, 3, 3, 2, 3),  # grouped
    (2, 3, 5, 11, 1, 1, 1, 3),  # dense, K = 1
    (1, 6, 4, 13, 5, 2, 1, 3),  # dense, L < (K-1)*d
]


def make_conv_inputs(shape, with_bias, non_contiguous):
    b, c_in, c_out, length, k, dilation, groups, rank = shape
    x = torch.randn(b, c_in, length, dtype=torch.float64)
    if non_contiguous:  # channel-last storage, same logical shape
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    if rank == 2:
        w = torch.randn(c_out, k, dtype=torch.float64)
    else:  # groups=None means depthwise here, as the front end infers it
        w = torch.randn(c_out, c_in // (groups or c_in), k, dtype=torch.float64)
    bias = torch.randn(c_out, dtype=torch.float64) if with_bias else None
    return x, w, bias, dilation, groups


@pytest.mark.parametrize("shape", CONV_SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("non_contiguous", [False, True])
def test_causal_conv1d_reference_agrees(shape, with_bias, activation, non_contiguous, seeded):
    x, w, bias, dilation, groups = make_conv_inputs(shape, with_bias, non_contiguous)
    expected = causalconv.reference.causal_conv1d(x, w, bias, dilation, groups, activation)
    got = cpp_conv_forward(x, w, bias, dilation, groups, activation)
    assert (got - expected).abs().max().item() < 1e-12

    dy = torch.randn_like(expected)
    ref_grads = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, dilation, groups, activation)
    cpp_grads = cpp_conv_backward(x, w, bias, dy, dilation, groups, activation)
    for name, r, c in zip(("dx", "dweight", "dbias"), ref_grads, cpp_grads):
        if r is None:
            assert c is None
            continue
        assert (r - c).abs().max().item() < 1e-11, name


@pytest.mark.parametrize("b,d,length,kp,km", [(1, 1, 1, 2, 2), (2, 3, 20, 3, 7), (1, 2, 5, 4, 9), (2, 4, 33, 2, 32)])
def test_b2b_reference_agrees(b, d, length, kp, km, seeded):
    x = torch.randn(b, 3 * d, length, dtype=torch.float64)
    wp = torch.randn(3 * d, kp, dtype=torch.float64)
    wm = torch.randn(d, km, dtype=torch.float64)
    skip = torch.randn(d, dtype=torch.float64)
    expected = causalconv.reference.b2b_causal_conv1d(x, wp, wm, skip)
    out = torch.full_like(expected, float("nan"))
    _C.reference_b2b_causal_conv1d_forward(view(x), view(wp), view(wm), view(skip), view(out))
    assert (out - expected).abs().max().item() < 1e-12

    dout = torch.randn_like(expected)
    ref_grads = causalconv.reference.b2b_causal_conv1d_backward(x, wp, wm, skip, dout)
    cpp_grads = [torch.full_like(t, float("nan")) for t in (x, wp, wm, skip)]
    _C.reference_b2b_causal_conv1d_backward(view(x), view(wp), view(wm), view(skip), view(dout), *map(view, cpp_grads))
    for name, r, c in zip(("dx", "dweight_proj", "dweight_mixer", "dskip_bias"), ref_grads, cpp_grads):
        assert (r - c).abs().max().item() < 1e-11, name


def test_reference_rejects_float32():
    x = torch.randn(1, 2, 5)
    w = torch.randn(2, 3)
    y = torch.empty(1, 2, 5)
    with pytest.raises(ValueError, match=r"causal_conv1d: x: expected float64 for the reference, got float32"):
        _C.reference_causal_conv1d_forward(view(x), view(w), None, view(y), 1, 0, 0)
