"""The custom ops' fake (meta) implementations, which torch.compile and torch.export
trace with: output shapes, dtypes and memory formats, forward and backward. Runs
without a GPU on meta tensors."""

import pytest
import torch

import causalconv


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_shape_and_format(dtype):
    w = torch.empty(8, 4, device="meta", dtype=dtype)
    x = torch.empty(2, 8, 16, device="meta", dtype=dtype)
    y = causalconv.causal_conv1d(x, w)
    assert (y.shape, y.dtype, y.is_contiguous()) == ((2, 8, 16), dtype, True)

    x_channel_last = torch.empty(2, 16, 8, device="meta", dtype=dtype).transpose(1, 2)
    y = causalconv.causal_conv1d(x_channel_last, w)
    assert y.shape == (2, 8, 16) and y.stride(1) == 1, "channel-last in, channel-last out"


def test_output_channels_follow_the_weight():
    x = torch.empty(1, 6, 5, device="meta")
    y = causalconv.causal_conv1d(x, torch.empty(4, 3, 2, device="meta"), groups=2)
    assert y.shape == (1, 4, 5)


def test_backward_gradient_shapes():
    x = torch.empty(2, 8, 16, device="meta", requires_grad=True)
    w = torch.empty(8, 1, 4, device="meta", requires_grad=True)
    b = torch.empty(8, device="meta", requires_grad=True)
    causalconv.causal_conv1d(x, w, b, activation="silu").sum().backward()
    assert (x.grad.shape, w.grad.shape, b.grad.shape) == ((2, 8, 16), (8, 1, 4), (8,))


def test_channel_last_gradients_keep_the_layout_the_kernels_write():
    # torch.autograd.grad returns dx as the backward op made it (.grad would be restrided to x's layout).
    x = torch.empty(2, 16, 8, device="meta").transpose(1, 2).requires_grad_(True)
    (dx,) = torch.autograd.grad(causalconv.causal_conv1d(x, torch.empty(8, 4, device="meta"), dilation=2).sum(), x)
    assert dx.shape == (2, 8, 16) and dx.stride(1) == 1, "depthwise channel-last: dx channel-last"
    (dx,) = torch.autograd.grad(causalconv.causal_conv1d(x, torch.empty(8, 200, device="meta"), dilation=2).sum(), x)
    assert dx.is_contiguous(), "reach beyond the channel-last kernel: read as rows, dx channel-first"


def test_a_non_3d_input_reaches_the_core_not_a_python_unpacking_error():
    x, w = torch.empty(8, 16, device="meta"), torch.empty(8, 4, device="meta")
    assert causalconv.causal_conv1d(x, w).shape == (0, 0, 0)  # fake: the core would raise ValueError


def test_torch_export_keeps_the_custom_op():
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(8, 4, device="meta"))

        def forward(self, x):
            return causalconv.causal_conv1d(x, self.weight, activation="silu")

    exported = torch.export.export(Layer(), (torch.empty(2, 8, 16, device="meta"),))
    targets = [n.target for n in exported.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.causalconv.causal_conv1d_fwd.default]


def test_torch_compile_fullgraph_traces_the_op():
    compiled = torch.compile(lambda x, w: causalconv.causal_conv1d(x, w) * 2, fullgraph=True, backend="eager")
    y = compiled(torch.empty(2, 8, 16, device="meta"), torch.empty(8, 4, device="meta"))
    assert y.shape == (2, 8, 16)


# (x, weight, bias) needing a gradient, and whether there is a bias at all.
GRADIENT_CASES = [(needs, with_bias) for with_bias in (False, True)
                  for needs in [(True, False, False), (False, True, False), (False, False, True), (True, True, False),
                                (False, True, True), (True, True, True)]
                  if with_bias or not needs[2]]


@pytest.mark.parametrize("needs,with_bias", GRADIENT_CASES,
                         ids=lambda v: "".join(n for n, need in zip(("x", "w", "b"), v) if need)
                         if isinstance(v, tuple) else ("bias" if v else "nobias"))
def test_backward_asks_only_for_the_gradients_autograd_needs(monkeypatch, needs, with_bias):
    # The backward op is asked for the gradients of the inputs that need one (dbias only with a
    # bias); the others come back as None. Through the custom op here (meta tensors);
    # tests/python/test_causal_conv1d_*.py run the kernels the same way.
    from causalconv import ops
    asked = []
    new_grads = ops._new_grads
    monkeypatch.setattr(ops, "_new_grads", lambda x, w, wanted=ops.WANT_ALL: asked.append(wanted) or
                        new_grads(x, w, wanted))
    needs_x, needs_w, needs_b = needs
    x = torch.empty(2, 8, 16, device="meta", requires_grad=needs_x)
    w = torch.empty(8, 1, 4, device="meta", requires_grad=needs_w)
    b = torch.empty(8, device="meta", requires_grad=needs_b) if with_bias else None
    inputs = [t for t in (x, w, b) if t is not None and t.requires_grad]
    grads = torch.autograd.grad(causalconv.causal_conv1d(x, w, b).sum(), inputs)
    assert [g.shape for g in grads] == [t.shape for t in inputs]
    expected = (ops.WANT_DX if needs_x else 0) | (ops.WANT_DWEIGHT if needs_w else 0) | (
        ops.WANT_DBIAS if needs_b else 0)
    assert asked == [expected]

