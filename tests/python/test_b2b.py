"""b2b_causal_conv1d: CUDA forward and all four gradients against the fp64 reference,
determinism, every validation rule, the nn layer; fake implementations, torch.export
and torch.compile on meta tensors (those run without a GPU)."""

import os

import pytest
import torch

import causalconv
from causalconv import _C
from causalconv._views import view
from conftest import assert_close_to_reference, requires_cuda

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def make_inputs(b, d, length, kp, km, dtype, layout="contiguous", device="cuda"):
    if layout == "strided":  # every other time step of a wider buffer, an odd channel stride
        x = torch.randn(b, 6 * d + 1, 2 * length, device=device, dtype=dtype)[:, 1::2, ::2]
    elif layout == "channel_last":
        x = torch.randn(b, length, 3 * d, device=device, dtype=dtype).transpose(1, 2)
    else:
        x = torch.randn(b, 3 * d, length, device=device, dtype=dtype)
    wp = torch.randn(3 * d, kp, device=device, dtype=dtype) / kp**0.5
    wm = torch.randn(d, km, device=device, dtype=dtype) / km**0.5
    skip = torch.randn(d, device=device, dtype=dtype)
    if layout != "contiguous":  # weights with non-unit strides too
        wp = wp.t().contiguous().t()
        wm = torch.randn(km, 2 * d, device=device, dtype=dtype)[:, ::2].t() / km**0.5
        skip = torch.randn(2 * d, device=device, dtype=dtype)[::2]
    return x, wp, wm, skip


def assert_forward_close(out, x, wp, wm, skip, what="output"):
    """The forward against the fp64 reference, scaled by the reference on |inputs|."""
    ref = causalconv.reference.b2b_causal_conv1d(x, wp, wm, skip)
    magnitude = causalconv.reference.b2b_causal_conv1d(x.abs(), wp.abs(), wm.abs(), skip.abs())
    assert_close_to_reference(out, ref, x.dtype, what, magnitude=magnitude)


def gradient_magnitudes(x, wp, wm, skip, dout):
    """The four gradients' references on |inputs|: each element's sum of |terms| (one channel's
    dskip over a short row can cancel far below them)."""
    return causalconv.reference.b2b_causal_conv1d_backward(x.abs(), wp.abs(), wm.abs(), skip.abs(), dout.abs())


def check(x, wp, wm, skip, dout_layout="contiguous"):
    """Forward and all four gradients against causalconv.reference (fp64)."""
    inputs = [t.detach().requires_grad_(True) for t in (x, wp, wm, skip)]
    out = causalconv.b2b_causal_conv1d(*inputs)
    assert out.shape == (x.shape[0], x.shape[1] // 3, x.shape[2]) and out.dtype == x.dtype
    assert_forward_close(out, x, wp, wm, skip)
    dout = torch.randn_like(out)
    if dout_layout == "strided":
        dout = torch.randn(out.shape[0], out.shape[1], 2 * out.shape[2], device=out.device, dtype=out.dtype)[..., ::2]
    out.backward(dout)
    ref = causalconv.reference.b2b_causal_conv1d_backward(x, wp, wm, skip, dout)
    for t, want, mag, name in zip(inputs, ref, gradient_magnitudes(x, wp, wm, skip, dout),
                                  ("dx", "dweight_proj", "dweight_mixer", "dskip_bias")):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype
        assert_close_to_reference(t.grad, want, x.dtype, name, reduction=name != "dx", magnitude=mag)
    return out, [t.grad for t in inputs]


# ---- forward + gradients against the fp64 reference ----

@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("km", [2, 3, 7, 128, 255, 256])
@pytest.mark.parametrize("kp", [2, 3, 32])
def test_widths(dtype, kp, km, seeded):
    # L = 2500: not a multiple of any tile (2048 forward, 1024 backward); odd D.
    check(*make_inputs(2, 3, 2500, kp, km, dtype))


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kp,km", [(2, 2), (3, 7), (4, 128), (32, 256)])
def test_awkward_lengths(dtype, kp, km, seeded):
    # L = 1, L < Kp, L < Km, L = Km, one past each tile size, several tiles per block.
    for length in sorted({1, 2, kp - 1, km - 1, km, 1025, 2049, 9000}):
        check(*make_inputs(1, 2, length, kp, km, dtype))


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [1, 2, 5])
@pytest.mark.parametrize("b", [1, 8])
def test_batches_and_channels(dtype, b, d, seeded):
    check(*make_inputs(b, d, 700, 3, 7, dtype))


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["strided", "channel_last"])
def test_non_contiguous_inputs(dtype, layout, seeded):
    x, wp, wm, skip = make_inputs(2, 3, 1100, 4, 9, dtype, layout)
    assert not x.is_contiguous() and not wm.is_contiguous() and not skip.is_contiguous()
    out, _ = check(x, wp, wm, skip, dout_layout="strided")
    assert out.is_contiguous()


@requires_cuda
def test_b2b_racecheck_shapes(seeded):
    # Small, tile-crossing shapes in every dtype: scripts/gpu-check runs this test
    # under compute-sanitizer racecheck (the kernels' shared-memory passes).
    for dtype in DTYPES:
        check(*make_inputs(2, 2, 3000, 3, 7, dtype))
        check(*make_inputs(1, 1, 1100, 32, 256, dtype))
    # The wgmma backward with dwp by the band of mma.sync products (Kp <= 8) over two tiles (the first staged
    # last), two rows.
    check(*make_inputs(1, 2, 5000, 3, 128, torch.bfloat16))
    # fp32 Kp <= 4 with a wide mixer across a 4096-step tile: the unit projections of the tf32
    # forward. Forward only: racecheck reports hazards of its own in the fp32 wgmma backward at
    # Km >= 66 (docs/gpu-machine.md), which test_wgmma_tf32_backward checks against the reference.
    x, wp, wm, skip = make_inputs(1, 1, 5000, 3, 128, torch.float32)
    assert_forward_close(causalconv.b2b_causal_conv1d(x, wp, wm, skip), x, wp, wm, skip)
    # Rows off the 16-byte grid (odd L) across a tile: the wgmma forms' realigned staging.
    check(*make_inputs(1, 1, 5001, 3, 128, torch.bfloat16))
    # More one-tile rows than an H100's or H200's resident blocks (3 x 132), forward only.
    x, wp, wm, skip = make_inputs(1, 450, 4096, 3, 128, torch.bfloat16)
    assert_forward_close(causalconv.b2b_causal_conv1d(x, wp, wm, skip), x, wp, wm, skip)


