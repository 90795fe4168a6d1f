"""Depthwise causal_conv1d on CUDA against the fp64 reference."""

import os

import pytest
import torch

import causalconv
from causalconv import _C
from causalconv._views import view
from conftest import (GRADIENT_SUBSETS, assert_close_to_reference, gradients_of_a_subset, requires_cuda,
                      subset_id)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
WIDTHS = [2, 3, 4, 5, 7, 8, 16, 31, 64, 128, 256]


def make_inputs(b, c, length, k, dtype, layout="channel_first", with_bias=False):
    if layout == "channel_last":
        x = torch.randn(b, length, c, device="cuda", dtype=dtype).transpose(1, 2)
    elif layout == "strided":  # every other time step of a wider buffer, plus an odd channel stride
        x = torch.randn(b, 2 * c + 1, 2 * length, device="cuda", dtype=dtype)[:, 1::2, ::2]
    else:
        x = torch.randn(b, c, length, device="cuda", dtype=dtype)
    w = torch.randn(c, k, device="cuda", dtype=dtype) / k**0.5
    bias = torch.randn(c, device="cuda", dtype=dtype) if with_bias else None
    return x, w, bias


def absolute(t):
    return None if t is None else t.abs()


def check(x, w, bias=None, dilation=1, activation=None):
    y = causalconv.causal_conv1d(x, w, bias, dilation=dilation, activation=activation)
    ref = causalconv.reference.causal_conv1d(x, w, bias, dilation, None, activation)
    # The sums' |terms| (silu' is at most 1.1): the scale of their rounding errors when they cancel.
    mag = causalconv.reference.causal_conv1d(x.abs(), w.abs(), absolute(bias), dilation, None, None)
    assert_close_to_reference(y, ref, x.dtype, magnitude=mag)
    return y


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", WIDTHS)
@pytest.mark.parametrize("dilation", [1, 2, 5])
def test_widths_and_dilations(dtype, k, dilation, seeded):
    x, w, _ = make_inputs(2, 7, 1000, k, dtype)
    check(x, w, dilation=dilation)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 4, 31, 256])
def test_awkward_lengths(dtype, k, seeded):
    for length in sorted({1, 2, k - 1, k, 8193}):
        x, w, _ = make_inputs(1, 3, length, k, dtype)
        check(x, w)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["channel_first", "channel_last", "strided"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("activation", [None, "silu"])
def test_layouts_bias_activation(dtype, layout, with_bias, activation, seeded):
    x, w, bias = make_inputs(3, 65, 517, 4, dtype, layout, with_bias)
    y = check(x, w, bias, activation=activation)
    if layout == "channel_last":
        assert y.stride(1) == 1, "channel-last input gives a channel-last output"
    else:
        assert y.is_contiguous()


def forward_into_poisoned(x, w, bias=None, dilation=1, activation=None, channel_last=False, misaligned=False):
    """Runs the core into a NaN-filled output, so unwritten elements fail the check.
    misaligned (channel-last): the output starts one element into its buffer."""
    if channel_last and misaligned:
        b, c, length = x.shape
        y = torch.full((b, length, c + 1), float("nan"), device=x.device, dtype=x.dtype)[..., 1:]
    else:
        y = torch.full_like(x.transpose(1, 2) if channel_last else x, float("nan"))
    y = y.transpose(1, 2) if channel_last else y
    code = {None: 0, "silu": 1}[activation]
    _C.causal_conv1d_forward(view(x), view(w), None if bias is None else view(bias), view(y), dilation, 0, code,
                             None, torch.cuda.current_stream().cuda_stream)
    return y


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7, 8, 9])
@pytest.mark.parametrize("layout", ["channel_first", "channel_last"])
def test_vector_paths(dtype, k, layout, seeded):
    # 16-byte aligned rows (channel-first: L a multiple of 8; channel-last: C a multiple of 8) take the
    # vectorised kernels; the lengths put the row's end at every position of a thread's run of outputs.
    channels = 24 if layout == "channel_last" else 5
    for length in (8, 16, 24, 32, 40, 64, 1000, 4104):
        x, w, bias = make_inputs(2, channels, length, k, dtype, layout, with_bias=True)
        for activation in (None, "silu"):
            y = forward_into_poisoned(x, w, bias, 1, activation, layout == "channel_last")
            ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, activation)
            assert_close_to_reference(y, ref, dtype, f"L={length} activation={activation}")
    if layout == "channel_last":  # the channel-last kernel also takes any width and dilation
        x, w, bias = make_inputs(2, channels, 300, 31, dtype, layout, with_bias=True)
        y = forward_into_poisoned(x, w, bias, 3, "silu", True)
        assert_close_to_reference(y, causalconv.reference.causal_conv1d(x, w, bias, 3, None, "silu"), dtype)


def channel_last_misaligned(b, c, length, k, dtype):
    """Channel-last x starting one element into its buffer (rows not 16-byte aligned)."""
    x = torch.randn(b, length, c + 1, device="cuda", dtype=dtype)[..., 1:].transpose(1, 2)
    w = torch.randn(c, k, device="cuda", dtype=dtype) / k**0.5
    return x, w, torch.randn(c, device="cuda", dtype=dtype)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,dilation", [(2, 1), (3, 1), (4, 1), (7, 1), (8, 1), (9, 1), (16, 1), (64, 1), (256, 1),
                                        (4, 2), (4, 5), (52, 5), (64, 5)])
