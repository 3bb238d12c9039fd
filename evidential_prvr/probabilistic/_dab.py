"""DAB modules: Gaussian heads, the sampling-free distribution bridge and the PAC loss.

DAB = "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval" (ECCV 2026).
Its text (a summary, no numbered equations) is cited by section: Key Design 1 (probabilistic
embedding), 2 (distribution bridge), 3 (PAC loss). Choices it leaves open are documented on each
class and collected in ``docs/guide/probabilistic.rst``.
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from evidential_prvr._checks import check_choice, check_in_range, check_positive, check_tensor
from evidential_prvr._module_bases import PresetModule
from evidential_prvr.choices import LOGVAR_WEIGHT_INITS, DABDatasetName, DABPreset, LogVarWeightInit
from evidential_prvr.functional._dab import (
    bounded_contraction,
    bridge_step_sizes,
    combine_video_log_variances,
    pac_loss,
    sinusoidal_time_embedding,
)
from evidential_prvr.functional._gaussian import DiagonalGaussian, _check_gaussian
from evidential_prvr.presets import dab_settings
from evidential_prvr.probabilistic import _input_checks
from evidential_prvr.probabilistic._input_checks import DEFAULT_LOGVAR_BOUNDS, _InputChecks

#: The factor on PyTorch's default weights of a log-variance layer with ``logvar_weight_init="small"``.
SMALL_LOGVAR_WEIGHT_SCALE = 1e-3


class _LogVarHead(_InputChecks, PresetModule):
    """What the DAB heads share: the checked sizes and bounds, and their last layer, a clipped log-variance
    ``Linear(dim_in, dim_out)`` (:meth:`_logvar_layer`).

    Each head adds its own layers in its ``__init__`` and then ``self.logvar = self._logvar_layer(logvar_init)``
    last, so that the parameter order, and hence the seeded random initialisation, is the head's layers
    followed by ``logvar``.
    """

    def __init__(
        self, dim_in: int, dim_out: int, *, logvar_bounds: tuple[float, float], validate_args: bool | None,
        logvar_weight_init: LogVarWeightInit = "zero", logvar_gain: float = 1.0,
    ) -> None:
        super().__init__(validate_args)
        _input_checks.check_sizes(dim_in=dim_in, dim_out=dim_out)
        check_choice(logvar_weight_init, "logvar_weight_init", LOGVAR_WEIGHT_INITS)
        check_positive(logvar_gain, "logvar_gain")
        self.logvar_bounds = _input_checks.check_bounds(logvar_bounds)
        self.logvar_weight_init = logvar_weight_init
        self.logvar_gain = float(logvar_gain)
        self.dim_in = dim_in
        self.dim_out = dim_out

    def _logvar_layer(self, logvar_init: float) -> nn.Linear:
        """A new ``Linear(dim_in, dim_out)`` with its bias set to ``logvar_init`` and its weights as
        ``logvar_weight_init`` says (:data:`~evidential_prvr.choices.LOGVAR_WEIGHT_INITS`), both divided by
        ``logvar_gain`` (:meth:`_scaled_logvar` multiplies the output by it, so every gain starts alike). PyTorch's
        default draw is always made first, so the random stream of the layers built after it is the same for every
        choice."""
        layer = nn.Linear(self.dim_in, self.dim_out)
        with torch.no_grad():
            layer.bias.fill_(float(logvar_init))
            if self.logvar_weight_init == "zero":
                layer.weight.zero_()
            elif self.logvar_weight_init == "small":
                layer.weight.mul_(SMALL_LOGVAR_WEIGHT_SCALE)
            if self.logvar_gain != 1.0:
                layer.weight.div_(self.logvar_gain)
                layer.bias.div_(self.logvar_gain)
        return layer

    def _scaled_logvar(self, layer_output: torch.Tensor) -> torch.Tensor:
        """The log-variance layer's output times ``logvar_gain``, clipped to ``logvar_bounds``."""
        if self.logvar_gain != 1.0:  # gain 1 (DAB's plain linear head) leaves the output as it is, bit for bit
            layer_output = self.logvar_gain * layer_output
        return layer_output.clamp(*self.logvar_bounds)