@requires_cuda
def test_a_larger_shape(seeded):
    # One realistic-width case (many blocks, 4 forward tiles per block).
    check(*make_inputs(2, 64, 8192 + 77, 3, 128, torch.bfloat16))


@requires_cuda
def test_empty_batch_and_length():
    for b, length in ((0, 10), (2, 0)):
        x, wp, wm, skip = (t.requires_grad_(True) for t in make_inputs(b, 3, length, 3, 7, torch.float32))
        out = causalconv.b2b_causal_conv1d(x, wp, wm, skip)
        assert out.shape == (b, 3, length)
        out.sum().backward()
        for t in (wp, wm, skip):  # sums over nothing
            assert torch.equal(t.grad, torch.zeros_like(t))


@requires_cuda
def test_runs_on_the_current_stream(seeded):
    x, wp, wm, skip = make_inputs(2, 16, 4096, 3, 7, torch.float16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = causalconv.b2b_causal_conv1d(x, wp, wm, skip)
    stream.synchronize()
    assert_forward_close(out, x, wp, wm, skip)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gradients_are_deterministic(dtype, seeded):
    # Km 128: the wgmma backwards on an H100/H200 (the tf32 form in fp32).
    x, wp, wm, skip = make_inputs(4, 32, 20000, 3, 128, dtype)
    dout = torch.randn(4, 32, 20000, device="cuda", dtype=dtype)
    runs = []
    for _ in range(3):
        inputs = [t.detach().requires_grad_(True) for t in (x, wp, wm, skip)]
        causalconv.b2b_causal_conv1d(*inputs).backward(dout)
        runs.append([t.grad for t in inputs])
    for later in runs[1:]:
        for a, b, name in zip(runs[0], later, ("dx", "dweight_proj", "dweight_mixer", "dskip_bias")):
            assert torch.equal(a, b), f"{name} differs bitwise between identical runs"


@requires_cuda
def test_forward_and_backward_under_torch_compile(seeded):
    x, wp, wm, skip = (t.requires_grad_(True) for t in make_inputs(2, 4, 300, 3, 7, torch.float32))

    def block(x, wp, wm, skip):
        return causalconv.b2b_causal_conv1d(x * 2.0, wp, wm, skip).square().sum()

    torch.compile(block, fullgraph=True)(x, wp, wm, skip).backward()
    out = causalconv.reference.b2b_causal_conv1d(x * 2.0, wp, wm, skip)
    ref = causalconv.reference.b2b_causal_conv1d_backward(x * 2.0, wp, wm, skip, 2 * out)
    want = (2 * ref[0], ref[1], ref[2], ref[3])
    for t, w, name in zip((x, wp, wm, skip), want, ("dx", "dweight_proj", "dweight_mixer", "dskip_bias")):
        assert_close_to_reference(t.grad, w, torch.float32, name, reduction=name != "dx")


# ---- the nn layer ----

@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_trains(dtype, seeded):
    layer = causalconv.nn.B2BCausalConv1d(8, 3, 16, device="cuda", dtype=dtype)
    with torch.no_grad():
        layer.skip_bias.normal_()
    x = torch.randn(2, 24, 500, device="cuda", dtype=dtype)
    out = layer(x)
    assert_close_to_reference(
        out, causalconv.reference.b2b_causal_conv1d(x, layer.weight_proj, layer.weight_mixer, layer.skip_bias), dtype)
    out.float().square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in layer.parameters())
    before = [p.detach().clone() for p in layer.parameters()]
    torch.optim.SGD(layer.parameters(), lr=0.1).step()
    assert any(not torch.equal(a, p) for a, p in zip(before, layer.parameters()))


def test_layer_parameters_and_init():
    layer = causalconv.nn.B2BCausalConv1d(16, 4, 128)
    assert layer.weight_proj.shape == (48, 4) and layer.weight_mixer.shape == (16, 128)
    assert layer.skip_bias.shape == (16,) and isinstance(layer.skip_bias, torch.nn.Parameter)
    assert layer.weight_proj.abs().max() <= 0.5 and layer.weight_mixer.abs().max() <= 128**-0.5
    assert layer.weight_mixer.std() > 0.3 * 128**-0.5  # not degenerate
    assert torch.equal(layer.skip_bias, torch.zeros(16))
    fixed = causalconv.nn.B2BCausalConv1d(16, 4, 128, skip_bias=False)
    assert [n for n, _ in fixed.named_parameters()] == ["weight_proj", "weight_mixer"]
    assert "skip_bias" not in fixed.state_dict() and torch.equal(fixed.skip_bias, torch.zeros(16))
    assert "kernel_size_mixer=128" in repr(layer)


def test_layer_on_meta_gives_shapes_and_gradients():
    layer = causalconv.nn.B2BCausalConv1d(8, 3, 7, device="meta", dtype=torch.bfloat16)
    x = torch.empty(2, 24, 100, device="meta", dtype=torch.bfloat16, requires_grad=True)
    out = layer(x)
    assert (out.shape, out.dtype) == ((2, 8, 100), torch.bfloat16)
    out.sum().backward()
    assert x.grad.shape == x.shape
    assert [p.grad.shape for p in layer.parameters()] == [(24, 3), (8, 7), (8,)]


