"""DAB's variance audit pieces: the derivative of the directional KL with respect to each log-variance against
``torch.distributions``, the gradient audit against the engine's trainer and that derivative, the log-variance gain
in the reference config, and the audit of a (tiny) comparison against its runs' own files."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributions import Normal, kl_divergence

from evidential_prvr.metrics import aurc
from reference_models.dab.audit import format_variance_audit, variance_audit
from reference_models.dab.benchmark import BENCHMARKS, generate_t2v_benchmark
from reference_models.dab.comparison_runner import DABComparison
from reference_models.dab.config import ABLATIONS, LOGVAR_GAIN, T2VConfig, ablation_config, preset
from reference_models.dab.data import load_t2v_split
from reference_models.dab.gradient_audit import gradient_audit, probe_steps
from reference_models.dab.model import T2VModel
from reference_models.dab.task import T2VTask
from reference_models.engine import Trainer
from reference_models.engine import seed_grid as grid

#: ``msrvtt-regime-varied`` (shared space, varied captions) and its preset at a size that trains in seconds.
TINY_VARIED = dataclasses.replace(BENCHMARKS["msrvtt-regime-varied"], n_train=24, n_val=6, n_test=12, topics=3,
                                  events_per_topic=4, frames=6, feature_dims=(16, 16))
TINY_VARIED_CONFIG = preset("msrvtt-regime-varied").replace(
    backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6}, head={"gaussian_dim": 16},
    bridge={"n_steps": 2, "time_dim": 8}, optim={"epochs": 2, "batch_size": 8})


def test_kl_derivatives_in_the_guide_against_torch_distributions() -> None:
    """d KL(Q_v || P_t) / d log sigma^2_t = (1 - r - delta^2 / sigma^2_t) / 2 and d / d log sigma^2_v = (r - 1) / 2."""
    g = torch.Generator().manual_seed(0)
    mu_v, mu_t = torch.randn(50, generator=g).double(), torch.randn(50, generator=g).double()
    lv_v = torch.randn(50, generator=g).double().requires_grad_()
    lv_t = torch.randn(50, generator=g).double().requires_grad_()
    kl = kl_divergence(Normal(mu_v, (0.5 * lv_v).exp()), Normal(mu_t, (0.5 * lv_t).exp())).sum()
    d_v, d_t = torch.autograd.grad(kl, (lv_v, lv_t))
    r = (lv_v - lv_t).exp().detach()
    torch.testing.assert_close(d_v, 0.5 * (r - 1))
    torch.testing.assert_close(d_t, 0.5 * (1 - r - (mu_v - mu_t) ** 2 / lv_t.exp().detach()))


def test_probe_steps() -> None:
    assert probe_steps(630, 63) == [0, 62, 157, 315, 472, 629]
    assert probe_steps(3, 1) == [0, 1, 2]


@pytest.fixture(scope="module")
def tiny_varied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_t2v_benchmark(tmp_path_factory.mktemp("varied"), seed=0, spec=TINY_VARIED)


def test_gradient_audit_trains_as_the_trainer_and_reads_the_derivative(tiny_varied: Path,
                                                                        tmp_path: Path) -> None:
    train, val = load_t2v_split(tiny_varied, "train", max_frames=6), load_t2v_split(tiny_varied, "val", max_frames=6)
    audit = gradient_audit(TINY_VARIED_CONFIG, train, seed=2)
    trainer = Trainer(T2VTask(TINY_VARIED_CONFIG, train, val), tmp_path / "run", device="cpu", seed=2)
    fit = trainer.fit()
    per_epoch = len(audit["losses"]) // TINY_VARIED_CONFIG.optim.epochs
    for epoch, record in enumerate(fit.history):  # the same updates: the same losses, epoch by epoch
        losses = audit["losses"][epoch * per_epoch:(epoch + 1) * per_epoch]
        assert sum(losses) / len(losses) == pytest.approx(record["loss/pac"], rel=1e-6)
    first = audit["probes"][0]
    assert first["step"] == 0
    activations = first["activations"]
    # at the identity start every variance is e^-2, so r = 1: the video log-variances get no gradient at all
    assert activations["video_base_logvar"]["grad_mean_abs"] < 1e-6 * activations["text_logvar"]["grad_mean_abs"]
    assert activations["video_token_logvar"]["grad_mean_abs"] < 1e-6 * activations["text_logvar"]["grad_mean_abs"]
    # ... while the text's is of the means' size
    assert activations["text_logvar"]["grad_mean_abs"] > 0.1 * activations["text_mu"]["grad_mean_abs"]
    assert activations["text_logvar"]["value_mean"] == pytest.approx(-2.0)
    b = audit["budget"]
    updates = audit["updates"]
    assert b["lr_sum_heads"] == pytest.approx(TINY_VARIED_CONFIG.optim.head_lr * (updates + 2) / 2)
    assert b["paper_lr_sum"] == pytest.approx(1e-4 * (56_250 + 2) / 2)
    assert b["distance_to_paper"]["video"] == pytest.approx(math.log(2.979) + 2.0)
    for group in first["groups"].values():  # AdamW moves no coordinate by much more than its learning rate
        assert group["update_rms"] <= 1.5 * group["lr"] + 1e-12
    with pytest.raises(ValueError, match="variant"):
        gradient_audit(TINY_VARIED_CONFIG.replace(head={"variant": "base"}), train)


def test_logvar_gain_in_the_reference_config() -> None:
    config = ablation_config(preset("msrvtt-regime-varied"), "dab-logvar-gain")
    assert config.head.logvar_gain == LOGVAR_GAIN == 100.0
    assert ABLATIONS["dab-logvar-gain"] == {"head": {"logvar_gain": LOGVAR_GAIN}}
    model = T2VModel(16, 16, TINY_VARIED_CONFIG.replace(head={"logvar_gain": 7.0}))
    assert model.gaussian_head.logvar_gain == model.token_head.logvar_gain == 7.0
    assert T2VConfig().head.logvar_gain == 1.0  # DAB's plain heads by default
    for bad in (0.0, -2.0):
        with pytest.raises(ValueError, match="logvar_gain"):
            T2VConfig().replace(head={"logvar_gain": bad})


@pytest.fixture(scope="module")
def tiny_comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny msrvtt-regime-varied comparison folder: the base and dab-logvar-gain, training seeds 0 and 1."""
    out = tmp_path_factory.mktemp("cmp")
    runner = DABComparison(TINY_VARIED_CONFIG, TINY_VARIED, multi_positive=True)
    grid.run_grid(runner, out, seeds=[0, 1], data_seeds=[0], methods=["dab-logvar-gain"], log=lambda line: None)
    return out