def test_channel_last_forward_paths(dtype, k, dilation, seeded):
    # The channel-last kernel: 128-channel tiles (C = 200: a partial second tile; C = 3 and 21:
    # not a multiple of the 16-byte vector, element staging), time tiles of 64/128 steps and
    # the causal halo (L = 1, L < K, several tiles), registers for K <= 8 at dilation 1, a
    # tap loop otherwise; reach (K-1)*d up to 255 (52 x 5), beyond it the direct kernel (64 x 5).
    for channels, length in ((200, 300), (3, 1), (21, 5), (136, 129)):
        for misaligned in (False, True):
            if misaligned:
                x, w, bias = channel_last_misaligned(2, channels, length, k, dtype)
            else:
                x, w, bias = make_inputs(2, channels, length, k, dtype, "channel_last", with_bias=True)
            for activation in (None, "silu"):
                y = forward_into_poisoned(x, w, bias, dilation, activation, True, misaligned)
                ref = causalconv.reference.causal_conv1d(x, w, bias, dilation, None, activation)
                assert_close_to_reference(y, ref, dtype, f"C={channels} L={length} misaligned={misaligned} "
                                                         f"activation={activation}")


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("k", [2, 4, 7])
def test_channel_last_forward_tile_walks(dtype, k, seeded):
    # Enough blocks that the pipelined forward (bf16 without silu) walks several time tiles per
    # block, the last range of each sequence one partial tile, and that the lane ring (fp32, and
    # bf16 with silu) has 127 runs per sequence, the last of 5 steps; into a NaN-filled output.
    x, w, bias = make_inputs(2, 1024, 126 * 128 + 5, k, dtype, "channel_last", with_bias=True)
    for activation in (None, "silu"):
        y = forward_into_poisoned(x, w, bias, 1, activation, True)
        ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, activation)
        assert_close_to_reference(y, ref, dtype, f"activation={activation}")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 3, 4])
def test_channel_last_backward_unit_dilation(dtype, k, seeded):
    # K <= 4, dilation 1: the tiled channel-last backward (128 channels x time tiles, per-block
    # partials). Partial channel tiles, C not a multiple of 8, misaligned rows, L = 1, L < K.
    for channels, length in ((200, 300), (21, 77), (8, 1), (136, 2)):
        for activation in (None, "silu"):
            x, w, bias = make_inputs(2, channels, length, k, dtype, "channel_last", with_bias=True)
            check_grads(x, w, bias, 1, activation)
            x, w, bias = channel_last_misaligned(2, channels, length, k, dtype)
            check_grads(x, w, bias, 1, activation)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channel_last_backward_tile_walks(dtype, seeded):
    # Aligned rows: the warp ring's 32 run groups per sequence. Misaligned rows: enough blocks of
    # the unit kernel that each walks 8 time tiles, the weight gradients carried across them.
    for inputs in (make_inputs(2, 1024, 16384, 4, dtype, "channel_last", with_bias=True),
                   channel_last_misaligned(2, 1024, 16384, 4, dtype)):
        for activation in (None, "silu"):
            check_grads(*inputs, 1, activation)


@requires_cuda
@pytest.mark.parametrize("c", [1, 2, 33])
def test_channel_counts_and_batches(c, seeded):
    for b in (1, 8):
        x, w, bias = make_inputs(b, c, 300, 5, torch.bfloat16, with_bias=True)
        check(x, w, bias, dilation=2)


@requires_cuda
def test_weight_with_singleton_middle_dim(seeded):
    x, w, _ = make_inputs(2, 6, 50, 3, torch.float32)
    y2 = causalconv.causal_conv1d(x, w)
    y3 = causalconv.causal_conv1d(x, w.unsqueeze(1))
    assert torch.equal(y2, y3)


@requires_cuda
def test_empty_batch():
    x, w, _ = make_inputs(0, 4, 10, 3, torch.float32)
    assert causalconv.causal_conv1d(x, w).shape == (0, 4, 10)


@requires_cuda
def test_runs_on_the_current_stream(seeded):
    x, w, _ = make_inputs(2, 16, 4096, 4, torch.float16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = causalconv.causal_conv1d(x, w)
    stream.synchronize()
    assert_close_to_reference(y, causalconv.reference.causal_conv1d(x, w), x.dtype)


@requires_cuda
@pytest.mark.parametrize("layout", ["channel_first", "channel_last"])
def test_eager_route_and_custom_op_agree_bitwise(layout, seeded):
    # Eager CUDA calls skip the custom op's dispatch (an autograd.Function over the same kernel
    # calls); torch.compile/export trace the custom op. Both must give the same bits.
    x, w, bias = make_inputs(2, 16, 300, 4, torch.bfloat16, layout, with_bias=True)
    dy = torch.randn_like(x)
    results = []
    for op in (lambda *a: causalconv.causal_conv1d(*a, activation="silu"),
               lambda *a: torch.ops.causalconv.causal_conv1d_fwd(*a, 1, 0, 1)):
        xr, wr, br = (t.detach().requires_grad_(True) for t in (x, w, bias))
        y = op(xr, wr, br)
        results.append((y, *torch.autograd.grad(y, (xr, wr, br), dy)))
    for a, b in zip(*results):
        assert torch.equal(a, b) and a.stride() == b.stride()


@requires_cuda
def test_torch_compile_fullgraph(seeded):
    x, w, bias = make_inputs(2, 8, 64, 4, torch.float32, with_bias=True)

    def layer(x, w, bias):
        return causalconv.causal_conv1d(x * 2.0, w, bias, activation="silu") + 1.0

    compiled = torch.compile(layer, fullgraph=True)
    ref = causalconv.reference.causal_conv1d(x * 2.0, w, bias, 1, None, "silu") + 1.0
    assert_close_to_reference(compiled(x, w, bias), ref, torch.float32)


# ---- backward: dx, dweight, dbias through silu, deterministic ----


def check_grads(x, w, bias=None, dilation=1, activation=None):
    x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    if bias is not None:
        bias = bias.detach().requires_grad_(True)
    y = causalconv.causal_conv1d(x, w, bias, dilation=dilation, activation=activation)
    dy = torch.randn_like(y)
    y.backward(dy)
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, dilation, None, activation)
    mag = causalconv.reference.causal_conv1d_backward(x.abs(), w.abs(), absolute(bias), dy.abs(), dilation, None,
                                                      None)
    assert_close_to_reference(x.grad, ref[0], x.dtype, "dx", magnitude=mag[0])
    assert_close_to_reference(w.grad, ref[1], x.dtype, "dweight", reduction=True, magnitude=mag[1])
    if bias is not None:
        assert_close_to_reference(bias.grad, ref[2], x.dtype, "dbias", reduction=True, magnitude=mag[2])
    return x.grad, w.grad


