"""``HUDObjective``: HUD's holistic and atomistic composition, alignment and losses as one drop-in module.

Meant to replace the composition + contrastive loss of a CoVR-style composed video retrieval (CVR) training
step: give it the reference video's atomistic tokens, the modification text's tokens and the target video's
tokens, and it returns HUD's loss (Eq. 12 + kappa * Eq. 14) with its named parts; at retrieval time
:meth:`HUDObjective.compose`, :meth:`HUDObjective.embed_targets` and :meth:`HUDObjective.similarity` rank a
gallery. Every derivative of HUD's Table 4 (D#1-D#9) is a named switch (:data:`HUD_DERIVATIVES`).

Equation numbers refer to "HUD: Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video
Retrieval". Choices the paper leaves open are documented on each class and in ``docs/guide/hud.rst``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from evidential_prvr._checks import check_positive, check_positive_int, check_tensor
from evidential_prvr._module_bases import PresetModule
from evidential_prvr.choices import HUDDatasetName, HUDPreset
from evidential_prvr.functional._gaussian import DiagonalGaussian
from evidential_prvr.functional._hud import (
    batch_classification_loss,
    holistic_atomistic_consistency_loss,
    max_token_similarity,
)
from evidential_prvr.presets import hud_settings
from evidential_prvr.probabilistic import _input_checks
from evidential_prvr.probabilistic._hud import BiasedMaxSimilarity, ComposeByWeights, ProbabilisticTextEmbedding


class QueryTokenAttention(nn.Module):
    """A small learnable query-token attention standing in for BLIP-2's Q-Former (HUD Eq. 1, 8, 9).

    Each layer lets the query tokens attend jointly to themselves and to the text tokens (BLIP-2's shared
    self-attention), then cross-attend to visual tokens, then pass a feed-forward block; every block is
    residual and followed by LayerNorm. The queries are either ``num_queries`` learnable tokens (Eq. 1:
    extracting :math:`L` tokens from a frame, or CoVR-2's composition) or given by the caller (Eq. 8-9: the
    reference atomistic tokens or their detail samples as "query embeddings"). The text tokens are keys and
    values only (they are not updated from layer to layer, a simplification of BLIP-2's text stream).

    Parameters
    ----------
    dim : int
        Token size :math:`D_A`.
    num_queries : int, optional
        Number of learnable query tokens; ``None`` means the caller always passes ``queries``.
    num_heads : int, default 1
        Attention heads (must divide ``dim``).
    num_layers : int, default 1
        Stacked layers.
    ffn_ratio : int, default 2
        Hidden size of the feed-forward block as a multiple of ``dim``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import QueryTokenAttention
    >>> qformer = QueryTokenAttention(16, num_queries=4)
    >>> qformer(visual=torch.randn(2, 10, 16)).shape  # Eq. 1: 4 tokens extracted from 10 visual tokens
    torch.Size([2, 4, 16])
    >>> qformer(queries=torch.randn(2, 6, 16), text=torch.randn(2, 5, 16)).shape  # Eq. 8: given queries + text
    torch.Size([2, 6, 16])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 1, 8, 9;
    Li et al., "BLIP-2", ICML 2023 (the Q-Former).
    """

    def __init__(
        self, dim: int, num_queries: int | None = None, *, num_heads: int = 1, num_layers: int = 1, ffn_ratio: int = 2
    ) -> None:
        super().__init__()
        for value, name in ((dim, "dim"), (num_heads, "num_heads"), (num_layers, "num_layers"), (ffn_ratio, "ffn_ratio")):
            check_positive_int(value, name)
        if num_queries is not None:
            check_positive_int(num_queries, "num_queries")
        if dim % num_heads:
            raise ValueError(f"num_heads must divide dim, got dim={dim}, num_heads={num_heads}")
        self.dim = dim
        self.queries = None if num_queries is None else nn.Parameter(0.02 * torch.randn(num_queries, dim))
        self.self_attention = nn.ModuleList(nn.MultiheadAttention(dim, num_heads, batch_first=True) for _ in range(num_layers))
        self.cross_attention = nn.ModuleList(nn.MultiheadAttention(dim, num_heads, batch_first=True) for _ in range(num_layers))
        self.feed_forward = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, ffn_ratio * dim), nn.GELU(), nn.Linear(ffn_ratio * dim, dim)) for _ in range(num_layers)
        )
        self.norms = nn.ModuleList(nn.ModuleList(nn.LayerNorm(dim) for _ in range(3)) for _ in range(num_layers))

    def forward(
        self,
        queries: torch.Tensor | None = None,
        text: torch.Tensor | None = None,
        text_mask: torch.Tensor | None = None,
        visual: torch.Tensor | None = None,
        visual_mask: torch.Tensor | None = None,
        *,
        query_groups: int = 1,
    ) -> torch.Tensor:
        """Output query tokens ``[B, Q, dim]``.

        Parameters
        ----------
        queries : torch.Tensor, optional
            ``[B, Q, dim]`` query embeddings; default: the learnable queries, repeated over the batch.
        text : torch.Tensor, optional
            ``[B, N, dim]`` text tokens attended jointly with the queries.
        text_mask : torch.Tensor, optional
            ``[B, N]`` bool, True = valid text token.
        visual : torch.Tensor, optional
            ``[B, T, dim]`` visual tokens the queries cross-attend to.
        visual_mask : torch.Tensor, optional
            ``[B, T]`` bool, True = valid visual token.
        query_groups : int, default 1
            The queries are this many equal, consecutive groups that do not attend to each other (each
            attends to itself and to the text): the same outputs as one call per group with the groups
            stacked on the batch, up to float rounding, with the text and visual tokens projected once.
        """
        batch = self._batch_size(queries, text, visual)
        check_positive_int(query_groups, "query_groups")
        if queries is None:
            if self.queries is None:
                raise ValueError("queries must be given: this QueryTokenAttention has no learnable queries (num_queries=None)")
            queries = self.queries.unsqueeze(0).expand(batch, -1, -1)
        for name, tokens, mask in (("queries", queries, None), ("text", text, text_mask), ("visual", visual, visual_mask)):
            if tokens is not None:
                check_tensor(tokens, name, ndim=3, floating=True)
                _input_checks.check_dim(tokens, name, self.dim)
                if tokens.shape[0] != batch:
                    raise ValueError(f"{name} must have batch size {batch}, got shape {tuple(tokens.shape)}")
                _input_checks.check_token_mask(mask, tokens, f"{name}_mask")
        n_queries = queries.shape[1]
        if n_queries % query_groups:
            raise ValueError(
                f"query_groups={query_groups} must divide the number of queries, got shape {tuple(queries.shape)}"
            )
        text_padding = None
        if text is not None and text_mask is not None:
            query_valid = torch.ones(batch, n_queries, dtype=torch.bool, device=queries.device)
            text_padding = ~torch.cat([query_valid, text_mask], dim=1)
        group_mask = None  # True = a query may not attend to that key (another group's query)
        if query_groups > 1:
            group = torch.arange(n_queries, device=queries.device) // (n_queries // query_groups)
            group_mask = group[:, None] != group[None, :]
            if text is not None:
                group_mask = F.pad(group_mask, (0, text.shape[1]), value=False)
        visual_padding = None if visual_mask is None else ~visual_mask
        x = queries
        for self_attn, cross_attn, ffn, layer_norms in zip(
            self.self_attention, self.cross_attention, self.feed_forward, self.norms
        ):
            norm_s, norm_c, norm_f = cast(nn.ModuleList, layer_norms)  # the layer's three LayerNorms
            context = x if text is None else torch.cat([x, text.to(x.dtype)], dim=1)
            x = norm_s(x + self_attn(x, context, context, key_padding_mask=text_padding, attn_mask=group_mask,
                                     need_weights=False)[0])
            if visual is not None:
                v = visual.to(x.dtype)
                x = norm_c(x + cross_attn(x, v, v, key_padding_mask=visual_padding, need_weights=False)[0])
            x = norm_f(x + ffn(x))
        return x

    @staticmethod
    def _batch_size(*tensors: torch.Tensor | None) -> int:
        for tensor in tensors:
            if tensor is not None:
                check_tensor(tensor, "tokens", ndim=3, floating=True)
                return tensor.shape[0]
        raise ValueError("QueryTokenAttention needs at least one of queries, text or visual")


@dataclass(frozen=True)
class HUDSwitches:
    """Which of HUD's parts are on; each ``False`` is one derivative of HUD's Table 4.

    Attributes
    ----------
    holistic_probabilistic : bool
        Textual probabilistic embedding and its :math:`U` sampled compositions (Eq. 2-5); off = D#1
        ``w/o_H_Prob`` (the holistic composed token is the composition of the original tokens only).
    holistic_composition : bool
        MLP-weighted composition (Eq. 4-5); off = D#2 ``w/o_H_Compose`` (simple addition).
    holistic_level : bool
        The whole holistic level; off = D#3 ``w/o_Holistic_Level`` (no holistic similarity, no Eq. 14).
    atomistic_detail : bool
        Visual detail embedding (Eq. 6-8); off = D#4 ``w/o_A_Detail`` (only the original tokens composed, Eq. 9).
    atomistic_composition : bool
        Query-token attention composition (Eq. 8-9); off = D#5 ``w/o_A_Compose`` (tokens + mean text token).
    atomistic_level : bool
        The whole atomistic level; off = D#6 ``w/o_Atomistic_Level`` (no atomistic similarity, no Eq. 14).
    similarity_bias : bool
        The weighting :math:`\\mathcal{B}` of Eq. 10-11; off = D#7 ``w/o_Bias`` (the mean of the per-token
        best matches instead).
    consistency_loss : bool
        :math:`\\mathcal{L}_{H\\leftrightarrow A}` (Eq. 13-14); off = D#8.
    rank_loss : bool
        :math:`\\mathcal{L}_{rank}` (Eq. 12); off = D#9.

    Examples
    --------
    >>> from evidential_prvr.probabilistic import HUDSwitches
    >>> HUDSwitches().derivative(7).similarity_bias
    False

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Table 4, §4.3.
    """

    holistic_probabilistic: bool = True
    holistic_composition: bool = True
    holistic_level: bool = True
    atomistic_detail: bool = True
    atomistic_composition: bool = True
    atomistic_level: bool = True
    similarity_bias: bool = True
    consistency_loss: bool = True
    rank_loss: bool = True

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
        if not (self.holistic_level or self.atomistic_level):
            raise ValueError("at least one of holistic_level and atomistic_level must be on")
        if not (self.rank_loss or self.consistency_loss):
            raise ValueError("at least one of rank_loss and consistency_loss must be on")
        if not self.rank_loss and not (self.holistic_level and self.atomistic_level):
            raise ValueError("rank_loss=False leaves only L_H<->A, which needs both the holistic and the atomistic level")

    def derivative(self, number: int) -> HUDSwitches:
        """These switches with the part removed by Table 4's derivative D#``number`` (1-9) turned off."""
        if number not in HUD_DERIVATIVES:
            raise ValueError(f"derivative must be one of {sorted(HUD_DERIVATIVES)} (HUD Table 4), got {number!r}")
        return replace(self, **{HUD_DERIVATIVES[number][1]: False})

    @property
    def uses_consistency(self) -> bool:
        """Whether Eq. 14 is computed (it needs both levels)."""
        return self.consistency_loss and self.holistic_level and self.atomistic_level