class GaussianEmbeddingHead(_LogVarHead):
    """Map embeddings to diagonal Gaussians :math:`(\\mu, \\log\\sigma^2)` (DAB, Key Design 1).

    .. math::

        \\hat x = x / \\lVert x \\rVert_2,\\quad
        \\mu = W_\\mu \\operatorname{LN}_\\mu(\\hat x) + b_\\mu,\\quad
        \\log\\sigma^2 = \\operatorname{clip}\\big(W_\\sigma \\operatorname{LN}_\\sigma(\\hat x) + b_\\sigma,\\
            \\text{low}, \\text{high}\\big).

    Choices: each of the two "independent linear heads" has its own LayerNorm; :math:`\\mu` is not
    normalised; the log-variance bias starts at ``logvar_init`` (DAB: -2.0) and its weights at zero
    (``logvar_weight_init="zero"``; DAB does not say), so that every input starts with the same variance and
    the cost starts as a squared distance of the means; clipping is a hard ``clamp`` (zero gradient outside the
    bounds). With ``logvar_gain`` :math:`g \\ne 1` the log-variance layer is parameterised as
    :math:`g\\,(W'_\\sigma \\operatorname{LN}_\\sigma(\\hat x) + b'_\\sigma)` with :math:`W'_\\sigma = W_\\sigma / g`,
    :math:`b'_\\sigma = b_\\sigma / g` at the start: the same linear head and the same start, but under Adam its
    output moves :math:`g` times as far per update (the step of an Adam update hardly depends on the gradient's
    scale), as a learning rate :math:`g` times the rest would.

    Parameters
    ----------
    dim_in : int
        Input embedding size.
    dim_out : int
        Gaussian dimension :math:`D`.
    logvar_init : float, default -2.0
        Initial log-variance bias.
    logvar_bounds : tuple of float
        Clipping range of :math:`\\log\\sigma^2`; default ``(-6.0, 2.0)``.
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.
    logvar_weight_init : {"zero", "small", "pytorch"}, default "zero"
        The start of the log-variance weights (:data:`~evidential_prvr.choices.LOGVAR_WEIGHT_INITS`); ``pytorch``
        is the start before version 3.0.
    logvar_gain : float, default 1.0
        The log-variance layer's gain :math:`g > 0` (above); 1 is DAB's plain linear head. A larger gain lets a
        short training move the variances as far as DAB's long one: at DAB's 1e-4 an update moves a log-variance by
        about 1e-4, and DAB's reported variances are 1.3 to 3.1 from the start in log-variance
        (``docs/guide/dab.rst``, "Why the variances do not move, and what makes them learn").

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import GaussianEmbeddingHead
    >>> mu, logvar = GaussianEmbeddingHead(32, 16)(torch.randn(4, 32))
    >>> mu.shape, bool((logvar >= -6).all() and (logvar <= 2).all())
    (torch.Size([4, 16]), True)

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 1.
    """

    def __init__(
        self,
        dim_in: int,
        dim_out: int,
        *,
        logvar_init: float = -2.0,
        logvar_bounds: tuple[float, float] = DEFAULT_LOGVAR_BOUNDS,
        validate_args: bool | None = None,
        logvar_weight_init: LogVarWeightInit = "zero",
        logvar_gain: float = 1.0,
    ) -> None:
        super().__init__(dim_in, dim_out, logvar_bounds=logvar_bounds, validate_args=validate_args,
                         logvar_weight_init=logvar_weight_init, logvar_gain=logvar_gain)
        self.mean_norm = nn.LayerNorm(dim_in)
        self.mean = nn.Linear(dim_in, dim_out)
        self.logvar_norm = nn.LayerNorm(dim_in)
        self.logvar = self._logvar_layer(logvar_init)

    @classmethod
    def _preset_arguments(cls, preset: DABPreset, dataset: DABDatasetName | None) -> dict[str, Any]:
        settings = dab_settings(preset, dataset)
        return {"logvar_init": settings.logvar_init, "logvar_bounds": settings.logvar_bounds,
                "logvar_weight_init": settings.logvar_weight_init}

    def forward(self, x: torch.Tensor) -> DiagonalGaussian:
        """Gaussians for ``x`` of shape ``[..., dim_in]``; returns ``mu``/``logvar`` of shape ``[..., dim_out]``."""
        _input_checks.check_features(x, "x", self.dim_in)
        _input_checks.check_inputs(self.validate_args, x=x)
        x = F.normalize(_input_checks.to_module_dtype(x, self), dim=-1)
        mu = self.mean(self.mean_norm(x))
        logvar = self._scaled_logvar(self.logvar(self.logvar_norm(x)))
        return DiagonalGaussian(mu, logvar)