# Per element: fp32 within a few ulp (below); 16-bit within one ulp of the correctly rounded
# value (the fast __expf's ~2^-17 relative error at |x| = 100 can tip a rounding at most one ulp).
SILU_EXTREME_RTOL = {torch.float32: 1e-6, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [4, 64])
@pytest.mark.parametrize("layout", ["channel_first", "channel_last"])
def test_silu_at_extreme_pre_activations(dtype, k, layout):
    # The identity filter (last tap 1: y = silu(x)), x from -100 to 100: silu's division by
    # 1 + e^-x, whose divisor overflows past x = -88.7 and passes 2^126 from x = -87.3, checked
    # per element, forward and through silu' backward. The forward's silu is checked against silu
    # of the kernel's own pre-activation z (the same call without silu: the same kernel and sums),
    # and z against x per element within the conv's bound (1e-6 of the one term for fp32): the
    # fp32 tf32 form (K >= 16) is off by ~2^-22 of a term, which silu scales by up to |x| = 100.
    c, length = 3, 2048
    x = torch.linspace(-100.0, 100.0, c * length, device="cuda").to(dtype).reshape(1, c, length)
    if layout == "channel_last":
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
        assert x.stride(1) == 1
    x.requires_grad_(True)
    w = torch.zeros(c, k, device="cuda", dtype=dtype)
    w[:, -1] = 1.0
    y = causalconv.causal_conv1d(x, w, activation="silu")
    dy = torch.ones_like(y)
    (dx,) = torch.autograd.grad(y, x, dy)
    xd = x.detach().double()
    z = causalconv.causal_conv1d(x.detach(), w).double()
    torch.testing.assert_close(z, xd, rtol=1e-6 if dtype == torch.float32 else 0.0, atol=0.0)
    ref_y = torch.nn.functional.silu(z)
    s = torch.sigmoid(xd)
    ref_dx = s * (1 + xd * (1 - s))
    # fp32: expf within 1 ulp, the division within 2, the products' roundings: a few ulp of the
    # value, or (where silu falls below 1e-30) nothing that matters. silu' = s (1 + x (1 - s))
    # loses the rounding of s near 1, |x| ulp(1) / 2 (5e-7 at x = 16, numpy's fp32 model of the
    # kernel), and cancels to 0 near x = -1.28: hence its atol. fp16's smallest subnormal is 6e-8.
    rtol = SILU_EXTREME_RTOL[dtype]
    atol = 6e-8 if dtype == torch.float16 else 1e-30
    torch.testing.assert_close(y.double(), ref_y, rtol=rtol, atol=atol)
    torch.testing.assert_close(dx.double(), ref_dx, rtol=rtol, atol=2e-6)
    assert torch.isfinite(y).all() and torch.isfinite(dx).all()


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 3, 4, 7, 16, 31, 128, 256])
@pytest.mark.parametrize("dilation", [1, 2, 5])
def test_grads_widths_and_dilations(dtype, k, dilation, seeded):
    x, w, bias = make_inputs(2, 5, 1000, k, dtype, with_bias=True)
    check_grads(x, w, bias, dilation, "silu")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("activation", [None, "silu"])
def test_grads_bias_activation(dtype, with_bias, activation, seeded):
    x, w, bias = make_inputs(3, 33, 4097, 4, dtype, with_bias=with_bias)
    check_grads(x, w, bias, 1, activation)


@requires_cuda
@pytest.mark.parametrize("k", [2, 4, 64])
def test_grads_awkward_lengths(k, seeded):
    for length in sorted({1, 2, k - 1, k, 2049, 8193}):
        x, w, bias = make_inputs(1, 3, length, k, torch.float32, with_bias=True)
        check_grads(x, w, bias, 1, "silu")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 3, 5, 7, 8])
def test_rows_off_the_16_byte_boundaries(dtype, k, seeded):
    # Odd lengths: contiguous rows start 2, 4, ... bytes past a 16-byte boundary (the window
    # kernels' shifted walk, from the boundary before each row).
    for length in (3, 2051):
        x, w, bias = make_inputs(2, 7, length, k, dtype, with_bias=True)
        check(x, w, bias, 1, "silu")
        check_grads(x, w, bias, 1, "silu")


@requires_cuda
@pytest.mark.parametrize("dtype,batch,channels,length,k", [
    (torch.bfloat16, 1, 8192, 8189, 7),  # 16 spans a row, cut into 2 runs of 8 (the last span short)
    (torch.float32, 2, 8192, 1029, 8),   # 5 spans a row (the last 5 steps long), one run each
])
def test_grads_of_rows_walked_in_runs(dtype, batch, channels, length, k, seeded):
    # Enough rows that the window backward walks several spans per warp (small shapes get one).
    x, w, bias = make_inputs(batch, channels, length, k, dtype, with_bias=True)
    check_grads(x, w, bias, 1, "silu")


@requires_cuda
@pytest.mark.parametrize("k,dilation", [(4, 500), (256, 5), (3, 1000)])
def test_long_reach_splits_by_residue(k, dilation, seeded):
    # (K-1)*d beyond the shared-memory halo: rows are processed per residue class mod d.
    for length in (1, 1999, 3001):
        x, w, bias = make_inputs(2, 3, length, k, torch.float32, with_bias=True)
        check(x, w, bias, dilation, "silu")
        check_grads(x, w, bias, dilation, "silu")


