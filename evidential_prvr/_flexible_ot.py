"""Module of flexible optimal transport with an adaptive dustbin (Holmes §3.3, Eq. 19-20): see
:func:`evidential_prvr.functional.flexible_ot`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from evidential_prvr._checks import should_validate
from evidential_prvr._docs import VALUE_CHECKS, insert_docs
from evidential_prvr._module_bases import _SettingsModule
from evidential_prvr._overrides import (
    module_from_settings,
    settings_constructor,
    settings_fields,
    settings_of,
    settings_properties,
)
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
    _flexible_ot,
    prepare_fot_inputs,
    run_pot_problems,
)
from evidential_prvr.presets import module_settings


@settings_properties(TransportSettings)
@insert_docs(value_checks=VALUE_CHECKS)
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
    {value_checks}

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

    if TYPE_CHECKING:  # the attributes that settings_properties adds (the fields of TransportSettings)
        epsilon: float
        n_iters: int
        dustbin_quantile: float | None
        normalize: FOTNormalization
        minmax_over: MinmaxScope
        marginals: FOTMarginals
        grad: SinkhornGrad
        tol: float | None
        method: SinkhornMethod

    @dataclass(frozen=True, kw_only=True)
    class _Arguments(TransportSettings):
        """The constructor's arguments: the transport settings and ``validate_args``."""

        validate_args: bool | None = None

    @settings_constructor(_Arguments)
    def __init__(self, arguments: _Arguments) -> None:
        super().__init__(settings_of(arguments, TransportSettings), arguments.validate_args)

    @classmethod
    def from_settings(cls, settings: TransportSettings, *, validate_args: bool | None = None) -> FlexibleOT:
        """The transport of a :class:`~evidential_prvr.presets.TransportSettings` (e.g. a registry section)."""
        return module_from_settings(cls, TransportSettings, settings, validate_args=validate_args)

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
        validate = should_validate(self.validate_args)
        qmask, cmask, valid, dense = prepare_fot_inputs(sim, query_mask, clip_mask, self._settings, validate)
        return _flexible_ot(sim, qmask, cmask, valid, dense, self._settings, validate, return_dustbin_value)

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
        return run_pot_problems(sim, query_mask, clip_mask, self._settings)
