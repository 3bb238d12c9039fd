"""Diagonal Gaussian embeddings: the shared type, pairwise divergences and sampling.

Convention used everywhere in :mod:`evidential_prvr.probabilistic`: a diagonal Gaussian
:math:`\\mathcal{N}(\\mu, \\operatorname{diag}(\\sigma^2))` is stored as ``(mu, logvar)`` with
``logvar`` :math:`= \\log \\sigma^2` (never :math:`\\log \\sigma`, never :math:`\\sigma`).

The pairwise functions here are what DAB (ECCV 2026, "Distribution-Alignment Bridge") uses as its
cross-modal cost. DAB's cost is :math:`C_{ij} = D_{\\mathrm{KL}}(Q_{v_j} \\,\\|\\, \\hat P_{t_i})`
(rows = text queries, columns = videos), which is the **transpose** of
``pairwise_gaussian_kl(video_mu, video_logvar, text_mu, text_logvar)``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from evidential_prvr._checks import (
    check_finite,
    check_nonempty,
    check_positive_int,
    check_same_shape,
    check_tensor,
    compute_dtype,
    should_validate,
)


def _check_gaussian(
    mu: torch.Tensor, logvar: torch.Tensor, name: str, *, ndim: int | tuple[int, ...] | None,
    validate_args: bool | None = None,
) -> None:
    """Validate one diagonal Gaussian given as ``(mu, logvar)``: non-empty, same shape, and finite
    (the value check follows ``validate_args``)."""
    check_tensor(mu, f"{name}_mu", ndim=ndim, floating=True)
    check_tensor(logvar, f"{name}_logvar", ndim=ndim, floating=True)
    check_same_shape(mu, logvar, f"{name}_mu", f"{name}_logvar")
    check_nonempty(mu, f"{name}_mu")
    if should_validate(validate_args):
        check_finite(mu, f"{name}_mu")
        check_finite(logvar, f"{name}_logvar")


def _common_dtype(*tensors: torch.Tensor) -> torch.dtype:
    """float32 for half-precision inputs, otherwise the widest input dtype."""
    dtype = compute_dtype(tensors[0])
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, compute_dtype(t))
    return dtype


def _check_pairwise_inputs(
    source_mu: torch.Tensor, source_logvar: torch.Tensor, target_mu: torch.Tensor, target_logvar: torch.Tensor
) -> None:
    _check_gaussian(source_mu, source_logvar, "source", ndim=2)
    _check_gaussian(target_mu, target_logvar, "target", ndim=2)
    if source_mu.shape[1] != target_mu.shape[1]:
        raise ValueError(
            "source_mu and target_mu must have the same embedding dimension D, got "
            f"shapes {tuple(source_mu.shape)} and {tuple(target_mu.shape)}"
        )
    if source_mu.device != target_mu.device:
        raise ValueError(f"source and target must be on the same device, got {source_mu.device} and {target_mu.device}")


class DiagonalGaussian(NamedTuple):
    """A batch of diagonal Gaussians :math:`\\mathcal{N}(\\mu, \\operatorname{diag}(e^{\\mathrm{logvar}}))`.

    Returned by every head of :mod:`evidential_prvr.probabilistic` and by
    :class:`~evidential_prvr.probabilistic.DistributionBridge`. It is a ``NamedTuple`` so that
    ``mu, logvar = head(x)`` and ``bridge(*head(x))`` work, while fields stay named.

    Attributes
    ----------
    mu : torch.Tensor
        Means, shape ``[..., D]``.
    logvar : torch.Tensor
        Log-variances :math:`\\log \\sigma^2`, same shape as ``mu``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import DiagonalGaussian
    >>> mu, logvar = DiagonalGaussian(torch.zeros(2, 4), torch.zeros(2, 4))
    >>> DiagonalGaussian(mu, logvar).sample(3).shape
    torch.Size([2, 3, 4])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 1; HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 2-3.
    """

    mu: torch.Tensor
    logvar: torch.Tensor

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw ``n`` reparameterised samples, shape ``[..., n, D]``; see :func:`reparameterised_sample`."""
        return reparameterised_sample(self.mu, self.logvar, n, generator=generator)