class _DerivativeTable(dict):
    """The derivatives of HUD's Table 4 by number (1-9), each the pair (the paper's name, the switch turned off).

    The switch is a field of :class:`HUDSwitches`; ``HUDObjective.from_preset("paper", ..., derivative=n)`` builds D#n.
    """


HUD_DERIVATIVES = _DerivativeTable({
    1: ("w/o_H_Prob", "holistic_probabilistic"),
    2: ("w/o_H_Compose", "holistic_composition"),
    3: ("w/o_Holistic_Level", "holistic_level"),
    4: ("w/o_A_Detail", "atomistic_detail"),
    5: ("w/o_A_Compose", "atomistic_composition"),
    6: ("w/o_Atomistic_Level", "atomistic_level"),
    7: ("w/o_Bias", "similarity_bias"),
    8: ("w/o_L_H<->A", "consistency_loss"),
    9: ("w/o_L_rank", "rank_loss"),
})


@dataclass
class HUDComposedQuery:
    """HUD's composed query tokens, L2-normalised, ready for :meth:`HUDObjective.similarity`.

    Attributes
    ----------
    holistic : torch.Tensor or None
        ``[B, K_H, D_H]`` holistic composed tokens :math:`F_c^H` (``K_H = 1 + U``, Eq. 5); ``None`` when the
        holistic level is off.
    atomistic : torch.Tensor or None
        ``[B, K_A, D_H]`` atomistic composed tokens :math:`F_c^A` (``K_A = 2T``, Eq. 9); ``None`` when the
        atomistic level is off.
    text : DiagonalGaussian or None
        ``[B, D_H]`` textual Gaussian :math:`p(z|m)` (Eq. 2), when computed.
    detail : DiagonalGaussian or None
        ``[B, T, D_A]`` visual detail Gaussian :math:`p(z|r)` (Eq. 6), when computed.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import HUDObjective
    >>> hud = HUDObjective.from_preset("paper", dim=16, holistic_dim=8, num_reference_tokens=3)
    >>> q = hud.compose(torch.randn(2, 3, 16), torch.randn(2, 4, 16))
    >>> q.holistic.shape, q.atomistic.shape
    (torch.Size([2, 9, 8]), torch.Size([2, 6, 8]))

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 2-9.
    """

    holistic: torch.Tensor | None
    atomistic: torch.Tensor | None
    text: DiagonalGaussian | None = None
    detail: DiagonalGaussian | None = None


