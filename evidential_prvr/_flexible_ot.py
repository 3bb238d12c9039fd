"""Module of flexible optimal transport with an adaptive dustbin (Holmes §3.3, Eq. 19-20): see
:func:`evidential_prvr.functional.flexible_ot`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._module_bases import PresetModule
from evidential_prvr._settings import TransportSettings, check_transport_options
from evidential_prvr.choices import (
    DatasetName,
    FOTMarginals,
    FOTNormalization,
    MinmaxScope,
    Preset,
    SinkhornGrad,
    SinkhornMethod,
)
from evidential_prvr.functional._flexible_ot import FlexibleOTResult, POTProblem, _pot_problems, flexible_ot
from evidential_prvr.presets import module_settings


class FlexibleOT(PresetModule):
    """Entropic optimal transport with an adaptive dustbin, batched over videos (Holmes Eq. 19-20).

    Holds the keyword arguments of :func:`~evidential_prvr.functional.flexible_ot` (its documentation gives the
    problem, the marginals and why the plan does not depend on the dustbin value) as plain attributes, checked
    here; ``forward`` is one call of it (which checks them again, so a value assigned later is checked when the
    module next runs). The hyperparameters are keyword-only.

    :meth:`from_preset`: ``"release"``: ε = 0.1, 50 iterations, dustbin at the 0.3 quantile, min-max
    normalisation over the padded block, SuperGlue-style marginals, stop-gradient plan (the same for every
    data set). ``"paper"`` (our reading of §3.3 and App. B.5): the raw similarities (the paper mentions no
    normalisation), the dustbin at the bottom 30%, uniform marginals (App. B.5), 50 iterations, ε = 0.1 (not
    given in the paper; the release value), stop-gradient plan (a label, Eq. 17). The transport settings are
    the same for all three data sets.

    Parameters
    ----------
    epsilon : float
        Entropic regularisation :math:`\\varepsilon > 0` (the release's ``pot_scale``).
    n_iters : int
        Sinkhorn iterations (maximum when ``tol`` is set).
    dustbin_quantile : float or None
        Quantile of the similarities that sets the dustbin value; None: no dustbin (plain OT, Eq. 19).
    normalize : {"minmax", None}
        Min-max normalisation of each video's similarities.
    marginals : {"release", "uniform"}
        Row marginals: SuperGlue-style (release) or uniform (App. B.5).
    tol : float or None
        Early-stopping tolerance on the row marginals (host synchronisations every 10 iterations).
    grad : {"detach", "autodiff"}
        Stop-gradient plan (release) or backpropagation through the iterations.
    method : {"auto", "log", "scaling"}
        Sinkhorn iteration scheme.
    minmax_over : {"block", "valid"}
        Min and max over the whole padded block (release) or over the valid entries.
    validate_args : bool, optional
        Value checks (host synchronisations); ``None`` follows :func:`evidential_prvr.set_default_validate_args`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr import FlexibleOT
    >>> fot = FlexibleOT.from_preset("release", dataset="tvr")
    >>> sim = torch.rand(4, 5, 32)  # 4 videos, up to 5 captions, 32 clips
    >>> query_mask = torch.tensor([[1, 1, 1, 0, 0], [1] * 5, [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    >>> result = fot(sim, query_mask)
    >>> result.assignment.shape, bool(result.plan[0, 3:].abs().sum() == 0)
    (torch.Size([4, 5, 32]), True)

    References
    ----------
    Holmes (ICML 2026), §3.3, Eq. 19-20 and App. B.5.
    """

    def __init__(
        self,
        *,
        epsilon: float = 0.1,
        n_iters: int = 50,
        dustbin_quantile: float | None = 0.3,
        normalize: FOTNormalization = "minmax",
        minmax_over: MinmaxScope = "block",
        marginals: FOTMarginals = "release",
        grad: SinkhornGrad = "detach",
        tol: float | None = None,
        method: SinkhornMethod = "auto",
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        check_transport_options(epsilon=epsilon, n_iters=n_iters, dustbin_quantile=dustbin_quantile,
                                normalize=normalize, minmax_over=minmax_over, marginals=marginals, grad=grad, tol=tol,
                                method=method)
        self.epsilon = epsilon
        self.n_iters = n_iters
        self.dustbin_quantile = dustbin_quantile
        self.normalize = normalize
        self.minmax_over = minmax_over
        self.marginals = marginals
        self.grad = grad
        self.tol = tol
        self.method = method
        self.validate_args = validate_args

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        return dataclasses.asdict(module_settings(preset, dataset).transport)

    def extra_repr(self) -> str:
        return (f"epsilon={self.epsilon}, n_iters={self.n_iters}, dustbin_quantile={self.dustbin_quantile}, "
                f"normalize={self.normalize!r}, minmax_over={self.minmax_over!r}, marginals={self.marginals!r}, "
                f"grad={self.grad!r}, tol={self.tol}, method={self.method!r}")

    def without_dustbin(self) -> FlexibleOT:
        """The same transport with the dustbin disabled (plain OT, Holmes Eq. 19; Table 3's OT ablation)."""
        return FlexibleOT(epsilon=self.epsilon, n_iters=self.n_iters, dustbin_quantile=None, normalize=self.normalize,
                          minmax_over=self.minmax_over, marginals=self.marginals, grad=self.grad, tol=self.tol,
                          method=self.method, validate_args=self.validate_args)

    def forward(
        self,
        sim: torch.Tensor,
        query_mask: torch.Tensor | None = None,
        clip_mask: torch.Tensor | None = None,
        return_dustbin_value: bool = False,
    ) -> FlexibleOTResult:
        """Solve the flexible transport of every video of ``sim [B, Mq, Mc]`` with the masks
        ``query_mask [B, Mq]`` and ``clip_mask [B, Mc]`` (see :func:`~evidential_prvr.functional.flexible_ot`)."""
        return flexible_ot(sim, query_mask, clip_mask, epsilon=self.epsilon, n_iters=self.n_iters,
                           dustbin_quantile=self.dustbin_quantile, normalize=self.normalize,
                           minmax_over=self.minmax_over, marginals=self.marginals, grad=self.grad, tol=self.tol,
                           method=self.method, return_dustbin_value=return_dustbin_value,
                           validate_args=self.validate_args)

    if TYPE_CHECKING:  # nn.Module.__call__ is untyped: calling the module is calling forward
        __call__ = forward

    def pot_problem(
        self, sim: torch.Tensor, query_mask: torch.Tensor | None = None, clip_mask: torch.Tensor | None = None
    ) -> list[POTProblem]:
        """Per video, the ``(a, b, M, reg)`` that ``ot.sinkhorn(a, b, M, reg, method="sinkhorn_log")`` solves to
        the same plan as this transport (at convergence; with the same number of iterations up to the update
        order), as float64 NumPy arrays over the valid entries of ``sim [B, Mq, Mc]`` and the masks.

        This loops over videos in Python: it is a verification aid, not a training path.

        Examples
        --------
        >>> import torch
        >>> from evidential_prvr import FlexibleOT
        >>> problem, = FlexibleOT().pot_problem(torch.tensor([[[0.9, 0.1]]], dtype=torch.float64))
        >>> problem.a, problem.b  # one query (1/3) and the dustbin (2/3); two clips
        (array([0.33333333, 0.66666667]), array([0.5, 0.5]))
        """
        transport = TransportSettings(epsilon=self.epsilon, n_iters=self.n_iters,
                                      dustbin_quantile=self.dustbin_quantile, normalize=self.normalize,
                                      minmax_over=self.minmax_over, marginals=self.marginals, grad=self.grad,
                                      tol=self.tol, method=self.method)  # checks the values
        return _pot_problems(sim, query_mask, clip_mask, transport)
