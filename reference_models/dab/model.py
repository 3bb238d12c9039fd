"""The CLIP4Clip-style text-to-video model on precomputed features, with the base or a DAB retrieval head.

Backbone (CLIP4Clip on frozen CLIP features): a text MLP; a frame projection with position embeddings and a
residual temporal transformer (``seqTransf``); frame pooling by mean (``meanP``) or X-Pool's text-conditioned
attention. With ``backbone.encoder = "identity"`` the text and frame encoders are square linear maps that start
as the identity, and the position embeddings and the temporal transformer's residual branches start at zero (the
stand-in for pretrained CLIP encoders: the untrained model ranks by the features' own cosine). Heads (:data:`~reference_models.dab.config.VARIANTS`):

* ``base`` -- cosine similarity times a learned logit scale (ranking and InfoNCE logits);
* ``dab`` -- DAB (ECCV 2026) Key Designs 1-3 through the library: one shared
  :class:`~evidential_prvr.probabilistic.GaussianEmbeddingHead` for the text and the pooled video, the
  :class:`~evidential_prvr.probabilistic.TokenUncertaintyHead` for the video variance, the
  :class:`~evidential_prvr.probabilistic.DistributionBridge` on the text Gaussian, and the cost
  :math:`C_{ij} = D_{\\mathrm{KL}}(Q_{v_j} \\| \\hat P_{t_i})` (or :math:`W_2^2`); ranking by :math:`-C`;
* ``prob`` -- the same without the bridge; ``bridge`` -- the bridge on the text point embedding, cosine head;
* ``bridge-det`` -- the equal-capacity deterministic control: the base plus DAB's mean layer (on texts and videos)
  and the same bridge on the text side, cosine head and InfoNCE; DAB less its variance layers (the Gaussian head's
  log-variance LayerNorm and Linear and the token uncertainty head), plus the base's logit scale.

How a model scores is resolved once from its config into its :class:`HeadPlan` (``model.plan``): Gaussian cost
or cosine, which bridge, which cost function, which ranking. In the ``bridge`` variant X-Pool attends with the
bridged text that the cosine uses (at the projected width when ``bridge.point_dim`` is set).

With ``bridge.condition = "video"`` DAB's bridge is the library's
:class:`~evidential_prvr.probabilistic.ConditionedDistributionBridge`: one chain per text-video pair toward the
video Gaussian (contraction bound ``bridge.contraction``), the cost taken pair by pair and computed in blocks of
at most :data:`PAIR_BLOCK` pairs, so that scoring a 1,000-video gallery holds a bounded amount of memory. With
``head.ranking = "mean_distance"`` the Gaussian variants rank by minus the squared distance between the (bridged)
text mean and the video mean, their cost still returned (training loss, KL-margin confidence).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

import torch
import torch.nn.functional as F
from torch import nn

from evidential_prvr.choices import LogVarWeightInit
from evidential_prvr.functional import (
    combine_video_log_variances,
    paired_gaussian_kl,
    paired_wasserstein2,
    pairwise_gaussian_kl,
    pairwise_gaussian_kl_prepared,
    pairwise_wasserstein2,
    prepare_kl_sources,
)
from evidential_prvr.probabilistic import (
    ConditionedDistributionBridge,
    DiagonalGaussian,
    DistributionBridge,
    GaussianEmbeddingHead,
    KLSources,
    TokenUncertaintyHead,
)
from reference_models.dab.config import T2VConfig, matched_tau

__all__ = ["T2VModel", "T2VOutput", "Gallery", "HeadPlan", "XPoolAttention", "PAIR_BLOCK", "MAX_LOGIT_SCALE"]

#: Text-video pairs bridged at once by the video-conditioned bridge (``[Q, block, D]`` states; evaluation only:
#: a training batch of 32 x 32 is one block).
PAIR_BLOCK = 16384
#: The cap of the cosine variants' learned logit scale, as in CLIP (the log-scale is clamped at its log).
MAX_LOGIT_SCALE = 100.0

#: A cost between diagonal Gaussians ``(source_mu, source_logvar, target_mu, target_logvar)``.
GaussianCost = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class HeadPlan:
    """How a :class:`T2VModel` scores, resolved once from its config.

    Attributes
    ----------
    gaussian : bool
        Rank by a cost between Gaussians (``dab``, ``prob``) instead of a scaled cosine (``base``, ``bridge``).
    bridge : {"none", "text", "video"}
        No bridge, a bridge of the text alone (one chain per text; ``dab``, ``bridge``), or a bridge of the text
        toward each video (``bridge.condition = "video"``, one chain per text-video pair).
    pairwise_cost, paired_cost : collections.abc.Callable
        The library's cost of ``head.cost``: every video against every text
        (:func:`~evidential_prvr.functional.pairwise_gaussian_kl` / ``pairwise_wasserstein2``) and pair by pair
        (:func:`~evidential_prvr.functional.paired_gaussian_kl` / ``paired_wasserstein2``).
    by_mean_distance : bool
        Rank by minus the squared distance of the means (``head.ranking = "mean_distance"``).
    kl : bool
        The cost is the KL divergence (``head.cost = "kl"``): a gallery of one Gaussian per video can prepare its
        side of it once (:func:`~evidential_prvr.functional.prepare_kl_sources`).
    """

    gaussian: bool
    bridge: Literal["none", "text", "video"]
    pairwise_cost: GaussianCost
    paired_cost: GaussianCost
    by_mean_distance: bool
    kl: bool

    @classmethod
    def from_config(cls, config: T2VConfig) -> HeadPlan:
        """The plan of ``config`` (its ``head`` and ``bridge`` sections)."""
        h = config.head
        bridge: Literal["none", "text", "video"] = (
            "video" if config.bridge.condition == "video" else "text" if h.variant in ("dab", "bridge", "bridge-det")
            else "none")
        kl = h.cost == "kl"
        return cls(h.gaussian, bridge, pairwise_gaussian_kl if kl else pairwise_wasserstein2,
                   paired_gaussian_kl if kl else paired_wasserstein2, h.ranking == "mean_distance", kl)


@dataclass
class T2VOutput:
    """Scores of ``Q`` texts against ``V`` videos.

    Attributes
    ----------
    logits : torch.Tensor
        ``[Q, V]``, higher = better: the ranking score (scaled cosine, or ``-cost`` for Gaussian heads).
    cost : torch.Tensor or None
        ``[Q, V]`` Gaussian cost (lower = better), ``None`` for the cosine heads.
    tau : torch.Tensor or None
        The learned PAC temperature (``head.tau_rule = "learned"``, with its gradient), else ``None``.
    """

    logits: torch.Tensor
    cost: torch.Tensor | None
    tau: torch.Tensor | None = None


@dataclass
class Gallery:
    """The query-independent side of ``V`` encoded videos, computed once per gallery.

    Attributes
    ----------
    tokens : torch.Tensor
        ``[V, T, hidden]`` frame tokens.
    mask : torch.Tensor
        ``[V, T]`` bool, True = real frame.
    pooled : torch.Tensor or None
        ``[V, hidden]`` mean-pooled videos (``None`` with X-Pool, whose pooling depends on the text).
    unit : torch.Tensor or None
        ``[V, width]`` the pooled videos at unit norm, as the cosine heads rank them (mean pooling).
    video : DiagonalGaussian or None
        ``[V, D]`` video Gaussians (Gaussian heads with mean pooling).
    kl_sources : evidential_prvr.probabilistic.KLSources or None
        The video side of the KL cost, prepared once (:meth:`T2VModel.encode_gallery` with ``prepare_kl=True``;
        Gaussian heads with mean pooling and ``head.cost = "kl"``).
    token_logvar : torch.Tensor or None
        ``[V, D]`` log-variances of the token uncertainty head (Gaussian heads).
    """

    tokens: torch.Tensor
    mask: torch.Tensor
    pooled: torch.Tensor | None = None
    unit: torch.Tensor | None = None
    video: DiagonalGaussian | None = None
    kl_sources: KLSources | None = None
    token_logvar: torch.Tensor | None = None


class XPoolAttention(nn.Module):
    """X-Pool's text-conditioned frame pooling: one attention per (text, video) pair.

    The text embedding is the query, the frame embeddings keys and values (multi-head, scaled dot product,
    softmax over the frames); then a linear layer with a residual connection, each step layer-normalised.
    Output ``[Q, V, hidden]``. Projections start at the identity, as in X-Pool.
    """

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm_in, self.norm_attn, self.norm_out = (nn.LayerNorm(hidden) for _ in range(3))
        self.q, self.k, self.v, self.out, self.linear = (nn.Linear(hidden, hidden) for _ in range(5))
        for layer in (self.q, self.k, self.v, self.out, self.linear):
            nn.init.eye_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, text: torch.Tensor, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q_count, (v_count, t_count, hidden) = text.shape[0], frames.shape
        head_dim = hidden // self.heads
        text, frames = self.norm_in(text), self.norm_in(frames)
        q = self.q(text).view(q_count, self.heads, head_dim)
        k = self.k(frames).view(v_count, t_count, self.heads, head_dim)
        v = self.v(frames).view(v_count, t_count, self.heads, head_dim)
        logits = torch.einsum("qhd,vthd->qvht", q, k) / head_dim**0.5
        logits = logits.masked_fill(~mask[None, :, None, :], float("-inf"))
        pooled = torch.einsum("qvht,vthd->qvhd", logits.softmax(dim=-1), v).reshape(q_count, v_count, hidden)
        pooled = self.norm_attn(self.out(pooled))
        return self.norm_out(pooled + self.linear(pooled))


class T2VModel(nn.Module):
    """Text-to-video retrieval model; see the module documentation for the parts.

    Parameters
    ----------
    frame_dim, text_dim : int
        Sizes of the precomputed frame and text features.
    config : T2VConfig
        Backbone and head settings.

    Examples
    --------
    >>> import torch
    >>> from reference_models.dab.config import T2VConfig, matched_tau
    >>> from reference_models.dab.model import T2VModel
    >>> model = T2VModel(16, 8, T2VConfig().replace(bridge={"n_steps": 4}))
    >>> out = model(torch.randn(3, 8), torch.randn(5, 12, 16), torch.ones(5, 12, dtype=torch.bool))
    >>> out.logits.shape, out.cost.shape
    (torch.Size([3, 5]), torch.Size([3, 5]))
    """

    #: ``bridge.distill = "one-step"`` only: whether the student has been distilled (a buffer, saved with the model).
    student_ready: torch.Tensor

    def __init__(self, frame_dim: int, text_dim: int, config: T2VConfig) -> None:
        super().__init__()
        b, h = config.backbone, config.head
        self.config = config
        self.plan = HeadPlan.from_config(config)
        self.frame_dim, self.text_dim = frame_dim, text_dim
        identity = b.encoder == "identity"
        if identity and not frame_dim == text_dim == b.hidden:
            raise ValueError(f'backbone.encoder = "identity" needs frame and text features of size backbone.hidden '
                             f"({b.hidden}), got {frame_dim} and {text_dim}")
        if identity:  # the frozen-CLIP stand-in: square linear encoders that start as the identity
            self.text_mlp = nn.Sequential(nn.Linear(text_dim, b.hidden))
        else:
            self.text_mlp = nn.Sequential(nn.LayerNorm(text_dim), nn.Linear(text_dim, b.hidden), nn.GELU(),
                                          nn.Linear(b.hidden, b.hidden))
        self.frame_proj = nn.Linear(frame_dim, b.hidden)
        self.position = nn.Parameter(torch.zeros(b.max_frames, b.hidden))
        if not identity:
            nn.init.normal_(self.position, std=0.02)
        self.temporal = None
        if b.temporal_layers:
            layer = nn.TransformerEncoderLayer(b.hidden, b.heads, dim_feedforward=2 * b.hidden, dropout=0.0,
                                               activation="gelu", batch_first=True, norm_first=True)
            self.temporal = nn.TransformerEncoder(layer, b.temporal_layers, enable_nested_tensor=False)
        if identity:
            for linear in (cast(nn.Linear, self.text_mlp[0]), self.frame_proj):  # text_mlp: one Linear here
                nn.init.eye_(linear.weight)
                nn.init.zeros_(linear.bias)
            for block in (self.temporal.layers if self.temporal is not None else []):
                for linear in (block.self_attn.out_proj, block.linear2):  # each residual branch starts at zero
                    nn.init.zeros_(linear.weight)
                    nn.init.zeros_(linear.bias)
        s = config.bridge
        narrow = h.variant == "bridge" and bool(s.point_dim)  # the bridge-only variant at a chosen width
        deterministic = h.variant == "bridge-det"  # the equal-capacity control: DAB's mean layer and bridge, cosine
        # the width the cosine variants pool and bridge at
        point_dim = s.point_dim if narrow else h.gaussian_dim if deterministic else b.hidden
        self.xpool = XPoolAttention(point_dim, b.heads) if b.pooling == "xpool" else None
        if h.gaussian:
            start = cast(LogVarWeightInit, h.logvar_weights)  # checked by the config
            self.gaussian_head = GaussianEmbeddingHead(b.hidden, h.gaussian_dim, logvar_weight_init=start,
                                                       logvar_gain=h.logvar_gain)
            self.token_head = TokenUncertaintyHead(b.hidden, h.gaussian_dim, logvar_weight_init=start,
                                                   logvar_gain=h.logvar_gain)
            if h.mean_init == "identity":  # the Gaussian mean starts as the (layer-normalised) embedding itself
                nn.init.eye_(self.gaussian_head.mean.weight)
                nn.init.zeros_(self.gaussian_head.mean.bias)
            self.tau_start = h.tau if h.tau_rule == "fixed" else matched_tau(h)
            # the base's cap on its inverse temperature, in DAB's units (matched/learned: scale = logit_scale at start)
            self.tau_floor = self.tau_start * h.logit_scale / MAX_LOGIT_SCALE
            self.log_tau = (nn.Parameter(torch.tensor(self.tau_start).log()) if h.tau_rule == "learned" else None)
        else:
            self.log_scale = nn.Parameter(torch.tensor(float(h.logit_scale)).log())
        self.bridge: DistributionBridge | ConditionedDistributionBridge | None = None  # as self.plan.bridge says
        self.point_proj = nn.Linear(b.hidden, point_dim) if narrow else None
        self.point_norm: nn.LayerNorm | None = None
        self.point_mean: nn.Linear | None = None
        if deterministic:  # DAB's mean layer (Key Design 1: L2-normalise, LayerNorm, Linear) without the variances
            self.point_norm, self.point_mean = nn.LayerNorm(b.hidden), nn.Linear(b.hidden, point_dim)
            if h.mean_init == "identity":
                nn.init.eye_(self.point_mean.weight)
                nn.init.zeros_(self.point_mean.bias)
        if self.plan.bridge == "video":
            self.bridge = ConditionedDistributionBridge(h.gaussian_dim, s.n_steps, s.total_steps,
                                                        contraction=s.contraction, time_dim=s.time_dim)
        elif self.plan.bridge == "text":
            self.bridge = DistributionBridge(h.gaussian_dim if h.gaussian else point_dim, s.n_steps, s.total_steps,
                                             time_dim=s.time_dim)
        self.student: DistributionBridge | None = None  # bridge.distill = "one-step": trained after the chain
        if s.distill == "one-step":
            with torch.random.fork_rng(devices=[]):  # built last and drawing nothing: the rest is DAB's, bit for bit
                self.student = cast(DistributionBridge, self.bridge).one_step_student()
            self.register_buffer("student_ready", torch.zeros((), dtype=torch.bool))

    # --- backbone -------------------------------------------------------------------------------------
    def encode_text(self, text: torch.Tensor) -> torch.Tensor:
        """``[Q, text_dim]`` features to ``[Q, hidden]`` embeddings."""
        return self.text_mlp(text)

    def encode_frames(self, frames: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[V, T, frame_dim]`` features to ``[V, T, hidden]`` frame tokens (padding rows stay finite)."""
        x = self.frame_proj(frames)
        x = x + self.position[: x.shape[1]]
        if self.temporal is not None:
            x = x + self.temporal(x, src_key_padding_mask=~mask)
        return x

    def encode_gallery(self, frames: torch.Tensor, mask: torch.Tensor, *, prepare_kl: bool = False) -> Gallery:
        """Everything about ``[V, T, frame_dim]`` videos that does not depend on the query.

        ``prepare_kl=True`` (serving a gallery query after query) also prepares the videos' side of the KL cost
        once (:func:`~evidential_prvr.functional.prepare_kl_sources`), so that a query costs one product with it;
        the scores equal the unprepared ones up to float rounding. Training and evaluation leave it off, so that
        their recorded numbers reproduce: a rounding-level change of the cost changes a training trajectory
        (trained with the prepared form, the seed-0 demo's DAB lands at R@1 77.9 instead of 74.6)."""
        tokens = self.encode_frames(frames, mask)
        gallery = Gallery(tokens, mask)
        if self.xpool is None:
            weights = mask.to(tokens.dtype).unsqueeze(-1)
            gallery.pooled = (tokens * weights).sum(1) / weights.sum(1)
        if self.plan.gaussian:
            gallery.token_logvar = self.token_head(tokens, mask=mask)
            if gallery.pooled is not None:
                gallery.video = self.video_gaussian(gallery.pooled, gallery.token_logvar)
                if prepare_kl and self.plan.kl:
                    gallery.kl_sources = prepare_kl_sources(*gallery.video)
        elif gallery.pooled is not None:
            gallery.unit = F.normalize(self._at_width(gallery.pooled), dim=-1)
        return gallery

    def pool(self, text: torch.Tensor, gallery: Gallery) -> torch.Tensor:
        """Video embeddings at the width of ``text``: ``[V, width]`` (mean) or ``[Q, V, width]`` (X-Pool, attending
        with each text). The width is ``backbone.hidden``, or ``bridge.point_dim`` in the narrower bridge-only
        variant, whose videos are projected like its texts."""
        # a gallery without pooled videos is an X-Pool model's (encode_gallery)
        if gallery.pooled is not None:
            return self._at_width(gallery.pooled)
        return cast(XPoolAttention, self.xpool)(text, self._at_width(gallery.tokens), gallery.mask)

    def _at_width(self, embeddings: torch.Tensor) -> torch.Tensor:
        if self.point_mean is not None:  # bridge-det: DAB's mean layer on the L2-normalised embedding
            return self.point_mean(cast(nn.LayerNorm, self.point_norm)(F.normalize(embeddings, dim=-1)))
        return embeddings if self.point_proj is None else self.point_proj(embeddings)

    # --- heads ----------------------------------------------------------------------------------------
    def pac_tau(self) -> torch.Tensor:
        """The PAC temperature of a Gaussian head (``head.tau_rule``, :data:`~reference_models.dab.config.TAU_RULES`):
        ``head.tau``, :func:`~reference_models.dab.config.matched_tau`, or the learned one (a 0-d tensor with its
        gradient; at least ``tau_floor``, the base's logit-scale cap)."""
        if self.log_tau is None:
            return torch.tensor(self.tau_start)
        return self.log_tau.exp().clamp(min=self.tau_floor)

    def text_bridge(self) -> DistributionBridge:
        """The text-only bridge a query goes through: the distilled one-step student once the distillation stage
        has trained it (:func:`~reference_models.dab.distill.distill_one_step` sets ``student_ready``), else the
        ``T'``-step chain (during training, the chain: the student is trained after it)."""
        if self.student is not None and bool(self.student_ready):
            return self.student
        return cast(DistributionBridge, self.bridge)

    def video_gaussian(self, pooled: torch.Tensor, token_logvar: torch.Tensor) -> DiagonalGaussian:
        """The video Gaussian of pooled videos ``[..., hidden]``: the Gaussian head's mean, its log-variance
        combined with the token uncertainty head's (``token_logvar``, ``[V, D]`` or broadcastable)."""
        video = self.gaussian_head(pooled)
        return DiagonalGaussian(video.mu, combine_video_log_variances(video.logvar, token_logvar.expand_as(video.logvar)))

    def _gaussian_cost(self, text: torch.Tensor, gallery: Gallery) -> T2VOutput:
        text_gaussian = self.gaussian_head(text)
        if self.plan.bridge == "video":
            return self._pair_bridged_cost(text, text_gaussian, gallery)
        if self.plan.bridge == "text":
            text_gaussian = self.text_bridge()(*text_gaussian)
        video = gallery.video
        if video is not None:  # one Gaussian per video: the library's pairwise costs, video first
            if gallery.kl_sources is not None:
                cost = pairwise_gaussian_kl_prepared(gallery.kl_sources, *text_gaussian).T
            else:
                cost = self.plan.pairwise_cost(video.mu, video.logvar, text_gaussian.mu, text_gaussian.logvar).T
            by_mean = -torch.cdist(text_gaussian.mu, video.mu).square() if self.plan.by_mean_distance else None
            return T2VOutput(-cost if by_mean is None else by_mean, cost)
        # X-Pool: one video Gaussian per (text, video) pair, [Q, V, D]
        video = self.video_gaussian(self.pool(text, gallery), cast(torch.Tensor, gallery.token_logvar))
        t_mu, t_logvar = text_gaussian.mu[:, None, :], text_gaussian.logvar[:, None, :]
        cost = self.plan.paired_cost(video.mu, video.logvar, t_mu, t_logvar)
        return T2VOutput(-(video.mu - t_mu).square().sum(-1) if self.plan.by_mean_distance else -cost, cost)

    def _pair_bridged_cost(self, text_emb: torch.Tensor, text: DiagonalGaussian, gallery: Gallery) -> T2VOutput:
        """Video-conditioned bridge: every text bridged toward every video, in blocks of videos."""
        bridge = cast(ConditionedDistributionBridge, self.bridge)
        t_mu, t_logvar = text.mu[:, None, :], text.logvar[:, None, :]
        video = gallery.video
        if video is not None:
            v_mu, v_logvar = video.mu[None], video.logvar[None]  # [1, V, D]
        else:  # X-Pool: one video Gaussian per pair, [Q, V, D]
            video = self.video_gaussian(self.pool(text_emb, gallery), cast(torch.Tensor, gallery.token_logvar))
            v_mu, v_logvar = video.mu, video.logvar
        block = max(1, PAIR_BLOCK // max(1, t_mu.shape[0]))
        costs, logits = [], []
        for start in range(0, v_mu.shape[1], block):
            vm, vl = v_mu[:, start : start + block], v_logvar[:, start : start + block]
            bridged = bridge(t_mu, t_logvar, vm, vl)
            cost = self.plan.paired_cost(vm, vl, bridged.mu, bridged.logvar)
            costs.append(cost)
            logits.append(-(vm - bridged.mu).square().sum(-1) if self.plan.by_mean_distance else -cost)
        return T2VOutput(torch.cat(logits, dim=1), torch.cat(costs, dim=1))

    def _cosine_logits(self, text: torch.Tensor, gallery: Gallery) -> torch.Tensor:
        if self.point_proj is not None or self.point_mean is not None:  # project (or DAB's mean layer), then bridge
            text = self._at_width(text)
        if self.plan.bridge == "text":  # deterministic bridge on the point embedding; the log-variance is inert
            text = cast(DistributionBridge, self.bridge)(text, torch.zeros_like(text)).mu
        # X-Pool attends with the bridged text
        pooled = gallery.unit if gallery.unit is not None else F.normalize(self.pool(text, gallery), dim=-1)
        text = F.normalize(text, dim=-1)
        cosine = text @ pooled.T if pooled.dim() == 2 else (pooled * text[:, None, :]).sum(-1)
        return self.log_scale.clamp(max=math.log(MAX_LOGIT_SCALE)).exp() * cosine

    def forward(self, text: torch.Tensor, frames: torch.Tensor, mask: torch.Tensor) -> T2VOutput:
        """Scores of texts ``[Q, text_dim]`` against videos ``[V, T, frame_dim]`` (``mask`` ``[V, T]``)."""
        return self.score(self.encode_text(text), self.encode_gallery(frames, mask))

    def score(self, text_emb: torch.Tensor, gallery: Gallery) -> T2VOutput:
        """Scores of text embeddings ``[Q, hidden]`` (:meth:`encode_text`) against a :class:`Gallery`."""
        if self.plan.gaussian:
            output = self._gaussian_cost(text_emb, gallery)
            output.tau = None if self.log_tau is None else self.pac_tau()
            return output
        return T2VOutput(self._cosine_logits(text_emb, gallery), None)
