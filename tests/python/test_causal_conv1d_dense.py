"""Dense and grouped causal_conv1d on CUDA against the fp64 reference, and nn.CausalConv1d."""

import math
import os

import pytest
import torch
import torch.nn.functional as F

import causalconv
from causalconv import _C
from causalconv._views import view
from causalconv.nn import CausalConv1d
from conftest import GRADIENT_SUBSETS, gradients_of_a_subset, rel_l2, requires_cuda, subset_id

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# fp32: the tensor-core path multiplies bf16 hi/lo halves of each operand (~2^-17
# relative per product), so 2e-5 rather than pure-FMA 1e-6; the issue's own criterion,
# allclose(atol=1e-4, rtol=1e-4), is checked on top. Weight gradients sum B*L terms.
BOUND = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
REDUCTION_BOUND = {torch.float32: 3e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}

# (C_in, C_out, groups) for each kind of grouping; none is a tile multiple.
CHANNELS = {"dense": (3, 5, 1), "groups2": (6, 10, 2), "groupsC": (6, 12, 6)}

under_sanitizer = "sanitizer" in os.environ.get("CUDA_INJECTION64_PATH", "").lower()


def assert_close(out, ref, dtype, what="output", reduction=False, allclose_fp32=True, magnitude=None):
    """Relative L2 error within the dtype's bound, scaled by ||ref|| + ||magnitude|| (magnitude: the
    reference on |inputs|, each element's sum of |terms|, which a cancelling sum hides from ||ref||)."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{what}: non-finite values (unwritten or overflowed elements)"
    err = rel_l2(out, ref)
    bound = (REDUCTION_BOUND if reduction else BOUND)[dtype]
    diff = out.double() - ref.double()
    max_abs = diff.abs().max().item() if out.numel() else 0.0
    scale = ref.double().norm().item() + (magnitude.double().norm().item() if magnitude is not None else 0.0)
    assert diff.norm().item() <= bound * scale, \
        f"{what}: relative L2 error {err:.3e} > {bound:.0e} (max abs error {max_abs:.3e})"
    if dtype == torch.float32 and allclose_fp32 and not reduction:
        assert torch.allclose(out.double(), ref.double(), atol=1e-4, rtol=1e-4), \
            f"{what}: fails allclose(atol=1e-4, rtol=1e-4), max abs error {max_abs:.3e}"


def make_inputs(b, c_in, c_out, length, k, groups, dtype, with_bias=True, layout="contiguous"):
    if layout == "channel_last":
        x = torch.randn(b, length, c_in, device="cuda", dtype=dtype).transpose(1, 2)
    elif layout == "strided":  # every other time step of a wider buffer, odd channel stride
        x = torch.randn(b, 2 * c_in + 1, 2 * length, device="cuda", dtype=dtype)[:, 1::2, ::2]
    else:
        x = torch.randn(b, c_in, length, device="cuda", dtype=dtype)
    fan_in = (c_in // groups) * k
    w = (torch.randn(c_out, c_in // groups, k, device="cuda") / math.sqrt(fan_in)).to(dtype)
    bias = torch.randn(c_out, device="cuda", dtype=dtype) if with_bias else None
    return x, w, bias


def check_forward(x, w, bias, dilation, groups, activation=None):
    y = causalconv.causal_conv1d(x, w, bias, dilation=dilation, groups=groups, activation=activation)
    ref = causalconv.reference.causal_conv1d(x, w, bias, dilation, groups, activation)
    # The sums' |terms| (silu' is at most 1.1): the scale of their rounding errors when they cancel.
    mag = causalconv.reference.causal_conv1d(x.abs(), w.abs(), None if bias is None else bias.abs(), dilation,
                                             groups, None)
    assert_close(y, ref, x.dtype, magnitude=mag)
    return y


def check_grads(x, w, bias, dilation, groups, activation=None, dy=None):
    x, w = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    if bias is not None:
        bias = bias.detach().requires_grad_(True)
    y = causalconv.causal_conv1d(x, w, bias, dilation=dilation, groups=groups, activation=activation)
    dy = torch.randn_like(y) if dy is None else dy
    y.backward(dy)
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, dilation, groups, activation)
    mag = causalconv.reference.causal_conv1d_backward(x.abs(), w.abs(), None if bias is None else bias.abs(),
                                                      dy.abs(), dilation, groups, None)
    assert_close(x.grad, ref[0], x.dtype, "dx", allclose_fp32=False, magnitude=mag[0])
    assert_close(w.grad, ref[1], x.dtype, "dweight", reduction=True, magnitude=mag[1])
    if bias is not None:
        assert_close(bias.grad, ref[2], x.dtype, "dbias", reduction=True, magnitude=mag[2])
    return x.grad, w.grad


# ---- forward and backward against the fp64 reference ----


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", list(CHANNELS))
@pytest.mark.parametrize("k", [1, 2, 4, 7, 16])
@pytest.mark.parametrize("dilation", [1, 3])
def test_forward_matrix(dtype, kind, k, dilation, seeded):
    c_in, c_out, groups = CHANNELS[kind]
    for length in (1, 5, 8193):
        x, w, bias = make_inputs(2, c_in, c_out, length, k, groups, dtype)
        check_forward(x, w, bias, dilation, groups, activation="silu" if length == 5 else None)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", list(CHANNELS))
@pytest.mark.parametrize("k", [1, 2, 4, 7, 16])
def test_grads_matrix(dtype, kind, k, seeded):
    c_in, c_out, groups = CHANNELS[kind]
    for length, dilation, activation in ((1, 1, None), (5, 3, "silu"), (8193, 3, None), (700, 1, "silu")):
        x, w, bias = make_inputs(1, c_in, c_out, length, k, groups, dtype)
        check_grads(x, w, bias, dilation, groups, activation)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_channels_past_a_tile(dtype, seeded):
    # 257 -> 129: every channel tile has a ragged edge; batch 1.
    x, w, bias = make_inputs(1, 257, 129, 1000, 4, 1, dtype)
    check_forward(x, w, bias, 1, 1, "silu")
    check_grads(x, w, bias, 1, 1, "silu")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 64, 64, 4096, 4, 1, 1), (1, 128, 96, 1500, 3, 2, 1),
                                   (2, 32, 160, 777, 2, 8, 1), (1, 64, 64, 300, 64, 1, 1),
                                   (1, 128, 128, 1000, 4, 1, 2), (3, 16, 16, 1025, 1, 1, 1)],
                         ids=lambda s: "B{}_{}to{}_L{}_K{}_d{}_g{}".format(*s))
def test_tensor_core_shapes(dtype, shape, seeded):
    # Channel counts that are multiples of 16/32 (the tensor-core forward, dx and weight
    # gradients), ragged time tiles; the last shape (16 outputs) takes the CUDA cores.
    b, c_in, c_out, length, k, dilation, groups = shape
    x, w, bias = make_inputs(b, c_in, c_out, length, k, groups, dtype)
    check_forward(x, w, bias, dilation, groups)
    check_forward(x, w, None, dilation, groups, "silu")
    check_grads(x, w, bias, dilation, groups)
    check_grads(x, w, bias, dilation, groups, "silu")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 96, 80, 2056, 16, 3, 2), (1, 256, 256, 8, 4, 1, 1),
                                   (2, 64, 320, 520, 7, 1, 1), (1, 512, 64, 256, 2, 5, 1),
                                   (2, 160, 96, 4104, 3, 700, 1)],
                         ids=lambda s: "B{}_{}to{}_L{}_K{}_d{}_g{}".format(*s))
def test_hopper_shapes(dtype, shape, seeded):
    # Shapes the Hopper (TMA + wgmma) forward and dx take on an H100/H200 (>= 32 channels per group).
    # Ragged on purpose: 48 source channels per group (a 64-channel box reaching past its group),
    # 40/80/96/320 outputs (partial 128-row tiles), L not a multiple of the 256-step tile, L = 8
    # (one partial tile), a reach (K-1)*d of 1400 steps (whole tiles of causal zeros).
    b, c_in, c_out, length, k, dilation, groups = shape
    x, w, bias = make_inputs(b, c_in, c_out, length, k, groups, dtype)
    check_forward(x, w, bias, dilation, groups)
    check_forward(x, w, None, dilation, groups, "silu")
    # Channel-first x is staged channel-last first; 16-bit channel-last x with aligned rows is
    # read in place, other channel-last x (an odd channel offset) staged again.
    x_cl = x.transpose(1, 2).contiguous().transpose(1, 2)
    check_forward(x_cl, w, bias, dilation, groups)
    wide = torch.randn(b, length, c_in + 1, device="cuda", dtype=dtype)
    check_forward(wide[:, :, 1:].transpose(1, 2), w, bias, dilation, groups)
    # dx: the transposed convolution of dy (16-bit) or of the fp32 gradient through silu.
    check_grads(x, w, bias, dilation, groups)
    check_grads(x, w, bias, dilation, groups, "silu")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("groups", [1, 2])
def test_hopper_rows_with_a_padded_pitch(dtype, groups, seeded):
    # Rows whose pitch is a whole 16 bytes but not their length (L = 517 in a 536-step buffer):
    # the Hopper kernels read them where they lie, through the pitch, with zeros past L.
    b, c_in, c_out, length = 2, 96, 136, 517
    x = torch.randn(b, c_in, 536, device="cuda", dtype=dtype)[:, :, :length]
    _, w, bias = make_inputs(b, c_in, c_out, length, 4, groups, dtype)
    check_forward(x, w, bias, 2, groups)
    check_grads(x, w, bias, 2, groups)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["channel_last", "padded_pitch", "odd_offset"])
def test_hopper_gradients_for_any_dy_layout(dtype, layout, seeded):
    # dy as autograd may hand it over: channel-last (the front end copies it to rows), rows inside
    # a wider buffer, rows off 16 bytes. The Hopper weight gradient reads the rows by TMA, in
    # place where time is innermost and the rows 16-byte aligned, else staged (stage_rows).
    b, c_in, c_out, length = 2, 96, 136, 517
    x, w, bias = make_inputs(b, c_in, c_out, length, 4, 1, dtype)
    if layout == "channel_last":
        dy = torch.randn(b, length, c_out, device="cuda", dtype=dtype).transpose(1, 2)
    elif layout == "padded_pitch":
        dy = torch.randn(b, c_out, 536, device="cuda", dtype=dtype)[:, :, :length]
    else:
        dy = torch.randn(b, c_out, length + 1, device="cuda", dtype=dtype)[:, :, 1:]
    check_grads(x, w, bias, 2, 1, dy=dy)


@requires_cuda
def test_hopper_racecheck_shapes(seeded):
    # Small shapes through each Hopper kernel for compute-sanitizer racecheck (scripts/gpu-check):
    # the convolution from rows (16-bit; fp32 from K = 4, as here), from staged channel-last
    # x (L not a multiple of 8), dx, and the weight gradients (two source chunks, two taps chunks).
    for dtype in DTYPES:
        for length in (520, 517):
            x, w, bias = make_inputs(1, 96, 136, length, 5, 1, dtype)
            check_forward(x, w, bias, 1, 1)
            check_grads(x, w, bias, 1, 1)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k,dilation", [(64, 1), (64, 5), (3, 3000), (2, 100000)])
def test_widest_kernels_and_long_reach(dtype, k, dilation, seeded):
    for length in (1, 63, 64, 2000):
        x, w, bias = make_inputs(2, 12, 8, length, k, 4, dtype)
        check_forward(x, w, bias, dilation, 4, "silu")
    x, w, bias = make_inputs(2, 12, 8, 2000, k, 2, dtype)
    check_grads(x, w, bias, dilation, 2, "silu")


@requires_cuda
@pytest.mark.parametrize("layout", ["channel_last", "strided"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layouts(layout, dtype, seeded):
    x, w, bias = make_inputs(2, 32, 48, 300, 4, 1, dtype, layout=layout)
    y = check_forward(x, w, bias, 2, 1, "silu")
    if layout == "channel_last":
        assert y.stride(1) == 1, "channel-last input gives a channel-last output"
    check_grads(x, w, bias, 2, 1, "silu")
    # A non-contiguous weight (a transposed view) is read in place.
    wt = w.transpose(0, 2).contiguous().transpose(0, 2)
    assert not wt.is_contiguous()
    check_forward(x, wt, bias, 2, 1)
    check_grads(x, wt, bias, 2, 1)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_sizes(dtype, seeded):
    for b in (1, 5):
        x, w, bias = make_inputs(b, 20, 36, 333, 5, 4, dtype)
        check_forward(x, w, bias, 2, 4)
        check_grads(x, w, bias, 2, 4, "silu")


@requires_cuda
def test_empty_shapes():
    x, w, bias = make_inputs(0, 4, 6, 10, 3, 2, torch.float32)
    assert causalconv.causal_conv1d(x, w, bias, groups=2).shape == (0, 6, 10)
    x, w, bias = make_inputs(2, 4, 6, 0, 3, 1, torch.float32)
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = causalconv.causal_conv1d(x, w)
    assert y.shape == (2, 6, 0)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w))


# ---- fp32 accuracy policy: no TF32, allclose(1e-4) against fp64 ----


@pytest.fixture
def tf32_allowed():
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def seed_like(batch, channels, length, device="cuda"):
    """The seed case's inputs: randn x, nn.Conv1d-initialised weight and bias (K = 4)."""
    layer = CausalConv1d(channels, channels, 4, device=device)
    x = torch.randn(batch, channels, length, device=device)
    return x, layer.weight.detach(), layer.bias.detach()