def pairwise_gaussian_kl(
    source_mu: torch.Tensor,
    source_logvar: torch.Tensor,
    target_mu: torch.Tensor,
    target_logvar: torch.Tensor,
) -> torch.Tensor:
    """KL divergence between every pair of diagonal Gaussians (DAB, Key Design 3, directional KL).

    Entry ``[i, j]`` is :math:`D_{\\mathrm{KL}}(\\mathcal{N}_{s,i} \\,\\|\\, \\mathcal{N}_{t,j})`:

    .. math::

        D_{\\mathrm{KL}}(S_i \\,\\|\\, T_j) = \\frac12 \\sum_{d=1}^{D} \\Big[
            \\frac{(\\mu_{s,id} - \\mu_{t,jd})^2}{\\sigma^2_{t,jd}} + \\frac{\\sigma^2_{s,id}}{\\sigma^2_{t,jd}}
            - \\log \\frac{\\sigma^2_{s,id}}{\\sigma^2_{t,jd}} - 1 \\Big].

    It is computed by expanding the square into one ``[N_s, 2D] @ [2D, N_t]`` matrix product plus
    a row and a column term, so memory is :math:`O((N_s + N_t) D + N_s N_t)` and no
    ``[N_s, N_t, D]`` tensor is ever formed. Before the expansion both sets of means are shifted by
    the (detached) mean of ``target_mu`` -- the KL only depends on mean differences, and the shift
    keeps the expanded terms small, which limits cancellation error. Tiny negative values from
    rounding are clamped to 0.

    For DAB's cost :math:`C_{ij} = D_{\\mathrm{KL}}(Q_{v_j} \\| \\hat P_{t_i})` call
    ``pairwise_gaussian_kl(video_mu, video_logvar, text_mu, text_logvar).T``.

    Parameters
    ----------
    source_mu, source_logvar : torch.Tensor
        ``[N_s, D]`` means and log-variances of the first argument of the KL.
    target_mu, target_logvar : torch.Tensor
        ``[N_t, D]`` means and log-variances of the second argument of the KL.

    Returns
    -------
    torch.Tensor
        ``[N_s, N_t]`` non-negative divergences, in float32 for float16/bfloat16 inputs and in the
        widest input dtype otherwise.

    Raises
    ------
    ValueError
        If a tensor is not 2-D, ``mu``/``logvar`` shapes differ, the embedding dimensions differ,
        or a value is not finite.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import pairwise_gaussian_kl
    >>> source = torch.zeros(1, 2), torch.zeros(1, 2)  # N(0, I)
    >>> target = torch.zeros(2, 2), torch.tensor([[0.0, 0.0], [1.0, 1.0]])  # N(0, I), N(0, e I)
    >>> pairwise_gaussian_kl(*source, *target)  # 0 and 2 * (1/e) / 2
    tensor([[0.0000, 0.3679]])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """
    _check_pairwise_inputs(source_mu, source_logvar, target_mu, target_logvar)
    dtype = _common_dtype(source_mu, source_logvar, target_mu, target_logvar)
    t_mu, t_lv = target_mu.to(dtype), target_logvar.to(dtype)
    sources = _kl_sources(source_mu.to(dtype), source_logvar.to(dtype), t_mu.detach().mean(dim=0, keepdim=True))
    return _kl_to_targets(sources, t_mu, t_lv)


class KLSources(NamedTuple):
    """The source side of :func:`pairwise_gaussian_kl`, prepared once by :func:`prepare_kl_sources` for
    many calls of :func:`pairwise_gaussian_kl_prepared` (a gallery of videos against query after query).

    Attributes
    ----------
    features : torch.Tensor
        ``[N_s, 2D]``: :math:`[\\tilde\\mu_s^2 + \\sigma_s^2,\\ -2\\tilde\\mu_s]` with
        :math:`\\tilde\\mu_s = \\mu_s - c`.
    row : torch.Tensor
        ``[N_s]``: :math:`-\\sum_d \\log\\sigma^2_{s,d} - D`.
    shift : torch.Tensor
        ``[1, D]``: the (detached) centre :math:`c` subtracted from every mean, the sources' mean.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import prepare_kl_sources
    >>> sources = prepare_kl_sources(torch.randn(1000, 256), torch.zeros(1000, 256))  # a gallery, once
    >>> sources.features.shape, sources.row.shape, sources.shift.shape
    (torch.Size([1000, 512]), torch.Size([1000]), torch.Size([1, 256]))

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """

    features: torch.Tensor
    row: torch.Tensor
    shift: torch.Tensor


