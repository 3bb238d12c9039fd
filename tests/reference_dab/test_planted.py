"""The planted world: its right variances against Monte Carlo, and what DAB's objective learns on it (the finding
of ``docs/guide/dab.rst``, "The planted test"), asserted with a margin at a fixed seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reference_models.dab.planted import PlantedRecipe, PlantedResult, PlantedSpec, planted_world, train_planted


def test_right_text_variance_is_the_noise_around_the_described_event() -> None:
    spec = PlantedSpec(videos=600, captions_per_video=6)
    world = planted_world(3, spec)
    residual = world.texts.double().numpy() - world.caption_events
    for level in spec.noise_levels:
        rows = world.caption_noise == level
        measured = residual[rows].var(axis=0, ddof=0).mean()  # per dimension, over ~1,200 captions
        assert measured == pytest.approx(level**2 / spec.latent_dim, rel=0.08)
        assert np.allclose(world.right_text_variance[rows], level**2 / spec.latent_dim)


def test_right_video_variance_is_the_spread_of_its_frames() -> None:
    spec = PlantedSpec(videos=400, frames=30)
    world = planted_world(4, spec)
    frames = world.frames.double().numpy()
    spread = frames.var(axis=1, ddof=0).mean(axis=1)  # per video: over its frames, then over dimensions
    # the frame noise makes each video's figure a draw around its right value; on average they agree
    assert spread.mean() == pytest.approx(world.right_video_variance.mean(), rel=0.05)
    single = world.video_events == 1
    assert world.right_video_variance[single] == pytest.approx(spec.frame_noise**2 / spec.latent_dim)
    for k in (2, 3):
        assert world.right_video_variance[world.video_events == k].mean() > 10 * spec.frame_noise**2 / spec.latent_dim
    assert np.corrcoef(spread, world.right_video_variance)[0, 1] > 0.95


def test_bad_planted_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="max_events"):
        PlantedSpec(max_events=9, frames=6)
    with pytest.raises(ValueError, match="noise_levels"):
        PlantedSpec(noise_levels=(0.5, 0.0))
    with pytest.raises(ValueError, match="batch_size"):
        train_planted(planted_world(0, PlantedSpec(videos=8)), PlantedRecipe(steps=1))


@pytest.fixture(scope="module")
def trained() -> dict[float, PlantedResult]:
    """DAB's objective on planted world 0 with DAB's recipe (gain 1) and with the log-variance gain 100."""
    world = planted_world(0)
    return {gain: train_planted(world, PlantedRecipe(steps=400, logvar_gain=gain), seed=0) for gain in (1.0, 100.0)}


def test_at_the_papers_recipe_the_order_is_right_and_the_size_negligible(trained: dict[float, PlantedResult]) -> None:
    paper = trained[1.0]
    # the text variance ranks the captions by their planted noise (seeds 0-2 gave lower ends 0.19, 0.24, 0.19)
    assert paper.text_vs_noise["low"] > 0.1
    # and the video variance is above the text variance (1.06-1.07 on seeds 0-2) ...
    assert paper.sigma2["video"] > 1.02 * paper.sigma2["text"]
    # ... but no variance leaves its start e^-2 by more than 15 % (5.8-7.5 % and 3.0-4.4 % on seeds 0-2)
    assert paper.moved["text"] < 0.15 and paper.moved["video"] < 0.15
    noise_levels = list(paper.text_by_noise.values())
    assert max(noise_levels) / min(noise_levels) < 1.02  # the three noise levels' variances within 2 %


def test_with_the_gain_the_variances_reach_the_papers_scale_in_the_right_order(
        trained: dict[float, PlantedResult]) -> None:
    gained = trained[100.0]
    assert gained.text_vs_noise["low"] > 0.05  # 0.09, 0.16, 0.16 on seeds 0-2
    by_noise = list(gained.text_by_noise.values())
    assert by_noise == sorted(by_noise) and by_noise[-1] > 1.05 * by_noise[0]  # 1.12-1.14 on seeds 0-2
    assert gained.sigma2["video"] > 2.5 * gained.sigma2["text"]  # 3.4-3.7 on seeds 0-2 (DAB: 5.87)
    assert gained.moved["video"] > 2.0  # some video variance at least 3 times its start (3.2-4.4 on seeds 0-2)
    start = math.exp(-2.0)
    assert gained.sigma2["video"] > 2.5 * start
