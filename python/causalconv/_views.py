"""Turn torch tensors into the plain tuples the core binding takes."""

from __future__ import annotations

from typing import Optional

import torch

_DTYPE_CODES = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2, torch.float64: 3}
_CUDA = 1
_CPU = 0


def view(t: torch.Tensor) -> tuple:
    """(data_ptr, dtype_code, device_kind, device_index, sizes, strides) for the core."""
    code = _DTYPE_CODES.get(t.dtype)
    if code is None:
        raise ValueError(f"expected a float32, float16, bfloat16 or float64 tensor, got {t.dtype}")
    # torch.Size is a tuple, which the binding takes as it is.
    kind, index = (_CUDA, t.get_device()) if t.is_cuda else (_CPU, 0)
    return (t.data_ptr(), code, kind, index, t.shape, t.stride())


def optional_view(t: Optional[torch.Tensor]) -> Optional[tuple]:
    return None if t is None else view(t)


# The raw handle of a device's current stream: torch.cuda.current_stream builds a Stream object,
# 6.5 us a call on the H200 machine (scripts/host_overhead.py), paid on every op call.
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def stream_of(t: torch.Tensor) -> int:
    """The current CUDA stream of t's device (0 for CPU tensors, which the core rejects)."""
    if not t.is_cuda:
        return 0
    if _current_raw_stream is not None:
        return _current_raw_stream(t.get_device())
    return torch.cuda.current_stream(t.device).cuda_stream


def scratch(nbytes: int, like: torch.Tensor) -> Optional[torch.Tensor]:
    """nbytes of caller-owned memory on like's device, from torch's caching allocator (None for 0)."""
    if nbytes == 0:
        return None
    return torch.empty(nbytes // 4 + 1, dtype=torch.float32, device=like.device)


def workspace(nbytes: int, like: torch.Tensor) -> Optional[tuple]:
    """Scratch memory for one call, as the view the core takes."""
    return optional_view(scratch(nbytes, like))


def rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t with unit stride along its last dim (what the row-reading kernels take); a tensor
    that is not 3-D, or whose rows have one element, is returned as it is."""
    return t if t.dim() != 3 or t.shape[-1] <= 1 or t.stride(-1) == 1 else t.contiguous()


def eager_cuda(t: torch.Tensor) -> bool:
    """Plain eager CUDA data: the ops then call their kernels through an autograd.Function
    rather than the custom op, whose Python dispatch costs about half the host time of a
    small forward+backward. torch.compile, torch.export and fake tensors keep the custom op."""
    return type(t) is torch.Tensor and t.is_cuda and not torch.compiler.is_compiling()
