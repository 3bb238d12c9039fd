"""The names users import from the package exist, and the documented entry points work together."""

import importlib
import re
from pathlib import Path

import pytest
import torch

import evidential_prvr
from evidential_prvr import functional


@pytest.mark.parametrize("name", evidential_prvr.__all__)
def test_every_exported_name_resolves(name):
    assert getattr(evidential_prvr, name) is not None


def test_the_version_is_written_once_for_the_package_and_its_metadata():
    """``evidential_prvr.__version__`` is the version that pyproject.toml gives the wheel, and the changelog has a
    dated section for it."""
    root = Path(__file__).resolve().parents[1]
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^version = "([^"]+)"$', pyproject, re.M)
    assert match and match.group(1) == evidential_prvr.__version__
    changelog = (root / "docs" / "changelog.rst").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(evidential_prvr.__version__)} \(\d{{4}}-\d{{2}}-\d{{2}}\)\n-+$", changelog, re.M)


def test_headline_import_from_the_readme():
    module = importlib.import_module("evidential_prvr")
    assert hasattr(module, "FlexibleOT") and hasattr(module, "EvidentialRetrievalLoss")


@pytest.mark.parametrize(
    "name",
    [
        "evidence", "opinion", "expected_entropy", "label_consistency", "dirichlet_mse_loss", "ds_combine",
        "sinkhorn", "triplet_ranking_loss", "info_nce_loss", "query_diversity_loss", "pairwise_gaussian_kl",
        "pairwise_wasserstein2", "kl_margin",
    ],
)
def test_functional_names_from_the_issues(name):
    assert callable(getattr(functional, name))


def test_drop_in_training_step_from_the_guide():
    """The snippet of docs/guide/drop_in.rst: L_inter + L_intra on a flat batch, gradients reach the inputs."""
    gen = torch.Generator().manual_seed(0)
    n_videos, n_queries, n_clips, dim = 6, 15, 8, 16
    query_video = torch.arange(n_queries) % n_videos
    query_emb = torch.randn(n_queries, dim, generator=gen, requires_grad=True)
    clip_emb = torch.randn(n_videos, n_clips, dim, generator=gen, requires_grad=True)
    cos = torch.einsum("qd,vcd->qvc", torch.nn.functional.normalize(query_emb, dim=-1),
                       torch.nn.functional.normalize(clip_emb, dim=-1))
    clip_sim = cos.amax(-1)
    frame_sim = cos.mean(-1)
    inter = evidential_prvr.EvidentialRetrievalLoss.from_preset("release", dataset="tvr")
    intra = evidential_prvr.IntraVideoEvidentialLoss.from_preset("release", dataset="tvr")
    groups = evidential_prvr.build_intra_video_batch(query_emb, query_video, clip_emb)
    loss = inter(frame_sim, clip_sim, query_video) + intra(groups.sim, groups.query_mask, groups.clip_mask)
    loss.backward()
    assert torch.isfinite(loss)
    assert query_emb.grad.abs().sum() > 0 and clip_emb.grad.abs().sum() > 0