def _kl_sources(s_mu: torch.Tensor, s_lv: torch.Tensor, shift: torch.Tensor) -> KLSources:
    s_mu = s_mu - shift
    features = torch.cat([s_mu.square() + torch.exp(s_lv), -2.0 * s_mu], dim=1)
    return KLSources(features, -s_lv.sum(dim=1) - s_mu.shape[1], shift)


def _kl_to_targets(sources: KLSources, t_mu: torch.Tensor, t_lv: torch.Tensor) -> torch.Tensor:
    t_mu = t_mu - sources.shift
    t_precision = torch.exp(-t_lv)
    target_features = torch.cat([t_precision, t_mu * t_precision], dim=1)
    col = (t_mu.square() * t_precision + t_lv).sum(dim=1)
    # one [N_s, N_t] buffer: addmm fuses the column term, the row term and the clamp are in place
    kl = torch.addmm(0.5 * col[None, :], sources.features, target_features.T, alpha=0.5)
    return kl.add_(0.5 * sources.row[:, None]).clamp_min_(0.0)


def prepare_kl_sources(source_mu: torch.Tensor, source_logvar: torch.Tensor) -> KLSources:
    """Prepare the sources of :func:`pairwise_gaussian_kl` once, for :func:`pairwise_gaussian_kl_prepared`.

    Everything of the expansion in :func:`pairwise_gaussian_kl` that depends only on the sources (DAB, Key
    Design 3): their ``[N_s, 2D]`` matrix-product features and their row term, centred on the sources' own
    (detached) mean. A gallery of video Gaussians is prepared once; each query then costs one
    ``[N_s, 2D] @ [2D, N_t]`` product and ``O(N_t D)`` work on its own side, and its divergences no longer
    depend on the other queries of its batch (:func:`pairwise_gaussian_kl` centres on the targets' mean).
    Gradients flow to ``source_mu`` and ``source_logvar`` through the prepared tensors.

    Parameters
    ----------
    source_mu, source_logvar : torch.Tensor
        ``[N_s, D]`` means and log-variances of the first argument of the KL.

    Returns
    -------
    ~evidential_prvr.probabilistic.KLSources
        In float32 for float16/bfloat16 inputs, otherwise in the inputs' widest dtype.

    Raises
    ------
    ValueError
        If a tensor is not 2-D, the shapes differ, or (with checks on) a value is not finite.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import pairwise_gaussian_kl_prepared, prepare_kl_sources
    >>> gallery = prepare_kl_sources(torch.zeros(2, 2), torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
    >>> pairwise_gaussian_kl_prepared(gallery, torch.zeros(1, 2), torch.zeros(1, 2))  # KL(gallery_i || query)
    tensor([[0.0000],
            [0.7183]])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """
    _check_gaussian(source_mu, source_logvar, "source", ndim=2)
    dtype = _common_dtype(source_mu, source_logvar)
    s_mu = source_mu.to(dtype)
    return _kl_sources(s_mu, source_logvar.to(dtype), s_mu.detach().mean(dim=0, keepdim=True))


