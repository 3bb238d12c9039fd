"""Module of the dynamic co-evidential aggregator (Holmes Eq. 16): see
:func:`evidential_prvr.functional.dempster_shafer_fusion`."""

from __future__ import annotations

import torch
from torch import nn

from evidential_prvr.functional._dempster_shafer import DempsterShaferOutput, dempster_shafer_fusion


class DempsterShaferFusion(nn.Module):
    """Parameter-free Dempster-Shafer fusion of two Dirichlet opinions (Holmes Eq. 16).

    ``forward(alpha_a, alpha_b)`` is one call of :func:`~evidential_prvr.functional.dempster_shafer_fusion`:
    fused parameters, beliefs, uncertainty and conflict. Differentiable.

    Parameters
    ----------
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import DempsterShaferFusion
    >>> DempsterShaferFusion()(torch.tensor([3.0, 1.0]), torch.tensor([2.0, 2.0])).uncertainty
    tensor(0.2857)

    References
    ----------
    Holmes (ICML 2026), Eq. 16; Han et al., "Trusted Multi-View Classification", ICLR 2021.
    """

    def __init__(self, validate_args: bool | None = None) -> None:
        super().__init__()
        self.validate_args = validate_args

    def forward(self, alpha_a: torch.Tensor, alpha_b: torch.Tensor) -> DempsterShaferOutput:
        """Fuse ``alpha_a`` and ``alpha_b`` (same shape ``[..., K]``, :math:`\\alpha \\ge 1`)."""
        return dempster_shafer_fusion(alpha_a, alpha_b, validate_args=self.validate_args)
