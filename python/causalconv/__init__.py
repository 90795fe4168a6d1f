"""causalconv: causal 1-D convolution operators for long-sequence models.

C++/CUDA core, PyTorch front end. See README.md and docs/ for the contracts.
"""

from . import _C, reference
from .b2b import b2b_causal_conv1d
from .ops import causal_conv1d
from . import nn

__version__ = _C.version()

__all__ = ["causal_conv1d", "b2b_causal_conv1d", "nn", "reference", "__version__"]
