"""The benchmark case registry.

A case names one shape of one op in one dtype and carries everything needed to
run, time and check it. ``tensor_case`` builds a case from the op's input
shapes and callables; one helper per op family (``depthwise`` below) turns a
shape into a ``tensor_case`` call, and ``register`` adds it to ``CASES``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, ContextManager, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

import causalconv
from causalconv import reference

Inputs = Dict[str, torch.Tensor]
# What a run returns: the output, then (forward+backward cases) the gradient of every input.
Outputs = Tuple[torch.Tensor, ...]
Runner = Callable[[Inputs], Outputs]

# Relative L2 error bounds against the fp64 reference (DESIGN.md §4).
REL_L2_BOUND = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
# Weight and bias gradients are fp32 sums over batch x length terms: their rounding grows with
# the term count while random-signed terms cancel, so fp32 gets the looser bound the tests use.
REDUCTION_REL_L2_BOUND = {torch.float32: 5e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
DTYPE_NAME = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


class Unavailable(Exception):
    """Raised by a baseline factory when the baseline cannot run this case; the message says why."""


# A baseline factory returns the baseline's runner or raises Unavailable.
BaselineFactory = Callable[[], Runner]


@dataclass(frozen=True)
class Case:
    name: str
    family: str
    dtype: torch.dtype
    make_inputs: Callable[[torch.device, int], Inputs]
    run_ours: Runner
    baselines: Dict[str, BaselineFactory]
    bytes_moved: int  # minimum HBM traffic: each input read once, each output written once
    flops: int
    reference: Callable[[Inputs], Outputs]  # fp64 results of what run_* returns
    output_names: Tuple[str, ...] = ("out",)  # one per result: "out", then "d<input>" per gradient
    reductions: Tuple[str, ...] = ()  # gradients summed over batch and length (weights, biases)
    quick: bool = False  # part of the --quick subset
    allclose: Optional[Tuple[float, float]] = None  # (atol, rtol): also require torch.allclose

    def check(self, outs: Outputs, refs: Outputs) -> dict:
        bounds = [(REDUCTION_REL_L2_BOUND if n in self.reductions else REL_L2_BOUND)[self.dtype]
                  for n in self.output_names]
        return compare_outputs(self.output_names, outs, refs, bounds, self.allclose)


def compare(out: torch.Tensor, ref: torch.Tensor, bound: float,
            allclose: Optional[Tuple[float, float]] = None) -> dict:
    """Relative L2 and max abs error of ``out`` against the fp64 ``ref``; NaN/inf fails.

    With ``allclose=(atol, rtol)`` the verdict also requires ``torch.allclose`` with those
    tolerances (recorded as ``result["allclose"]``).
    """
    if not bool(torch.isfinite(out).all()):  # errors would be NaN: record none, fail
        return {"rel_l2": None, "max_abs": None, "bound": bound, "passed": False, "note": "non-finite output"}
    diff = out.detach().double() - ref
    ref_norm = ref.norm().item()
    rel_l2 = diff.norm().item() / ref_norm if ref_norm > 0 else diff.norm().item()
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    result = {"rel_l2": rel_l2, "max_abs": max_abs, "bound": bound, "passed": rel_l2 <= bound, "note": ""}
    if allclose is not None:
        atol, rtol = allclose
        close = bool(torch.allclose(out.detach().double(), ref, atol=atol, rtol=rtol))
        result["allclose"] = close
        result["passed"] = result["passed"] and close
        result["note"] = f"allclose(atol={atol:g}, rtol={rtol:g}) " + ("ok" if close else "fails")
    return result


def compare_outputs(names: Sequence[str], outs: Outputs, refs: Outputs, bounds: Sequence[float],
                    allclose: Optional[Tuple[float, float]] = None) -> dict:
    """``compare`` of the output (with ``allclose``, the forward's accuracy contract) and of every
    gradient after it (its relative L2 bound only); any failure fails the verdict.

    ``rel_l2`` and ``max_abs`` stay the output's; ``grad_rel_l2`` is the worst gradient's and the
    note names the gradients that fail.
    """
    result = compare(outs[0], refs[0], bounds[0], allclose=allclose)
    if len(names) == 1:
        return result
    failed, worst = [], 0.0
    for name, out, ref, bound in zip(names[1:], outs[1:], refs[1:], bounds[1:]):
        grad = compare(out, ref, bound)
        if not grad["passed"]:
            failed.append(name)
        worst = max(worst, grad["rel_l2"] if grad["rel_l2"] is not None else math.inf)
    result["grad_rel_l2"] = worst
    result["passed"] = result["passed"] and not failed
    grads = f"gradients fail: {', '.join(failed)}" if failed else f"gradients rel L2 {worst:.1e}"
    result["note"] = "; ".join(n for n in (grads, result["note"]) if n)
    return result


CASES: List[Case] = []


def register(case: Case) -> Case:
    CASES.append(case)
    return case


def select(cases: Sequence[Case], filters: Sequence[str] = (), quick: bool = False) -> List[Case]:
    """Cases whose name contains any of ``filters`` (all when empty), restricted to the quick subset if asked."""
    return [c for c in cases
            if (not quick or c.quick) and (not filters or any(f in c.name for f in filters))]


def tensor_case(*, family: str, name: str, dtype: torch.dtype, inputs: Dict[str, Sequence[int]],
                output: Sequence[int], ours: Callable[..., torch.Tensor],
                reference: Callable[..., torch.Tensor], baselines: Dict[str, BaselineFactory],
                flops: int, backward: bool = False, quick: bool = False,
                channel_last: Sequence[str] = (), scales: Optional[Dict[str, float]] = None,
                baseline_contexts: Optional[Dict[str, Callable[[], ContextManager]]] = None,
                allclose: Optional[Tuple[float, float]] = None) -> Case:
    """A case whose inputs are seeded randn tensors of ``dtype``, passed to the callables by name.

    Inputs named in ``channel_last`` (and the output gradient, when the case has
    one) are (B, C, L) views of (B, L, C) storage. ``scales`` multiplies named inputs
    (e.g. weights at nn.Conv1d's initial scale). A baseline named in
    ``baseline_contexts`` runs (forward and backward) inside that context manager,
    e.g. with TF32 switched on or off.

    With ``backward`` every run does forward + backward with respect to all inputs
    (an extra ``dout`` input holds the output gradient) and returns the output and
    every input's gradient; the check compares each with fp64 autograd through
    ``reference``.
    """
    nbytes = dtype.itemsize
    input_bytes = sum(math.prod(s) for s in inputs.values()) * nbytes
    output_bytes = math.prod(output) * nbytes
    if backward:
        # Forward reads the inputs and writes the output; backward reads the inputs
        # again plus dout and writes one gradient per input.
        bytes_moved = 3 * input_bytes + 2 * output_bytes
    else:
        bytes_moved = input_bytes + output_bytes

    def make_inputs(device, seed):
        gen = torch.Generator(device=device).manual_seed(seed)
        shapes = dict(inputs, **({"dout": output} if backward else {}))
        tensors = {n: _randn(s, n in channel_last or (n == "dout" and bool(channel_last)), gen, device, dtype) for n, s in shapes.items()}
        for n, scale in (scales or {}).items():
            tensors[n] = tensors[n].mul_(scale)
        for n in inputs:
            tensors[n].requires_grad_(backward)
        return tensors

    def runner(fn):
        return _forward_backward(fn, list(inputs)) if backward else (lambda t: (fn(**t),))

    def reference_run(t: Inputs) -> Outputs:
        if not backward:
            return (reference(**{n: t[n].detach() for n in inputs}),)
        leaves = {n: t[n].detach().double().requires_grad_(True) for n in inputs}
        out = reference(**leaves)
        grads = torch.autograd.grad(out, list(leaves.values()), t["dout"].double())
        return (out.detach(), *grads)

    def lazy_runner(name, factory):
        context = (baseline_contexts or {}).get(name)
        if context is None:
            return lambda: runner(factory())
        return lambda: _in_context(context, runner(factory()))

    return Case(name=name + (" fwd+bwd" if backward else ""), family=family, dtype=dtype,
                make_inputs=make_inputs, run_ours=runner(ours),
                baselines={b: lazy_runner(b, f) for b, f in baselines.items()},
                bytes_moved=bytes_moved, flops=flops, reference=reference_run,
                output_names=("out", *(f"d{n}" for n in inputs)) if backward else ("out",),
                # An input without the output's batch and length is summed over them in backward.
                reductions=tuple(f"d{n}" for n, shape in inputs.items()
                                 if len(shape) != 3 or (shape[0], shape[2]) != (output[0], output[2])),
                quick=quick, allclose=allclose)


def _in_context(context: Callable[[], ContextManager], run: Runner) -> Runner:
    def run_in_context(t: Inputs) -> torch.Tensor:
        with context():
            return run(t)
    return run_in_context


def _randn(shape, channel_last: bool, gen, device, dtype) -> torch.Tensor:
    if not channel_last:
        return torch.randn(tuple(shape), generator=gen, device=device, dtype=dtype)
    b, c, length = shape
    return torch.randn((b, length, c), generator=gen, device=device, dtype=dtype).transpose(1, 2)


def _forward_backward(fn: Callable[..., torch.Tensor], differentiable: List[str]) -> Runner:
    def run(t: Inputs) -> Outputs:
        out = fn(**{n: t[n] for n in differentiable})
        # autograd.grad rather than .backward(): nothing accumulates across timed runs.
        grads = torch.autograd.grad(out, [t[n] for n in differentiable], t["dout"])
        return (out.detach(), *grads)
    return run


# ---- depthwise causal_conv1d -------------------------------------------------

def torch_depthwise(x, weight, bias=None, *, activation=None):
    """The PyTorch eager composite users replace: pad + grouped conv1d (+ silu)."""
    y = F.conv1d(F.pad(x, (weight.shape[-1] - 1, 0)), weight.unsqueeze(1), bias, groups=x.shape[1])
    return F.silu(y) if activation == "silu" else y


def dao_depthwise(width: int, activation: Optional[str]) -> Runner:
    if width > 4:
        raise Unavailable(f"Dao causal_conv1d supports K <= 4, this case has K={width}")
    try:
        from causal_conv1d import causal_conv1d_fn
    except (ImportError, OSError) as e:
        raise Unavailable(f"import causal_conv1d failed: {type(e).__name__}: {e}") from None
    return lambda x, weight, bias=None: causal_conv1d_fn(x, weight, bias, activation=activation)


def depthwise(batch: int, channels: int, length: int, width: int, dtype: torch.dtype, *,
              bias: bool = False, activation: Optional[str] = None, backward: bool = False,
              channel_last: bool = False, quick: bool = False) -> Case:
    inputs = {"x": (batch, channels, length), "weight": (channels, width)}
    if bias:
        inputs["bias"] = (channels,)
    suffix = (" bias" if bias else "") + (f" {activation}" if activation else "") + (" BLC" if channel_last else "")
    flops = 2 * batch * channels * length * width
    return tensor_case(
        family="depthwise",
        name=f"depthwise {DTYPE_NAME[dtype]} B{batch} D{channels} L{length} K{width}{suffix}",
        dtype=dtype, inputs=inputs, output=(batch, channels, length),
        ours=lambda x, weight, bias=None: causalconv.causal_conv1d(x, weight, bias, activation=activation),
        reference=lambda x, weight, bias=None: reference.causal_conv1d(x, weight, bias, activation=activation),
        baselines={"torch": lambda: partial(torch_depthwise, activation=activation),
                   "dao": lambda: dao_depthwise(width, activation)},
        flops=3 * flops if backward else flops,  # backward: dx and dweight cost one forward each
        backward=backward, quick=quick, channel_last=("x",) if channel_last else ())


# Issue 4's shapes (B, C, L, K), forward and forward+backward, bf16 and fp32.
DEPTHWISE_SHAPES = [(4, 4096, 8192, 4), (8, 2048, 2048, 4), (1, 12288, 8192, 3), (1, 4096, 8192, 7),
                    (1, 4096, 8192, 128), (1, 4096, 65536, 4)]
for _dtype in (torch.bfloat16, torch.float32):
    for _backward in (False, True):
        for _b, _c, _l, _k in DEPTHWISE_SHAPES:
            register(depthwise(_b, _c, _l, _k, _dtype, backward=_backward,
                               quick=(_b, _c, _l, _k) == (8, 2048, 2048, 4) and _dtype == torch.bfloat16))
        register(depthwise(4, 4096, 8192, 4, _dtype, backward=_backward, channel_last=True))
# Odd lengths (prompts): rows off the 16-byte boundary, which the kernels walk from the boundary
# before each row; bf16.
for _backward in (False, True):
    for _k in (4, 128):
        register(depthwise(1, 4096, 8191, _k, torch.bfloat16, backward=_backward))
# The Mamba block's call (bias and silu, both layouts): the activation is per output, on the
# kernels' critical path, and what users compare against Dao with.
for _backward in (False, True):
    for _channel_last in (False, True):
        register(depthwise(4, 4096, 8192, 4, torch.bfloat16, bias=True, activation="silu", backward=_backward,
                           channel_last=_channel_last))


# ---- b2b_causal_conv1d (the fused Hyena operator) ------------------------------

def torch_b2b(x, weight_proj, weight_mixer, skip_bias):
    """The unfused PyTorch eager composite, in the input dtype: two padded grouped convs and the gating."""
    p = torch_depthwise(x, weight_proj)
    x2, x1, v = p[:, 0::3], p[:, 1::3], p[:, 2::3]
    z = x1 * v
    h = torch_depthwise(z, weight_mixer) + skip_bias[:, None] * z
    return x2 * h


def b2b_flops(batch: int, dim: int, length: int, kp: int, km: int, backward: bool = False) -> int:
    """Forward: per output, three projection taps rows (2*Kp each), the mixer (2*Km), skip and gates (4).
    Forward+backward: the backward recomputes the forward and costs about two more (dx and the weight
    gradients each cost one forward's taps), so 3x the forward, as for depthwise."""
    forward = batch * dim * length * (6 * kp + 2 * km + 4)
    return 3 * forward if backward else forward


def b2b(batch: int, dim: int, length: int, kp: int, km: int, dtype: torch.dtype, *, backward: bool = False,
        quick: bool = False) -> Case:
    return tensor_case(
        family="b2b",
        name=f"b2b {DTYPE_NAME[dtype]} B{batch} D{dim} L{length} Kp{kp} Km{km}",
        dtype=dtype,
        inputs={"x": (batch, 3 * dim, length), "weight_proj": (3 * dim, kp), "weight_mixer": (dim, km),
                "skip_bias": (dim,)},
        output=(batch, dim, length),
        ours=causalconv.b2b_causal_conv1d,
        reference=reference.b2b_causal_conv1d,
        baselines={"torch": lambda: torch_b2b},
        flops=b2b_flops(batch, dim, length, kp, km, backward),
        backward=backward, quick=quick)


# Issue shapes (B, D, L, Kp, Km), forward and forward+backward, bf16 and fp32.
B2B_SHAPES = [(b, 4096, 8192, kp, km) for b in (1, 4) for kp, km in ((3, 7), (3, 128), (4, 256))] + [
    (1, 8192, 8192, 3, 7), (1, 4096, 131072, 3, 128)]
for _dtype in (torch.bfloat16, torch.float32):
    for _backward in (False, True):
        for _shape in B2B_SHAPES:
            register(b2b(*_shape, _dtype, backward=_backward,
                         quick=_shape == (1, 4096, 8192, 3, 7) and _dtype == torch.bfloat16))
# Odd lengths (prompts): x's three rows and the output row each at their own distance past a 16-byte
# boundary; bf16.
for _backward in (False, True):
    for _kp, _km in ((3, 7), (3, 128)):
        register(b2b(1, 4096, 8191, _kp, _km, torch.bfloat16, backward=_backward))

# ---- dense and grouped causal_conv1d -------------------------------------------------

def torch_dense(x, weight, bias=None, *, dilation=1, groups=1, activation=None):
    """The PyTorch eager composite users replace: causal left pad + conv1d (+ silu)."""
    y = F.conv1d(F.pad(x, ((weight.shape[-1] - 1) * dilation, 0)), weight, bias, dilation=dilation, groups=groups)
    return F.silu(y) if activation == "silu" else y


@contextlib.contextmanager
def tf32(allowed: bool):
    """PyTorch's TF32 switches (cuDNN convolutions and cuBLAS matmuls) set for the block."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def dense(batch: int, c_in: int, c_out: int, length: int, width: int, dtype: torch.dtype, *,
          dilation: int = 1, groups: int = 1, bias: bool = True, activation: Optional[str] = None,
          backward: bool = False, quick: bool = False) -> Case:
    """Dense/grouped causal conv with nn.Conv1d-scale weights (so fp32 checks are meaningful).

    fp32 cases are checked with allclose(atol=1e-4, rtol=1e-4) against fp64 on top of the
    relative L2 bound, and carry two PyTorch baselines: TF32 allowed (PyTorch's default for
    convolutions) and TF32 off; each reports its own verdict.
    """
    inputs = {"x": (batch, c_in, length), "weight": (c_out, c_in // groups, width)}
    if bias:
        inputs["bias"] = (c_out,)
    fan_in = (c_in // groups) * width
    scale = 1.0 / math.sqrt(3.0 * fan_in)  # std of nn.Conv1d's uniform(+-1/sqrt(fan_in)) init
    options = dict(dilation=dilation, groups=groups, activation=activation)
    suffix = ((f" d{dilation}" if dilation != 1 else "") + (f" g{groups}" if groups != 1 else "")
              + ("" if bias else " nobias") + (f" {activation}" if activation else ""))
    torch_runner = lambda: partial(torch_dense, **options)  # noqa: E731
    if dtype == torch.float32:
        baselines = {"torch tf32": torch_runner, "torch fp32": torch_runner}
        contexts = {"torch tf32": lambda: tf32(True), "torch fp32": lambda: tf32(False)}
    else:
        baselines, contexts = {"torch": torch_runner}, {}
    flops = 2 * batch * c_out * (c_in // groups) * width * length
    return tensor_case(
        family="dense",
        name=f"dense {DTYPE_NAME[dtype]} B{batch} Cin{c_in} Cout{c_out} L{length} K{width}{suffix}",
        dtype=dtype, inputs=inputs, output=(batch, c_out, length),
        ours=lambda x, weight, bias=None: causalconv.causal_conv1d(x, weight, bias, **options),
        reference=lambda x, weight, bias=None: reference.causal_conv1d(x, weight, bias, dilation, groups,
                                                                       activation),
        baselines=baselines, baseline_contexts=contexts,
        flops=3 * flops if backward else flops,  # backward: dx and dweight cost one forward each
        backward=backward, quick=quick, scales={"weight": scale, **({"bias": scale} if bias else {})},
        allclose=(1e-4, 1e-4) if dtype == torch.float32 else None)


# Issue 5's shapes (B, C_in, C_out, L, K, dilation): the seed case ("replace nn.Conv1d +
# F.pad"), a wide one and a long dilated one; forward and forward+backward, fp32 and bf16.
DENSE_SHAPES = [(32, 256, 256, 8192, 4, 1), (8, 512, 512, 4096, 3, 1), (16, 64, 64, 16000, 2, 8)]
for _dtype in (torch.float32, torch.bfloat16):
    for _backward in (False, True):
        for _b, _ci, _co, _l, _k, _d in DENSE_SHAPES:
            register(dense(_b, _ci, _co, _l, _k, _dtype, dilation=_d, backward=_backward))
register(dense(4, 64, 64, 2048, 4, torch.bfloat16, quick=True))