def pairwise_gaussian_kl_prepared(
    sources: KLSources, target_mu: torch.Tensor, target_logvar: torch.Tensor
) -> torch.Tensor:
    """:func:`pairwise_gaussian_kl` of prepared sources (:func:`prepare_kl_sources`) against ``[N_t, D]`` targets.

    Entry ``[i, j]`` is :math:`D_{\\mathrm{KL}}(\\mathcal{N}_{s,i} \\,\\|\\, \\mathcal{N}_{t,j})` (DAB, Key Design
    3), equal to :func:`pairwise_gaussian_kl` up to float rounding (the two centre the means differently).

    Parameters
    ----------
    sources : ~evidential_prvr.probabilistic.KLSources
        ``N_s`` prepared sources of dimension ``D``.
    target_mu, target_logvar : torch.Tensor
        ``[N_t, D]`` means and log-variances of the second argument of the KL.

    Returns
    -------
    torch.Tensor
        ``[N_s, N_t]`` non-negative divergences, in the wider of the sources' dtype and the targets' (float32
        for float16/bfloat16 targets).

    Raises
    ------
    TypeError
        If ``sources`` is not a :class:`~evidential_prvr.probabilistic.KLSources`.
    ValueError
        If a target tensor is not 2-D, its shapes differ, its dimension is not the sources', it is on another
        device, or (with checks on) a value is not finite.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import pairwise_gaussian_kl, pairwise_gaussian_kl_prepared, prepare_kl_sources
    >>> videos, text = (torch.randn(100, 8), torch.randn(100, 8)), (torch.randn(1, 8), torch.randn(1, 8))
    >>> gallery = prepare_kl_sources(*videos)
    >>> cost = pairwise_gaussian_kl_prepared(gallery, *text).T  # DAB's [queries, videos] cost
    >>> torch.allclose(cost, pairwise_gaussian_kl(*videos, *text).T, rtol=1e-5, atol=1e-4)
    True

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """
    if not isinstance(sources, KLSources):
        raise TypeError(f"sources must be a KLSources (from prepare_kl_sources), got {type(sources).__name__}")
    _check_gaussian(target_mu, target_logvar, "target", ndim=2)
    dim = sources.shift.shape[1]
    if target_mu.shape[1] != dim:
        raise ValueError(f"target_mu must have the sources' dimension D = {dim}, got shape {tuple(target_mu.shape)}")
    if target_mu.device != sources.features.device:
        raise ValueError(f"sources and target must be on the same device, got {sources.features.device} and "
                         f"{target_mu.device}")
    dtype = torch.promote_types(sources.features.dtype, _common_dtype(target_mu, target_logvar))
    if dtype != sources.features.dtype:
        sources = KLSources(*(t.to(dtype) for t in sources))
    return _kl_to_targets(sources, target_mu.to(dtype), target_logvar.to(dtype))


def pairwise_wasserstein2(
    source_mu: torch.Tensor,
    source_logvar: torch.Tensor,
    target_mu: torch.Tensor,
    target_logvar: torch.Tensor,
    *,
    squared: bool = True,
) -> torch.Tensor:
    """2-Wasserstein distance between every pair of diagonal Gaussians (DAB's :math:`W_2` ablation).

    For diagonal covariances the closed form is

    .. math::

        W_2^2(S_i, T_j) = \\lVert \\mu_{s,i} - \\mu_{t,j} \\rVert_2^2
            + \\lVert \\sigma_{s,i} - \\sigma_{t,j} \\rVert_2^2,
        \\qquad \\sigma = e^{\\mathrm{logvar}/2}.

    Computed, like :func:`pairwise_gaussian_kl`, as a squared Euclidean distance between the
    concatenated vectors :math:`[\\mu, \\sigma]` by matrix-product expansion (no ``[N_s, N_t, D]``
    tensor). The DAB text does not say whether its ablation uses :math:`W_2` or :math:`W_2^2`;
    ``squared=True`` (default) returns :math:`W_2^2`, which is on the same scale as the KL cost.

    Parameters
    ----------
    source_mu, source_logvar : torch.Tensor
        ``[N_s, D]``.
    target_mu, target_logvar : torch.Tensor
        ``[N_t, D]``.
    squared : bool, default True
        Return :math:`W_2^2`; with ``False`` return :math:`W_2`. The square root's gradient is
        taken at :math:`\\max(W_2^2, 10^{-12})` so it stays finite for identical Gaussians.

    Returns
    -------
    torch.Tensor
        ``[N_s, N_t]``, dtype as in :func:`pairwise_gaussian_kl`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import pairwise_wasserstein2
    >>> pairwise_wasserstein2(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(2, 2), torch.zeros(2, 2))
    tensor([[2., 2.]])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, ablation of the distance (Wasserstein-2).
    """
    _check_pairwise_inputs(source_mu, source_logvar, target_mu, target_logvar)
    if not isinstance(squared, bool):
        raise TypeError(f"squared must be a bool, got {type(squared).__name__}")
    dtype = _common_dtype(source_mu, source_logvar, target_mu, target_logvar)
    shift = target_mu.detach().to(dtype).mean(dim=0, keepdim=True)
    source = torch.cat([source_mu.to(dtype) - shift, torch.exp(0.5 * source_logvar.to(dtype))], dim=1)
    target = torch.cat([target_mu.to(dtype) - shift, torch.exp(0.5 * target_logvar.to(dtype))], dim=1)
    sq = torch.addmm(target.square().sum(dim=1)[None, :], source, target.T, alpha=-2.0)
    sq = sq.add_(source.square().sum(dim=1)[:, None]).clamp_min_(0.0)
    return sq if squared else sq.clamp_min(1e-12).sqrt()


