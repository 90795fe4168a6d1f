import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

requires_cuda = pytest.mark.skipif(
    not HAS_CUDA, reason="needs a CUDA GPU: torch.cuda.is_available() is False on this machine"
)

# Per-dtype bounds on relative L2 error against the fp64 reference (DESIGN.md §4).
REL_L2_BOUND = {torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    denom = ref.norm().item()
    err = (out - ref).norm().item()
    return err / denom if denom > 0 else err


# Weight and bias gradients are fp32 sums over B*L terms, whose rounding error grows
# like sqrt(B*L) * 2^-24 times the terms' magnitude, while random-signed terms cancel to
# a sum only ~sqrt(B*L) times one term: in fp32 they get a looser bound than the short
# per-element sums (1e-5 was exceeded once, 1.3e-5 on dbias over 6000 terms, on the H200).
REDUCTION_REL_L2_BOUND = {torch.float32: 5e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


# Below a dtype's smallest normal number its rounding error is absolute (half this spacing),
# not relative: a tiny output (fp16 from 6e-5 down) may miss a relative bound by rounding alone.
SUBNORMAL_SPACING = {torch.float32: 2.0**-149, torch.float16: 2.0**-24, torch.bfloat16: 2.0**-133}


def assert_close_to_reference(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = "output",
                              reduction: bool = False, magnitude: torch.Tensor | None = None):
    """||out - ref|| <= bound * (||ref|| + ||magnitude||) + subnormal allowance. magnitude, when
    given, is the reference on |inputs| (each output's sum of |terms|): the scale rounding
    errors grow with, which a sum that cancels (a tiny shape: one channel, L = 2) hides
    from ||ref|| alone."""
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{what}: non-finite values (unwritten or overflowed elements)"
    err = rel_l2(out, ref)
    bound = (REDUCTION_REL_L2_BOUND if reduction else REL_L2_BOUND)[dtype]
    diff = out.double() - ref.double()
    max_abs = diff.abs().max().item() if out.numel() else 0.0
    scale = ref.double().norm().item() + (magnitude.double().norm().item() if magnitude is not None else 0.0)
    allowed = bound * scale + SUBNORMAL_SPACING[dtype] * out.numel() ** 0.5
    assert diff.norm().item() <= allowed, \
        f"{what}: relative L2 error {err:.3e} > {bound:.0e} (max abs error {max_abs:.3e})"


@pytest.fixture
def seeded():
    """A fresh seed each run (printed on failure) so inputs differ run to run."""
    seed = torch.seed() % (2**31)
    torch.manual_seed(seed)
    return seed


# Which of (x, weight, bias) need a gradient: each subset autograd can ask the backward for.
GRADIENT_SUBSETS = [(True, False, False), (False, True, False), (False, False, True), (True, True, False),
                    (False, True, True), (True, False, True)]


def subset_id(needs) -> str:
    return "+".join(name for name, need in zip(("dx", "dweight", "dbias"), needs) if need)


def gradients_of_a_subset(op, x, weight, bias, needs):
    """op(x, weight, bias) with only the inputs marked in needs requiring a gradient; returns
    the output gradient used and {index in (x, weight, bias): gradient}."""
    leaves = [None if t is None else t.detach().requires_grad_(need) for t, need in zip((x, weight, bias), needs)]
    y = op(*leaves)
    dy = torch.randn_like(y)
    wanted = [i for i, t in enumerate(leaves) if t is not None and t.requires_grad]
    grads = torch.autograd.grad(y, [leaves[i] for i in wanted], dy)
    return dy, dict(zip(wanted, grads))