# ---- fake implementations, torch.export, torch.compile (no GPU needed) ----

def meta_inputs(b=2, d=4, length=16, kp=3, km=7, dtype=torch.float32, requires_grad=False):
    shapes = ((b, 3 * d, length), (3 * d, kp), (d, km), (d,))
    return [torch.empty(s, device="meta", dtype=dtype, requires_grad=requires_grad) for s in shapes]


@pytest.mark.parametrize("dtype", DTYPES)
def test_fake_forward_and_backward_shapes(dtype):
    x, wp, wm, skip = meta_inputs(dtype=dtype, requires_grad=True)
    out = causalconv.b2b_causal_conv1d(x, wp, wm, skip)
    assert (out.shape, out.dtype) == ((2, 4, 16), dtype)
    out.sum().backward()
    assert [t.grad.shape for t in (x, wp, wm, skip)] == [t.shape for t in (x, wp, wm, skip)]
    assert all(t.grad.dtype == dtype for t in (x, wp, wm, skip))


def test_torch_export_keeps_the_custom_op():
    exported = torch.export.export(causalconv.nn.B2BCausalConv1d(4, 3, 7, device="meta"),
                                   (torch.empty(2, 12, 16, device="meta"),))
    targets = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.causalconv.b2b_causal_conv1d_fwd.default]


def test_torch_compile_fullgraph_traces_forward_and_backward():
    compiled = torch.compile(lambda *t: causalconv.b2b_causal_conv1d(*t).sum() * 2, fullgraph=True, backend="eager")
    inputs = meta_inputs(requires_grad=True)
    compiled(*inputs).backward()
    assert [t.grad.shape for t in inputs] == [t.shape for t in inputs]


def test_opcheck_on_meta():
    torch.library.opcheck(torch.ops.causalconv.b2b_causal_conv1d_fwd.default, tuple(meta_inputs()),
                          test_utils=("test_schema", "test_faketensor"))


# ---- bad inputs: ValueError naming the argument, what was expected and what was got ----

def test_cpu_tensors_are_rejected():
    x, wp, wm, skip = make_inputs(1, 2, 8, 3, 4, torch.float32, device="cpu")
    with pytest.raises(ValueError, match=r"b2b_causal_conv1d: x: expected a CUDA tensor.*got a tensor on cpu"):
        causalconv.b2b_causal_conv1d(x, wp, wm, skip)


def _args(on_cpu=(), dtype=torch.float32, **changes):
    """Valid arguments (D = 2, Kp = 3, Km = 4) on CUDA, with changes, and the named ones left on the CPU."""
    args = dict(x=torch.randn(2, 6, 16, dtype=dtype), weight_proj=torch.randn(6, 3, dtype=dtype),
                weight_mixer=torch.randn(2, 4, dtype=dtype), skip_bias=torch.randn(2, dtype=dtype))
    args.update(changes)
    return {name: t if name in on_cpu else t.cuda() for name, t in args.items()}


BAD_INPUTS = [
    # (rule, arguments, message pattern after "b2b_causal_conv1d: ")
    ("x on cpu", lambda: _args(on_cpu=("x",)), r"x: expected a CUDA tensor .*got a tensor on cpu"),
    ("weight on cpu", lambda: _args(on_cpu=("weight_mixer",)),
     r"weight_mixer: expected a CUDA tensor .*got a tensor on cpu"),
    ("float64", lambda: _args(dtype=torch.float64), r"x: expected float32, float16 or bfloat16 .*got float64"),
    ("dtype mismatch", lambda: _args(weight_proj=torch.randn(6, 3, dtype=torch.bfloat16)),
     r"weight_proj: expected float32 \(the dtype of x\), got bfloat16"),
    ("x rank", lambda: _args(x=torch.randn(6, 16)), r"x: expected 3 dimensions, got 2 dimensions"),
    ("x channels", lambda: _args(x=torch.randn(2, 7, 16)), r"x: expected shape \(B, 3\*D, L\) .*got \(2, 7, 16\)"),
    ("weight_proj rank", lambda: _args(weight_proj=torch.randn(6, 1, 3)),
     r"weight_proj: expected 2 dimensions, got 3 dimensions"),
    ("weight_proj channels", lambda: _args(weight_proj=torch.randn(3, 3)),
     r"weight_proj: expected shape \(3\*D, Kp\) = \(6, 3\), got \(3, 3\)"),
    ("weight_mixer rank", lambda: _args(weight_mixer=torch.randn(2, 1, 4)),
     r"weight_mixer: expected 2 dimensions, got 3 dimensions"),
    ("weight_mixer channels", lambda: _args(weight_mixer=torch.randn(3, 4)),
     r"weight_mixer: expected shape \(D, Km\) = \(2, 4\), got \(3, 4\)"),
    ("skip_bias rank", lambda: _args(skip_bias=torch.randn(2, 1)),
     r"skip_bias: expected 1 dimensions, got 2 dimensions"),
    ("skip_bias shape", lambda: _args(skip_bias=torch.randn(3)),
     r"skip_bias: expected shape \(D\) = \(2,\), got \(3,\)"),
    ("Kp too small", lambda: _args(weight_proj=torch.randn(6, 1)),
     r"weight_proj.shape\[1\] \(Kp\): expected a value in \[2, 32\], got 1"),
    ("Kp too large", lambda: _args(weight_proj=torch.randn(6, 33)),
     r"weight_proj.shape\[1\] \(Kp\): expected a value in \[2, 32\], got 33"),
    ("Km too small", lambda: _args(weight_mixer=torch.randn(2, 1)),
     r"weight_mixer.shape\[1\] \(Km\): expected a value in \[2, 256\], got 1"),
    ("Km too large", lambda: _args(weight_mixer=torch.randn(2, 257)),
     r"weight_mixer.shape\[1\] \(Km\): expected a value in \[2, 256\], got 257"),
]