@requires_cuda
def test_fp32_seed_like_passes_allclose_with_tf32_allowed(tf32_allowed, seeded):
    x, w, bias = seed_like(2, 256, 2048)
    y = causalconv.causal_conv1d(x, w, bias)
    ref = causalconv.reference.causal_conv1d(x, w, bias)
    assert torch.allclose(y.double(), ref, atol=1e-4, rtol=1e-4), (y.double() - ref).abs().max().item()
    assert rel_l2(y, ref) <= 2e-5


@requires_cuda
@pytest.mark.skipif(under_sanitizer, reason="full seed shape (137 GFLOP) is too slow under compute-sanitizer")
def test_fp32_full_seed_case_passes_allclose(tf32_allowed, seeded):
    x, w, bias = seed_like(32, 256, 8192)
    y = causalconv.causal_conv1d(x, w, bias)
    ref = causalconv.reference.causal_conv1d(x, w, bias)
    max_abs = (y.double() - ref).abs().max().item()
    assert torch.allclose(y.double(), ref, atol=1e-4, rtol=1e-4), f"max abs error {max_abs:.3e}"


@requires_cuda
@pytest.mark.parametrize("shape", [(2, 3, 5, 1000, 3, 1), (1, 64, 128, 3000, 7, 2), (3, 96, 32, 1111, 16, 1)])
def test_fp32_random_shapes_pass_allclose(tf32_allowed, shape, seeded):
    b, c_in, c_out, length, k, dilation = shape
    x = torch.randn(b, c_in, length, device="cuda")
    conv = torch.nn.Conv1d(c_in, c_out, k, dilation=dilation, device="cuda")  # realistic weight scale
    y = causalconv.causal_conv1d(x, conv.weight.detach(), conv.bias.detach(), dilation=dilation)
    ref = causalconv.reference.causal_conv1d(x, conv.weight.detach(), conv.bias.detach(), dilation)
    assert torch.allclose(y.double(), ref, atol=1e-4, rtol=1e-4), (y.double() - ref).abs().max().item()