@requires_cuda
@pytest.mark.parametrize("layout", ["channel_last", "strided"])
def test_grads_layouts(layout, seeded):
    x, w, bias = make_inputs(2, 40, 300, 4, torch.bfloat16, layout, with_bias=True)
    check_grads(x, w, bias, 2, "silu")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,dilation", [(2, 1), (4, 1), (4, 3), (7, 1), (31, 2), (128, 1), (256, 1), (128, 3)])
def test_grads_channel_last(dtype, k, dilation, seeded):
    # Channel-last x and dy go straight to the channel-last backward kernel while (K-1)*d <= 255
    # (its dx is channel-last too); beyond that reach (K=128, d=3) the rows path takes them.
    for channels, length in ((33, 129), (64, 1000), (2, 2)):
        x, w, bias = make_inputs(2, channels, length, k, dtype, "channel_last", with_bias=True)
        check_grads(x, w, bias, dilation, "silu")
        if (k - 1) * dilation <= _C.MAX_CHANNEL_LAST_BACKWARD_REACH:  # .grad would be restrided to x's layout
            xr = x.detach().requires_grad_(True)
            y = causalconv.causal_conv1d(xr, w, bias, dilation=dilation, activation="silu")
            (dx,) = torch.autograd.grad(y, xr, torch.ones_like(y))
            assert dx.stride(1) == 1, "channel-last input gives a channel-last dx"


@requires_cuda
@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("k,dilation", [(5, 2), (4, 1)])  # the general and the tiled (K <= 4, d = 1) kernel
def test_channel_last_backward_writes_every_element(activation, k, dilation, seeded):
    x, w, bias = make_inputs(3, 40, 300, k, torch.float32, "channel_last", with_bias=True)
    dy = torch.randn(3, 300, 40, device="cuda").transpose(1, 2)
    dx = torch.full((3, 300, 40), float("nan"), device="cuda").transpose(1, 2)
    dw, db = torch.full_like(w, float("nan")), torch.full_like(bias, float("nan"))
    code = {None: 0, "silu": 1}[activation]
    args = (view(x), view(w), view(bias), view(dy), view(dx), view(dw), view(db), dilation, 0, code)
    nbytes = _C.causal_conv1d_backward_workspace_bytes(*args)
    ws = torch.full((nbytes // 4 + 1,), float("nan"), device="cuda")
    _C.causal_conv1d_backward(*args, view(ws), torch.cuda.current_stream().cuda_stream)
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, dilation, None, activation)
    assert_close_to_reference(dx, ref[0], torch.float32, "dx")
    assert_close_to_reference(dw, ref[1], torch.float32, "dweight", reduction=True)
    assert_close_to_reference(db, ref[2], torch.float32, "dbias", reduction=True)


@requires_cuda
def test_grads_of_a_3d_weight(seeded):
    x, w, _ = make_inputs(2, 6, 100, 3, torch.float32)
    w3 = w.unsqueeze(1).detach().requires_grad_(True)
    causalconv.causal_conv1d(x, w3).sum().backward()
    ref = causalconv.reference.causal_conv1d_backward(x, w3, None, torch.ones(2, 6, 100, device="cuda"))
    assert w3.grad.shape == w3.shape
    assert_close_to_reference(w3.grad, ref[1], torch.float32, "dweight", reduction=True)


@requires_cuda
@pytest.mark.parametrize("layout,channels,length", [("channel_first", 64, 20000), ("channel_last", 96, 3000)])
def test_weight_grads_are_deterministic(layout, channels, length, seeded):
    x, w, bias = make_inputs(4, channels, length, 4, torch.bfloat16, layout, with_bias=True)
    dy = torch.randn_like(x)  # same layout as x
    grads = []
    for _ in range(3):
        xr, wr, br = (t.detach().requires_grad_(True) for t in (x, w, bias))
        causalconv.causal_conv1d(xr, wr, br, activation="silu").backward(dy)
        grads.append((xr.grad, wr.grad, br.grad))
    for later in grads[1:]:
        for a, b in zip(grads[0], later):
            assert torch.equal(a, b), "gradients differ bitwise between identical runs"


@requires_cuda
def test_backward_under_torch_compile(seeded):
    x, w, bias = make_inputs(2, 8, 64, 4, torch.float32, with_bias=True)
    x, w, bias = (t.requires_grad_(True) for t in (x, w, bias))
    compiled = torch.compile(lambda x, w, b: causalconv.causal_conv1d(x, w, b, activation="silu").square().sum(),
                             fullgraph=True)
    compiled(x, w, bias).backward()
    y = causalconv.reference.causal_conv1d(x, w, bias, 1, None, "silu")
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, 2 * y, 1, None, "silu")
    for got, want, name in zip((x.grad, w.grad, bias.grad), ref, ("dx", "dweight", "dbias")):
        assert_close_to_reference(got, want, torch.float32, name, reduction=name != "dx")


# ---- bad inputs: ValueError naming the argument, expected and got; nothing written ----


def test_cpu_tensors_are_rejected():
    x, w = torch.randn(1, 4, 8), torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"causal_conv1d: x: expected a CUDA tensor.*got a tensor on cpu"):
        causalconv.causal_conv1d(x, w)


def test_unknown_activation_is_rejected():
    x, w = torch.randn(1, 4, 8), torch.randn(4, 3)
    with pytest.raises(ValueError, match=r"activation: expected None or 'silu', got 'relu'"):
        causalconv.causal_conv1d(x, w, activation="relu")