@requires_cuda
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_value_error(case):
    _, make, pattern = case
    with pytest.raises(ValueError, match=r"b2b_causal_conv1d: " + pattern):
        causalconv.b2b_causal_conv1d(**make())


@requires_cuda
def test_rejected_calls_write_nothing():
    x, wp, wm, skip = make_inputs(1, 2, 8, 3, 4, torch.float32)
    out = torch.full((1, 2, 8), float("nan"), device="cuda")
    bad_wm = torch.randn(2, 300, device="cuda")  # Km outside the envelope
    with pytest.raises(ValueError):
        _C.b2b_causal_conv1d_forward(view(x), view(wp), view(bad_wm), view(skip), view(out), None, 0)
    dx = torch.full_like(x, float("nan"))
    grads = (dx, torch.full_like(wp, float("nan")), torch.full((2, 300), float("nan"), device="cuda"),
             torch.full_like(skip, float("nan")))
    with pytest.raises(ValueError):
        _C.b2b_causal_conv1d_backward(view(x), view(wp), view(bad_wm), view(skip), view(out),
                                      *map(view, grads), None, 0)
    torch.cuda.synchronize()
    assert torch.isnan(out).all() and all(torch.isnan(g).all() for g in grads)


@requires_cuda
def test_backward_rejects_a_short_workspace():
    x, wp, wm, skip = make_inputs(1, 2, 64, 3, 4, torch.float32)
    dout = torch.randn(1, 2, 64, device="cuda")
    grads = (torch.full_like(x, float("nan")), torch.empty_like(wp), torch.empty_like(wm), torch.empty_like(skip))
    args = (view(x), view(wp), view(wm), view(skip), view(dout), *map(view, grads))
    assert _C.b2b_causal_conv1d_backward_workspace_bytes(*args) > 0
    with pytest.raises(ValueError, match=r"b2b_causal_conv1d: workspace: expected at least \d+ bytes, got 0 bytes"):
        _C.b2b_causal_conv1d_backward(*args, None, 0)
    torch.cuda.synchronize()
    assert torch.isnan(grads[0]).all(), "a rejected call wrote its output"


@requires_cuda
def test_core_rejects_rows_with_a_time_stride():
    # The front end makes rows contiguous; the core says what it needs when called directly.
    x, wp, wm, skip = make_inputs(1, 2, 8, 3, 4, torch.float32, layout="strided")
    out = torch.empty(1, 2, 8, device="cuda")
    with pytest.raises(ValueError, match=r"b2b_causal_conv1d: x: expected unit stride along L .*got stride 2"):
        _C.b2b_causal_conv1d_forward(view(x), view(wp), view(wm), view(skip), view(out), None, 0)


@requires_cuda
def test_eager_route_and_custom_op_agree_bitwise(seeded):
    # Eager CUDA calls skip the custom op's dispatch (an autograd.Function over the same kernel
    # calls); torch.compile/export trace the custom op. Both must give the same bits.
    inputs = make_inputs(2, 5, 300, 3, 7, torch.bfloat16)
    results = []
    for op in (causalconv.b2b_causal_conv1d, torch.ops.causalconv.b2b_causal_conv1d_fwd):
        leaves = [t.detach().requires_grad_(True) for t in inputs]
        out = op(*leaves)
        results.append((out, *torch.autograd.grad(out, leaves, torch.ones_like(out))))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("km", [8, 9, 16, 33, 128, 129, 255, 256])
def test_tensor_core_mixer(dtype, km, seeded):
    # fp16/bf16 with Km >= 9 run projections and mixer on the tensor cores (Km = 8 is the CUDA-core side of the
    # dispatch); each Toeplitz-block count's template is hit. Outputs start as NaN so unwritten
    # elements fail; lengths: L = 1, inside one 16-step chunk, one past it, 16-byte aligned rows
    # (1000, 4096 + 8: the wgmma form on an H100/H200) and unaligned ones (2500, 4097: the mma.sync
    # form), several tiles.
    for kp in (2, 3, 17, 18, 32):  # 2 or 3 projection blocks
        for length in (1, 15, 17, 1000, 2500, 4097, 4104):
            x, wp, wm, skip = make_inputs(2, 3, length, kp, km, dtype)
            out = torch.full((2, 3, length), float("nan"), device="cuda", dtype=dtype)
            _C.b2b_causal_conv1d_forward(view(x), view(wp), view(wm), view(skip), view(out), None,
                                         torch.cuda.current_stream().cuda_stream)
            assert_forward_close(out, x, wp, wm, skip, f"Kp={kp} L={length}")


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("km", [2, 7, 8, 9, 65, 129, 256])
def test_forward_rows_off_the_16_byte_boundary(dtype, km, seeded):
    # Rows of x and out at different distances past a 16-byte boundary (x at row stride L + 3 after a
    # 1-element offset, out at L + 5 after 2, with NaN between the rows). Km <= 8: v1, or the short kernel
    # realigning each row from its 16-byte grid (kB2BShortRealignedRows); 16-bit Km >= 9: the mma.sync
    # form, or the wgmma form realigning likewise (kB2BWgmmaRealignedRows); fp32 Km >= 9: the tf32 form.
    # Lengths: under one unit, a tile less one step, two tiles less one (tile ends inside a unit), a third
    # tile of 5 steps. Every element between the rows of out must stay NaN.
    for kp, length in ((3, 3), (32 if km > 8 else 4, 4095), (3, 8191), (4, 8197)):
        _, wp, wm, skip = make_inputs(2, 3, length, kp, km, dtype)
        x_buf = torch.full((2, 10, length + 3), float("nan"), device="cuda", dtype=dtype).view(-1)
        x = x_buf[1:].as_strided((2, 9, length), (10 * (length + 3), length + 3, 1))
        x.copy_(torch.randn(2, 9, length, device="cuda", dtype=dtype))
        out_buf = torch.full((2 * 4 * (length + 5),), float("nan"), device="cuda", dtype=dtype)
        out = out_buf[2:].as_strided((2, 3, length), (4 * (length + 5), length + 5, 1))
        _C.b2b_causal_conv1d_forward(view(x), view(wp), view(wm), view(skip), view(out), None,
                                     torch.cuda.current_stream().cuda_stream)
        assert_forward_close(out, x, wp, wm, skip, f"Kp={kp} L={length}")
        written = torch.ones_like(out_buf, dtype=torch.bool)
        written[2:].as_strided((2, 3, length), (4 * (length + 5), length + 5, 1)).fill_(False)
        assert torch.isnan(out_buf[written]).all(), f"L={length}: elements between the rows of out were written"