# ---- determinism, streams, compile ----


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("c_out", [96, 24], ids=["tensor_cores", "cuda_cores"])
@pytest.mark.parametrize("activation", [None, "silu"])  # 16-bit dy vs the fp32 silu gradient
def test_gradients_are_bitwise_deterministic(dtype, c_out, activation, seeded):
    x, w, bias = make_inputs(4, 64, c_out, 3000, 4, 2, dtype)
    dy = torch.randn(4, c_out, 3000, device="cuda", dtype=dtype)
    runs = []
    for _ in range(3):
        xr, wr, br = (t.detach().requires_grad_(True) for t in (x, w, bias))
        y = causalconv.causal_conv1d(xr, wr, br, groups=2, activation=activation)
        y.backward(dy)
        runs.append((y.detach(), xr.grad, wr.grad, br.grad))
    for later in runs[1:]:
        for a, b in zip(runs[0], later):
            assert torch.equal(a, b), "results differ bitwise between identical runs"


@requires_cuda
def test_runs_on_the_current_stream(seeded):
    x, w, bias = make_inputs(2, 64, 64, 4096, 4, 1, torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        y = causalconv.causal_conv1d(x, w, bias)
    stream.synchronize()
    assert_close(y, causalconv.reference.causal_conv1d(x, w, bias), torch.bfloat16)


@requires_cuda
def test_torch_compile_fullgraph(seeded):
    layer = CausalConv1d(16, 24, 4, dilation=2, groups=2, activation="silu", device="cuda")
    x = torch.randn(2, 16, 100, device="cuda", requires_grad=True)
    compiled = torch.compile(lambda x: layer(x * 2.0).square().sum(), fullgraph=True)
    compiled(x).backward()
    w, b = layer.weight.detach(), layer.bias.detach()
    y = causalconv.reference.causal_conv1d(x * 2.0, w, b, 2, 2, "silu")
    ref = causalconv.reference.causal_conv1d_backward(x * 2.0, w, b, 2 * y, 2, 2, "silu")
    assert_close(x.grad, 2.0 * ref[0], torch.float32, "dx", allclose_fp32=False)
    assert_close(layer.weight.grad, ref[1], torch.float32, "dweight", reduction=True)
    assert_close(layer.bias.grad, ref[2], torch.float32, "dbias", reduction=True)


# ---- bad inputs: ValueError naming the argument, expected and got ----

BAD_INPUTS = [
    # (id, x shape, weight shape, bias shape, kwargs, message pattern); float32 on CUDA unless said
    ("x rank", (4, 8), (6, 4, 3), None, {}, r"causal_conv1d: x: expected 3 dimensions, got 2"),
    ("weight rank", (1, 4, 8), (6, 4, 3, 1), None, {},
     r"causal_conv1d: weight: expected 2 dimensions .* or 3 dimensions .*, got 4 dimensions"),
    ("weight C_in/groups", (1, 4, 8), (6, 3, 3), None, {"groups": 1},
     r"causal_conv1d: weight: expected shape \(C_out, C_in/groups, K\) = \(6, 4, 3\), got \(6, 3, 3\)"),
    ("inferred groups", (1, 4, 8), (6, 3, 3), None, {},
     r"causal_conv1d: weight: expected shape \(C_out, C_in/groups, K\) whose second dim divides C_in = 4, "
     r"got \(6, 3, 3\)"),
    ("groups not dividing C_in", (1, 4, 8), (6, 1, 3), None, {"groups": 3},
     r"causal_conv1d: groups: expected a positive divisor of C_in = 4, got 3"),
    ("groups not dividing C_out", (1, 4, 8), (5, 2, 3), None, {"groups": 2},
     r"causal_conv1d: weight: expected C_out = weight.shape\[0\] divisible by groups = 2, got \(5, 2, 3\)"),
    ("groups zero", (1, 4, 8), (6, 4, 3), None, {"groups": 0},
     r"causal_conv1d: groups: expected a positive integer or None, got 0"),
    ("groups negative", (1, 4, 8), (6, 4, 3), None, {"groups": -2},
     r"causal_conv1d: groups: expected a positive integer or None, got -2"),
    ("bias shape", (1, 4, 8), (6, 4, 3), (4,), {}, r"causal_conv1d: bias: expected shape \(C_out\) = \(6,\), got \(4,\)"),
    ("bias rank", (1, 4, 8), (6, 4, 3), (6, 1), {}, r"causal_conv1d: bias: expected 1 dimensions, got 2"),
    ("K zero", (1, 4, 8), (6, 4, 0), None, {},
     r"causal_conv1d: weight.shape\[-1\] \(kernel width K, dense/grouped\): expected a value in \[1, 64\], got 0"),
    ("K too large", (1, 4, 8), (6, 4, 65), None, {},
     r"causal_conv1d: weight.shape\[-1\] \(kernel width K, dense/grouped\): expected a value in \[1, 64\], got 65"),
    ("dilation zero", (1, 4, 8), (6, 4, 3), None, {"dilation": 0},
     r"causal_conv1d: dilation: expected a value in \[1, \d+\], got 0"),
    ("dilation too large", (1, 4, 8), (6, 4, 3), None, {"dilation": 2**40},
     r"causal_conv1d: dilation: expected a value in \[1, 549755813888\], got 1099511627776"),
]


@requires_cuda
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_value_error(case):
    _, x_shape, w_shape, bias_shape, kwargs, pattern = case
    x, w = torch.randn(x_shape, device="cuda"), torch.randn(w_shape, device="cuda")
    bias = torch.randn(bias_shape, device="cuda") if bias_shape else None
    with pytest.raises(ValueError, match=pattern):
        causalconv.causal_conv1d(x, w, bias, **kwargs)


@requires_cuda
@pytest.mark.parametrize("what,pattern", [
    ("weight dtype", r"causal_conv1d: weight: expected float32 \(the dtype of x\), got float16"),
    ("bias dtype", r"causal_conv1d: bias: expected float32 \(the dtype of x\), got bfloat16"),
    ("fp64", r"causal_conv1d: x: expected float32, float16 or bfloat16 .*got float64"),
    ("cpu weight", r"causal_conv1d: weight: expected a CUDA tensor .*got a tensor on cpu"),
    ("activation", r"causal_conv1d: activation: expected None or 'silu', got 'gelu'"),
])
def test_dtype_device_and_activation_errors(what, pattern):
    x, w, bias = torch.randn(1, 4, 8, device="cuda"), torch.randn(6, 2, 3, device="cuda"), None
    kwargs = {"groups": 2}
    if what == "weight dtype":
        w = w.half()
    elif what == "bias dtype":
        bias = torch.randn(6, device="cuda", dtype=torch.bfloat16)
    elif what == "fp64":
        x, w = x.double(), w.double()
    elif what == "cpu weight":
        w = w.cpu()
    else:
        kwargs["activation"] = "gelu"
    with pytest.raises(ValueError, match=pattern):
        causalconv.causal_conv1d(x, w, bias, **kwargs)


def test_cpu_input_is_rejected():
    x, w = torch.randn(1, 4, 8), torch.randn(6, 4, 3)
    with pytest.raises(ValueError, match=r"causal_conv1d: x: expected a CUDA tensor.*got a tensor on cpu"):
        causalconv.causal_conv1d(x, w)


@requires_cuda
def test_rejected_calls_write_nothing():
    x = torch.randn(1, 4, 8, device="cuda")
    w = torch.randn(6, 4, 65, device="cuda")  # K outside the envelope
    y = torch.full((1, 6, 8), float("nan"), device="cuda")
    with pytest.raises(ValueError):
        _C.causal_conv1d_forward(view(x), view(w), None, view(y), 1, 1, 0, None, 0)
    w = torch.randn(6, 4, 3, device="cuda")
    dy, dx, dw = torch.randn(1, 6, 8, device="cuda"), torch.full_like(x, float("nan")), torch.full_like(w, float("nan"))
    args = (view(x), view(w), None, view(dy), view(dx), view(dw), None, 1, 1, 1)
    assert _C.causal_conv1d_backward_workspace_bytes(*args) > 0
    with pytest.raises(ValueError, match=r"causal_conv1d: workspace: expected at least \d+ bytes, got 0 bytes"):
        _C.causal_conv1d_backward(*args, None, 0)
    torch.cuda.synchronize()
    assert torch.isnan(y).all() and torch.isnan(dx).all() and torch.isnan(dw).all()


def on_hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


# (B, C_in, C_out, L, K, dilation, groups, dtype, activation): the Hopper forward from rows (L a
# multiple of 8), grouped with 40 sources a group (rows padded to 40), the staged pre-pass (L = 517;
# fp32 with K = 3), the fp32 rows, silu (its backward recomputes the forward).
KEPT_X_CASES = {
    "bf16_rows": (2, 96, 136, 520, 4, 1, 1, torch.bfloat16, None),
    "fp16_grouped_rows": (1, 80, 64, 1000, 3, 2, 2, torch.float16, None),
    "bf16_staged": (2, 64, 64, 517, 4, 1, 1, torch.bfloat16, None),
    "fp32_rows": (1, 64, 96, 800, 4, 3, 1, torch.float32, None),
    "fp32_staged": (2, 72, 64, 300, 3, 1, 1, torch.float32, None),
    "bf16_silu": (1, 64, 64, 512, 2, 1, 1, torch.bfloat16, "silu"),
}


@requires_cuda
@pytest.mark.parametrize("case", list(KEPT_X_CASES))
def test_kept_x_gives_the_same_gradients(case, seeded):
    # The eager route's forward keeps x's channel-last copy for the weight gradient (Hopper); the
    # custom op's route (no copy kept: the backward makes its own) must give the same bits.
    if not on_hopper():
        pytest.skip("the forward keeps a copy of x only on the Hopper (sm_90) kernels")
    b, c_in, c_out, length, k, dilation, groups, dtype, activation = KEPT_X_CASES[case]
    x, w, bias = make_inputs(b, c_in, c_out, length, k, groups, dtype)
    code = 0 if activation is None else 1
    y = torch.empty(b, c_out, length, device="cuda", dtype=dtype)
    assert _C.causal_conv1d_saved_x_bytes(view(x), view(w), view(bias), view(y), dilation, groups, code) > 0
    dy = torch.randn(b, c_out, length, device="cuda", dtype=dtype)
    grads = []
    for op in (lambda *a: causalconv.causal_conv1d(*a, dilation=dilation, groups=groups, activation=activation),
               lambda *a: torch.ops.causalconv.causal_conv1d_fwd(*a, dilation, groups, code)):
        leaves = [t.detach().requires_grad_() for t in (x, w, bias)]
        out = op(*leaves)
        out.backward(dy)
        grads.append([out.detach()] + [t.grad for t in leaves])
    for name, kept, own in zip(("y", "dx", "dweight", "dbias"), *grads):
        assert torch.equal(kept, own), f"{name}: the kept copy of x changed the result"
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, dilation, groups, activation)
    assert_close(grads[0][2], ref[1], dtype, "dweight", reduction=True)