BAD_INPUTS = [
    # (description, x, weight, bias, kwargs, message pattern)
    ("x rank", lambda: torch.randn(4, 8), lambda: torch.randn(4, 3), None, {}, r"x: expected 3 dimensions, got 2"),
    ("fp64", lambda: torch.randn(1, 4, 8, dtype=torch.float64), lambda: torch.randn(4, 3, dtype=torch.float64),
     None, {}, r"x: expected float32, float16 or bfloat16.*got float64"),
    ("dtype mismatch", lambda: torch.randn(1, 4, 8), lambda: torch.randn(4, 3, dtype=torch.float16), None, {},
     r"weight: expected float32 \(the dtype of x\), got float16"),
    ("weight channels", lambda: torch.randn(1, 4, 8), lambda: torch.randn(5, 3), None, {},
     r"groups: expected C_in = 4 for a 2-D|weight: expected shape \(C, K\)"),
    ("weight rank", lambda: torch.randn(1, 4, 8), lambda: torch.randn(4, 1, 1, 3), None, {},
     r"weight: expected 2 dimensions .* or 3 dimensions"),
    ("bias shape", lambda: torch.randn(1, 4, 8), lambda: torch.randn(4, 3), lambda: torch.randn(5), {},
     r"bias: expected shape \(C_out\) = \(4,\), got \(5,\)"),
    ("K too small", lambda: torch.randn(1, 4, 8), lambda: torch.randn(4, 1), None, {},
     r"kernel width K, depthwise\): expected a value in \[2, 256\], got 1"),
    ("K too large", lambda: torch.randn(1, 4, 8), lambda: torch.randn(4, 257), None, {},
     r"expected a value in \[2, 256\], got 257"),
    ("dilation", lambda: torch.randn(1, 4, 8), lambda: torch.randn(4, 3), None, {"dilation": 0},
     r"dilation: expected a value in \[1, .*\], got 0"),
    ("groups", lambda: torch.randn(1, 4, 8), lambda: torch.randn(4, 1, 3), None, {"groups": 3},
     r"groups: expected a positive divisor of C_in = 4, got 3"),
]


@requires_cuda
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_value_error(case):
    _, make_x, make_w, make_bias, kwargs, pattern = case
    x, w = make_x().cuda(), make_w().cuda()
    bias = make_bias().cuda() if make_bias else None
    with pytest.raises(ValueError, match=pattern):
        causalconv.causal_conv1d(x, w, bias, **kwargs)


@requires_cuda
def test_rejected_call_writes_nothing():
    x = torch.randn(1, 4, 8, device="cuda")
    w = torch.randn(4, 300, device="cuda")  # K outside the envelope
    y = torch.full((1, 4, 8), float("nan"), device="cuda")
    with pytest.raises(ValueError):
        _C.causal_conv1d_forward(view(x), view(w), None, view(y), 1, 0, 0, None, 0)
    torch.cuda.synchronize()
    assert torch.isnan(y).all()


@requires_cuda
def test_backward_rejects_a_short_workspace():
    x = torch.randn(1, 4, 64, device="cuda")
    w = torch.randn(4, 3, device="cuda")
    dy, dx, dw = torch.randn_like(x), torch.full_like(x, float("nan")), torch.empty_like(w)
    args = (view(x), view(w), None, view(dy), view(dx), view(dw), None, 1, 0, 0)
    assert _C.causal_conv1d_backward_workspace_bytes(*args) > 0
    with pytest.raises(ValueError, match=r"causal_conv1d: workspace: expected at least \d+ bytes, got 0 bytes"):
        _C.causal_conv1d_backward(*args, None, 0)
    torch.cuda.synchronize()
    assert torch.isnan(dx).all(), "a rejected call wrote its output"


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [8, 9, 16, 17, 31, 33, 64, 65, 128, 129, 193, 255, 256])
def test_tensor_core_path(dtype, k, seeded):
    # fp16/bf16, dilation 1, 9 <= K <= 256 with unit time stride take a tensor-core (Toeplitz) kernel;
    # K = 8 is the window kernel's side of the dispatch. From K = 65 on, rows that all start 16-byte
    # aligned (L = 16, 1000) take the wgmma form on the H200 (2-5 blocks of 64: K = 65, 128/129, 193,
    # 255/256), the others the mma.sync form (each template of its 3/5/9/17 blocks of 16 is hit).
    # Lengths: shorter than a chunk of 16, one chunk, one step past it, aligned rows (16, 1000) and
    # unaligned ones (4097).
    for length in (1, 15, 16, 17, 1000, 4097):
        for with_bias, activation in ((False, None), (True, "silu"), (True, None)):
            x, w, bias = make_inputs(2, 3, length, k, dtype, with_bias=with_bias)
            y = forward_into_poisoned(x, w, bias, 1, activation)
            ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, activation)
            assert_close_to_reference(y, ref, dtype, f"L={length} bias={with_bias} activation={activation}")


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tensor_core_path_tile_walks_and_fallbacks(dtype, seeded):
    # Rows longer than 8 tiles (several blocks along a row, each walking tiles), odd channels, batch > 1:
    # of the mma.sync form (tiles of 2048, unaligned rows) and of the wgmma form (tiles of 4096, aligned
    # rows); then the shapes that must stay on the CUDA-core kernels: dilation > 1, a strided time axis,
    # channel-last; and fp32 (the tiled kernel, or the tf32 form when kDepthwiseTf32x3Forward is on).
    for length in (2048 * 9 + 5, 4096 * 9 + 8):
        x, w, bias = make_inputs(2, 5, length, 128, dtype, with_bias=True)
        y = forward_into_poisoned(x, w, bias, 1, "silu")
        ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, "silu")
        assert_close_to_reference(y, ref, dtype, f"L={length}")
    for layout, dilation in (("channel_first", 2), ("strided", 1), ("channel_last", 1)):
        x, w, bias = make_inputs(2, 9, 700, 64, dtype, layout, with_bias=True)
        y = forward_into_poisoned(x, w, bias, dilation, None, layout == "channel_last")
        ref = causalconv.reference.causal_conv1d(x, w, bias, dilation, None, None)
        assert_close_to_reference(y, ref, dtype, f"{layout} dilation={dilation}")
    x, w, bias = make_inputs(1, 3, 1000, 128, torch.float32, with_bias=True)
    y = forward_into_poisoned(x, w, bias, 1, None)
    assert_close_to_reference(y, causalconv.reference.causal_conv1d(x, w, bias, 1, None, None), torch.float32)