@requires_cuda
@pytest.mark.parametrize("km", [8, 9, 16, 33, 128, 129, 255, 256])
def test_fp32_wide_mixers(km, seeded):
    # fp32 with Km >= 9: the mixer on tf32 tensor cores split three ways when kB2BTf32x3Forward is on
    # (src/b2b/b2b_forward.cu), else the CUDA-core kernel; the fp32 bound either way. Kp up to 32 (the
    # staged reach), L = 1, one chunk and one step past it, L < Km, unaligned rows (2500, 4097), rows
    # of several tiles walked by one block through its one stage; then (Km >= 9) NaN and infinities
    # in x, which must reach exactly the outputs whose own terms hold them. (At Km <= 8 the short
    # kernel's zero-padded taps may turn an output just past the reach NaN: its documented quirk.)
    for kp in (2, 3, 17, 32):
        for length in (1, 16, 17, 200, 2500, 4097, 2048 * 4 + 300):
            x, wp, wm, skip = make_inputs(2, 3, length, kp, km, torch.float32)
            out = torch.full((2, 3, length), float("nan"), device="cuda")
            _C.b2b_causal_conv1d_forward(view(x), view(wp), view(wm), view(skip), view(out), None,
                                         torch.cuda.current_stream().cuda_stream)
            assert_forward_close(out, x, wp, wm, skip, f"Kp={kp} L={length}")
    if km < 9:
        return
    x, wp, wm, skip = make_inputs(1, 2, 3000, 3, km, torch.float32)
    x[0, 1, 2030] = float("nan")
    x[0, 2, 2070] = float("inf")
    x[0, 3, 2030] = float("-inf")
    out = causalconv.b2b_causal_conv1d(x, wp, wm, skip).cpu()
    ref = causalconv.reference.b2b_causal_conv1d(x.cpu(), wp.cpu(), wm.cpu(), skip.cpu())  # plain tap sums
    assert torch.equal(torch.isnan(out), torch.isnan(ref)), "NaN where the reference has none, or none where it has"
    assert torch.equal(out[torch.isinf(ref)], ref[torch.isinf(ref)].float()), "infinite outputs differ"
    finite = torch.isfinite(ref)
    mag = causalconv.reference.b2b_causal_conv1d(x.abs().cpu(), wp.abs().cpu(), wm.abs().cpu(), skip.abs().cpu())
    assert_close_to_reference(out[finite], ref[finite], torch.float32, "finite outputs", magnitude=mag[finite])


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("length", [3000, 9000])
def test_tensor_core_mixer_keeps_nonfinite_inputs_causal(dtype, length, seeded):
    # The 16-bit tensor-core forwards multiply a NaN or infinity by the zero weights of lags outside the
    # filters unless kToeplitzNonFiniteGuard (src/common/toeplitz_guard.cuh) is on; it is off until the
    # H200 has timed it (docs/performance.md, session 29), so this runs only where
    # CAUSALCONV_TEST_TOEPLITZ_GUARD=1 says the build has it. 3000: the mma.sync form's unaligned rows
    # (after the 2-element offset below); 9000: the wgmma form, a NaN before a 4096-step tile boundary
    # and an infinity after it (the z halo carried across).
    if os.environ.get("CAUSALCONV_TEST_TOEPLITZ_GUARD") != "1":
        pytest.skip("tensor-core forms without kToeplitzNonFiniteGuard (set CAUSALCONV_TEST_TOEPLITZ_GUARD=1 on a "
                    "build with it on)")
    x, wp, wm, skip = make_inputs(1, 2, length, 3, 128, dtype)
    if length == 3000:
        x = torch.randn(1, 6, length + 2, device="cuda", dtype=dtype)[..., 2:]
    t0 = 2030 if length == 3000 else 4090
    x[0, 1, t0] = float("nan")
    x[0, 2, t0 + 40] = float("inf")
    x[0, 3, t0] = float("-inf")
    out = causalconv.b2b_causal_conv1d(x, wp, wm, skip).cpu()
    ref = causalconv.reference.b2b_causal_conv1d(x.cpu(), wp.cpu(), wm.cpu(), skip.cpu())  # plain tap sums
    assert torch.equal(torch.isnan(out), torch.isnan(ref)), "NaN where the reference has none, or none where it has"
    assert torch.equal(out[torch.isinf(ref)].double(), ref[torch.isinf(ref)]), "infinite outputs differ"
    finite = torch.isfinite(ref)
    mag = causalconv.reference.b2b_causal_conv1d(x.abs().cpu(), wp.abs().cpu(), wm.abs().cpu(), skip.abs().cpu())
    assert_close_to_reference(out[finite], ref[finite], dtype, "finite outputs", magnitude=mag[finite])


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tensor_core_mixer_long_rows_and_strided_weights(dtype, seeded):
    # Rows of 5 tiles (blocks walking several tiles), odd D, weights with non-unit strides, and the
    # gradients of the whole op (its backward is unchanged) through the front end.
    check(*make_inputs(2, 5, 2048 * 4 + 300, 4, 128, dtype))
    check(*make_inputs(1, 3, 3000, 3, 200, dtype, layout="strided"))
    # Aligned rows for the wgmma form: 10 4096-step tiles on 2 rows (each tile a segment of its own,
    # its z halo computed on the CUDA cores), then 16 tiles on 128 rows (segments of 2 tiles: the
    # halo carried from the first to the second).
    check(*make_inputs(1, 2, 4096 * 9 + 8, 3, 128, dtype))
    check(*make_inputs(1, 128, 4096 * 16, 3, 128, dtype))


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_wgmma_forward_many_rows_of_whole_chunks(dtype, seeded):
    # Rows of whole 64-step chunks with 2-3 times more 4096-step tiles than an H100's or H200's
    # resident blocks (a forward whose blocks walked tile ranges across rows, as session 48's streamed
    # form did, would start mid-row and cross rows here); a last tile of one chunk; rows of one tile.
    for b, d, length, kp, km in ((1, 512, 8192, 3, 128), (2, 300, 4096 + 64, 32, 256), (1, 1000, 640, 18, 66),
                                 (3, 200, 4096 * 3, 17, 150)):
        x, wp, wm, skip = make_inputs(b, d, length, kp, km, dtype)
        assert_forward_close(causalconv.b2b_causal_conv1d(x, wp, wm, skip), x, wp, wm, skip)


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("km", [9, 64, 65, 128, 129, 193, 256])
def test_wgmma_backward(dtype, km, seeded):
    # fp16/bf16 with 9 <= Km <= 256, Kp <= 32 on 16-byte aligned rows: the wgmma backward on an
    # H100/H200 (every mixer block count, both projection slice counts, both dwp forms: the band of
    # mma.sync products up to Kp 8), into NaN-poisoned outputs.
    # Lengths: L = 1, inside one chunk, a partial 4096-step tile, two tiles with a few steps in the
    # second (the dh and dp chunks carried from the walk's first tile).
    for kp in (2, 8, 17, 18, 32):
        for length in (1, 40, 1000, 4096 + 8):
            x, wp, wm, skip = make_inputs(1, 3, length, kp, km, dtype)
            dout = torch.randn(1, 3, length, device="cuda", dtype=dtype)
            _backward_into_poisoned(x, wp, wm, skip, dout, torch.empty_like(x))


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_wgmma_backward_segments(dtype, seeded):
    # Rows cut into segments (blocks of consecutive tiles walked from the last, each but the row's
    # last primed by the tile after it): the launcher aims at 512 blocks, so 2 rows of 12 tiles take
    # a segment per tile, 128 rows segments of 3; 512 rows stay whole.
    for b, d, length in ((1, 2, 4096 * 11 + 24), (1, 128, 4096 * 12), (1, 512, 4096 * 2 - 8)):
        x, wp, wm, skip = make_inputs(b, d, length, 3, 128, dtype)
        dout = torch.randn(b, d, length, device="cuda", dtype=dtype)
        _backward_into_poisoned(x, wp, wm, skip, dout, torch.empty_like(x))


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("km", [9, 128, 256])
def test_wgmma_backward_rows_off_the_16_byte_boundary(dtype, km, seeded):
    # Odd L: every x, dout row at its own lead past a 16-byte boundary, and dx a view at another
    # offset into a wider buffer: the wgmma backward's realigned rows (kB2BWgmmaBackwardRealignedRows).
    # L = 1, under one unit, a tile boundary inside a unit, two tiles; the NaN-poisoned values around
    # each dx row stay untouched.
    for kp in (3, 18):
        for length in (1, 7, 4097, 8191):
            x, wp, wm, skip = make_inputs(1, 3, length, kp, km, dtype)
            dout = torch.randn(1, 3, length, device="cuda", dtype=dtype)
            wide = torch.full((1, 9, length + 6), float("nan"), device="cuda", dtype=dtype)
            dx = wide[:, :, 3:3 + length]
            _backward_into_poisoned(x, wp, wm, skip, dout, dx)
            assert wide[:, :, :3].isnan().all() and wide[:, :, 3 + length:].isnan().all()


