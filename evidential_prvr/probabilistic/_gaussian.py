"""``DABAlignment``: DAB's heads, bridge and PAC loss composed into one drop-in loss module.

Meant to replace an InfoNCE term over text/video embeddings: give it text embeddings ``[B, d]``
and video tokens ``[B, T, d]`` (positives on the diagonal) and it returns the PAC loss, the cost
matrix and all Gaussians.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from evidential_prvr._checks import check_positive_int, check_tensor
from evidential_prvr.choices import LogVarWeightInit
from evidential_prvr.functional._gaussian import DiagonalGaussian, pairwise_gaussian_kl
from evidential_prvr.probabilistic import _input_checks
from evidential_prvr.probabilistic._dab import (
    DistributionBridge,
    GaussianEmbeddingHead,
    ProbabilisticAlignmentContrastiveLoss,
    TokenUncertaintyHead,
)
from evidential_prvr.probabilistic._input_checks import DEFAULT_LOGVAR_BOUNDS, _InputChecks


@dataclass
class DABGaussians:
    """The Gaussians DAB computes for a batch of texts and videos.

    Attributes
    ----------
    text : DiagonalGaussian
        ``[Q, D]`` text Gaussians :math:`P_t` before the bridge.
    bridged_text : DiagonalGaussian
        ``[Q, D]`` bridged text Gaussians :math:`\\hat P_t`.
    video : DiagonalGaussian
        ``[V, D]`` video Gaussians :math:`Q_v` (log-variance averaged with the token head).

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import DABAlignment
    >>> g = DABAlignment(32, 16, tau=16.0, n_steps=4).gaussians(torch.randn(3, 32), torch.randn(5, 6, 32))
    >>> g.text.mu.shape, g.bridged_text.mu.shape, g.video.logvar.shape
    (torch.Size([3, 16]), torch.Size([3, 16]), torch.Size([5, 16]))

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Designs 1-2.
    """

    text: DiagonalGaussian
    bridged_text: DiagonalGaussian
    video: DiagonalGaussian


@dataclass
class DABAlignmentOutput:
    """Output of :class:`DABAlignment`.

    Attributes
    ----------
    loss : torch.Tensor
        Scalar PAC loss.
    cost : torch.Tensor
        ``[B, B]`` cost :math:`C_{ij} = D_{\\mathrm{KL}}(Q_{v_j} \\| \\hat P_{t_i})`, rows = texts;
        ``-cost`` is a text-to-video similarity for ranking.
    gaussians : DABGaussians
        Text, bridged text and video Gaussians.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import DABAlignment
    >>> out = DABAlignment(32, 16, tau=16.0, n_steps=4)(torch.randn(3, 32), torch.randn(3, 6, 32))
    >>> out.loss.shape, out.cost.shape
    (torch.Size([]), torch.Size([3, 3]))

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Design 3.
    """

    loss: torch.Tensor
    cost: torch.Tensor
    gaussians: DABGaussians


class DABAlignment(_InputChecks):
    """DAB's full alignment objective: heads → bridge on the text side → KL cost → PAC loss.

    Pipeline (DAB, Key Designs 1-3):

    1. text Gaussian :math:`P_t` = :class:`GaussianEmbeddingHead` (text embedding);
    2. video Gaussian :math:`Q_v`: :class:`GaussianEmbeddingHead` on the masked mean of the video
       tokens gives :math:`\\mu_v` and :math:`\\log\\sigma^2_{v,\\text{base}}`;
       :class:`TokenUncertaintyHead` on the tokens gives the final
       :math:`\\log\\sigma^2_v = \\tfrac12(\\log\\sigma^2_{v,\\text{base}} + \\log\\sigma^2_{v,\\text{tok}})`;
    3. :math:`\\hat P_t` = :class:`DistributionBridge` :math:`(P_t)`;
    4. ``cost = pairwise_gaussian_kl(video, bridged_text).T`` and the PAC loss on it.

    Choices: DAB's "shared probabilistic encoder" is read as one :class:`GaussianEmbeddingHead`
    for both modalities (``share_head=True``, default; ``False`` gives each its own head); the
    global video embedding is the masked token mean (DAB's text-conditioned cross-attention pooling
    is the backbone's job and out of scope: pass ``T = 1`` tokens holding an already pooled video
    embedding to use one).

    Parameters
    ----------
    dim_in : int
        Size of the text embedding and of the video tokens.
    dim : int
        Gaussian dimension :math:`D`.
    tau : float
        PAC temperature; KL costs scale with :math:`D`, see the guide for a starting value.
    share_head : bool, default True
        Use one Gaussian head for text and video.
    n_steps, total_steps, step_range
        Bridge settings, see :class:`DistributionBridge`.
    logvar_bounds : tuple of float
        Log-variance clipping range used by all heads and the bridge; default ``(-6.0, 2.0)``.
    logvar_weight_init : {"zero", "small", "pytorch"}, default "zero"
        The start of the heads' log-variance weights (:data:`~evidential_prvr.choices.LOGVAR_WEIGHT_INITS`;
        ``zero``: the identity start, every input with the same variance at step 0).
    logvar_gain : float, default 1.0
        The gain of both heads' log-variance layers (:class:`GaussianEmbeddingHead`; 1: DAB's plain linear heads;
        a larger gain moves the variances that many times as far per Adam update).
    validate_args : bool, optional
        Check that the inputs are finite (host synchronisations); ``None`` follows
        :func:`evidential_prvr.set_default_validate_args`. Empty inputs are always refused.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.probabilistic import DABAlignment
    >>> dab = DABAlignment(dim_in=32, dim=16, tau=16.0, n_steps=4)
    >>> out = dab(torch.randn(8, 32), torch.randn(8, 12, 32))  # text i describes video i
    >>> out.loss.backward()
    >>> dab.cost(torch.randn(3, 32), torch.randn(5, 12, 32)).shape  # [Q, V] at evaluation time
    torch.Size([3, 5])

    References
    ----------
    DAB: "Distribution-Alignment Bridge for Uncertainty-Aware Text-to-Video Retrieval", ECCV 2026, Key Designs 1-3.
    """

    def __init__(
        self,
        dim_in: int,
        dim: int,
        tau: float,
        *,
        share_head: bool = True,
        n_steps: int = 32,
        total_steps: int = 1000,
        step_range: tuple[float, float] = (0.2, 0.6),
        logvar_bounds: tuple[float, float] = DEFAULT_LOGVAR_BOUNDS,
        logvar_weight_init: LogVarWeightInit = "zero",
        validate_args: bool | None = None,
        logvar_gain: float = 1.0,
    ) -> None:
        super().__init__(validate_args)
        check_positive_int(dim_in, "dim_in")
        if not isinstance(share_head, bool):
            raise TypeError(f"share_head must be a bool, got {type(share_head).__name__}")
        self.dim_in = dim_in
        self.text_head = GaussianEmbeddingHead(dim_in, dim, logvar_bounds=logvar_bounds,
                                               logvar_weight_init=logvar_weight_init, logvar_gain=logvar_gain,
                                               validate_args=validate_args)
        self.video_head = self.text_head if share_head else GaussianEmbeddingHead(
            dim_in, dim, logvar_bounds=logvar_bounds, logvar_weight_init=logvar_weight_init, logvar_gain=logvar_gain,
            validate_args=validate_args)
        self.token_head = TokenUncertaintyHead(dim_in, dim, logvar_bounds=logvar_bounds,
                                               logvar_weight_init=logvar_weight_init, logvar_gain=logvar_gain,
                                               validate_args=validate_args)
        self.bridge = DistributionBridge(dim, n_steps, total_steps, step_range, logvar_bounds=logvar_bounds,
                                         validate_args=validate_args)
        self.pac = ProbabilisticAlignmentContrastiveLoss(tau, validate_args)

    def gaussians(
        self, text: torch.Tensor, video_tokens: torch.Tensor, video_mask: torch.Tensor | None = None
    ) -> DABGaussians:
        """Text (``[Q, dim_in]``), bridged text and video (``[V, T, dim_in]`` tokens) Gaussians; ``Q`` and ``V`` may differ."""
        check_tensor(text, "text", ndim=2, floating=True)
        check_tensor(video_tokens, "video_tokens", ndim=3, floating=True)
        _input_checks.check_inputs(self.validate_args, text=text, video_tokens=video_tokens)
        _input_checks.check_token_mask(video_mask, video_tokens, "video_mask", self.validate_args)
        text_gaussian = self.text_head(text)
        video_base = self.video_head(_input_checks.masked_mean(video_tokens, video_mask))
        video_logvar = self.token_head(video_tokens, base_logvar=video_base.logvar, mask=video_mask)
        return DABGaussians(
            text=text_gaussian,
            bridged_text=self.bridge(*text_gaussian),
            video=DiagonalGaussian(video_base.mu, video_logvar),
        )

    def cost(
        self, text: torch.Tensor, video_tokens: torch.Tensor, video_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[Q, V]`` cost :math:`C_{ij} = D_{\\mathrm{KL}}(Q_{v_j} \\| \\hat P_{t_i})` for retrieval (no loss)."""
        g = self.gaussians(text, video_tokens, video_mask)
        return pairwise_gaussian_kl(g.video.mu, g.video.logvar, g.bridged_text.mu, g.bridged_text.logvar).T

    def forward(
        self, text: torch.Tensor, video_tokens: torch.Tensor, video_mask: torch.Tensor | None = None
    ) -> DABAlignmentOutput:
        """PAC loss, cost and Gaussians for ``B`` matching text/video pairs (text ``i`` ↔ video ``i``).

        Parameters
        ----------
        text : torch.Tensor
            ``[B, dim_in]`` text query embeddings.
        video_tokens : torch.Tensor
            ``[B, T, dim_in]`` frame/clip tokens of the matching videos.
        video_mask : torch.Tensor, optional
            ``[B, T]`` bool, True = valid token.
        """
        check_tensor(text, "text", ndim=2, floating=True)
        check_tensor(video_tokens, "video_tokens", ndim=3, floating=True)
        if text.shape[0] != video_tokens.shape[0]:
            raise ValueError(
                "text and video_tokens must have the same batch size B (positives on the diagonal), got "
                f"shapes {tuple(text.shape)} and {tuple(video_tokens.shape)}"
            )
        g = self.gaussians(text, video_tokens, video_mask)
        cost = pairwise_gaussian_kl(g.video.mu, g.video.logvar, g.bridged_text.mu, g.bridged_text.logvar).T
        return DABAlignmentOutput(loss=self.pac(cost), cost=cost, gaussians=g)
