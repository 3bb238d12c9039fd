"""Pure tensor functions of DAB (Distribution-Alignment Bridge, ECCV 2026).

The DAB text available to this project is a summary without numbered equations, so the
docstrings cite its sections ("Key Design 1-3"). Every choice the text leaves open is listed in
the guide page ``docs/guide/probabilistic.rst``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from evidential_prvr._checks import (
    check_in_range,
    check_positive,
    check_positive_int,
    check_same_shape,
    check_square_scores,
    check_tensor,
    compute_dtype,
)


def pac_loss(cost: torch.Tensor, tau: float, *, validate_args: bool | None = None) -> torch.Tensor:
    """Probabilistic Alignment Contrastive loss (DAB, Key Design 3).

    With positives on the diagonal of the ``[B, B]`` cost (rows = text queries, columns = videos,
    :math:`C_{ij} = D_{\\mathrm{KL}}(Q_{v_j} \\| \\hat P_{t_i})`):

    .. math::

        \\mathcal{L}_{\\mathrm{PAC}} = -\\frac1B \\sum_{i=1}^{B} \\Big[
            \\log \\frac{e^{-C_{ii}/\\tau}}{\\sum_{j} e^{-C_{ij}/\\tau}}
          + \\log \\frac{e^{-C_{ii}/\\tau}}{\\sum_{j} e^{-C_{ji}/\\tau}} \\Big],

    i.e. the row-wise (text-to-video) cross-entropy of :math:`-C/\\tau` **plus** (not averaged
    with) the column-wise (video-to-text) one, as written in DAB. Computed with ``log_softmax`` in
    float32 or wider.

    Parameters
    ----------
    cost : torch.Tensor
        ``[B, B]`` costs, lower = better; the positive of row ``i`` is column ``i``.
    tau : float
        Temperature :math:`\\tau > 0`. DAB does not report its value; KL costs grow with the
        embedding dimension, so :math:`\\tau` must be chosen on that scale (see the guide).
    validate_args : bool, optional
        Check that ``cost`` is finite (a host synchronisation).

    Returns
    -------
    torch.Tensor
        Scalar loss.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import pac_loss
    >>> pac_loss(torch.zeros(2, 2), tau=1.0)  # chance in both directions: 2 log 2
    tensor(1.3863)

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """
    check_square_scores(cost, "cost", validate_args)
    check_positive(tau, "tau")
    logits = -cost.to(compute_dtype(cost)) / tau
    labels = torch.arange(cost.shape[0], device=cost.device)
    return F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)


def sinusoidal_time_embedding(timesteps: torch.Tensor, dim: int, *, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of diffusion timesteps, used to condition DAB's drift MLP (Key Design 2).

    .. math::

        e(t)_k = \\cos(t\\,\\omega_k),\\quad e(t)_{k + \\lfloor D/2 \\rfloor} = \\sin(t\\,\\omega_k),
        \\qquad \\omega_k = \\text{max\\_period}^{-k/\\lfloor D/2 \\rfloor},

    with a zero last channel when ``dim`` is odd (the standard DDPM/transformer form; DAB only says
    "sinusoidal time embedding").

    Parameters
    ----------
    timesteps : torch.Tensor
        ``[K]`` timesteps (integer or floating).
    dim : int
        Embedding size.
    max_period : float, default 10000
        Longest period of the sinusoids.

    Returns
    -------
    torch.Tensor
        ``[K, dim]`` embedding, floating (the default dtype for integer timesteps).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import sinusoidal_time_embedding
    >>> sinusoidal_time_embedding(torch.tensor([0, 1]), 4)
    tensor([[1.0000, 1.0000, 0.0000, 0.0000],
            [0.5403, 0.9999, 0.8415, 0.0100]])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 2; Vaswani et al., "Attention Is All You Need", NeurIPS 2017.
    """
    check_tensor(timesteps, "timesteps", ndim=1)
    check_positive_int(dim, "dim")
    check_positive(max_period, "max_period")
    dtype = compute_dtype(timesteps)
    half = dim // 2
    freqs = torch.exp(
        -math.log(max_period) * torch.arange(half, device=timesteps.device, dtype=dtype) / max(half, 1)
    )
    args = timesteps.to(dtype)[:, None] * freqs[None, :]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=1)
    if dim % 2:
        emb = F.pad(emb, (0, 1))
    return emb


