"""causalconv: causal 1-D convolution operators for long-sequence models.

C++/CUDA core, PyTorch front end. See README.md and docs/ for the contracts.
"""

from . import _C, nn, reference
from .ops import causal_conv1d

__version__ = _C.version()

__all__ = ["causal_conv1d", "reference", "__version__"]