@requires_cuda
@pytest.mark.parametrize("k", [9, 16, 17, 33, 64, 65, 128, 129, 255, 256])
def test_fp32_wide_widths(k, seeded):
    # fp32 at dilation 1, 9 <= K <= 256, unit time stride: the tensor-core form on tf32 MMAs split three
    # ways when kDepthwiseTf32x3Forward is on (each Toeplitz block count: 2, 3, 5, 9, 17; from K 65 on
    # Hopper's warpgroup MMA where the rows allow, kDepthwiseWgmmaTf32x3Forward: 3, 4, 5 blocks), else
    # the tiled CUDA-core kernel (its register window); the fp32 bound either way. Lengths: one step, one chunk and one step
    # past it, L < K, aligned rows (1000) and unaligned ones (4097), rows of several tiles walked by
    # one block (8 tiles of 2048 per block) and by several. Then inputs spread over 2^-20 .. 2^20 (the
    # split's lo parts carry each value's low bits, whatever its scale).
    for length in (1, 16, 17, 200, 1000, 4097, 2048 * 9 + 5):
        for with_bias, activation in ((False, None), (True, "silu")):
            x, w, bias = make_inputs(2, 3, length, k, torch.float32, with_bias=with_bias)
            y = forward_into_poisoned(x, w, bias, 1, activation)
            ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, activation)
            mag = causalconv.reference.causal_conv1d(x.abs(), w.abs(), absolute(bias), 1, None, None)
            assert_close_to_reference(y, ref, torch.float32, f"L={length} bias={with_bias} {activation}",
                                      magnitude=mag)
    x, w, _ = make_inputs(1, 4, 3000, k, torch.float32)
    x = x * torch.exp2(torch.randint(-20, 21, x.shape, device="cuda").float())
    y = forward_into_poisoned(x, w)
    mag = causalconv.reference.causal_conv1d(x.abs(), w.abs(), None, 1, None, None)
    assert_close_to_reference(y, causalconv.reference.causal_conv1d(x, w, None, 1, None, None), torch.float32,
                              "inputs over 2^+-20", magnitude=mag)


# The 16-bit tensor-core forms multiply a NaN or infinity by the zero weights of the lags outside
# the filter (0 x inf = NaN), which reaches outputs before it in time, unless the guard
# kToeplitzNonFiniteGuard (src/common/toeplitz_guard.cuh) is on. It is off until the
# H200 has timed it (docs/performance.md, session 29): those cases run only where
# CAUSALCONV_TEST_TOEPLITZ_GUARD=1 says the build has it (a gpu-check variant).
TOEPLITZ_GUARD_ON = os.environ.get("CAUSALCONV_TEST_TOEPLITZ_GUARD") == "1"


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [4, 20, 128, 256])
@pytest.mark.parametrize("length", [3000, 8192])
def test_nonfinite_inputs_stay_causal(dtype, k, length, seeded):
    # NaN in one row, +inf 40 steps later and -inf in another: exactly the outputs whose own terms
    # hold them are NaN / infinite (as the fp64 reference's sums make them), the others finite and
    # within the bound. 8192: the streaming form's rows (L % 64 == 0); 3000: the cp.async forms'.
    if dtype != torch.float32 and k >= 9 and not TOEPLITZ_GUARD_ON:
        pytest.skip("16-bit tensor-core forms without kToeplitzNonFiniteGuard (set CAUSALCONV_TEST_TOEPLITZ_GUARD=1 "
                    "on a build with it on)")
    x, w, bias = make_inputs(2, 3, length, k, dtype, with_bias=True)
    t0 = 2030 if length == 3000 else 4090  # just before a tile boundary (2048, 4096): halos see it
    x[0, 1, t0] = float("nan")
    x[0, 1, t0 + 40] = float("inf")
    x[1, 2, t0] = float("-inf")
    y = forward_into_poisoned(x, w, bias, 1, None).cpu()
    x, w, bias = x.cpu(), w.cpu(), bias.cpu()  # the reference on the CPU: a plain tap sum per output
    ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, None)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), "NaN where the reference has none, or none where it has"
    inf = torch.isinf(ref)
    assert torch.equal(y[inf], ref[inf].to(y.dtype)), "infinite outputs differ"
    finite = torch.isfinite(ref)
    assert torch.isfinite(y[finite]).all()
    mag = causalconv.reference.causal_conv1d(x.abs(), w.abs(), bias.abs(), 1, None, None)
    assert_close_to_reference(y[finite], ref[finite], dtype, "finite outputs", magnitude=mag[finite])


@requires_cuda
def test_fp32_wide_widths_racecheck_shapes(seeded):
    # Small fp32 shapes for compute-sanitizer racecheck (scripts/gpu-check): on the tf32 forms, a
    # block walking 5 tiles (mma.sync's 2048 steps; 3 of the warpgroup form's 4096) on an aligned row
    # (both stages, the split of each thread's own units before the barrier, the output tile in
    # the consumed stage), and rows off the 16-byte boundary of one partial tile.
    for length, c in ((8192 + 8, 1), (203, 2)):
        x, w, bias = make_inputs(1, c, length, 128, torch.float32, with_bias=True)
        y = forward_into_poisoned(x, w, bias, 1, "silu")
        ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, "silu")
        mag = causalconv.reference.causal_conv1d(x.abs(), w.abs(), bias.abs(), 1, None, None)
        assert_close_to_reference(y, ref, torch.float32, f"L={length}", magnitude=mag)


