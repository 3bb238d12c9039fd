"""A planted world in which DAB's right variances are known in closed form, and DAB's objective trained on it.

DAB (ECCV 2026) claims that its variances carry the uncertainty of each text and video: vague captions get a large
text variance, videos of several events a large video variance (its "Key Findings": the video variance ends 5.87
times the text variance). :func:`planted_world` draws a small world where both are planted and known:

* **Events and a cone.** Every event is a unit vector along a shared direction (the features' cone, norm
  ``cone``) plus a unit vector orthogonal to it, in ``latent_dim`` dimensions; the features are the latent vectors
  themselves (the heads L2-normalise them, so the cone's share of a normalised feature falls as its noise grows:
  what a caption's noise does is visible to a linear head).
* **Videos with a known number of events.** A video holds :math:`K` events, :math:`K` uniform on
  ``1..max_events``, each over a contiguous run of its ``frames`` frames, plus frame noise of norm
  ``frame_noise``.
* **Captions with a known noise.** Each caption describes one of its video's events, plus noise of norm
  :math:`s` drawn per caption from ``noise_levels``: :math:`x = e + s\\,n`, :math:`n \\sim
  \\mathcal N(0, I / L)`.

The right variances, in closed form (``PlantedWorld.right_text_variance`` / ``right_video_variance``): given a
caption :math:`x`, its event is :math:`\\mathcal N(x, (s^2 / L) I)` (a flat prior), so the right text variance per
dimension is :math:`s^2 / L`; the frames of a video are its events with their weights, whose spread per dimension
is :math:`\\frac1L \\sum_k w_k \\lVert e_k - \\bar e\\rVert^2` plus the frame noise's :math:`(\\text{frame\\_noise})^2
/ L`. The heads map features to a learned space, so only the *order* is compared: the learned text variance against
the caption's noise and the learned video variance against its number of events (Spearman, with a bootstrap
interval over the captions or videos).

:func:`train_planted` trains the library's :class:`~evidential_prvr.probabilistic.DABAlignment` (DAB's Key Designs
1-3: the shared Gaussian head, the token uncertainty head, the bridge, the directional KL and PAC) on it with DAB's
recipe (:class:`PlantedRecipe`: AdamW at 1e-4 with weight decay 0.02, 10 % linear warm-up then linear decay, batch 32,
:math:`T' = 32` of 1000; the temperature, which DAB does not give, at the base's starting inverse temperature,
:func:`~reference_models.dab.config.matched_tau`'s rule) and reports what the variances learned
(:class:`PlantedResult`). ``python -m reference_models.dab planted`` prints it for several seeds and gains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from evidential_prvr.probabilistic import DABAlignment
from reference_models.dab.diagnostics import spearman_interval

__all__ = ["PlantedRecipe", "PlantedResult", "PlantedSpec", "PlantedWorld", "format_planted", "planted_world",
           "train_planted"]


@dataclass(frozen=True)
class PlantedSpec:
    """The planted world's sizes and noise levels.

    Attributes
    ----------
    videos : int
        Videos (every one is trained on and read out).
    latent_dim : int
        :math:`L`, the size of events and features.
    frames : int
        Frames per video.
    max_events : int
        A video holds 1 to ``max_events`` events (uniform).
    captions_per_video : int
        Captions per video, each of one of its events (uniform).
    noise_levels : tuple of float
        The caption noise norms :math:`s`, one drawn per caption (uniform).
    cone : float
        Norm of the direction every event shares.
    frame_noise : float
        Norm of each frame's noise.
    """

    videos: int = 256
    latent_dim: int = 16
    frames: int = 6
    max_events: int = 3
    captions_per_video: int = 4
    noise_levels: tuple[float, ...] = (0.25, 0.5, 1.0)
    cone: float = 1.0
    frame_noise: float = 0.1

    def __post_init__(self) -> None:
        for name in ("videos", "latent_dim", "frames", "max_events", "captions_per_video"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PlantedSpec.{name} must be an integer >= 1, got {value!r}")
        if self.max_events > self.frames:
            raise ValueError(f"PlantedSpec.max_events ({self.max_events}) must be <= frames ({self.frames})")
        if self.latent_dim < 2:
            raise ValueError(f"PlantedSpec.latent_dim must be >= 2 (the cone and a direction), got {self.latent_dim}")
        if not self.noise_levels or any(not level > 0 for level in self.noise_levels):
            raise ValueError(f"PlantedSpec.noise_levels must be numbers > 0, got {self.noise_levels!r}")
        if not self.cone >= 0 or not self.frame_noise >= 0:
            raise ValueError(f"PlantedSpec.cone and frame_noise must be >= 0, got {self.cone!r}, {self.frame_noise!r}")


@dataclass
class PlantedWorld:
    """One draw of :class:`PlantedSpec`.

    Attributes
    ----------
    spec : PlantedSpec
        The design.
    frames : torch.Tensor
        ``[V, T, L]`` frame features.
    texts : torch.Tensor
        ``[S, L]`` caption features.
    caption_video : numpy.ndarray
        ``[S]`` each caption's video.
    caption_noise : numpy.ndarray
        ``[S]`` each caption's noise norm :math:`s`.
    caption_events : numpy.ndarray
        ``[S, L]`` the event each caption describes (the caption without its noise).
    video_events : numpy.ndarray
        ``[V]`` each video's number of events :math:`K`.
    right_text_variance : numpy.ndarray
        ``[S]`` :math:`s^2 / L`, the variance per dimension of the caption's event given the caption.
    right_video_variance : numpy.ndarray
        ``[V]`` the spread per dimension of the video's frames: its events' (weighted by their frames) plus the
        frame noise's.
    """

    spec: PlantedSpec
    frames: torch.Tensor
    texts: torch.Tensor
    caption_video: np.ndarray
    caption_noise: np.ndarray
    caption_events: np.ndarray
    video_events: np.ndarray
    right_text_variance: np.ndarray
    right_video_variance: np.ndarray


def planted_world(seed: int, spec: PlantedSpec | None = None) -> PlantedWorld:
    """Draw the planted world ``seed`` of ``spec`` (the module documentation says what is planted).

    Parameters
    ----------
    seed : int
        Every draw comes from this seed.
    spec : PlantedSpec, optional
        The design (default: :class:`PlantedSpec`).

    Returns
    -------
    PlantedWorld
        Features, labels and the right variances.
    """
    spec = spec or PlantedSpec()
    rng = np.random.default_rng(seed)
    dim = spec.latent_dim
    cone = rng.standard_normal(dim)
    cone /= np.linalg.norm(cone)
    frames = np.zeros((spec.videos, spec.frames, dim))
    events = rng.integers(1, spec.max_events + 1, size=spec.videos)
    right_video = np.zeros(spec.videos)
    texts, owner, noise, described = [], [], [], []
    levels = np.asarray(spec.noise_levels, dtype=np.float64)
    for v in range(spec.videos):
        own = rng.standard_normal((events[v], dim))
        own -= (own @ cone)[:, None] * cone  # orthogonal to the cone, then unit
        own /= np.linalg.norm(own, axis=1, keepdims=True)
        own += spec.cone * cone
        cuts = np.sort(rng.choice(np.arange(1, spec.frames), size=events[v] - 1, replace=False))
        bounds = [0, *map(int, cuts), spec.frames]
        for k in range(events[v]):
            frames[v, bounds[k]:bounds[k + 1]] = own[k]
        weights = np.diff(bounds) / spec.frames
        centre = weights @ own
        right_video[v] = (weights * ((own - centre) ** 2).sum(1)).sum() / dim + spec.frame_noise**2 / dim
        frames[v] += rng.standard_normal((spec.frames, dim)) * (spec.frame_noise / math.sqrt(dim))
        for _ in range(spec.captions_per_video):
            event = own[rng.integers(events[v])]
            level = levels[rng.integers(len(levels))]
            texts.append(event + level * rng.standard_normal(dim) / math.sqrt(dim))
            described.append(event)
            owner.append(v)
            noise.append(level)
    noise_array = np.asarray(noise)
    return PlantedWorld(spec, torch.tensor(frames, dtype=torch.float32),
                        torch.tensor(np.stack(texts), dtype=torch.float32), np.asarray(owner), noise_array,
                        np.stack(described), events, noise_array**2 / dim, right_video)


@dataclass(frozen=True)
class PlantedRecipe:
    """How :func:`train_planted` trains: DAB's recipe unless changed.

    Attributes
    ----------
    steps : int
        AdamW updates.
    batch_size : int
        Distinct videos per batch, each with one of its captions (DAB: 32).
    lr : float
        The learning rate of every parameter (DAB's probabilistic and bridge modules: 1e-4; there is no encoder).
    weight_decay, warmup_ratio : float
        AdamW's decay (DAB: 0.02) and the linear warm-up's share (DAB: 10 %), then linear decay to 0.
    gaussian_dim : int
        :math:`D`.
    n_steps : int
        The bridge's :math:`T'` (DAB: 32 of 1000).
    logvar_gain : float
        The log-variance layers' gain (the library's ``logvar_gain``; 1: DAB's).
    tau : float or None
        PAC temperature; ``None``: :math:`D e^{2} / 20`, the base's starting inverse temperature of 20 on the centred
        cosine at the identity start (:func:`~reference_models.dab.config.matched_tau`'s rule).
    """

    steps: int = 400
    batch_size: int = 32
    lr: float = 1e-4
    weight_decay: float = 0.02
    warmup_ratio: float = 0.1
    gaussian_dim: int = 16
    n_steps: int = 32
    logvar_gain: float = 1.0
    tau: float | None = None

    def temperature(self) -> float:
        """The PAC temperature this recipe trains with."""
        return self.tau if self.tau is not None else self.gaussian_dim * math.exp(2.0) / 20.0


@dataclass
class PlantedResult:
    """What the variances learned on a planted world (all on the whole world, after training).

    Attributes
    ----------
    seed : int
        The world's and the training's seed.
    recipe : PlantedRecipe
        How it was trained.
    sigma2 : dict
        Mean :math:`\\sigma^2` of the ``text``, ``bridged`` text and ``video`` Gaussians (over items and dimensions).
    text_by_noise : dict
        Mean text :math:`\\sigma^2` per caption noise level.
    video_by_events : dict
        Mean video :math:`\\sigma^2` per number of events.
    text_vs_noise, bridged_vs_noise, video_vs_events, video_vs_right : dict
        :func:`~reference_models.dab.diagnostics.spearman_interval` of the learned mean variance against the planted
        noise / number of events / right video variance (``{"spearman", "low", "high", "n"}``).
    moved : dict
        The largest relative distance of a text / video :math:`\\sigma^2` from its start :math:`e^{-2}`.
    seconds : float
        Training time.
    """

    seed: int
    recipe: PlantedRecipe
    sigma2: dict[str, float]
    text_by_noise: dict[str, float]
    video_by_events: dict[str, float]
    text_vs_noise: dict[str, float]
    bridged_vs_noise: dict[str, float]
    video_vs_events: dict[str, float]
    video_vs_right: dict[str, float]
    moved: dict[str, float]
    seconds: float = 0.0


def _factor(step: int, total: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def train_planted(world: PlantedWorld, recipe: PlantedRecipe | None = None, *, seed: int = 0) -> PlantedResult:
    """Train :class:`~evidential_prvr.probabilistic.DABAlignment` on ``world`` with ``recipe`` and read the variances.

    Each update takes ``batch_size`` distinct videos and one of each one's captions (the texts' positives on the
    diagonal, as DAB's PAC loss needs), all drawn from ``seed``.

    Parameters
    ----------
    world : PlantedWorld
        The planted world.
    recipe : PlantedRecipe, optional
        The training (default: DAB's, :class:`PlantedRecipe`).
    seed : int
        Seed of the initialisation and of the batches.

    Returns
    -------
    PlantedResult
        What the variances learned.
    """
    import time

    recipe = recipe or PlantedRecipe()
    spec = world.spec
    if recipe.batch_size > spec.videos:
        raise ValueError(f"PlantedRecipe.batch_size ({recipe.batch_size}) must be <= the world's videos "
                         f"({spec.videos})")
    start = time.perf_counter()
    torch.manual_seed(seed)
    model = DABAlignment(spec.latent_dim, recipe.gaussian_dim, tau=recipe.temperature(), n_steps=recipe.n_steps,
                         logvar_gain=recipe.logvar_gain, validate_args=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    warmup = max(1, round(recipe.warmup_ratio * recipe.steps)) if recipe.warmup_ratio > 0 else 0
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: _factor(t, recipe.steps, warmup))
    generator = torch.Generator().manual_seed(seed)
    captions_of = [torch.from_numpy(np.flatnonzero(world.caption_video == v)) for v in range(spec.videos)]
    counts = torch.tensor([len(c) for c in captions_of])
    for _ in range(recipe.steps):
        videos = torch.randperm(spec.videos, generator=generator)[: recipe.batch_size]
        picks = (torch.rand(recipe.batch_size, generator=generator) * counts[videos]).long()
        captions = torch.stack([captions_of[int(v)][int(p)] for v, p in zip(videos, picks)])
        loss = model(world.texts[captions], world.frames[videos]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        gaussians = model.gaussians(world.texts, world.frames)
    text = gaussians.text.logvar.double().exp().mean(-1).numpy()
    bridged = gaussians.bridged_text.logvar.double().exp().mean(-1).numpy()
    video = gaussians.video.logvar.double().exp().mean(-1).numpy()
    start_value = math.exp(-2.0)
    return PlantedResult(
        seed=seed, recipe=recipe,
        sigma2={"text": float(text.mean()), "bridged": float(bridged.mean()), "video": float(video.mean())},
        text_by_noise={f"{s:g}": float(text[world.caption_noise == s].mean()) for s in spec.noise_levels},
        video_by_events={str(k): float(video[world.video_events == k].mean())
                         for k in range(1, spec.max_events + 1) if (world.video_events == k).any()},
        text_vs_noise=spearman_interval(torch.from_numpy(text), torch.from_numpy(world.caption_noise), seed=seed),
        bridged_vs_noise=spearman_interval(torch.from_numpy(bridged), torch.from_numpy(world.caption_noise), seed=seed),
        video_vs_events=spearman_interval(torch.from_numpy(video), torch.from_numpy(world.video_events), seed=seed),
        video_vs_right=spearman_interval(torch.from_numpy(video), torch.from_numpy(world.right_video_variance),
                                         seed=seed),
        moved={"text": float(np.abs(text / start_value - 1).max()), "video": float(np.abs(video / start_value - 1).max())},
        seconds=seconds,
    )


def _interval(figures: dict[str, float]) -> str:
    return f"{figures['spearman']:+.3f} [{figures['low']:+.3f}, {figures['high']:+.3f}]"


def format_planted(results: list[PlantedResult]) -> str:
    """One line per result: the recipe's gain, the mean variances, their orders and Spearman intervals."""
    lines = ["seed  gain   sigma2 text / bridged / video   video/text  text by noise          "
             "text vs noise            video by events        video vs events"]
    for r in results:
        s2 = r.sigma2
        by_noise = " / ".join(f"{v:.4f}" for v in r.text_by_noise.values())
        by_events = " / ".join(f"{v:.4f}" for v in r.video_by_events.values())
        lines.append(f"{r.seed:<4d}  {r.recipe.logvar_gain:<5g}  {s2['text']:.4f} / {s2['bridged']:.4f} / "
                     f"{s2['video']:.4f}    {s2['video'] / s2['text']:<10.2f}  {by_noise:<21s}  "
                     f"{_interval(r.text_vs_noise):<23s}  {by_events:<21s}  {_interval(r.video_vs_events)}")
    return "\n".join(lines)