@dataclass
class HUDTargetTokens:
    """HUD's target tokens, L2-normalised.

    Attributes
    ----------
    holistic : torch.Tensor or None
        ``[B, 1, D_H]`` holistic target token :math:`F_t^H` (its extension to :math:`1 + U` copies does not
        change the similarity, see :func:`~evidential_prvr.functional.biased_max_similarity`).
    atomistic : torch.Tensor or None
        ``[B, M, D_H]`` atomistic target tokens :math:`F_t^A`; padded tokens are replaced by a copy of a valid
        one, so that the max over target tokens sees only valid tokens.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import HUDObjective
    >>> hud = HUDObjective.from_preset("paper", dim=16, holistic_dim=8, num_reference_tokens=3)
    >>> hud.embed_targets(torch.randn(5, 7, 16)).atomistic.shape
    torch.Size([5, 7, 8])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", §3.4.
    """

    holistic: torch.Tensor | None
    atomistic: torch.Tensor | None


@dataclass
class HUDObjectiveOutput:
    """Output of :class:`HUDObjective`.

    Attributes
    ----------
    total : torch.Tensor
        Scalar loss :math:`\\mathcal{L}_{rank} + \\kappa \\mathcal{L}_{H\\leftrightarrow A}` (Eq. 15), with the
        parts the switches turned off left out.
    rank : torch.Tensor
        Scalar :math:`\\mathcal{L}_{rank}` (Eq. 12); zero when ``rank_loss`` is off.
    consistency : torch.Tensor
        Scalar :math:`\\mathcal{L}_{H\\leftrightarrow A}` (Eq. 14), unweighted; zero when not computed.
    holistic_similarity, atomistic_similarity : torch.Tensor or None
        ``[B, B]`` :math:`\\mathcal{S}(F^H_{ci}, F^H_{tj})` and :math:`\\mathcal{S}(F^A_{ci}, F^A_{tj})`
        (rows = composed queries); ``None`` for a level that is off.
    query : HUDComposedQuery
        The composed query tokens.
    targets : HUDTargetTokens
        The target tokens.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import HUDObjective
    >>> hud = HUDObjective.from_preset("paper", dim=16, holistic_dim=8, num_reference_tokens=3)
    >>> out = hud(torch.randn(4, 3, 16), torch.randn(4, 5, 16), torch.randn(4, 6, 16))
    >>> sorted(out.scalars())
    ['consistency', 'rank', 'total']

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 12-15.
    """

    total: torch.Tensor
    rank: torch.Tensor
    consistency: torch.Tensor
    holistic_similarity: torch.Tensor | None
    atomistic_similarity: torch.Tensor | None
    query: HUDComposedQuery
    targets: HUDTargetTokens

    def scalars(self) -> dict[str, torch.Tensor]:
        """The scalar losses by name (``total``, ``rank``, ``consistency``), detached, for logging."""
        return {"total": self.total.detach(), "rank": self.rank.detach(), "consistency": self.consistency.detach()}