@requires_cuda
@pytest.mark.parametrize("km", [65, 128, 129, 193, 256])
def test_wgmma_tf32_backward(km, seeded):
    # fp32 with Kp <= 4 and Km >= 65: the tf32 wgmma backward on an H100/H200 (every mixer block
    # count), into NaN-poisoned outputs. L = 1, inside one chunk, one tile and 8 steps (the dp steps
    # past a tile summed directly), odd L (rows off the 16-byte grid: x and dout at their own leads,
    # dx a view into a wider buffer whose padding must stay NaN), 3 tiles over D = 3 (blocks walking
    # two tiles).
    for kp in (2, 3, 4):
        for b, d, length in ((1, 3, 1), (1, 3, 40), (2, 3, 4096 + 8), (1, 3, 4097), (1, 3, 4096 * 2 + 77)):
            x, wp, wm, skip = make_inputs(b, d, length, kp, km, torch.float32)
            dout = torch.randn(b, d, length, device="cuda")
            wide = torch.full((b, 3 * d, length + 6), float("nan"), device="cuda")
            dx = wide[:, :, 3:3 + length]
            _backward_into_poisoned(x, wp, wm, skip, dout, dx)
            assert wide[:, :, :3].isnan().all() and wide[:, :, 3 + length:].isnan().all()


