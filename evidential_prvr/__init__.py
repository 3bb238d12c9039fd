"""evidential-prvr: uncertainty-aware partially relevant video retrieval for PyTorch.

The library has two layers: :mod:`evidential_prvr.functional` holds pure tensor functions, one per
equation of the papers it implements, and this package exports the ``nn.Module`` wrappers with
hyperparameters, presets and named outputs.
"""

from evidential_prvr import functional

# Inter-video evidential learning (Holmes §3.2)

# Flexible optimal transport and intra-video evidential learning (Holmes §3.3)

# Basic retrieval objectives (Holmes App. B.1) and metrics

__version__ = "0.1.0"
