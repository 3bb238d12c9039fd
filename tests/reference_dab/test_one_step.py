"""The one-step bridge of the reference model (``bridge.distill = "one-step"``, :mod:`reference_models.dab.distill`)
and the Gaussian head at the backbone's width (``head.mean_init``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from evidential_prvr.functional import bridge_distillation_loss
from reference_models.dab.cli import load_trained
from reference_models.dab.comparison_runner import DABComparison
from reference_models.dab.config import ABLATIONS, T2VConfig, ablation_config
from reference_models.dab.data import load_t2v_split
from reference_models.dab.distill import DISTILLED_NAME, distill_one_step
from reference_models.dab.evaluate import score_split
from reference_models.dab.model import T2VModel
from reference_models.engine import load_checkpoint
from reference_models.engine import seed_grid as grid
from tests.reference_dab.test_regime_comparison import TINY_REGIME, TINY_REGIME_CONFIG


def _model(config: T2VConfig, seed: int = 0) -> T2VModel:
    torch.manual_seed(seed)
    return T2VModel(16, 16, config)


def test_a_model_with_a_student_is_dabs_model_until_distilled() -> None:
    dab = _model(TINY_REGIME_CONFIG)
    onestep = _model(ablation_config(TINY_REGIME_CONFIG, "dab-onestep"))
    theirs = dab.state_dict()
    for key, value in onestep.state_dict().items():
        if key.startswith("student.") or key == "student_ready":
            continue
        assert torch.equal(value, theirs[key]), key  # the student draws nothing from the stream
    assert torch.rand(1).item() == pytest.approx((torch.manual_seed(0), _model(TINY_REGIME_CONFIG), torch.rand(1))[2].item())
    assert not bool(onestep.student_ready) and onestep.text_bridge() is onestep.bridge
    text, frames, mask = torch.randn(3, 16), torch.randn(4, 6, 16), torch.ones(4, 6, dtype=torch.bool)
    torch.testing.assert_close(onestep(text, frames, mask).cost, dab(text, frames, mask).cost)


def test_config_checks() -> None:
    with pytest.raises(ValueError, match='bridge.distill = "one-step" distils the text-only bridge .* got head.variant'
                                         " 'prob'"):
        TINY_REGIME_CONFIG.replace(head={"variant": "prob"}, bridge={"distill": "one-step"})
    with pytest.raises(ValueError, match="bridge.condition 'video'"):
        TINY_REGIME_CONFIG.replace(bridge={"distill": "one-step", "condition": "video"})
    with pytest.raises(ValueError, match="bridge.distill"):
        TINY_REGIME_CONFIG.replace(bridge={"distill": "two-step"})
    assert TINY_REGIME_CONFIG.head.mean_init == "identity"  # the msrvtt-regime preset's, at the tiny width
    with pytest.raises(ValueError, match='head.mean_init = "identity" needs head.gaussian_dim = backbone.hidden \\(16\\), '
                                         "got 8"):
        TINY_REGIME_CONFIG.replace(head={"gaussian_dim": 8})
    with pytest.raises(ValueError, match="distill_lr must be > 0"):
        TINY_REGIME_CONFIG.replace(bridge={"distill_lr": 0.0})
    assert ABLATIONS["dab-onestep"] == {"bridge": {"distill": "one-step"}}


def test_identity_start_of_the_mean_head() -> None:
    config = TINY_REGIME_CONFIG
    model = _model(config)
    assert torch.equal(model.gaussian_head.mean.weight, torch.eye(16))
    assert torch.equal(model.gaussian_head.mean.bias, torch.zeros(16))
    x = torch.randn(5, 16)
    normalised = torch.nn.functional.normalize(x, dim=-1)
    torch.testing.assert_close(model.gaussian_head(x).mu, model.gaussian_head.mean_norm(normalised))
    # the 64-d row of the comparison goes back to a random mean layer
    narrow = ablation_config(config, "dab-64")
    assert (narrow.head.gaussian_dim, narrow.head.mean_init, narrow.head.tau) == (64, "random", 4.0)


def test_the_distillation_stage_trains_the_student_toward_the_chain() -> None:
    config = ablation_config(TINY_REGIME_CONFIG, "dab-onestep").replace(bridge={"distill_epochs": 40})
    model = _model(config)
    with torch.no_grad():  # a chain that moves its input (trained bridges do)
        for p in model.bridge.drift[-1].parameters():
            p.normal_(0.0, 0.3)
    texts = torch.randn(300, 16)
    result = distill_one_step(model, texts, seed=0)
    assert bool(model.student_ready) and model.text_bridge() is model.student
    assert result.captions == 300 and result.updates == 40 * 2 and result.loss_end < 0.5 * result.loss_start
    with torch.no_grad():
        start = model.gaussian_head(model.encode_text(texts))
        student, teacher = model.student(*start), model.bridge(*start)
    assert float(bridge_distillation_loss(*student, *teacher)) == pytest.approx(result.loss_end, rel=1e-5)
    assert all(p.grad is None for name, p in model.named_parameters() if not name.startswith("student."))


def test_one_step_runs_of_a_comparison_distil_the_dab_run_and_resume_to_the_same_model(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    runner = DABComparison(TINY_REGIME_CONFIG, TINY_REGIME, multi_positive=True)
    records = grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], methods=["dab", "dab-onestep"],
                            log=lambda line: None)
    run = tmp_path / "runs" / "data0" / "seed0"
    saved = load_checkpoint(run / "dab-onestep" / DISTILLED_NAME)
    assert saved["distillation"]["loss_end"] <= saved["distillation"]["loss_start"]
    teacher = load_checkpoint(run / "dab" / "best.pt")["model"]
    for key, value in teacher.items():  # the one-step model is the dab run's model plus its student
        assert torch.equal(saved["model"][key], value), key
    model = load_trained(run / "dab-onestep" / DISTILLED_NAME)
    assert bool(model.student_ready) and model.config.bridge.distill == "one-step"
    split = load_t2v_split(grid.data_folder(tmp_path, 0), "test", max_frames=6)
    onestep = next(r for r in records if r.variant == "dab-onestep")
    from evidential_prvr.metrics import ranks_of_ground_truth

    assert ranks_of_ground_truth(score_split(model, split).logits, split.query_video).tolist() == \
        onestep.sets["test"].ranks
    # resumed: the saved stage is loaded, not run again; distilled afresh elsewhere: the same student
    stamp = (run / "dab-onestep" / DISTILLED_NAME).stat().st_mtime_ns
    data = grid.data_folder(tmp_path, 0)
    again = runner.train_and_rank("dab-onestep", data, run / "dab-onestep", seed=0, device="cpu", resume=True,
                                  show_progress=False)
    assert (run / "dab-onestep" / DISTILLED_NAME).stat().st_mtime_ns == stamp
    assert again["test"] == onestep.sets["test"]
    fresh = tmp_path / "fresh" / "data0" / "seed0"
    (fresh / "dab").mkdir(parents=True)
    for name in ("best.pt", grid.RANKS_NAME):
        (fresh / "dab" / name).write_bytes((run / "dab" / name).read_bytes())
    (fresh / "dab-onestep").mkdir()
    runner.train_and_rank("dab-onestep", data, fresh / "dab-onestep", seed=0, device="cpu", resume=False,
                          show_progress=False)
    redone = load_checkpoint(fresh / "dab-onestep" / DISTILLED_NAME)["model"]
    for key, value in saved["model"].items():
        assert torch.equal(redone[key], value), key


def test_the_timing_benchmark_runs() -> None:
    """``benchmarks/dab_one_step.py`` at a tiny size (nothing is timed against a target here)."""
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, str(root / "benchmarks" / "dab_one_step.py"), "--gallery", "8", "--queries",
                          "2", "--repeats", "1", "--threads", "1", "--validate", "off"], cwd=root, capture_output=True,
                         text=True, timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 0, run.stderr[-3000:]
    assert "one-step bridge / base, one at a time" in run.stdout and "dab-onestep" in run.stdout
