"""Module of flexible optimal transport with an adaptive dustbin (Holmes §3.3, Eq. 19-20): see
:func:`evidential_prvr.functional.flexible_ot`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._module_bases import _SettingsModule
from evidential_prvr._settings import check_settings, settings_fields
from evidential_prvr.choices import (
    DatasetName,
    FOTMarginals,
    FOTNormalization,
    MinmaxScope,
    Preset,
    SinkhornGrad,
    SinkhornMethod,
)
from evidential_prvr.functional._flexible_ot import (
    FlexibleOTResult,
    POTProblem,
    TransportSettings,
    _pot_problems,
    flexible_ot,
)
from evidential_prvr.presets import module_settings


class FlexibleOT(_SettingsModule[TransportSettings]):
    """Entropic optimal transport with an adaptive dustbin, batched over videos (Holmes Eq. 19-20).

    Holds the settings of :func:`~evidential_prvr.functional.flexible_ot` (its documentation gives the
    problem, the marginals and why the plan does not depend on the dustbin value); ``forward`` is one
    call of it.

    The hyperparameters are keyword-only: they are the fields of
    :class:`~evidential_prvr.presets.TransportSettings` (:meth:`settings`), also readable and assignable
    as attributes (an assignment is checked like the constructor's argument).

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
        settings = TransportSettings(epsilon=epsilon, n_iters=n_iters, dustbin_quantile=dustbin_quantile,
                                     normalize=normalize, minmax_over=minmax_over, marginals=marginals, grad=grad,
                                     tol=tol, method=method)  # checks the values
        super().__init__(settings, validate_args)

    @classmethod
    def from_settings(cls, settings: TransportSettings, *, validate_args: bool | None = None) -> FlexibleOT:
        """The transport of a :class:`~evidential_prvr.presets.TransportSettings` (e.g. a registry section)."""
        check_settings(settings, TransportSettings)
        return cls(**settings_fields(settings, TransportSettings), validate_args=validate_args)

    # The fields of TransportSettings as attributes; assigning one rebuilds (and so re-checks) the settings.

    @property
    def epsilon(self) -> float:
        """The ``epsilon`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.epsilon

    @epsilon.setter
    def epsilon(self, value: float) -> None:
        self._settings = dataclasses.replace(self._settings, epsilon=value)

    @property
    def n_iters(self) -> int:
        """The ``n_iters`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.n_iters

    @n_iters.setter
    def n_iters(self, value: int) -> None:
        self._settings = dataclasses.replace(self._settings, n_iters=value)

    @property
    def dustbin_quantile(self) -> float | None:
        """The ``dustbin_quantile`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.dustbin_quantile

    @dustbin_quantile.setter
    def dustbin_quantile(self, value: float | None) -> None:
        self._settings = dataclasses.replace(self._settings, dustbin_quantile=value)

    @property
    def normalize(self) -> FOTNormalization:
        """The ``normalize`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.normalize

    @normalize.setter
    def normalize(self, value: FOTNormalization) -> None:
        self._settings = dataclasses.replace(self._settings, normalize=value)

    @property
    def minmax_over(self) -> MinmaxScope:
        """The ``minmax_over`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.minmax_over

    @minmax_over.setter
    def minmax_over(self, value: MinmaxScope) -> None:
        self._settings = dataclasses.replace(self._settings, minmax_over=value)

    @property
    def marginals(self) -> FOTMarginals:
        """The ``marginals`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.marginals

    @marginals.setter
    def marginals(self, value: FOTMarginals) -> None:
        self._settings = dataclasses.replace(self._settings, marginals=value)

    @property
    def grad(self) -> SinkhornGrad:
        """The ``grad`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.grad

    @grad.setter
    def grad(self, value: SinkhornGrad) -> None:
        self._settings = dataclasses.replace(self._settings, grad=value)

    @property
    def tol(self) -> float | None:
        """The ``tol`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.tol

    @tol.setter
    def tol(self, value: float | None) -> None:
        self._settings = dataclasses.replace(self._settings, tol=value)

    @property
    def method(self) -> SinkhornMethod:
        """The ``method`` of :meth:`settings` (assigning it re-validates the settings)."""
        return self._settings.method

    @method.setter
    def method(self, value: SinkhornMethod) -> None:
        self._settings = dataclasses.replace(self._settings, method=value)

    @classmethod
    def _preset_arguments(cls, preset: Preset, dataset: DatasetName | None) -> dict[str, Any]:
        return settings_fields(module_settings(preset, dataset).transport)

    def without_dustbin(self) -> FlexibleOT:
        """The same transport with the dustbin disabled (plain OT, Holmes Eq. 19)."""
        return FlexibleOT.from_settings(dataclasses.replace(self._settings, dustbin_quantile=None),
                                        validate_args=self.validate_args)

    def forward(
        self,
        sim: torch.Tensor,
        query_mask: torch.Tensor | None = None,
        clip_mask: torch.Tensor | None = None,
        return_dustbin_value: bool = False,
    ) -> FlexibleOTResult:
        """Solve the flexible transport of every video of ``sim [B, Mq, Mc]`` with the masks
        ``query_mask [B, Mq]`` and ``clip_mask [B, Mc]`` (see :func:`~evidential_prvr.functional.flexible_ot`)."""
        s = self._settings
        return flexible_ot(sim, query_mask, clip_mask, epsilon=s.epsilon, n_iters=s.n_iters,
                           dustbin_quantile=s.dustbin_quantile, normalize=s.normalize, minmax_over=s.minmax_over,
                           marginals=s.marginals, grad=s.grad, tol=s.tol, method=s.method,
                           return_dustbin_value=return_dustbin_value, validate_args=self.validate_args)

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
        return _pot_problems(sim, query_mask, clip_mask, self._settings)
