"""The comparison tool (``python -m reference_models.compare``, :mod:`reference_models.engine.seed_grid`): tiny
runs of every task, split-and-merge equals one shot, resume skips finished runs and completes interrupted
ones, the schema of ``results.json``, the per-query ranks agree with each task's evaluation, and the errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from reference_models import compare as cli
from reference_models.engine import UserError
from reference_models.engine import seed_grid as grid
from tests.reference.data_helpers import MICRO_SPEC


def _holmes_runner(epochs: int = 1):
    from reference_models.holmes.comparison_runner import HolmesComparison
    from reference_models.holmes.config import preset

    return HolmesComparison(preset("embedded").replace(schedule={"epochs": epochs}), MICRO_SPEC)


def _hud_runner():
    from reference_models.hud.benchmark import CVRBenchmarkSpec
    from reference_models.hud.comparison_runner import HUDComparison

    return HUDComparison(CVRBenchmarkSpec().scaled(0.02), epochs=1)


def _dab_runner():
    from reference_models.dab.benchmark import T2VBenchmarkSpec
    from reference_models.dab.comparison_runner import DABComparison
    from reference_models.dab.config import T2VConfig

    spec = T2VBenchmarkSpec(n_train=24, n_val=6, n_test=8, topics=3, events_per_topic=4, frames=6,
                            feature_dims=(12, 10))
    config = T2VConfig().replace(backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6},
                                 head={"gaussian_dim": 8}, bridge={"n_steps": 4, "time_dim": 8},
                                 optim={"epochs": 1, "batch_size": 8})
    return DABComparison(config, spec)


@pytest.fixture
def tiny_holmes(monkeypatch):
    """``--task holmes`` of the command line trains the micro benchmark for one epoch."""
    import reference_models.holmes.comparison_runner as module

    monkeypatch.setattr(module, "runner", lambda epochs=None, scale=1.0: _holmes_runner(epochs or 1))
    torch.set_num_threads(1)


def _without_timings(results: dict) -> dict:
    return {k: v for k, v in results.items() if k != "runs"}


def test_split_and_merge_equals_one_shot(tiny_holmes, tmp_path, capsys):
    split, once = tmp_path / "split", tmp_path / "once"
    args = ["--task", "holmes", "--data-seeds", "0,1", "--n-boot", "200", "--no-progress"]
    assert cli.main(["run", *args, "--seeds", "0", "--out", str(split), "--no-report"]) == 0
    assert not (split / "results.json").exists()
    assert cli.main(["run", *args, "--seeds", "1", "--out", str(split), "--no-report"]) == 0
    assert cli.main(["report", "--out", str(split), "--n-boot", "200"]) == 0
    assert cli.main(["run", *args, "--seeds", "0,1", "--out", str(once)]) == 0
    merged = json.loads((split / "results.json").read_text())
    one_shot = json.loads((once / "results.json").read_text())
    assert _without_timings(merged) == _without_timings(one_shot)
    assert [(r["data_seed"], r["seed"], r["variant"]) for r in merged["runs"]] == \
        [(r["data_seed"], r["seed"], r["variant"]) for r in one_shot["runs"]]
    assert (split / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "verdict (test, headline SumR):" in printed and "holmes mean ± sd" in printed


def test_resume_skips_finished_runs_and_completes_an_interrupted_one(tmp_path):
    runner = _holmes_runner(epochs=2)
    first = grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], log=lambda line: None)
    calls, lines = [], []
    original = runner.train_and_rank

    def spy(variant, data, out, **options):
        calls.append((variant, options["resume"]))
        return original(variant, data, out, **options)

    runner.train_and_rank = spy  # type: ignore[method-assign]
    again = grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], log=lines.append)
    assert calls == [] and sum("skipped" in line for line in lines) == 2
    assert [r.sets for r in again] == [r.sets for r in first]
    # an interrupted run: its ranks.json is missing, its last.pt is there -> resumed, same ranks
    folder = grid.run_folder(tmp_path, 0, 0, "holmes")
    (folder / grid.RANKS_NAME).unlink()
    resumed = grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], log=lines.append)
    assert calls == [("holmes", True)]
    assert resumed[0].sets == first[0].sets
    # a run cut after its first epoch resumes to the ranks of an uninterrupted run
    from reference_models.engine import Trainer
    from reference_models.holmes.data import load_split
    from reference_models.holmes.task import HolmesTask

    data = grid.data_folder(tmp_path, 0)
    config = runner.config.with_ablation("baseline")
    splits = {s: load_split(data, "embedded", "synthetic", s, max_query_len=config.model.max_query_len)
              for s in ("train", "val")}
    cut = grid.run_folder(tmp_path, 0, 1, "baseline")
    Trainer(HolmesTask(config, splits["train"], splits["val"]), cut, seed=1).fit(stop_after_epoch=0)
    grid.run_grid(runner, tmp_path, seeds=[1], data_seeds=[0], log=lines.append)
    assert ("baseline", True) in calls
    uninterrupted = runner.train_and_rank("baseline", data, tmp_path / "fresh", seed=1, device="cpu", resume=False,
                                          show_progress=False)
    record = next(r for r in grid.read_runs(tmp_path) if (r.seed, r.variant) == (1, "baseline"))
    assert record.sets["test"] == uninterrupted["test"]


@pytest.mark.parametrize("make", [_hud_runner, _dab_runner], ids=["hud", "dab"])
def test_results_json_schema_for_every_task(make, tmp_path):
    runner = make()
    grid.run_grid(runner, tmp_path, seeds=[0, 1], data_seeds=[0, 1], log=lambda line: None)
    results = cli.report(tmp_path, n_boot=200)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["schema"] == cli.SCHEMA and saved["task"] == runner.task
    spec = runner.spec
    assert (saved["method"], saved["base"], saved["headline"], saved["primary_set"]) == \
        (spec.method, spec.base, list(spec.headline), spec.primary)
    assert saved["level"] == 0.95 and saved["n_boot"] == 200 and saved["verdict"]["rule"] == cli.VERDICT_RULE
    assert set(saved["sets"]) == set(spec.sets)
    for block in saved["sets"].values():
        assert block["data_seeds"] == [0, 1] and block["runs"] == {spec.method: 4, spec.base: 4}
        assert block["seeds"] == {v: {"0": [0, 1], "1": [0, 1]} for v in spec.variants}
        assert set(block["metrics"]) == set(spec.metrics)  # JSON keys are sorted
        for c in block["metrics"].values():
            assert c["low"] <= c["difference"] + 1e-9 and c["difference"] <= c["high"] + 1e-9
            assert set(c) == {"metric", "method", "base", "difference", "low", "high", "level", "n_boot",
                              "higher_is_better", "beats_base", "worse_than_base"}
            assert set(c["method"]) == {"mean", "sd", "runs"}
        assert block["per_type"], "every task labels its queries"
        for sub in block["per_type"].values():
            assert set(sub["metrics"]) == set(spec.metrics)
    assert len(saved["runs"]) == 8 and all(r["train_seconds"] >= 0 for r in saved["runs"])
    assert saved["verdict"]["text"] in ("beats its base", "worse than its base",
                                        "cannot tell (an interval of a headline metric includes zero)")
    assert results["verdict"] == saved["verdict"]


def test_query_ranks_agree_with_each_tasks_evaluation(tmp_path):
    from reference_models.dab.evaluate import retrieval_metrics, score_split
    from reference_models.hud.metrics import evaluate_split as hud_evaluate
    from reference_models.hud.task import CVRTask

    # HUD: the recalls of the ranks are those of evaluate_split
    hud = _hud_runner()
    grid.run_grid(hud, tmp_path / "hud", seeds=[0], data_seeds=[0], log=lambda line: None)
    from reference_models.hud.data import (
        SPLITS,
        SplitPaths,
        Vocabulary,
        load_cvr_split,
        read_annotations,
    )

    data = grid.data_folder(tmp_path / "hud", 0)
    paths = {s: SplitPaths.default(data, s) for s in SPLITS}
    vocabulary = Vocabulary.build([t.edit for t in read_annotations(paths["train"].annotation)])
    splits = {s: load_cvr_split(s, p, vocabulary) for s, p in paths.items()}
    config = hud.config("hud")
    task = CVRTask(config, splits["train"], splits["val"], vocabulary)
    model = task.build_model()
    ranks = torch.tensor(task.query_ranks(model, splits["test"], "cpu").ranks)
    expected = hud_evaluate(task.method, model, splits["test"], torch.device("cpu"), seed=config.eval_seed)
    for k in (1, 5, 10, 50):
        assert 100.0 * float((ranks <= k).double().mean()) == pytest.approx(expected[f"R@{k}"])
    # DAB: R@K, MnR and MdR of the ranks are retrieval_metrics'
    dab = _dab_runner()
    grid.run_grid(dab, tmp_path / "dab", seeds=[0], data_seeds=[0], log=lambda line: None)
    from reference_models.dab.data import load_t2v_split
    from reference_models.dab.task import T2VTask

    data = grid.data_folder(tmp_path / "dab", 0)
    splits = {s: load_t2v_split(data, s, max_frames=6) for s in ("train", "val", "test")}
    task = T2VTask(dab.config, splits["train"], splits["val"])
    torch.manual_seed(0)
    model = task.build_model()
    ranks = torch.tensor(task.query_ranks(model, splits["test"], "cpu").ranks).double()
    expected = retrieval_metrics(score_split(model, splits["test"]).logits, splits["test"].query_video)
    assert float(ranks.mean()) == pytest.approx(expected["MnR"]) and float(ranks.median()) == expected["MdR"]
    assert 100.0 * float((ranks <= 1).double().mean()) == pytest.approx(expected["R@1"])


def test_holmes_query_ranks_agree_with_evaluate_retrieval(tmp_path):
    from reference_models.holmes.data import generate_embedded_benchmark, load_split
    from reference_models.holmes.evaluate import evaluate_retrieval
    from reference_models.holmes.task import HolmesTask

    runner = _holmes_runner()
    generate_embedded_benchmark(tmp_path, "embedded", seed=0, spec=MICRO_SPEC)
    splits = {s: load_split(tmp_path, "embedded", "synthetic", s) for s in ("train", "val", "test")}
    task = HolmesTask(runner.config, splits["train"], splits["val"])
    torch.manual_seed(0)
    model = task.build_model()
    ranks = torch.tensor(task.query_ranks(model, splits["test"], "cpu").ranks)
    recall = evaluate_retrieval(model, splits["test"], runner.config).recall
    for k in (1, 5, 10, 100):
        assert 100.0 * float((ranks <= k).double().mean()) == pytest.approx(recall[f"R@{k}"])


def test_another_comparisons_folder_and_bad_flags_are_one_line_errors(tmp_path, capsys):
    grid.run_grid(_holmes_runner(epochs=1), tmp_path, seeds=[0], data_seeds=[0], log=lambda line: None)
    with pytest.raises(UserError, match="other settings"):
        grid.run_grid(_holmes_runner(epochs=2), tmp_path, seeds=[0], data_seeds=[0], log=lambda line: None)
    assert cli.main(["report", "--out", str(tmp_path / "nothing")]) == 2
    assert "no comparison.json" in capsys.readouterr().err
    plan = json.loads((tmp_path / grid.PLAN_NAME).read_text(encoding="utf-8"))
    assert plan["format"] == grid.FOLDER_FORMAT
    del plan["format"]  # a folder of release 1.x
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / grid.PLAN_NAME).write_text(json.dumps(plan), encoding="utf-8")
    assert cli.main(["report", "--out", str(tmp_path / "old")]) == 2
    err = capsys.readouterr().err
    assert "written by release 1.x" in err and err.count("\n") == 1
    with pytest.raises(UserError, match="written by release 1.x"):
        grid.run_grid(_holmes_runner(epochs=1), tmp_path / "old", seeds=[0], data_seeds=[0], log=lambda line: None)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "--task", "holmes", "--seeds", "0,x", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        cli.main(["run", "--task", "nope", "--out", str(tmp_path)])
    assert "invalid choice" in capsys.readouterr().err


def test_a_data_seed_with_one_model_only_is_left_out(tmp_path):
    runner = _holmes_runner()
    grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0, 1], log=lambda line: None)
    import shutil

    shutil.rmtree(grid.run_folder(tmp_path, 1, 0, "baseline"))
    results = cli.build_results(grid.read_runs(tmp_path), grid.read_plan(tmp_path), n_boot=100)
    assert results["sets"]["test"]["data_seeds"] == [0]


def test_comparison_specs_name_their_headline_metrics():
    from reference_models.dab.task import T2VTask
    from reference_models.holmes.task import HolmesTask
    from reference_models.hud.task import CVRTask

    assert HolmesTask.comparison.headline == ("SumR",)
    assert CVRTask.comparison.headline == ("MeanR",)
    assert T2VTask.comparison.headline == ("R@1", "MnR") and T2VTask.comparison.sets == ("test", "test_all")
    with pytest.raises(ValueError, match="headline"):
        grid.ComparisonSpec("a", "b", headline=("SumR",), metrics=("R@1",), ks=(1,))
    assert set(cli.TASKS) == {"holmes", "hud", "dab", "videos"}
    assert Path(cli.__file__).name == "compare.py"


def test_dab_regime_comparison_ranks_generic_captions_by_topic_and_reports_diagnostics(tmp_path, capsys):
    from reference_models.dab.comparison_runner import MULTI_POSITIVE_SET

    torch.set_num_threads(1)
    runner = cli.runner_for("dab", benchmark="msrvtt-regime", scale=0.01, epochs=1)
    grid.run_grid(runner, tmp_path, seeds=[0], data_seeds=[0], log=lambda line: None)
    results = cli.report(tmp_path, n_boot=100)
    printed = capsys.readouterr().out
    assert set(results["sets"]) == {"test", "test_all", MULTI_POSITIVE_SET}
    # one generic caption per test video
    assert results["sets"][MULTI_POSITIVE_SET]["queries"] == {"0": runner.benchmark.n_test}
    record = next(r for r in grid.read_runs(tmp_path) if r.variant == "dab")
    # multi-positive: never worse than the rank of the caption's own video
    own = dict(zip(record.sets["test_all"].query_ids, record.sets["test_all"].ranks))
    multi = record.sets[MULTI_POSITIVE_SET]
    assert all(rank <= own[q] for q, rank in zip(multi.query_ids, multi.ranks))
    assert set(results["diagnostics"]) == {"dab"} and results["diagnostics"]["dab"]["runs"] == 1
    assert {"sigma2.text", "sigma2.bridged", "sigma2.video", "bridge.closed_fraction",
            "variance_share.all_pairs"} <= set(results["diagnostics"]["dab"]["mean"])
    assert "diagnostics of dab" in printed and "sigma2.video" in printed