def _check_paired_inputs(
    source_mu: torch.Tensor, source_logvar: torch.Tensor, target_mu: torch.Tensor, target_logvar: torch.Tensor,
    validate_args: bool | None,
) -> None:
    """Validate matched ``[..., D]`` Gaussians whose source and target shapes broadcast."""
    _check_gaussian(source_mu, source_logvar, "source", ndim=None, validate_args=validate_args)
    _check_gaussian(target_mu, target_logvar, "target", ndim=None, validate_args=validate_args)
    if source_mu.dim() < 1 or target_mu.dim() < 1 or source_mu.shape[-1] != target_mu.shape[-1]:
        raise ValueError(
            "source_mu and target_mu must be [..., D] with the same embedding dimension D, got "
            f"shapes {tuple(source_mu.shape)} and {tuple(target_mu.shape)}"
        )
    if source_mu.device != target_mu.device:
        raise ValueError(f"source and target must be on the same device, got {source_mu.device} and {target_mu.device}")
    try:
        torch.broadcast_shapes(source_mu.shape, target_mu.shape)
    except RuntimeError:
        raise ValueError(
            "source and target shapes must broadcast against each other, got "
            f"{tuple(source_mu.shape)} and {tuple(target_mu.shape)}"
        ) from None


def paired_gaussian_kl(
    source_mu: torch.Tensor,
    source_logvar: torch.Tensor,
    target_mu: torch.Tensor,
    target_logvar: torch.Tensor,
    *,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """KL divergence of matched pairs of diagonal Gaussians (DAB, Key Design 3, one cost per text-video pair).

    The divergence of :func:`pairwise_gaussian_kl` taken pair by pair instead of every source against every
    target: the inputs broadcast over their leading dimensions and each pair gives

    .. math::

        D_{\\mathrm{KL}}(S \\,\\|\\, T) = \\frac12 \\sum_{d=1}^{D} \\Big[
            \\frac{(\\mu_{s,d} - \\mu_{t,d})^2}{\\sigma^2_{t,d}} + \\frac{\\sigma^2_{s,d}}{\\sigma^2_{t,d}}
            - \\log \\frac{\\sigma^2_{s,d}}{\\sigma^2_{t,d}} - 1 \\Big].

    Use it where every pair has its own Gaussians (a text bridged toward each video, a video pooled for each
    text), so that no all-pairs matrix is formed. Each variance term is computed from the log-variance
    difference; tiny negative totals from rounding are clamped to 0.

    Parameters
    ----------
    source_mu, source_logvar : torch.Tensor
        ``[..., D]`` means and log-variances of the first argument of the KL.
    target_mu, target_logvar : torch.Tensor
        ``[..., D]`` means and log-variances of the second argument, broadcastable against the source's.
    validate_args : bool, optional
        Check that every mean and log-variance is finite (a host synchronisation); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    torch.Tensor
        The broadcast shape without ``D``: one non-negative divergence per pair, in float32 for
        float16/bfloat16 inputs and in the widest input dtype otherwise.

    Raises
    ------
    ValueError
        If ``mu``/``logvar`` shapes differ, the embedding dimensions differ, the shapes do not broadcast,
        or (with ``validate_args``) a value is not finite.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import paired_gaussian_kl
    >>> source = torch.zeros(2, 2), torch.zeros(2, 2)  # N(0, I) twice
    >>> target = torch.zeros(2, 2), torch.tensor([[0.0, 0.0], [1.0, 1.0]])  # N(0, I), N(0, e I)
    >>> paired_gaussian_kl(*source, *target)  # 0 and 2 * (1/e) / 2
    tensor([0.0000, 0.3679])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """
    _check_paired_inputs(source_mu, source_logvar, target_mu, target_logvar, validate_args)
    dtype = _common_dtype(source_mu, source_logvar, target_mu, target_logvar)
    t_lv = target_logvar.to(dtype)
    log_ratio = source_logvar.to(dtype) - t_lv
    mean = (source_mu.to(dtype) - target_mu.to(dtype)).square() * torch.exp(-t_lv)
    return (0.5 * (mean + (torch.exp(log_ratio) - log_ratio - 1.0)).sum(dim=-1)).clamp_min(0.0)


def paired_wasserstein2(
    source_mu: torch.Tensor,
    source_logvar: torch.Tensor,
    target_mu: torch.Tensor,
    target_logvar: torch.Tensor,
    *,
    squared: bool = True,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """2-Wasserstein distance of matched pairs of diagonal Gaussians (DAB's :math:`W_2` ablation, pair by pair).

    The distance of :func:`pairwise_wasserstein2` taken pair by pair: the inputs broadcast over their leading
    dimensions and each pair gives

    .. math::

        W_2^2(S, T) = \\lVert \\mu_s - \\mu_t \\rVert_2^2 + \\lVert \\sigma_s - \\sigma_t \\rVert_2^2,
        \\qquad \\sigma = e^{\\mathrm{logvar}/2}.

    Parameters
    ----------
    source_mu, source_logvar : torch.Tensor
        ``[..., D]``.
    target_mu, target_logvar : torch.Tensor
        ``[..., D]``, broadcastable against the source's.
    squared : bool, default True
        Return :math:`W_2^2`; with ``False`` return :math:`W_2` (gradient taken at
        :math:`\\max(W_2^2, 10^{-12})`, as in :func:`pairwise_wasserstein2`).
    validate_args : bool, optional
        Check that every mean and log-variance is finite (a host synchronisation); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    torch.Tensor
        The broadcast shape without ``D``, dtype as in :func:`paired_gaussian_kl`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import paired_wasserstein2
    >>> paired_wasserstein2(torch.zeros(2, 2), torch.zeros(2, 2), torch.ones(1, 2), torch.zeros(1, 2))
    tensor([2., 2.])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, ablation of the distance (Wasserstein-2).
    """
    _check_paired_inputs(source_mu, source_logvar, target_mu, target_logvar, validate_args)
    if not isinstance(squared, bool):
        raise TypeError(f"squared must be a bool, got {type(squared).__name__}")
    dtype = _common_dtype(source_mu, source_logvar, target_mu, target_logvar)
    sq = (source_mu.to(dtype) - target_mu.to(dtype)).square().sum(dim=-1) + (
        torch.exp(0.5 * source_logvar.to(dtype)) - torch.exp(0.5 * target_logvar.to(dtype))
    ).square().sum(dim=-1)
    return sq if squared else sq.clamp_min(1e-12).sqrt()


def kl_margin(cost: torch.Tensor, *, validate_args: bool | None = None) -> torch.Tensor:
    """Per-query confidence: second-lowest minus lowest cost in each row (DAB, "KL margin").

    .. math::

        m_i = C_{i,(2)} - C_{i,(1)} \\ge 0,

    where :math:`C_{i,(k)}` is the :math:`k`-th smallest entry of row :math:`i`. DAB sorts queries
    by this margin for selective retrieval (large margin = confident top-1).

    **Inverse temperature of the query variance.** With DAB's orientation
    :math:`C_{ij} = D_{\\mathrm{KL}}(Q_{v_j} \\| \\hat P_{t_i})` the text query is the *second*
    argument of the KL, so the mean-mismatch and variance-ratio terms are multiplied by the query
    precision :math:`e^{-\\log \\sigma^2_{t_i,d}}`. For an isotropic query variance
    :math:`\\log\\sigma^2_{t_i,d} = s_i`,

    .. math::

        C_{ij} = e^{-s_i} A_{ij} - H_j + b_i,\\qquad
        A_{ij} = \\tfrac12 \\sum_d \\big[(\\mu_{v_j,d} - \\mu_{t_i,d})^2 + \\sigma^2_{v_j,d}\\big],\\quad
        H_j = \\tfrac12 \\sum_d \\log \\sigma^2_{v_j,d},

    with :math:`b_i` independent of the video. So :math:`e^{-\\log\\sigma^2_t}` acts as a per-query
    inverse temperature on :math:`A`: when the candidates have equal :math:`H_j` (e.g. a shared
    video variance, or permutations of one log-variance vector) the margin is exactly
    :math:`m_i = e^{-s_i}(A_{i,(2)} - A_{i,(1)})`, i.e. a query whose variance is :math:`k` times
    larger has a :math:`k` times smaller margin; otherwise the video entropy term :math:`H_j` adds
    an offset that the query variance does not scale.

    Parameters
    ----------
    cost : torch.Tensor
        ``[Q, V]`` costs (lower = better match), ``V >= 2``.
    validate_args : bool, optional
        Check that ``cost`` is finite (a host synchronisation); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    torch.Tensor
        ``[Q]`` margins, float32 for half-precision input.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import kl_margin
    >>> kl_margin(torch.tensor([[3.0, 1.0, 2.0]]))  # second lowest minus lowest cost
    tensor([1.])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, "KL margin" (selective retrieval).
    """
    check_tensor(cost, "cost", ndim=2, floating=True)
    check_nonempty(cost, "cost")
    if cost.shape[1] < 2:
        raise ValueError(f"cost must have at least 2 columns (candidates) per query, got shape {tuple(cost.shape)}")
    if should_validate(validate_args):
        check_finite(cost, "cost")
    lowest_two = torch.topk(cost.to(compute_dtype(cost)), k=2, dim=1, largest=False, sorted=True).values
    return lowest_two[:, 1] - lowest_two[:, 0]


def reparameterised_sample(
    mu: torch.Tensor,
    logvar: torch.Tensor,
    n: int,
    *,
    generator: torch.Generator | None = None,
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Reparameterised samples :math:`z_u = \\mu + e^{\\mathrm{logvar}/2} \\odot \\eta_u` (HUD Eq. 3).

    HUD writes :math:`\\mathbf{F}^{p_u} = \\mathbf{F}^{\\sigma} \\cdot \\eta^u + \\mathbf{F}^{\\mu}`
    with the raw output of its :math:`\\sigma` head; this library's heads output
    :math:`\\log\\sigma^2`, so the scale is :math:`e^{\\mathrm{logvar}/2}` (see the guide).

    Parameters
    ----------
    mu, logvar : torch.Tensor
        ``[..., D]`` means and log-variances.
    n : int
        Number of i.i.d. samples per Gaussian (HUD's :math:`U`).
    generator : torch.Generator, optional
        Source of the noise :math:`\\eta \\sim \\mathcal{N}(0, I)`; with a seeded generator on the
        inputs' device the samples are deterministic.
    validate_args : bool, optional
        Check that ``logvar`` is finite (a host synchronisation); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Returns
    -------
    torch.Tensor
        ``[..., n, D]`` samples, differentiable w.r.t. ``mu`` and ``logvar``, in the inputs' dtype.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import reparameterised_sample
    >>> reparameterised_sample(torch.zeros(4, 8), torch.zeros(4, 8), 3).shape
    torch.Size([4, 3, 8])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 3; Kingma and Welling, "Auto-Encoding Variational Bayes", ICLR 2014.
    """
    check_tensor(mu, "mu", floating=True)
    check_tensor(logvar, "logvar", floating=True)
    check_same_shape(mu, logvar, "mu", "logvar")
    if mu.dim() < 1:
        raise ValueError(f"mu must have at least 1 dimension [..., D], got shape {tuple(mu.shape)}")
    check_positive_int(n, "n")
    if should_validate(validate_args):
        check_finite(logvar, "logvar")
    shape = (*mu.shape[:-1], n, mu.shape[-1])
    noise = torch.randn(shape, generator=generator, device=mu.device, dtype=mu.dtype)
    return mu.unsqueeze(-2) + torch.exp(0.5 * logvar).unsqueeze(-2) * noise