@requires_cuda
def test_a_short_saved_x_is_rejected():
    if not on_hopper():
        pytest.skip("a copy of x is kept only on the Hopper (sm_90) kernels")
    x, w, _ = make_inputs(1, 64, 64, 256, 4, 1, torch.bfloat16)
    y = torch.empty(1, 64, 256, device="cuda", dtype=torch.bfloat16)
    args = (view(x), view(w), None, view(y), 1, 1, 0)
    short = torch.empty(_C.causal_conv1d_saved_x_bytes(*args) // 4 - 1, device="cuda")
    with pytest.raises(ValueError, match=r"causal_conv1d: saved_x: expected at least \d+ bytes, got \d+ bytes"):
        _C.causal_conv1d_forward(*args, None, 0, view(short))
    dy, dw = torch.randn_like(y), torch.empty_like(w)
    with pytest.raises(ValueError, match=r"causal_conv1d: saved_x: expected at least \d+ bytes"):
        _C.causal_conv1d_backward(view(x), view(w), None, view(dy), None, view(dw), None, 1, 1, 0, None, 0,
                                  view(short))


# ---- nn.CausalConv1d ----


def test_module_parameters_match_nn_conv1d():
    for kwargs in ({}, {"groups": 2, "dilation": 3}, {"bias": False}):
        ours = CausalConv1d(8, 12, 5, **kwargs)
        theirs = torch.nn.Conv1d(8, 12, 5, **kwargs)
        assert [(n, p.shape) for n, p in ours.named_parameters()] == \
               [(n, p.shape) for n, p in theirs.named_parameters()]
        assert list(ours.state_dict()) == list(theirs.state_dict())
        # nn.Conv1d's initialisation: uniform in +-1/sqrt(fan_in) for weight and bias.
        bound = 1 / math.sqrt(ours.weight.shape[1] * 5)
        assert ours.weight.abs().max() <= bound
        assert ours.weight.std() > bound / 3
        if ours.bias is not None:
            assert ours.bias.abs().max() <= bound


def test_module_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"CausalConv1d: out_channels: expected a multiple of groups = 4, got 6"):
        CausalConv1d(8, 6, 3, groups=4)
    with pytest.raises(ValueError, match=r"CausalConv1d: activation: expected None or 'silu', got 'relu'"):
        CausalConv1d(8, 8, 3, activation="relu")
    with pytest.raises(ValueError, match=r"conv.stride: expected \(1,\), got \(2,\)"):
        CausalConv1d.from_conv1d(torch.nn.Conv1d(4, 4, 3, stride=2))