@requires_cuda
def test_fp32_tiled_windows_racecheck_shapes(seeded):
    # Small fp32 shapes for compute-sanitizer racecheck (scripts/gpu-check) on the tiled kernels'
    # register windows (kDepthwiseTiledRegisterWindow): the forward's at K12 (below the tf32 forms),
    # the backward's at K33, each over rows of three 2048-step tiles (the last partial), with silu.
    for k in (12, 33):
        x, w, bias = make_inputs(1, 2, 2048 * 2 + 5, k, torch.float32, with_bias=True)
        check_grads(x, w, bias, 1, "silu")


def rows_in_padded_buffer(b, c, length, pad, dtype, fill):
    """(b, c, length) rows at row stride length + pad inside a buffer whose other elements hold fill."""
    return torch.full((b, c, length + pad), fill, device="cuda", dtype=dtype)[..., :length]


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [9, 33, 128, 256])
def test_tensor_core_rows_off_the_16_byte_boundary(dtype, k, seeded):
    # Rows of odd length in a buffer of row stride L + 8: most start off the 16-byte boundary, each
    # x row as far from one as its y (dy, dx) row. With kToeplitzShiftedRows on (src/common/
    # toeplitz_mma.cuh) the Toeplitz forms walk them from the boundary before them: the pads between
    # the rows hold large finite values on the inputs' side (a walk that reads them unmasked gives
    # wrong outputs) and NaN on the outputs' side (a walk that stores before a row leaves them
    # changed). Then y (dx) at row stride L + 9, whose rows lie at other distances than x's: those
    # rows go by element. Forward for every dtype (fp32: the tf32 form when its flag is on), the
    # backward for 16-bit (the tensor-core backward).
    nan = float("nan")
    for length in (3, 3001, 8191):
        for out_pad in (8, 9):
            x = rows_in_padded_buffer(2, 5, length, 8, dtype, 1e4)
            x.copy_(torch.randn_like(x))
            w = torch.randn(5, k, device="cuda", dtype=dtype) / k**0.5
            bias = torch.randn(5, device="cuda", dtype=dtype)
            y = rows_in_padded_buffer(2, 5, length, out_pad, dtype, nan)
            _C.causal_conv1d_forward(view(x), view(w), view(bias), view(y), 1, 0, 1, None,
                                     torch.cuda.current_stream().cuda_stream)
            what = f"L={length} output row stride L+{out_pad}"
            ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, "silu")
            mag = causalconv.reference.causal_conv1d(x.abs(), w.abs(), bias.abs(), 1, None, None)
            assert_close_to_reference(y, ref, dtype, what, magnitude=mag)  # (fp32: the bound with the terms)
            assert torch.isnan(y.as_strided((2, 5, out_pad), (y.stride(0), y.stride(1), 1), length)).all(), \
                f"{what}: the forward wrote between the rows"
            if dtype == torch.float32:
                continue
            dy = rows_in_padded_buffer(2, 5, length, 8, dtype, 1e4)
            dy.copy_(torch.randn_like(dy))
            dx = rows_in_padded_buffer(2, 5, length, out_pad, dtype, nan)
            dw, db = torch.full_like(w, nan), torch.full_like(bias, nan)
            args = (view(x), view(w), view(bias), view(dy), view(dx), view(dw), view(db), 1, 0, 1)
            ws = torch.full((_C.causal_conv1d_backward_workspace_bytes(*args) // 4 + 1,), nan, device="cuda")
            _C.causal_conv1d_backward(*args, view(ws), torch.cuda.current_stream().cuda_stream)
            ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, 1, None, "silu")
            assert_close_to_reference(dx, ref[0], dtype, f"dx {what}")
            assert_close_to_reference(dw, ref[1], dtype, f"dweight {what}", reduction=True)
            assert_close_to_reference(db, ref[2], dtype, f"dbias {what}", reduction=True)
            assert torch.isnan(dx.as_strided((2, 5, out_pad), (dx.stride(0), dx.stride(1), 1), length)).all(), \
                f"{what}: the backward wrote between the rows"


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [33, 64, 65, 128, 129, 193, 256])
def test_tensor_core_streaming_form(dtype, k, seeded):
    # Rows of whole 64-step chunks (L % 64 == 0) with 16-byte aligned starts take the streaming wgmma
    # form on the H200 from K = 66 (TMA ring, persistent grid; below, the cp.async wgmma form): one chunk; a second tile of one chunk; rows longer
    # than a tile; more than 4 tiles per block of the grid (the ring wraps, ranges cross rows); rows
    # 64 steps apart inside a wider buffer (the maps' channel and batch strides), contiguous output.
    cases = [(2, 3, 64), (2, 5, 4160), (1, 7, 8192), (2, 1024, 4096)]
    for b, c, length in cases:
        for with_bias, activation in ((True, "silu"), (False, None)):
            x, w, bias = make_inputs(b, c, length, k, dtype, with_bias=with_bias)
            y = forward_into_poisoned(x, w, bias, 1, activation)
            ref = causalconv.reference.causal_conv1d(x, w, bias, 1, None, activation)
            assert_close_to_reference(y, ref, dtype, f"B{b} C{c} L={length} bias={with_bias} {activation}")
    x = torch.randn(3, 5, 4160 + 64, device="cuda", dtype=dtype)[:, :, :4160]
    w = torch.randn(5, k, device="cuda", dtype=dtype) / k**0.5
    y = forward_into_poisoned(x, w, None, 1, None)
    assert_close_to_reference(y, causalconv.reference.causal_conv1d(x, w, None, 1, None, None), dtype, "padded rows")


@requires_cuda
@pytest.mark.parametrize("k", [64, 256])
def test_tensor_core_streaming_form_racecheck_shapes(k, seeded):
    # Small shapes of the streaming form for compute-sanitizer racecheck (scripts/gpu-check): blocks of
    # one and of two tiles.
    for b, c, length in ((1, 3, 4160), (1, 2, 64)):
        x, w, bias = make_inputs(b, c, length, k, torch.bfloat16, with_bias=True)
        y = forward_into_poisoned(x, w, bias, 1, "silu")
        assert_close_to_reference(y, causalconv.reference.causal_conv1d(x, w, bias, 1, None, "silu"), torch.bfloat16)