@requires_cuda
@pytest.mark.parametrize("km", [65, 128, 193, 256])
def test_wgmma_tf32_backward_many_rows(km, seeded):
    # More rows than SMs (B2 D211, 422 rows, and D300), rows of one and two tiles: every block's
    # partials and every row's last tile, with rows in many waves.
    for b, d, length in ((2, 211, 300), (1, 300, 4096 + 40)):
        x, wp, wm, skip = make_inputs(b, d, length, 3, km, torch.float32)
        dout = torch.randn(b, d, length, device="cuda")
        _backward_into_poisoned(x, wp, wm, skip, dout, torch.empty(b, 3 * d, length, device="cuda"))


# ---- the chunked backward (Kp <= 4; Km <= 8, <= 16 or wide): register-blocked, with
# 4-element vector accesses when rows allow them; the general kernel for Kp > 4 ----

def _backward_into_poisoned(x, wp, wm, skip, dout, dx):
    """The core's backward into NaN-poisoned outputs (dx may be a view into a larger
    buffer); returns the four gradients after checking them against the fp64 reference."""
    from causalconv._views import stream_of
    dx.fill_(float("nan"))
    grads = (dx, torch.full_like(wp, float("nan")), torch.full_like(wm, float("nan")),
             torch.full_like(skip, float("nan")))
    args = (view(x), view(wp), view(wm), view(skip), view(dout), *map(view, grads))
    ws_bytes = _C.b2b_causal_conv1d_backward_workspace_bytes(*args)
    ws = torch.full((ws_bytes // 4 + 1,), float("nan"), device=x.device)  # partials not written stay NaN
    _C.b2b_causal_conv1d_backward(*args, view(ws), stream_of(x))
    ref = causalconv.reference.b2b_causal_conv1d_backward(x, wp, wm, skip, dout)
    for got, want, mag, name in zip(grads, ref, gradient_magnitudes(x, wp, wm, skip, dout),
                                    ("dx", "dweight_proj", "dweight_mixer", "dskip_bias")):
        assert_close_to_reference(got, want, x.dtype, name, reduction=name != "dx", magnitude=mag)
    return grads


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kp,km", [(2, 2), (3, 3), (3, 7), (4, 8), (2, 9), (4, 15), (4, 16), (3, 17), (5, 7),
                                   (32, 16), (4, 128), (2, 256)])
def test_chunked_backward_widths(dtype, kp, km, seeded):
    # Both sides of Kp <= 4 and Km <= 8 / 16; L = 4101: 5 tiles (one block walks 4), L % 4 = 1.
    check(*make_inputs(2, 3, 4101, kp, km, dtype))


@requires_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kp,km", [(3, 7), (4, 16), (2, 2), (3, 128)])
def test_chunked_backward_lengths(dtype, kp, km, seeded):
    # L = 1, L < Km, around the 4-step groups, the 1024-step tile and the 4-tile block.
    # Four channels: one dskip summed over a few terms can cancel far below its terms
    # (and its fp32 relative error with it); four such sums at once practically cannot.
    for length in (1, 2, 3, 4, 5, 6, 7, 15, 16, 17, 1023, 1024, 1025, 1028, 4095, 4096, 4097, 4100, 9001):
        check(*make_inputs(1, 4, length, kp, km, dtype))


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b,d", [(1, 1), (8, 1), (1, 5), (8, 5)])
def test_chunked_backward_batches_and_channels(dtype, b, d, seeded):
    check(*make_inputs(b, d, 2051, 3, 7, dtype))


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kp,km", [(3, 7), (4, 16), (4, 128)])
@pytest.mark.parametrize("offset", [0, 1, 2, 4])
def test_chunked_backward_row_alignment(dtype, kp, km, offset, seeded):
    # Rows that start 0, 1, 2 or 4 elements into a buffer, with a row stride of
    # L + offset: only some of them allow the 4-element vector accesses. dx is a view
    # too, and what lies around its rows stays untouched.
    b, d, length = 2, 3, 2052
    x = torch.randn(b, 3 * d, length + offset, device="cuda", dtype=dtype)[..., offset:]
    dout = torch.randn(b, d, length + offset, device="cuda", dtype=dtype)[..., offset:]
    _, wp, wm, skip = make_inputs(b, d, 1, kp, km, dtype)
    dx_buffer = torch.zeros(b, 3 * d, length + offset, device="cuda", dtype=dtype)
    _backward_into_poisoned(x, wp, wm, skip, dout, dx_buffer[..., offset:])
    assert torch.equal(dx_buffer[..., :offset], torch.zeros_like(dx_buffer[..., :offset]))


@requires_cuda
def test_chunked_backward_non_contiguous_inputs(seeded):
    for dtype in DTYPES:
        for layout in ("strided", "channel_last"):
            x, wp, wm, skip = make_inputs(2, 3, 1100, 3, 7, dtype, layout)
            check(x, wp, wm, skip, dout_layout="strided")


@requires_cuda
@pytest.mark.parametrize("kp,km", [(3, 7), (4, 16), (3, 128)])
def test_chunked_backward_is_deterministic(kp, km, seeded):
    # Many blocks, each walking 4 tiles: every gradient bitwise equal across runs.
    x, wp, wm, skip = make_inputs(4, 32, 20000, kp, km, torch.bfloat16)
    dout = torch.randn(4, 32, 20000, device="cuda", dtype=torch.bfloat16)
    runs = []
    for _ in range(3):
        inputs = [t.detach().requires_grad_(True) for t in (x, wp, wm, skip)]
        causalconv.b2b_causal_conv1d(*inputs).backward(dout)
        runs.append([t.grad for t in inputs])
    for later in runs[1:]:
        for a, b, name in zip(runs[0], later, ("dx", "dweight_proj", "dweight_mixer", "dskip_bias")):
            assert torch.equal(a, b), f"{name} differs bitwise between identical runs"