def test_module_on_meta_gives_shapes():
    layer = CausalConv1d(8, 12, 4, groups=2, device="meta")
    x = torch.empty(3, 8, 50, device="meta", requires_grad=True)
    y = layer(x)
    assert y.shape == (3, 12, 50)
    y.sum().backward()
    assert x.grad.shape == x.shape and layer.weight.grad.shape == (12, 4, 4) and layer.bias.grad.shape == (12,)


def test_fake_impl_dense_backward_shapes():
    x = torch.empty(2, 6, 16, device="meta", requires_grad=True)
    w = torch.empty(9, 2, 5, device="meta", requires_grad=True)
    y = causalconv.causal_conv1d(x, w, groups=3, activation="silu")
    assert y.shape == (2, 9, 16)
    y.sum().backward()
    assert (x.grad.shape, w.grad.shape) == ((2, 6, 16), (9, 2, 5))


@requires_cuda
@pytest.mark.parametrize("kwargs", [{}, {"groups": 4, "dilation": 3}, {"bias": False, "dilation": 2}])
def test_loads_nn_conv1d_state_dict_and_matches_it(kwargs, seeded):
    conv = torch.nn.Conv1d(16, 24, 4, device="cuda", **kwargs)
    layer = CausalConv1d(16, 24, 4, device="cuda", **kwargs)
    layer.load_state_dict(conv.state_dict())  # strict: same keys and shapes
    x = torch.randn(3, 16, 500, device="cuda")
    d = conv.dilation[0]
    with torch.no_grad():
        ref = F.conv1d(F.pad(x.double(), (3 * d, 0)), conv.weight.double(),
                       None if conv.bias is None else conv.bias.double(), dilation=d, groups=conv.groups)
        y = layer(x)
    assert_close(y, ref, torch.float32)
    assert_close(CausalConv1d.from_conv1d(conv)(x).detach(), ref, torch.float32)


