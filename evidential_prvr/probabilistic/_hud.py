"""HUD modules: probabilistic modification-text embedding, weighted composition, biased similarity, losses.

HUD = "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval".
Equation numbers refer to that paper; open choices are documented on each class and in
``docs/guide/probabilistic.rst``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from evidential_prvr._checks import check_choice, check_positive, check_positive_int
from evidential_prvr.functional._gaussian import DiagonalGaussian
from evidential_prvr.functional._hud import (
    TOKEN_MATCHING,
    batch_classification_loss,
    biased_max_similarity,
    holistic_atomistic_consistency_loss,
)
from evidential_prvr.probabilistic import _input_checks
from evidential_prvr.probabilistic._input_checks import DEFAULT_LOGVAR_BOUNDS, _InputChecks


class ProbabilisticTextEmbedding(_InputChecks):
    """Gaussian embedding of the modification text, conditioned on the reference video (HUD Eq. 2).

    .. math::

        \\mu = \\operatorname{LN}\\big(\\operatorname{sigmoid}(W_\\mu[\\operatorname{CA}_\\mu(F_m^H, F_r) + F_m^H])\\big),\\qquad
        \\log\\sigma^2 = \\operatorname{clip}\\big(W_\\sigma[\\operatorname{CA}_\\sigma(F_m^H, F_r) + F_m^H]\\big),

    where :math:`\\operatorname{CA}(q, kv)` is cross-attention with the holistic text token as the
    single query and the reference video tokens :math:`F_r` ``[B, T, D]`` as keys/values; the two
    cross-attentions have separate weights (Eq. 2's subscripts). Samples (Eq. 3) come from
    ``output.sample(n, generator=...)``, see :func:`~evidential_prvr.functional.reparameterised_sample`.
    Several query tokens ``[B, Q, D]`` are embedded at once, each attending on its own (HUD's Eq. 6 uses
    the same architecture with every reference token as a query over the text tokens).

    The two cross-attentions are :class:`torch.nn.MultiheadAttention` modules (their parameters, state-dict
    keys and initialisation), evaluated together as one attention with twice the heads (their projections
    concatenated, one ``scaled_dot_product_attention`` call): the same outputs as
    calling each module, up to float rounding, in fewer operations. With one key (HUD's holistic token)
    the attention weight is exactly 1 and only the value projection is evaluated.

    Choices: HUD's :math:`\\sigma` head is "a single linear layer" whose output multiplies the
    noise directly; here that linear output is read as :math:`\\log\\sigma^2` (the library-wide
    convention, always positive variance) and clipped to ``logvar_bounds``. HUD's Eq. 2 uses the
    reference *holistic* token as key/value; passing ``T = 1`` tokens reproduces that exactly.

    Parameters
    ----------
    dim : int
        Holistic embedding size :math:`D_H`.
    num_heads : int, default 1
        Heads of each cross-attention (HUD does not say); must divide ``dim``.
    logvar_bounds : tuple of float
        Clipping range of :math:`\\log\\sigma^2` (a library choice; HUD does not clip); default ``(-6.0, 2.0)``.
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import ProbabilisticTextEmbedding
    >>> text = ProbabilisticTextEmbedding(16)(torch.randn(4, 16), torch.randn(4, 5, 16))
    >>> text.mu.shape, text.sample(3).shape
    (torch.Size([4, 16]), torch.Size([4, 3, 16]))
    >>> ProbabilisticTextEmbedding(16)(torch.randn(4, 3, 16), torch.randn(4, 5, 16)).mu.shape  # 3 query tokens each
    torch.Size([4, 3, 16])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 2-3.
    """

    def __init__(
        self, dim: int, *, num_heads: int = 1, logvar_bounds: tuple[float, float] = DEFAULT_LOGVAR_BOUNDS,
        validate_args: bool | None = None,
    ) -> None:
        super().__init__(validate_args)
        _input_checks.check_sizes(dim=dim, num_heads=num_heads)
        if dim % num_heads:
            raise ValueError(f"num_heads must divide dim, got dim={dim}, num_heads={num_heads}")
        self.dim = dim
        self.logvar_bounds = _input_checks.check_bounds(logvar_bounds)
        self.mean_attention = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.logvar_attention = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.mean_head = nn.Sequential(nn.Linear(dim, dim), nn.Sigmoid(), nn.LayerNorm(dim))
        self.logvar_head = nn.Linear(dim, dim)

    def forward(
        self, text: torch.Tensor, reference_tokens: torch.Tensor, mask: torch.Tensor | None = None
    ) -> DiagonalGaussian:
        """Gaussian of the modification text, ``[B, dim]`` (or ``[B, Q, dim]`` for ``Q`` query tokens).

        Parameters
        ----------
        text : torch.Tensor
            ``[B, dim]`` holistic modification-text token :math:`F_m^H`, or ``[B, Q, dim]`` query tokens,
            each embedded on its own.
        reference_tokens : torch.Tensor
            ``[B, T, dim]`` reference video tokens (``T = 1`` for HUD's holistic token).
        mask : torch.Tensor, optional
            ``[B, T]`` bool, True = valid reference token.
        """
        _input_checks.check_features(text, "text", self.dim, ndim=(2, 3))
        _input_checks.check_features(reference_tokens, "reference_tokens", self.dim, ndim=3)
        if reference_tokens.shape[0] != text.shape[0]:
            raise ValueError(
                f"reference_tokens must have batch size {text.shape[0]} like text, got shape {tuple(reference_tokens.shape)}"
            )
        _input_checks.check_inputs(self.validate_args, text=text, reference_tokens=reference_tokens)
        _input_checks.check_token_mask(mask, reference_tokens, validate_args=self.validate_args)
        text = _input_checks.to_module_dtype(text, self)
        reference = _input_checks.to_module_dtype(reference_tokens, self)
        query = text if text.dim() == 3 else text.unsqueeze(1)
        mean_context, logvar_context = _two_cross_attentions(
            self.mean_attention, self.logvar_attention, query, reference, _input_checks.key_padding(mask)
        )
        mu = self.mean_head(mean_context + query)
        logvar = self.logvar_head(logvar_context + query).clamp(*self.logvar_bounds)
        if text.dim() == 2:
            mu, logvar = mu.squeeze(1), logvar.squeeze(1)
        return DiagonalGaussian(mu, logvar)


def _two_cross_attentions(
    first: nn.MultiheadAttention,
    second: nn.MultiheadAttention,
    query: torch.Tensor,
    keys: torch.Tensor,
    padding: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``first(query, keys, keys)`` and ``second(query, keys, keys)`` (batch-first, no dropout) as one attention.

    The two modules' query, key and value projections are concatenated, so that both run as a single
    attention with ``2 * num_heads`` heads of the same head size (the scale :math:`1/\\sqrt{d_{head}}` is
    unchanged); each output then passes its own module's output projection. ``padding`` is the
    ``[B, T]`` key padding mask (True = ignore). With one key (and no padding) the attention weight is
    exactly 1, so the output is the value projection of that key.
    """
    dim, heads = first.embed_dim, first.num_heads
    batch, n_queries, n_keys = query.shape[0], query.shape[1], keys.shape[1]
    weight = torch.cat([first.in_proj_weight.view(3, dim, dim), second.in_proj_weight.view(3, dim, dim)], dim=1)
    bias = torch.cat([first.in_proj_bias.view(3, dim), second.in_proj_bias.view(3, dim)], dim=1)
    if n_keys == 1 and padding is None:
        context = F.linear(keys, weight[2], bias[2])  # [B, 1, 2 dim], the same for every query
    else:
        q = F.linear(query, weight[0], bias[0])
        k, v = F.linear(keys, weight[1:].reshape(4 * dim, dim), bias[1:].reshape(4 * dim)).chunk(2, dim=-1)
        q, k, v = (x.unflatten(-1, (2 * heads, dim // heads)).transpose(1, 2) for x in (q, k, v))
        attend = None if padding is None else ~padding[:, None, None, :]
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=attend).transpose(1, 2).flatten(2)
    outputs = (F.linear(part, module.out_proj.weight, module.out_proj.bias)
               for part, module in zip(context.split(dim, dim=-1), (first, second)))
    first_out, second_out = (out.expand(batch, n_queries, dim) for out in outputs)
    return first_out, second_out


class ComposeByWeights(_InputChecks):
    """Compose text and reference with MLP-predicted element-wise weights (HUD Eq. 4-5).

    .. math::

        [w_\\alpha, w_\\beta] = \\operatorname{chunk}_2\\big(\\operatorname{MLP}([F_r^H, F_m])\\big),\\qquad
        F_c = w_\\alpha \\odot F_m + w_\\beta \\odot F_r^H.

    Choices: MLP = Linear(2D, hidden) → ReLU → Linear(hidden, 2D) with no activation on the weights
    (HUD specifies neither). HUD applies "an identical composition operation" to the original
    (non-sampled) text token; whether that shares weights with the sample composition is not said
    -- use one instance for both to share, two to not share.

    Parameters
    ----------
    dim : int
        Embedding size :math:`D_H`.
    hidden_dim : int, optional
        Hidden size of the MLP (default ``dim``).
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import ComposeByWeights
    >>> ComposeByWeights(16)(torch.randn(4, 16), torch.randn(4, 3, 16)).shape  # three samples per query
    torch.Size([4, 3, 16])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 4-5.
    """

    def __init__(self, dim: int, hidden_dim: int | None = None, *, validate_args: bool | None = None) -> None:
        super().__init__(validate_args)
        check_positive_int(dim, "dim")
        hidden = _input_checks.hidden_size(hidden_dim, dim)
        self.dim = dim
        self.mlp = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, 2 * dim))

    def forward(self, reference: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Composed tokens, shape of ``text``.

        Parameters
        ----------
        reference : torch.Tensor
            ``[B, D]`` reference holistic token, or ``[B, U, D]`` matching ``text``.
        text : torch.Tensor
            ``[B, D]`` text token or ``[B, U, D]`` text samples; a ``[B, D]`` reference is
            explicitly repeated over the ``U`` samples.
        """
        _input_checks.check_features(reference, "reference", self.dim, ndim=(2, 3))
        _input_checks.check_features(text, "text", self.dim, ndim=(2, 3))
        _input_checks.check_inputs(self.validate_args, reference=reference, text=text)
        if reference.dim() == 2 and text.dim() == 3 and reference.shape[0] == text.shape[0]:
            reference = reference.unsqueeze(1).expand_as(text)
        if reference.shape != text.shape:
            raise ValueError(
                "reference must have shape [B, D] or the shape of text, got "
                f"reference {tuple(reference.shape)} and text {tuple(text.shape)}"
            )
        reference, text = _input_checks.to_module_dtype(reference, self), _input_checks.to_module_dtype(text, self)
        weights: torch.Tensor = self.mlp(torch.cat([reference, text], dim=-1))
        w_alpha, w_beta = weights.chunk(2, dim=-1)
        return w_alpha * text + w_beta * reference


class BiasedMaxSimilarity(_InputChecks):
    """HUD's similarity with a learnable per-token bias :math:`\\mathbf{b}` (Eq. 10-11).

    Wraps :func:`~evidential_prvr.functional.biased_max_similarity`; the bias starts at zero
    (HUD does not give an initialisation), i.e. plain softmax-weighted token similarities.

    Parameters
    ----------
    num_tokens : int
        Number :math:`K` of composed tokens (holistic: :math:`1 + U`).
    token_matching : {"max", "paired"}
        See :func:`~evidential_prvr.functional.biased_max_similarity`.
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import BiasedMaxSimilarity
    >>> BiasedMaxSimilarity(num_tokens=4)(torch.randn(2, 4, 16), torch.randn(3, 4, 16)).shape
    torch.Size([2, 3])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 10-11.
    """

    def __init__(self, num_tokens: int, *, token_matching: str = "max", validate_args: bool | None = None) -> None:
        super().__init__(validate_args)
        check_positive_int(num_tokens, "num_tokens")
        check_choice(token_matching, "token_matching", TOKEN_MATCHING)
        self.token_matching = token_matching
        self.bias = nn.Parameter(torch.zeros(num_tokens))

    def forward(self, composed_tokens: torch.Tensor, target_tokens: torch.Tensor) -> torch.Tensor:
        """``[B_q, B_t]`` similarities of ``[B_q, K, D]`` composed tokens and ``[B_t, M, D]`` target tokens."""
        return biased_max_similarity(composed_tokens=composed_tokens, target_tokens=target_tokens, bias=self.bias,
                                     token_matching=self.token_matching, validate_args=self.validate_args)


class BatchClassificationLoss(nn.Module):
    """HUD's :math:`\\mathcal{L}_{rank}` (Eq. 12); see :func:`~evidential_prvr.functional.batch_classification_loss`.

    Parameters
    ----------
    tau : float, default 0.1
        Temperature (HUD: 0.1).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import BatchClassificationLoss
    >>> BatchClassificationLoss()(torch.zeros(2, 2), torch.zeros(2, 2))
    tensor(0.6931)

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 12.
    """

    def __init__(self, tau: float = 0.1) -> None:
        super().__init__()
        check_positive(tau, "tau")
        self.tau = float(tau)

    def forward(self, holistic_sim: torch.Tensor, atomistic_sim: torch.Tensor) -> torch.Tensor:
        """Scalar loss from ``[B, B]`` holistic and atomistic similarities (rows = composed queries)."""
        return batch_classification_loss(holistic_sim, atomistic_sim, tau=self.tau)

    def extra_repr(self) -> str:
        return f"tau={self.tau}"


class HolisticAtomisticConsistencyLoss(nn.Module):
    """HUD's :math:`\\mathcal{L}_{H\\leftrightarrow A}` (Eq. 13-14); see
    :func:`~evidential_prvr.functional.holistic_atomistic_consistency_loss`.

    Parameters
    ----------
    tau : float, default 0.1
        Temperature (HUD: 0.1).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import HolisticAtomisticConsistencyLoss
    >>> HolisticAtomisticConsistencyLoss()(torch.eye(3), torch.eye(3))  # equal distributions
    tensor(0.)

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 13-14.
    """

    def __init__(self, tau: float = 0.1) -> None:
        super().__init__()
        check_positive(tau, "tau")
        self.tau = float(tau)

    def forward(self, holistic_sim: torch.Tensor, atomistic_sim: torch.Tensor) -> torch.Tensor:
        """Scalar loss from ``[B, B]`` holistic and atomistic similarities (rows = composed queries)."""
        return holistic_atomistic_consistency_loss(holistic_sim, atomistic_sim, tau=self.tau)

    def extra_repr(self) -> str:
        return f"tau={self.tau}"