def _fill_padding(tokens: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``[B, G T, D]`` tokens (``G`` consecutive sets of ``T``, one ``[B, T]`` mask for all) with every padded token
    replaced by its set's first valid token (a max over a row is then unchanged)."""
    if mask is None:
        return tokens
    batch, n_tokens, dim = tokens.shape
    sets = tokens.view(batch, n_tokens // mask.shape[1], mask.shape[1], dim)
    first = mask.to(torch.int64).argmax(dim=1)
    filler = sets[torch.arange(batch, device=tokens.device), :, first].unsqueeze(2)  # [B, G, 1, D]
    return torch.where(mask[:, None, :, None], sets, filler).view(batch, n_tokens, dim)


def _add_composition(reference: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
    """Simple addition in place of Eq. 4-5 (D#2): ``[B, D]`` reference plus ``[B, D]`` or ``[B, U, D]`` text."""
    return (reference.unsqueeze(1) if text.dim() == 3 else reference) + text


def _unweighted_similarity(composed: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``[B_q, B_t]`` mean over composed tokens of their best target-token match (Eq. 11 without B, D#7)."""
    return max_token_similarity(composed, target).mean(dim=1)


class HUDObjective(PresetModule):
    """HUD's composition, holistic-to-atomistic alignment and loss, from atomistic tokens (HUD Eq. 2-15).

    Inputs are the reference video's atomistic tokens :math:`F_r^A` ``[B, T, D_A]`` (the output of HUD's
    Eq. 1, e.g. :class:`QueryTokenAttention` with learnable queries over the frame features), the modification
    text's tokens ``[B, N, D_A]`` (read as both :math:`F_m^A` and :math:`\\varPhi_{\\mathbb{T}}(x_m)`) and the
    target video's tokens ``[B, M, D_A]``. Pipeline:

    1. holistic tokens (§3.2.1): :math:`F_r^H` = projection of the masked mean of :math:`F_r^A`
       (``video_projection``), :math:`F_m^H` = projection of the masked mean of the text tokens;
    2. textual Gaussian (Eq. 2, :class:`ProbabilisticTextEmbedding` with :math:`F_r^H` as the one key) and
       :math:`U` samples (Eq. 3);
    3. holistic composition (Eq. 4-5, one :class:`ComposeByWeights` for the original tokens and every
       sample): :math:`F_c^H = [C(F_r^H, F_m^H), C(F_r^H, F_m^{p_1}), \\dots]`, ``[B, 1 + U, D_H]``;
    4. visual detail Gaussian (Eq. 6, a :class:`ProbabilisticTextEmbedding` of size :math:`D_A` applied to each
       reference token as the query, the text tokens as keys) and one sample per token (Eq. 7);
    5. atomistic composition (Eq. 8-9): one :class:`QueryTokenAttention` takes the detail samples and the
       original tokens as query embeddings jointly with the text tokens;
       :math:`F_c^A = \\operatorname{Proj}([\\cdot, \\cdot])`, ``[B, 2T, D_H]``;
    6. targets (§3.4): :math:`F_t^H` = ``video_projection`` of the masked mean of the target tokens,
       :math:`F_t^A` = ``video_projection`` of each target token; all tokens are L2-normalised;
    7. :class:`BiasedMaxSimilarity` at both levels (Eq. 10-11), :func:`~evidential_prvr.functional.batch_classification_loss`
       (Eq. 12) and :func:`~evidential_prvr.functional.holistic_atomistic_consistency_loss` (Eq. 13-14) with
       ``tau``, total = Eq. 15.

    Choices HUD leaves open: cosine similarities (normalised tokens, as BLIP-2); one composition module shared by
    the original and the sampled tokens ("an identical composition operation"); the same ``video_projection``
    for reference and target (one embedding function :math:`\\mathcal{H}`, §3.1); a reference ``mask`` is used
    in the pooling and the attention, and the composed tokens at padded positions are replaced by copies of a
    valid one. The number of reference tokens is fixed (the bias of Eq. 10 has one entry per token).

    :meth:`~evidential_prvr.PresetModule.from_preset`: ``"paper"`` (:func:`~evidential_prvr.presets.hud_settings`; ``dataset`` ``None`` or
    ``"webvid-covr"``, the composed video retrieval settings): U = 8, tau = 0.1, kappa = 0.5, every part on.
    ``dim``, ``holistic_dim`` and ``num_reference_tokens`` depend on the backbone and are the caller's
    arguments; ``derivative=n`` (1-9) gives Table 4's derivative D#n.

    Parameters
    ----------
    dim : int
        Atomistic token size :math:`D_A`.
    holistic_dim : int
        Holistic / retrieval embedding size :math:`D_H`.
    num_reference_tokens : int
        :math:`T = N_f \\times L`, the number of reference atomistic tokens.
    num_samples : int, default 8
        :math:`U` (HUD: 8 on WebVid-CoVR).
    tau : float, default 0.1
        Temperature of Eq. 12-13.
    kappa : float, default 0.5
        Weight of :math:`\\mathcal{L}_{H\\leftrightarrow A}` (Eq. 15).
    num_heads : int, default 1
        Heads of every attention.
    switches : HUDSwitches, optional
        Which parts are on (default: all, the full HUD).
    derivative : int, optional
        Table 4's derivative D#``derivative`` (1-9, :data:`HUD_DERIVATIVES`): ``switches`` with that part
        turned off.
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import HUDObjective
    >>> hud = HUDObjective.from_preset("paper", dim=16, holistic_dim=8, num_reference_tokens=3)
    >>> out = hud(torch.randn(4, 3, 16), torch.randn(4, 5, 16), torch.randn(4, 6, 16))  # triplet i: query i -> target i
    >>> out.total.backward()
    >>> query = hud.compose(torch.randn(2, 3, 16), torch.randn(2, 5, 16))
    >>> hud.similarity(query, hud.embed_targets(torch.randn(7, 6, 16))).shape  # rank a gallery of 7
    torch.Size([2, 7])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 1-15, Table 4.
    """

    def __init__(
        self,
        dim: int,
        holistic_dim: int,
        num_reference_tokens: int,
        *,
        num_samples: int = 8,
        tau: float = 0.1,
        kappa: float = 0.5,
        num_heads: int = 1,
        switches: HUDSwitches | None = None,
        derivative: int | None = None,
        validate_args: bool | None = None,
    ) -> None:
        super().__init__()
        for value, name in ((dim, "dim"), (holistic_dim, "holistic_dim"), (num_reference_tokens, "num_reference_tokens"),
                            (num_samples, "num_samples")):
            check_positive_int(value, name)
        check_positive(tau, "tau")
        if isinstance(kappa, bool) or not isinstance(kappa, (int, float)) or not kappa >= 0:
            raise ValueError(f"kappa must be a number >= 0, got {kappa!r}")
        switches = HUDSwitches() if switches is None else switches
        if not isinstance(switches, HUDSwitches):
            raise TypeError(f"switches must be a HUDSwitches, got {type(switches).__name__}")
        if derivative is not None:
            switches = switches.derivative(derivative)
        self.dim, self.holistic_dim, self.num_reference_tokens = dim, holistic_dim, num_reference_tokens
        self.num_samples, self.tau, self.kappa = num_samples, float(tau), float(kappa)
        self.switches = switches
        self.validate_args = validate_args
        self.video_projection = nn.Linear(dim, holistic_dim)
        self.text_projection = nn.Linear(dim, holistic_dim)
        self.text_embedding = ProbabilisticTextEmbedding(holistic_dim, num_heads=num_heads, validate_args=validate_args)
        self.holistic_composition = ComposeByWeights(holistic_dim, validate_args=validate_args)
        self.detail_embedding = ProbabilisticTextEmbedding(dim, num_heads=num_heads, validate_args=validate_args)
        self.qformer = QueryTokenAttention(dim, num_heads=num_heads)
        self.composed_projection = nn.Linear(dim, holistic_dim)
        holistic_tokens = 1 + (num_samples if switches.holistic_probabilistic else 0)
        atomistic_tokens = num_reference_tokens * (2 if switches.atomistic_detail else 1)
        self.holistic_similarity = BiasedMaxSimilarity(holistic_tokens, validate_args=validate_args)
        self.atomistic_similarity = BiasedMaxSimilarity(atomistic_tokens, validate_args=validate_args)

    @classmethod
    def _preset_arguments(cls, preset: HUDPreset, dataset: HUDDatasetName | None) -> dict[str, Any]:
        return dataclasses.asdict(hud_settings(preset, dataset))

    # ------------------------------------------------------------------ composition (Eq. 2-9)

    def compose(
        self,
        reference_tokens: torch.Tensor,
        text_tokens: torch.Tensor,
        reference_mask: torch.Tensor | None = None,
        text_mask: torch.Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> HUDComposedQuery:
        """Composed query tokens of ``[B, T, D_A]`` reference and ``[B, N, D_A]`` text tokens (Eq. 2-9).

        ``generator`` (on the tokens' device) makes the samples of Eq. 3 and 7 deterministic, e.g. at evaluation.
        """
        check_tensor(reference_tokens, "reference_tokens", ndim=3, floating=True)
        check_tensor(text_tokens, "text_tokens", ndim=3, floating=True)
        _input_checks.check_dim(reference_tokens, "reference_tokens", self.dim)
        _input_checks.check_dim(text_tokens, "text_tokens", self.dim)
        if reference_tokens.shape[1] != self.num_reference_tokens:
            raise ValueError(
                f"reference_tokens must hold num_reference_tokens={self.num_reference_tokens} tokens, "
                f"got shape {tuple(reference_tokens.shape)}"
            )
        if text_tokens.shape[0] != reference_tokens.shape[0]:
            raise ValueError(
                f"text_tokens must have batch size {reference_tokens.shape[0]} like reference_tokens, "
                f"got shape {tuple(text_tokens.shape)}"
            )
        _input_checks.check_inputs(self.validate_args, reference_tokens=reference_tokens, text_tokens=text_tokens)
        _input_checks.check_token_mask(reference_mask, reference_tokens, "reference_mask", self.validate_args)
        _input_checks.check_token_mask(text_mask, text_tokens, "text_mask", self.validate_args)
        on = self.switches
        holistic = text_gaussian = atomistic = detail = None
        if on.holistic_level:
            holistic, text_gaussian = self._compose_holistic(reference_tokens, text_tokens, reference_mask, text_mask,
                                                             generator)
        if on.atomistic_level:
            atomistic, detail = self._compose_atomistic(reference_tokens, text_tokens, reference_mask, text_mask,
                                                        generator)
        return HUDComposedQuery(holistic=holistic, atomistic=atomistic, text=text_gaussian, detail=detail)

    def _compose_holistic(
        self, reference: torch.Tensor, text: torch.Tensor, reference_mask: torch.Tensor | None,
        text_mask: torch.Tensor | None, generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, DiagonalGaussian | None]:
        on = self.switches
        reference_h = self.video_projection(_input_checks.masked_mean(reference, reference_mask))
        text_h = self.text_projection(_input_checks.masked_mean(text, text_mask))
        compose = self.holistic_composition if on.holistic_composition else _add_composition
        texts = text_h.unsqueeze(1)
        gaussian = None
        if on.holistic_probabilistic:
            gaussian = self.text_embedding(text_h, reference_h.unsqueeze(1))
            texts = torch.cat([texts, gaussian.sample(self.num_samples, generator=generator)], dim=1)
        # One composition call for the original token and the U samples (the composition is per token).
        return F.normalize(compose(reference_h, texts), dim=-1), gaussian

    def _compose_atomistic(
        self, reference: torch.Tensor, text: torch.Tensor, reference_mask: torch.Tensor | None,
        text_mask: torch.Tensor | None, generator: torch.Generator | None,
    ) -> tuple[torch.Tensor, DiagonalGaussian | None]:
        on = self.switches
        query_sets = [reference]
        detail = None
        if on.atomistic_detail:
            # Eq. 6: every reference token is a query over the text tokens (Eq. 2's architecture, its own weights).
            detail = self.detail_embedding(reference, text, text_mask)
            query_sets.append(detail.sample(1, generator=generator).squeeze(-2))  # Eq. 7: one sample per token
        n_sets, queries = len(query_sets), torch.cat(query_sets, dim=1)  # [B, 2T, D_A]: the tokens, then their samples
        if on.atomistic_composition:
            # Eq. 8 and the original-token branch of Eq. 9 in one call; the two query sets do not attend to each other.
            composed = self.qformer(queries=queries, text=text, text_mask=text_mask, query_groups=n_sets)
        else:
            composed = queries + _input_checks.masked_mean(text, text_mask).unsqueeze(1)
        composed = _fill_padding(composed, reference_mask)
        return F.normalize(self.composed_projection(composed), dim=-1), detail

    # ------------------------------------------------------------------ targets and similarity (Eq. 10-11)

    def embed_targets(self, target_tokens: torch.Tensor, target_mask: torch.Tensor | None = None) -> HUDTargetTokens:
        """Holistic and atomistic target tokens of ``[B, M, D_A]`` target video tokens (§3.4)."""
        check_tensor(target_tokens, "target_tokens", ndim=3, floating=True)
        _input_checks.check_dim(target_tokens, "target_tokens", self.dim)
        _input_checks.check_inputs(self.validate_args, target_tokens=target_tokens)
        _input_checks.check_token_mask(target_mask, target_tokens, "target_mask", self.validate_args)
        holistic = atomistic = None
        if self.switches.holistic_level:
            pooled = _input_checks.masked_mean(target_tokens, target_mask)
            holistic = F.normalize(self.video_projection(pooled), dim=-1).unsqueeze(1)
        if self.switches.atomistic_level:
            atomistic = F.normalize(self.video_projection(_fill_padding(target_tokens, target_mask)), dim=-1)
        return HUDTargetTokens(holistic=holistic, atomistic=atomistic)

    def level_similarities(
        self, query: HUDComposedQuery, targets: HUDTargetTokens
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``[Q, G]`` holistic and atomistic similarities (Eq. 10-11); ``None`` for a level that is off."""
        if not isinstance(query, HUDComposedQuery) or not isinstance(targets, HUDTargetTokens):
            raise TypeError(
                "query and targets must come from compose() and embed_targets(), got "
                f"{type(query).__name__} and {type(targets).__name__}"
            )
        sims: list[torch.Tensor | None] = []
        for level, module in (("holistic", self.holistic_similarity), ("atomistic", self.atomistic_similarity)):
            composed, target = getattr(query, level), getattr(targets, level)
            if composed is None or target is None:
                if (composed is None) != (target is None):
                    raise ValueError(f"query and targets disagree on the {level} level (one of them is None)")
                sims.append(None)
            elif self.switches.similarity_bias:
                sims.append(module(composed, target))
            else:
                sims.append(_unweighted_similarity(composed, target))
        return sims[0], sims[1]

    def similarity(self, query: HUDComposedQuery, gallery: HUDTargetTokens) -> torch.Tensor:
        """``[Q, G]`` retrieval score :math:`\\mathcal{S}^H + \\mathcal{S}^A` (the logit of Eq. 12 times tau)."""
        holistic, atomistic = self.level_similarities(query, gallery)
        if holistic is None:
            return atomistic  # type: ignore[return-value]
        return holistic if atomistic is None else holistic + atomistic

    # ------------------------------------------------------------------ loss (Eq. 12-15)

    def forward(
        self,
        reference_tokens: torch.Tensor,
        text_tokens: torch.Tensor,
        target_tokens: torch.Tensor,
        reference_mask: torch.Tensor | None = None,
        text_mask: torch.Tensor | None = None,
        target_mask: torch.Tensor | None = None,
        *,
        generator: torch.Generator | None = None,
    ) -> HUDObjectiveOutput:
        """HUD's loss for ``B`` triplets (query ``i`` = reference ``i`` + text ``i``, its target = target ``i``).

        Parameters
        ----------
        reference_tokens : torch.Tensor
            ``[B, T, D_A]`` reference atomistic tokens (``T = num_reference_tokens``).
        text_tokens : torch.Tensor
            ``[B, N, D_A]`` modification-text tokens.
        target_tokens : torch.Tensor
            ``[B, M, D_A]`` target video tokens.
        reference_mask, text_mask, target_mask : torch.Tensor, optional
            ``[B, *]`` bool, True = valid token.
        generator : torch.Generator, optional
            Source of the sampling noise.
        """
        check_tensor(target_tokens, "target_tokens", ndim=3, floating=True)
        check_tensor(reference_tokens, "reference_tokens", ndim=3, floating=True)
        if target_tokens.shape[0] != reference_tokens.shape[0]:
            raise ValueError(
                f"target_tokens must have batch size {reference_tokens.shape[0]} like reference_tokens (target i "
                f"belongs to query i), got shape {tuple(target_tokens.shape)}"
            )
        query = self.compose(reference_tokens, text_tokens, reference_mask, text_mask, generator=generator)
        targets = self.embed_targets(target_tokens, target_mask)
        holistic, atomistic = self.level_similarities(query, targets)
        on = self.switches
        zero = (holistic if holistic is not None else atomistic).new_zeros(())  # type: ignore[union-attr]
        rank = consistency = zero
        if on.rank_loss:
            # A removed level contributes nothing to the logits of Eq. 12 (D#3, D#6).
            rank = batch_classification_loss(
                holistic if holistic is not None else torch.zeros_like(atomistic),  # type: ignore[arg-type]
                atomistic if atomistic is not None else torch.zeros_like(holistic),  # type: ignore[arg-type]
                tau=self.tau,
            )
        if on.uses_consistency:
            assert holistic is not None and atomistic is not None  # Eq. 14 needs both levels
            consistency = holistic_atomistic_consistency_loss(holistic, atomistic, tau=self.tau)
        total = (rank if on.rank_loss else zero) + (self.kappa * consistency if on.uses_consistency else zero)
        return HUDObjectiveOutput(total=total, rank=rank, consistency=consistency, holistic_similarity=holistic,
                                  atomistic_similarity=atomistic, query=query, targets=targets)

    def extra_repr(self) -> str:
        off = [name for number, (name, field) in HUD_DERIVATIVES.items() if not getattr(self.switches, field)]
        return (f"num_samples={self.num_samples}, tau={self.tau}, kappa={self.kappa}"
                + (f", removed={off}" if off else ""))