def bridge_step_sizes(n_steps: int, step_range: tuple[float, float] = (0.2, 0.6)) -> list[float]:
    """Step sizes :math:`\\chi_t` of the distribution bridge, in execution order (DAB, Key Design 2).

    The bridge runs the truncated chain :math:`t = T', T'-1, \\dots, 1` and :math:`\\chi_t` is linear
    in :math:`t`, from ``step_range[0]`` at :math:`t = 1` to ``step_range[1]`` at :math:`t = T'`:

    .. math::

        \\chi_t = \\chi_{\\min} + (\\chi_{\\max} - \\chi_{\\min}) \\frac{t - 1}{T' - 1},

    so the first update is the largest and the last the smallest (coarse to fine). DAB only states
    "a linear step-size schedule :math:`\\chi_t \\in [0.2, 0.6]`"; the direction is this library's
    choice. With ``n_steps == 1`` the single step uses ``step_range[1]``.

    Parameters
    ----------
    n_steps : int
        Number of bridge steps :math:`T'`.
    step_range : tuple of float
        ``(chi_min, chi_max)`` with ``0 < chi_min <= chi_max <= 1``.

    Returns
    -------
    list of float
        ``n_steps`` step sizes, first executed first (plain floats: no device synchronisation).

    Examples
    --------
    >>> from evidential_prvr.functional import bridge_step_sizes
    >>> bridge_step_sizes(3)
    [0.6, 0.4, 0.2]

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 2.
    """
    check_positive_int(n_steps, "n_steps")
    if not isinstance(step_range, (tuple, list)) or len(step_range) != 2:
        raise ValueError(f"step_range must be a pair (chi_min, chi_max), got {step_range!r}")
    lo, hi = step_range
    check_in_range(lo, "step_range[0]", 0.0, 1.0, low_inclusive=False)
    check_in_range(hi, "step_range[1]", 0.0, 1.0, low_inclusive=False)
    if lo > hi:
        raise ValueError(f"step_range must satisfy chi_min <= chi_max, got {step_range!r}")
    if n_steps == 1:
        return [float(hi)]
    return [lo + (hi - lo) * (t - 1) / (n_steps - 1) for t in range(n_steps, 0, -1)]


def combine_video_log_variances(base_logvar: torch.Tensor, token_logvar: torch.Tensor) -> torch.Tensor:
    """Final video log-variance from the global and the token head (DAB, Key Design 1).

    .. math::

        \\log \\sigma_v^2 = \\tfrac12 \\big(\\log \\sigma_{v,\\text{base}}^2 + \\log \\sigma_{v,\\text{tok}}^2\\big).

    Parameters
    ----------
    base_logvar, token_logvar : torch.Tensor
        Same shape ``[..., D]``.

    Returns
    -------
    torch.Tensor
        Same shape, the mean of the two log-variances.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import combine_video_log_variances
    >>> combine_video_log_variances(torch.tensor([-2.0]), torch.tensor([0.0]))
    tensor([-1.])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 1.
    """
    check_tensor(base_logvar, "base_logvar", floating=True)
    check_tensor(token_logvar, "token_logvar", floating=True)
    check_same_shape(base_logvar, token_logvar, "base_logvar", "token_logvar")
    return 0.5 * (base_logvar + token_logvar)