@requires_cuda
def test_replaces_the_causal_conv_layers_of_a_model(seeded):
    class TCN(torch.nn.Module):  # a model written with nn.Conv1d + left padding
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(torch.nn.Conv1d(32, 32, 3, dilation=d) for d in (1, 2, 4))

        def forward(self, x):
            for conv in self.convs:
                x = x + F.silu(conv(F.pad(x, ((conv.kernel_size[0] - 1) * conv.dilation[0], 0))))
            return x

    class CausalTCN(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.convs = torch.nn.ModuleList(CausalConv1d.from_conv1d(c, activation="silu") for c in model.convs)

        def forward(self, x):
            for conv in self.convs:
                x = x + conv(x)
            return x

    model = TCN().cuda().double()
    x = torch.randn(2, 32, 1000, device="cuda", dtype=torch.float64)
    ref = model(x)
    fast = CausalTCN(model.float())
    assert_close(fast(x.float()).detach(), ref.detach(), torch.float32)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
def test_module_gradients(dtype, seeded):
    layer = CausalConv1d(10, 15, 3, dilation=2, groups=5, device="cuda", dtype=dtype)
    x = torch.randn(2, 10, 400, device="cuda", dtype=dtype, requires_grad=True)
    dy = torch.randn(2, 15, 400, device="cuda", dtype=dtype)
    layer(x).backward(dy)
    ref = causalconv.reference.causal_conv1d_backward(x, layer.weight, layer.bias, dy, 2, 5)
    assert_close(x.grad, ref[0], dtype, "dx", allclose_fp32=False)
    assert_close(layer.weight.grad, ref[1], dtype, "dweight", reduction=True)
    assert_close(layer.bias.grad, ref[2], dtype, "dbias", reduction=True)


# The backward with the core asked for a subset of the gradients (frozen weights: no
# weight-gradient pass; an input that needs no dx; no dbias): what it writes matches the reference.
UNWANTED_GRADIENT_PATHS = {  # name: (B, C_in, C_out, L, K, groups, dtype, dilation, activation)
    "hopper_bf16": (2, 64, 96, 1000, 4, 1, torch.bfloat16, 1, "silu"),
    "hopper_fp32": (1, 64, 64, 777, 3, 1, torch.float32, 2, None),
    "cuda_cores": (2, 3, 5, 500, 4, 1, torch.float32, 3, "silu"),
    "grouped": (1, 6, 10, 300, 2, 2, torch.float16, 1, None),
}


@requires_cuda
@pytest.mark.parametrize("needs", GRADIENT_SUBSETS, ids=subset_id)
@pytest.mark.parametrize("path", list(UNWANTED_GRADIENT_PATHS))
def test_unwanted_gradients_are_skipped(path, needs, seeded):
    b, c_in, c_out, length, k, groups, dtype, dilation, activation = UNWANTED_GRADIENT_PATHS[path]
    x, w, bias = make_inputs(b, c_in, c_out, length, k, groups, dtype)
    dy, grads = gradients_of_a_subset(
        lambda x, w, bias: causalconv.causal_conv1d(x, w, bias, dilation=dilation, groups=groups,
                                                    activation=activation),
        x, w, bias, needs)
    ref = causalconv.reference.causal_conv1d_backward(x, w, bias, dy, dilation, groups, activation)
    for i, grad in grads.items():
        assert_close(grad, ref[i], dtype, ("dx", "dweight", "dbias")[i], reduction=i > 0, allclose_fp32=False)