class TokenUncertaintyHead(_LogVarHead):
    """Video log-variance from frame tokens (DAB, Key Design 1, token-based uncertainty head).

    .. math::

        \\hat X = X / \\lVert X \\rVert_2 \\ \\text{(per token)},\\quad
        h = \\operatorname{mean}_T\\big(\\hat X + \\operatorname{SelfAttn}_{1\\,\\text{head}}(\\hat X)\\big),\\quad
        \\log\\sigma^2_{\\text{tok}} = \\operatorname{clip}(W \\operatorname{LN}(h) + b),

    and, when ``base_logvar`` (from a :class:`GaussianEmbeddingHead` on the global video
    embedding) is given, the final video log-variance
    :math:`\\tfrac12(\\log\\sigma^2_{\\text{base}} + \\log\\sigma^2_{\\text{tok}})`.

    Choices: "residually combined with global video representations" is read as the transformer
    residual, so :math:`h` = mean-pooled attention output + mean-pooled (normalised) tokens, the
    latter being the global video representation; tokens are L2-normalised like the inputs of
    :class:`GaussianEmbeddingHead`; the bias starts at ``logvar_init`` and the weights as ``logvar_weight_init``
    says (zero: every video starts with the same log-variance).

    Parameters
    ----------
    dim_in : int
        Token size.
    dim_out : int
        Gaussian dimension :math:`D`.
    logvar_init : float, default -2.0
        Initial bias of the log-variance layer.
    logvar_bounds : tuple of float
        Clipping range; default ``(-6.0, 2.0)``.
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.
    logvar_weight_init : {"zero", "small", "pytorch"}, default "zero"
        The start of the log-variance weights, as in :class:`GaussianEmbeddingHead`.
    logvar_gain : float, default 1.0
        The log-variance layer's gain, as in :class:`GaussianEmbeddingHead` (1: DAB's plain linear head).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import TokenUncertaintyHead
    >>> TokenUncertaintyHead(32, 16)(torch.randn(4, 10, 32), base_logvar=torch.full((4, 16), -2.0)).shape
    torch.Size([4, 16])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 1 (token-based uncertainty head).
    """

    def __init__(
        self,
        dim_in: int,
        dim_out: int,
        *,
        logvar_init: float = -2.0,
        logvar_bounds: tuple[float, float] = DEFAULT_LOGVAR_BOUNDS,
        validate_args: bool | None = None,
        logvar_weight_init: LogVarWeightInit = "zero",
        logvar_gain: float = 1.0,
    ) -> None:
        super().__init__(dim_in, dim_out, logvar_bounds=logvar_bounds, validate_args=validate_args,
                         logvar_weight_init=logvar_weight_init, logvar_gain=logvar_gain)
        self.attention = nn.MultiheadAttention(dim_in, num_heads=1, batch_first=True)
        self.norm = nn.LayerNorm(dim_in)
        self.logvar = self._logvar_layer(logvar_init)

    @classmethod
    def _preset_arguments(cls, preset: DABPreset, dataset: DABDatasetName | None) -> dict[str, Any]:
        settings = dab_settings(preset, dataset)
        return {"logvar_init": settings.logvar_init, "logvar_bounds": settings.logvar_bounds,
                "logvar_weight_init": settings.logvar_weight_init}

    def forward(
        self, tokens: torch.Tensor, base_logvar: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Log-variance ``[B, dim_out]`` from ``tokens`` ``[B, T, dim_in]``.

        Parameters
        ----------
        tokens : torch.Tensor
            ``[B, T, dim_in]`` frame (or clip) tokens.
        base_logvar : torch.Tensor, optional
            ``[B, dim_out]``; if given, the result is the average with it (the final video log-variance),
            otherwise :math:`\\log\\sigma^2_{\\text{tok}}` alone.
        mask : torch.Tensor, optional
            ``[B, T]`` bool, True = valid token; padded tokens are ignored by attention and pooling.
        """
        _input_checks.check_features(tokens, "tokens", self.dim_in, ndim=3)
        _input_checks.check_inputs(self.validate_args, tokens=tokens, base_logvar=base_logvar)
        _input_checks.check_token_mask(mask, tokens, validate_args=self.validate_args)
        x = F.normalize(_input_checks.to_module_dtype(tokens, self), dim=-1)
        attended = self.attention(x, x, x, key_padding_mask=_input_checks.key_padding(mask), need_weights=False)[0]
        pooled = _input_checks.masked_mean(x + attended, mask)
        token_logvar: torch.Tensor = self._scaled_logvar(self.logvar(self.norm(pooled)))
        if base_logvar is None:
            return token_logvar
        check_tensor(base_logvar, "base_logvar", ndim=2, floating=True)
        if tuple(base_logvar.shape) != tuple(token_logvar.shape):
            raise ValueError(
                f"base_logvar must have shape {tuple(token_logvar.shape)} ([B, dim_out]), got {tuple(base_logvar.shape)}"
            )
        return combine_video_log_variances(base_logvar.to(token_logvar.dtype), token_logvar).clamp(*self.logvar_bounds)


class _DriftChain(_InputChecks, PresetModule):
    """What DAB's bridges share: the checked settings, the step sizes, the time embeddings and the
    zero-initialised drift MLP ``Linear(inputs * dim + time_dim, hidden) -> GELU -> Linear(hidden, 2 * dim)``;
    ``inputs`` is the number of ``dim``-sized parts the drift sees (2: the state; 4: the state and its target).
    Each bridge writes its own ``__init__`` and passes its settings here by keyword."""

    time_embeddings: torch.Tensor  # the [n_steps, time_dim] buffer registered in __init__

    def __init__(
        self,
        *,
        inputs: int,
        dim: int,
        n_steps: int,
        total_steps: int,
        step_range: tuple[float, float],
        hidden_dim: int | None,
        time_dim: int,
        logvar_bounds: tuple[float, float],
        validate_args: bool | None,
    ) -> None:
        super().__init__(validate_args)
        _input_checks.check_sizes(dim=dim, n_steps=n_steps, total_steps=total_steps, time_dim=time_dim)
        hidden = _input_checks.hidden_size(hidden_dim, dim)
        if n_steps > total_steps:
            raise ValueError(f"n_steps must be <= total_steps, got n_steps={n_steps}, total_steps={total_steps}")
        self.dim = dim
        self.n_steps = n_steps
        self.total_steps = total_steps
        self.time_dim = time_dim
        self.hidden_dim = hidden
        self.logvar_bounds = _input_checks.check_bounds(logvar_bounds)
        self.step_range = cast("tuple[float, float]", tuple(float(v) for v in step_range))
        self.step_sizes = bridge_step_sizes(n_steps, self.step_range)
        self.drift = nn.Sequential(nn.Linear(inputs * dim + time_dim, hidden), nn.GELU(),
                                   nn.Linear(hidden, 2 * dim))
        output_layer = cast(nn.Linear, self.drift[-1])  # the Linear(hidden, 2 * dim) just built
        nn.init.zeros_(output_layer.weight)
        nn.init.zeros_(output_layer.bias)
        steps = torch.arange(n_steps, 0, -1, dtype=torch.float32)
        self.register_buffer(
            "time_embeddings", sinusoidal_time_embedding(steps, time_dim, max_period=float(total_steps)), persistent=False
        )


class DistributionBridge(_DriftChain):
    """Sampling-free, deterministic bridge that drifts a Gaussian in parameter space (DAB, Key Design 2).

    For :math:`t = T', T'-1, \\dots, 1` (``n_steps`` :math:`= T'`):

    .. math::

        [\\Delta\\mu_t, \\Delta\\log\\sigma^2_t] = \\operatorname{MLP}\\big([\\mu_t, \\log\\sigma^2_t, e(t)]\\big),\\qquad
        \\mu_{t-1} = \\mu_t - \\chi_t \\Delta\\mu_t,\\qquad
        \\log\\sigma^2_{t-1} = \\operatorname{clip}(\\log\\sigma^2_t - \\chi_t \\Delta\\log\\sigma^2_t),

    with :math:`e(t)` = :func:`~evidential_prvr.functional.sinusoidal_time_embedding` of the
    integer step :math:`t` (``max_period = total_steps``) and :math:`\\chi_t` from
    :func:`~evidential_prvr.functional.bridge_step_sizes`. The MLP's output layer is
    zero-initialised, so at initialisation the bridge is the identity (up to clipping the input).
    No noise is sampled. The drift MLP is not conditioned on the video (DAB feeds it only "the
    current distribution parameters"), and one MLP is shared by all steps.

    Choices: the truncated chain is the *last* :math:`T'` steps (:math:`t \\le T'`) of a
    ``total_steps`` chain, and ``total_steps`` sets the longest period of the time embedding;
    MLP = Linear(2D + time_dim, hidden) → GELU → Linear(hidden, 2D); input log-variances are
    clipped once before the first step and after every step.

    Parameters
    ----------
    dim : int
        Gaussian dimension :math:`D`.
    n_steps : int, default 32
        Truncated steps :math:`T'` (DAB: 32).
    total_steps : int, default 1000
        Length :math:`N` of the full chain (DAB: 1000); must be >= ``n_steps``.
    step_range : tuple of float
        Range of :math:`\\chi_t`; default ``(0.2, 0.6)``.
    hidden_dim : int, optional
        Hidden size of the drift MLP (default ``dim``).
    time_dim : int, default 128
        Size of the sinusoidal time embedding.
    logvar_bounds : tuple of float
        Clipping range of :math:`\\log\\sigma^2`; default ``(-6.0, 2.0)``.
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import DistributionBridge
    >>> mu, logvar = torch.randn(4, 16), torch.full((4, 16), -2.0)
    >>> bridged = DistributionBridge(16, n_steps=8)(mu, logvar)
    >>> bool(torch.equal(bridged.mu, mu))  # zero-initialised drift: the identity at initialisation
    True

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 2.
    """

    def __init__(
        self,
        dim: int,
        n_steps: int = 32,
        total_steps: int = 1000,
        step_range: tuple[float, float] = (0.2, 0.6),
        *,
        hidden_dim: int | None = None,
        time_dim: int = 128,
        logvar_bounds: tuple[float, float] = DEFAULT_LOGVAR_BOUNDS,
        validate_args: bool | None = None,
    ) -> None:
        super().__init__(inputs=2, dim=dim, n_steps=n_steps, total_steps=total_steps, step_range=step_range,
                         hidden_dim=hidden_dim, time_dim=time_dim, logvar_bounds=logvar_bounds,
                         validate_args=validate_args)

    def one_step_student(self) -> DistributionBridge:
        """A one-step bridge to distil this chain into (DAB, "Limitations & Future Work": one-step bridge
        distillation), starting as a copy of this bridge's drift.

        The student is a :class:`DistributionBridge` with ``n_steps = 1`` and this bridge's dimension, chain
        length, step range (its single step has the step size ``step_range[1]``), time embedding, clipping
        and checks; its drift MLP has the same sizes and starts with this bridge's weights (so it starts as one
        step of the trained drift, at :math:`t = 1`). Train it with
        :class:`BridgeDistillationLoss` against this bridge's end points; it is on this bridge's device and
        dtype.
        """
        student = DistributionBridge(self.dim, 1, self.total_steps, self.step_range, hidden_dim=self.hidden_dim,
                                     time_dim=self.time_dim, logvar_bounds=self.logvar_bounds,
                                     validate_args=self.validate_args)
        reference = next(self.parameters())
        student = student.to(device=reference.device, dtype=reference.dtype)
        student.drift.load_state_dict(self.drift.state_dict())
        return student

    @classmethod
    def _preset_arguments(cls, preset: DABPreset, dataset: DABDatasetName | None) -> dict[str, Any]:
        fields = ("n_steps", "total_steps", "step_range", "logvar_bounds")
        return {name: getattr(dab_settings(preset, dataset), name) for name in fields}

    def forward(self, mu: torch.Tensor, logvar: torch.Tensor) -> DiagonalGaussian:
        """Run the ``n_steps`` bridge updates on Gaussians ``[..., dim]``; returns ``(mu, logvar)``, same shape.

        Outputs are in the dtype of the bridge's parameters (float32 for half inputs with float32 weights).
        """
        _check_gaussian(mu, logvar, "input", ndim=None, validate_args=self.validate_args)
        _input_checks.check_dim(mu, "mu", self.dim)
        mu = _input_checks.to_module_dtype(mu, self)
        logvar = _input_checks.to_module_dtype(logvar, self).clamp(*self.logvar_bounds)
        time_embeddings = self.time_embeddings.to(mu.dtype)
        for step, chi in enumerate(self.step_sizes):
            t_emb = time_embeddings[step].expand(*mu.shape[:-1], -1)
            d_mu, d_logvar = self.drift(torch.cat([mu, logvar, t_emb], dim=-1)).chunk(2, dim=-1)
            mu = mu - chi * d_mu
            logvar = (logvar - chi * d_logvar).clamp(*self.logvar_bounds)
        return DiagonalGaussian(mu, logvar)


class ConditionedDistributionBridge(_DriftChain):
    """The distribution bridge conditioned on its target video distribution, one chain per text-video pair
    (DAB, Key Design 2: "given a text distribution :math:`P_t` and a target video distribution :math:`Q_v`").

    For :math:`t = T', \\dots, 1`, with :math:`x_t = [\\mu_t, \\log\\sigma^2_t]` the text state of one pair and
    :math:`x_v = [\\mu_v, \\log\\sigma^2_v]` its video:

    .. math::

        [\\Delta\\mu_t, \\Delta\\log\\sigma^2_t] = \\operatorname{MLP}\\big([x_t, x_v, e(t)]\\big),\\qquad
        x' = \\operatorname{clip}(x_t - \\chi_t [\\Delta\\mu_t, \\Delta\\log\\sigma^2_t]),\\qquad
        x_{t-1} = \\operatorname{contract}_{\\rho_s}(x', x_t; x_v),

    the last step :func:`~evidential_prvr.functional.bounded_contraction` with the per-step rate
    :math:`\\rho_s = \\rho^{1/T'}`, so that the whole chain contracts at rate at most :math:`\\rho`:
    :math:`\\|x_0 - x_v\\| \\le \\rho\\,\\|x_{T'} - x_v\\|` (DAB: "contractive updates (contraction rate at most
    0.8)"). Reading the rate per step instead would shrink every pair's distance to
    :math:`0.8^{32} \\approx 8 \\cdot 10^{-4}` of its start at :math:`T' = 32` and leave nothing to rank; that
    reading is ``contraction=0.8 ** n_steps``. ``contraction=None`` leaves the updates unbounded.
    :math:`e(t)`, :math:`\\chi_t`, the zero-initialised output layer and the clipping are those of
    :class:`DistributionBridge`, whose chain is the same without :math:`x_v`.

    The first layer is applied as the sum of its state, target and time parts, so the target's part is
    computed once per target and the time's once per step; the per-pair work is the MLP on the state.

    Parameters
    ----------
    dim : int
        Gaussian dimension :math:`D`.
    n_steps : int, default 32
        Truncated steps :math:`T'`.
    total_steps : int, default 1000
        Chain length :math:`N` (the time embedding's longest period).
    step_range : tuple of float
        Range of :math:`\\chi_t`; default ``(0.2, 0.6)``.
    contraction : float or None, default 0.8
        :math:`\\rho \\in (0, 1]` of the whole chain, or ``None``.
    hidden_dim : int, optional
        Hidden size of the drift MLP (default ``dim``).
    time_dim : int, default 128
        Size of the sinusoidal time embedding.
    logvar_bounds : tuple of float
        Clipping range of :math:`\\log\\sigma^2`; default ``(-6.0, 2.0)``.
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import ConditionedDistributionBridge
    >>> bridge = ConditionedDistributionBridge(16, n_steps=4)
    >>> text = torch.randn(3, 1, 16), torch.full((3, 1, 16), -2.0)   # 3 texts
    >>> video = torch.randn(1, 5, 16), torch.full((1, 5, 16), -1.0)  # 5 videos
    >>> bridge(*text, *video).mu.shape  # one bridged text per pair
    torch.Size([3, 5, 16])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 2.
    """

    def __init__(
        self,
        dim: int,
        n_steps: int = 32,
        total_steps: int = 1000,
        step_range: tuple[float, float] = (0.2, 0.6),
        *,
        contraction: float | None = 0.8,
        hidden_dim: int | None = None,
        time_dim: int = 128,
        logvar_bounds: tuple[float, float] = DEFAULT_LOGVAR_BOUNDS,
        validate_args: bool | None = None,
    ) -> None:
        # inputs=4: the drift sees the state and its target video
        super().__init__(inputs=4, dim=dim, n_steps=n_steps, total_steps=total_steps, step_range=step_range,
                         hidden_dim=hidden_dim, time_dim=time_dim, logvar_bounds=logvar_bounds,
                         validate_args=validate_args)
        if contraction is not None:
            check_in_range(contraction, "contraction", 0.0, 1.0, low_inclusive=False)
        self.contraction = contraction

    @classmethod
    def _preset_arguments(cls, preset: DABPreset, dataset: DABDatasetName | None) -> dict[str, Any]:
        fields = ("n_steps", "total_steps", "step_range", "contraction", "logvar_bounds")
        return {name: getattr(dab_settings(preset, dataset), name) for name in fields}

    def forward(self, mu: torch.Tensor, logvar: torch.Tensor, target_mu: torch.Tensor,
                target_logvar: torch.Tensor) -> DiagonalGaussian:
        """Bridge texts ``(mu, logvar)`` toward targets ``(target_mu, target_logvar)``; the two pairs broadcast
        (``[Q, 1, D]`` and ``[1, V, D]``: every pair); returns the bridged texts in the broadcast shape."""
        _check_gaussian(mu, logvar, "input", ndim=None, validate_args=self.validate_args)
        _check_gaussian(target_mu, target_logvar, "target", ndim=None, validate_args=self.validate_args)
        _input_checks.check_dim(mu, "mu", self.dim)
        _input_checks.check_dim(target_mu, "target_mu", self.dim)
        try:
            shape = torch.broadcast_shapes(mu.shape, target_mu.shape)
        except RuntimeError:
            raise ValueError(f"mu {tuple(mu.shape)} and target_mu {tuple(target_mu.shape)} must broadcast to one "
                             "shape (e.g. [Q, 1, D] texts and [1, V, D] videos)") from None
        lo, hi = self.logvar_bounds
        mu = _input_checks.to_module_dtype(mu, self).expand(shape)
        logvar = _input_checks.to_module_dtype(logvar, self).clamp(lo, hi).expand(shape)
        target_mu = _input_checks.to_module_dtype(target_mu, self)
        target_logvar = _input_checks.to_module_dtype(target_logvar, self).clamp(lo, hi)
        first, output = cast(nn.Linear, self.drift[0]), self.drift[1:]
        d2 = 2 * self.dim
        state_weight, target_weight, time_weight = first.weight.split([d2, d2, first.in_features - 2 * d2], dim=1)
        target_part = torch.cat([target_mu, target_logvar], dim=-1) @ target_weight.T + first.bias
        time_parts = self.time_embeddings.to(mu.dtype) @ time_weight.T  # [n_steps, hidden]
        rate = None if self.contraction is None else self.contraction ** (1.0 / self.n_steps)
        for step, chi in enumerate(self.step_sizes):
            hidden = torch.cat([mu, logvar], dim=-1) @ state_weight.T + target_part + time_parts[step]
            d_mu, d_logvar = output(hidden).chunk(2, dim=-1)
            new_mu, new_logvar = mu - chi * d_mu, (logvar - chi * d_logvar).clamp(lo, hi)
            if rate is not None:
                new_mu, new_logvar = bounded_contraction(new_mu, new_logvar, mu, logvar, target_mu, target_logvar,
                                                         rate)
            mu, logvar = new_mu, new_logvar
        return DiagonalGaussian(mu, logvar)


class ProbabilisticAlignmentContrastiveLoss(_InputChecks):
    """DAB's PAC loss as a module; see :func:`~evidential_prvr.functional.pac_loss` (Key Design 3).

    Parameters
    ----------
    tau : float
        Temperature > 0 (no default: DAB does not report one, and it must match the scale of the
        KL costs, which grows with :math:`D`).
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import ProbabilisticAlignmentContrastiveLoss
    >>> ProbabilisticAlignmentContrastiveLoss(tau=1.0)(torch.zeros(2, 2))
    tensor(1.3863)

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """

    def __init__(self, tau: float, validate_args: bool | None = None) -> None:
        super().__init__(validate_args)
        check_positive(tau, "tau")
        self.tau = float(tau)

    def forward(self, cost: torch.Tensor) -> torch.Tensor:
        """Scalar loss for a ``[B, B]`` cost with positives on the diagonal (rows = texts, columns = videos)."""
        return pac_loss(cost, tau=self.tau, validate_args=self.validate_args)

    def extra_repr(self) -> str:
        return f"tau={self.tau}"