@requires_cuda
def test_b2b_racecheck_chunked_backward_shapes(seeded):
    # Small shapes of each chunked kernel (vector and element-wise rows, a block walking
    # several tiles) for compute-sanitizer racecheck / memcheck.
    for dtype in DTYPES:
        check(*make_inputs(1, 2, 4097, 3, 7, dtype))
        check(*make_inputs(2, 2, 3001, 4, 16, dtype))
        check(*make_inputs(1, 2, 3000, 3, 128, dtype))


# ---- the short-filter backward (Kp <= 4, Km <= 8, rows of x, dout and dx made of whole 16-byte
# vectors); contiguous rows of such lengths take it throughout the tests above too ----

@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kp,km", [(3, 7), (2, 2), (4, 8), (2, 3)])
def test_short_backward_padded_rows(dtype, kp, km, seeded):
    # Rows of every length made of whole 16-byte vectors by padding the row stride: partial
    # last vectors, the warp's step (256 / 128 steps) and span (4096 / 2048 steps at 16-bit /
    # fp32), several spans per row; dx into a NaN buffer whose padding must stay NaN.
    vec = 16 // torch.tensor([], dtype=dtype).element_size()
    for b, d in ((1, 1), (2, 3)):
        for length in (1, 7, 8, 9, 255, 256, 257, 2047, 2049, 4095, 4096, 4097, 8200, 10000):
            stride = (length + vec - 1) // vec * vec + vec
            x = torch.randn(b, 3 * d, stride, device="cuda", dtype=dtype)[..., :length]
            dout = torch.randn(b, d, stride, device="cuda", dtype=dtype)[..., :length]
            _, wp, wm, skip = make_inputs(b, d, 1, kp, km, dtype)
            if length % 2:
                skip.zero_()
            dx_buffer = torch.full((b, 3 * d, stride), float("nan"), device="cuda", dtype=dtype)
            _backward_into_poisoned(x, wp, wm, skip, dout, dx_buffer[..., :length])
            assert torch.isnan(dx_buffer[..., length:]).all(), f"L={length}: wrote outside the rows of dx"


# ---- the short-filter forward (Kp <= 4, Km <= 8, rows of whole 16-byte vectors); Kp = 5,
# Km = 9 and unaligned rows take the other kernels ----

def _forward_into_poisoned(x, wp, wm, skip, out):
    """The core's forward into out (NaN-filled first; a view into a larger NaN buffer is
    allowed), checked against the fp64 reference."""
    out.fill_(float("nan"))
    _C.b2b_causal_conv1d_forward(view(x), view(wp), view(wm), view(skip), view(out), None,
                                 torch.cuda.current_stream().cuda_stream)
    assert_forward_close(out, x, wp, wm, skip, f"B={x.shape[0]} D={out.shape[1]} L={x.shape[2]}")


SHORT_LENGTHS = (1, 2, 7, 8, 9, 255, 256, 257, 1000, 2049, 8200)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kp", [2, 3, 4, 5])
@pytest.mark.parametrize("km", [2, 3, 7, 8, 9])
def test_short_forward_contiguous(dtype, kp, km, seeded):
    # Contiguous rows: the short kernel when Kp <= 4, Km <= 8 and L is a multiple of the
    # vector width (8 at 16-bit, 4 at fp32: L = 8, 256, 1000, 8200), the CUDA-core v1 (or,
    # 16-bit Km = 9, the tensor cores) otherwise. Half the cases with skip = 0.
    for b, d in ((1, 1), (3, 3)):
        for length in SHORT_LENGTHS:
            x, wp, wm, skip = make_inputs(b, d, length, kp, km, dtype)
            if length % 2:
                skip.zero_()
            out = torch.empty(b, d, length, device="cuda", dtype=dtype)
            _forward_into_poisoned(x, wp, wm, skip, out)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kp,km", [(3, 7), (2, 2), (4, 8), (2, 3), (5, 7), (3, 9)])
def test_short_forward_padded_rows(dtype, kp, km, seeded):
    # Rows of every length made of whole 16-byte vectors by padding the row stride (the
    # short kernel's partial last vector), outputs into a NaN buffer whose padding must
    # stay NaN; then rows shifted by one element (misaligned base: the v1 fallback).
    vec = 16 // torch.tensor([], dtype=dtype).element_size()
    for b, d in ((1, 1), (3, 3)):
        for length in SHORT_LENGTHS:
            stride = (length + vec - 1) // vec * vec + vec
            for shift in (0, 1):
                xbuf = torch.randn(b, 3 * d, stride + 1, device="cuda", dtype=dtype)
                x = xbuf[:, :, shift:shift + length]
                _, wp, wm, skip = make_inputs(b, d, 1, kp, km, dtype)
                if length % 2:
                    skip.zero_()
                obuf = torch.full((b, d, stride + 1), float("nan"), device="cuda", dtype=dtype)
                out = obuf[:, :, shift:shift + length]
                _forward_into_poisoned(x, wp, wm, skip, out)
                rest = torch.cat([obuf[:, :, :shift], obuf[:, :, shift + length:]], dim=2)
                assert torch.isnan(rest).all(), f"L={length} shift={shift}: wrote outside the rows of out"


@requires_cuda
def test_b2b_racecheck_short_forward_shapes(seeded):
    # Small shapes of the short forward (full and partial last vectors, several spans per
    # row) for compute-sanitizer memcheck and racecheck; odd lengths take its realigned form
    # (rows off the 16-byte grid: the warp ring's extra unit, the walk past the row's end
    # across a span of 2048 / 4096 steps).
    for dtype in DTYPES:
        for length in (8, 1000, 2049 + 7, 2047, 4095):
            check(*make_inputs(2, 2, length, 3, 7, dtype))