def bounded_contraction(
    mu: torch.Tensor,
    logvar: torch.Tensor,
    previous_mu: torch.Tensor,
    previous_logvar: torch.Tensor,
    target_mu: torch.Tensor,
    target_logvar: torch.Tensor,
    rate: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hold one bridge update to a contraction toward its target distribution (DAB, Key Design 2).

    In the joint parameter space :math:`x = [\\mu, \\log\\sigma^2]`, with :math:`x_t` the state before the
    update, :math:`x'` the updated state and :math:`x_v` the target (the video distribution
    :math:`Q_v`), the update is pulled back onto the ball of radius :math:`\\rho\\,\\|x_t - x_v\\|` around
    the target:

    .. math::

        x_{t-1} = x_v + \\min\\Big(1, \\frac{\\rho\\,\\|x_t - x_v\\|}{\\|x' - x_v\\|}\\Big)\\,(x' - x_v),

    so that :math:`\\|x_{t-1} - x_v\\| \\le \\rho\\,\\|x_t - x_v\\|` ("contractive updates, contraction
    rate at most :math:`\\rho`"). An update already inside the ball is returned unchanged, and the result
    lies on the segment from :math:`x_v` to :math:`x'`, so a log-variance clipped to a range that holds
    the target's stays in it.

    Parameters
    ----------
    mu, logvar : torch.Tensor
        The updated state :math:`x'` ``[..., D]``.
    previous_mu, previous_logvar : torch.Tensor
        The state before the update, :math:`x_t`.
    target_mu, target_logvar : torch.Tensor
        The target :math:`x_v`. The three pairs broadcast to one shape (e.g. ``[Q, 1, D]`` states and
        ``[1, V, D]`` targets for every text-video pair); each pair's two tensors have the same shape.
    rate : float
        :math:`\\rho \\in (0, 1]`.

    Returns
    -------
    tuple of torch.Tensor
        ``(mu, logvar)`` of :math:`x_{t-1}`, in the broadcast shape, computed in float32 or wider (half inputs
        are upcast).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import bounded_contraction
    >>> zero = torch.zeros(1, 2)
    >>> mu, logvar = bounded_contraction(torch.tensor([[3.0, 0.0]]), zero, torch.tensor([[1.0, 0.0]]), zero,
    ...                                  zero, zero, rate=0.5)
    >>> mu  # moved 3 from the target, allowed 0.5 x 1
    tensor([[0.5000, 0.0000]])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 2.
    """
    pairs = {"mu": (mu, logvar), "previous_mu": (previous_mu, previous_logvar),
             "target_mu": (target_mu, target_logvar)}
    for name, (m, lv) in pairs.items():
        check_tensor(m, name, floating=True)
        check_tensor(lv, name.replace("mu", "logvar"), floating=True)
        check_same_shape(m, lv, name, name.replace("mu", "logvar"))
    try:
        torch.broadcast_shapes(mu.shape, previous_mu.shape, target_mu.shape)
    except RuntimeError:
        listed = ", ".join(f"{name} {tuple(m.shape)}" for name, (m, _) in pairs.items())
        raise ValueError(f"the bridge states and their targets must broadcast to one shape, got {listed}") from None
    check_in_range(rate, "rate", 0.0, 1.0, low_inclusive=False)
    dtype = compute_dtype(mu)
    for other in (logvar, previous_mu, previous_logvar, target_mu, target_logvar):
        dtype = torch.promote_types(dtype, compute_dtype(other))
    mu, logvar, previous_mu, previous_logvar, target_mu, target_logvar = (
        t.to(dtype) for t in (mu, logvar, previous_mu, previous_logvar, target_mu, target_logvar))
    tiny = torch.finfo(dtype).tiny  # keeps sqrt's gradient finite at a zero distance
    before = ((previous_mu - target_mu).square().sum(-1) + (previous_logvar - target_logvar).square().sum(-1))
    step_mu, step_logvar = mu - target_mu, logvar - target_logvar
    after = step_mu.square().sum(-1) + step_logvar.square().sum(-1)
    allowed = rate * before.clamp_min(tiny).sqrt()
    distance = after.clamp_min(tiny).sqrt()
    outside = distance > allowed
    scale = torch.where(outside, allowed / distance, torch.ones_like(distance)).unsqueeze(-1)
    outside = outside.unsqueeze(-1)  # an update inside the ball is returned as it is, bit for bit
    return (torch.where(outside, target_mu + scale * step_mu, mu),
            torch.where(outside, target_logvar + scale * step_logvar, logvar))