def test_variance_audit_of_a_comparison_against_its_runs(tiny_comparison: Path) -> None:
    tmp_path = tiny_comparison
    audit = variance_audit(tmp_path, "dab-logvar-gain", n_boot=200)
    folders = [grid.run_folder(tmp_path, 0, s, "dab-logvar-gain") for s in (0, 1)]
    diagnostics = [json.loads((f / "diagnostics.json").read_text()) for f in folders]
    assert audit["sigma2"]["video"]["mean"] == pytest.approx(np.mean([d["sigma2"]["video"] for d in diagnostics]))
    ratios = [d["sigma2"]["video"] / d["sigma2"]["text"] for d in diagnostics]
    assert audit["sigma2"]["ratio"]["mean"] == pytest.approx(np.mean(ratios))
    assert [r["specificity"] for r in audit["runs"]] == [d["text_sigma2_vs_specificity"] for d in diagnostics]
    # the selective figures from the runs' own ranks and confidences
    ranks = [json.loads((f / "ranks.json").read_text())["sets"]["test"] for f in folders]
    base = [json.loads((grid.run_folder(tmp_path, 0, s, "base") / "ranks.json").read_text())["sets"]["test"]
            for s in (0, 1)]

    def mean_aurc(runs: list[dict]) -> float:
        return float(np.mean([float(aurc(torch.tensor(r["confidence"]), torch.tensor(r["ranks"]) == 1)) for r in runs]))

    figures = audit["selective"]["metrics"]["AURC"]
    assert figures["method"]["mean"] == pytest.approx(mean_aurc(ranks))
    assert figures["base"]["mean"] == pytest.approx(mean_aurc(base))
    assert audit["selective"]["error_rate"] == pytest.approx(np.mean([np.mean(np.asarray(r["ranks"]) > 1) for r in ranks]))
    assert audit["selective"]["confidence"] == {"method": "kl_margin", "base": "max_score_margin"}
    text = format_variance_audit(audit)
    assert "2.979" in text and "0.507" in text and "0.935" in text and "5.87" in text and "0.429" in text
    assert "the variances learn (the guide's rule)" in text
    assert audit["learned"]["runs"] == 2
    with pytest.raises(Exception, match="no finished dab run"):
        variance_audit(tmp_path, "dab", n_boot=200)


def test_diagnose_command_line(tiny_comparison: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from reference_models.dab import cli

    output = tmp_path / "audit.json"
    assert cli.main(["diagnose", "--comparison", str(tiny_comparison), "--method", "dab-logvar-gain", "--n-boot",
                     "200", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "variance audit of dab-logvar-gain" in printed and "DAB paper" in printed
    assert json.loads(output.read_text())["method"] == "dab-logvar-gain"
    for argv, message in (
        (["diagnose", "--comparison", str(tmp_path / "none")], "no such folder"),
        (["diagnose", "--comparison", str(tiny_comparison), "--data-seed", "3"], "--data-seed is not a flag"),
        (["diagnose", "--gradients", "--method", "dab"], "--method is not a flag"),
        (["diagnose", "--gradients"], "needs --output-dir"),
        (["diagnose", "--comparison", str(tiny_comparison), "--method", "prob"], "no finished prob run"),
    ):
        assert cli.main(argv) == 2
        assert message in capsys.readouterr().err
    other = tmp_path / "grad"  # an instance of another seed already there: refused, not silently reused
    generate_t2v_benchmark(other / "data", seed=5, spec=TINY_VARIED)
    assert cli.main(["diagnose", "--gradients", "--output-dir", str(other)]) == 2
    assert "another instance" in capsys.readouterr().err


def test_planted_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from reference_models.dab import cli

    output = tmp_path / "planted.json"
    assert cli.main(["planted", "--seeds", "0", "--gains", "1,3", "--steps", "3", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "text vs noise" in printed
    results = json.loads(output.read_text())["results"]
    assert [r["recipe"]["logvar_gain"] for r in results] == [1.0, 3.0]
    with pytest.raises(SystemExit):  # a bad flag value: argparse's one line and status 2
        cli.main(["planted", "--gains", "0"])
    assert "expected numbers > 0" in capsys.readouterr().err