def backward_into_poisoned(x, w, bias, dy, activation, want_dx=True, want_weight_grads=True):
    """Runs the core backward into NaN-filled gradients and a NaN-filled workspace."""
    nan = float("nan")
    dx = torch.full_like(x, nan) if want_dx else None
    dw = torch.full_like(w, nan) if want_weight_grads else None
    db = torch.full_like(bias, nan) if want_weight_grads and bias is not None else None
    code = {None: 0, "silu": 1}[activation]
    args = (view(x), view(w), None if bias is None else view(bias), view(dy), None if dx is None else view(dx),
            None if dw is None else view(dw), None if db is None else view(db), 1, 0, code)
    nbytes = _C.causal_conv1d_backward_workspace_bytes(*args)
    ws = torch.full((nbytes // 4 + 1,), nan, device="cuda")
    _C.causal_conv1d_backward(*args, view(ws), torch.cuda.current_stream().cuda_stream)
    return dx, dw, db


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [8, 9, 16, 31, 33, 64, 65, 128, 129, 255, 256])
def test_tensor_core_backward(dtype, k, seeded):
    # The backward of the tensor-core envelope (16-bit, dilation 1, 9 <= K <= 256, unit time stride)
    # runs on the tensor cores: dx on the transposed Toeplitz blocks, dweight/dbias as per-tile partials
    # of lag-block MMAs; K = 8 is the window kernel's side. Every Toeplitz-block template; lengths below a
    # chunk, below K, 16-byte aligned (1000, 2048) and not (4097), several tiles (2 * 2048 + 5).
    for length in (1, 15, 17, 1000, 2048, 4097, 4101):
        for with_bias, activation in ((False, None), (True, "silu"), (True, None)):
            x, w, bias = make_inputs(2, 3, length, k, dtype, with_bias=with_bias)
            dy = torch.randn_like(x)
            dx, dw, db = backward_into_poisoned(x, w, bias, dy, activation)
            ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, 1, None, activation)
            what = f"L={length} bias={with_bias} activation={activation}"
            assert_close_to_reference(dx, ref[0], dtype, f"dx {what}")
            assert_close_to_reference(dw, ref[1], dtype, f"dweight {what}", reduction=True)
            if with_bias:
                assert_close_to_reference(db, ref[2], dtype, f"dbias {what}", reduction=True)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tensor_core_backward_tile_walks_and_partial_outputs(dtype, seeded):
    # Rows longer than 8 tiles (several blocks along a row, each walking tiles two deep), odd channels,
    # batch > 1; then dx alone and the weight gradients alone (each skips the other's work).
    x, w, bias = make_inputs(2, 5, 2048 * 9 + 5, 128, dtype, with_bias=True)
    check_grads(x, w, bias, 1, "silu")
    x, w, bias = make_inputs(3, 7, 3000, 200, dtype, with_bias=True)
    dy = torch.randn_like(x)
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, 1, None, "silu")
    dx, _, _ = backward_into_poisoned(x, w, bias, dy, "silu", want_weight_grads=False)
    assert_close_to_reference(dx, ref[0], dtype, "dx alone")
    _, dw, db = backward_into_poisoned(x, w, bias, dy, "silu", want_dx=False)
    assert_close_to_reference(dw, ref[1], dtype, "dweight alone", reduction=True)
    assert_close_to_reference(db, ref[2], dtype, "dbias alone", reduction=True)


@requires_cuda
@pytest.mark.parametrize("k", [16, 128, 256])
def test_tensor_core_weight_grads_are_deterministic(k, seeded):
    x, w, bias = make_inputs(4, 64, 20000, k, torch.bfloat16, with_bias=True)
    dy = torch.randn_like(x)
    runs = [backward_into_poisoned(x, w, bias, dy, "silu") for _ in range(3)]
    for later in runs[1:]:
        for a, b in zip(runs[0], later):
            assert torch.equal(a, b), "gradients differ bitwise between identical runs"


# Each backward path with the core asked for a subset of the gradients (frozen weights, an
# input that needs no gradient, no bias gradient): the kernels skip the rest, what they write
# matches the reference.
UNWANTED_GRADIENT_PATHS = {  # name: (B, C, L, K, dtype, layout, dilation, activation)
    "window": (2, 9, 2048, 4, torch.bfloat16, "channel_first", 1, "silu"),
    "tiled": (2, 5, 1000, 5, torch.float32, "channel_first", 2, None),
    "tensor_cores": (2, 3, 3000, 64, torch.bfloat16, "channel_first", 1, "silu"),
    "long_reach": (1, 3, 1999, 4, torch.float32, "channel_first", 500, "silu"),
    "channel_last_unit": (2, 40, 300, 4, torch.bfloat16, "channel_last", 1, "silu"),
    "channel_last": (2, 33, 129, 7, torch.float16, "channel_last", 3, None),
    "strided": (2, 6, 300, 3, torch.float32, "strided", 1, "silu"),
}


@requires_cuda
@pytest.mark.parametrize("needs", GRADIENT_SUBSETS, ids=subset_id)
@pytest.mark.parametrize("path", list(UNWANTED_GRADIENT_PATHS))
def test_unwanted_gradients_are_skipped(path, needs, seeded):
    b, c, length, k, dtype, layout, dilation, activation = UNWANTED_GRADIENT_PATHS[path]
    x, w, bias = make_inputs(b, c, length, k, dtype, layout, with_bias=True)
    dy, grads = gradients_of_a_subset(
        lambda x, w, bias: causalconv.causal_conv1d(x, w, bias, dilation=dilation, activation=activation),
        x, w, bias, needs)
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, dilation, None, activation)
    for i, grad in grads.items():
        assert_close_to_reference(grad, ref[i], dtype, ("dx", "dweight", "dbias")[i], reduction=i > 0)
