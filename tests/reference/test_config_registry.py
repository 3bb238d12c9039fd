"""Round trip registry -> reference config -> model, optimiser, objective: every registry field arrives unchanged.

For every preset (``release``, ``paper``) and data set, the config's sections are the registry's dataclasses
(the same type, or for ``model`` and ``optim`` the registry's type extended with reference-only switches, under
the registry's field names), and each field of each section of :func:`evidential_prvr.presets.holmes_settings`
is looked up where the reference model uses it (the built model's ``ModelConfig``, the optimiser's parameter
groups, the engine schedule, the training batches, the criterion and its parts). Fields are compared by name,
so a field the library adds is checked too; a section it adds fails the test until it has a config section.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from evidential_prvr.presets import ModelSettings as RegistryModelSettings
from evidential_prvr.presets import holmes_settings
from reference_models.holmes.config import HolmesConfig, from_registry
from reference_models.holmes.data import load_split
from reference_models.holmes.factory import model_config
from reference_models.holmes.model import HolmesModel, ModelSettings
from reference_models.holmes.objective import HolmesObjective
from reference_models.holmes.task import HolmesTask

DATASETS = ("tvr", "activitynet", "charades")
SOURCES = ("release", "paper")

#: registry sections that the config holds as they are (the same dataclass type, equal values).
EMBEDDED_AS_IS = ("schedule", "weights", "base", "inter", "transport", "intra")
#: registry section -> the config section that extends its dataclass with reference-only switches.
EXTENDED = {"model": "model", "optimizer": "optim"}
DATA_FIELDS = ("n_clips", "n_frames")  # the model is built with the data's clip and frame counts


def used(module: torch.nn.Module) -> dict[str, Any]:
    """What a library loss module is configured with: its constructor's arguments, which it holds as attributes of
    the same names (and its transport's, ``fot``, except those the module holds itself)."""
    found = {name: getattr(module, name) for name in inspect.signature(type(module)).parameters
             if name != "fot" and hasattr(module, name)}
    part = getattr(module, "fot", None)
    if part is not None:
        found = {**used(part), **found}
    return found


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isinf(a) and math.isinf(b):
        return a == b
    return a == b


@pytest.fixture(scope="module")
def micro_split(tmp_path_factory):
    from tests.reference.data_helpers import COLLECTION, make_micro_benchmark
    from tests.reference.run_helpers import FEATURE

    root = make_micro_benchmark(tmp_path_factory.mktemp("micro"))
    return load_split(root, COLLECTION, FEATURE, "train", n_clips=4, n_frames=8)


@pytest.mark.parametrize("dataset", DATASETS)
@pytest.mark.parametrize("source", SOURCES)
def test_every_registry_field_reaches_the_model_the_optimiser_and_the_objective(source, dataset, micro_split):
    settings = holmes_settings(source, dataset)
    config = from_registry(dataset, source)
    assert HolmesConfig.from_dict(config.to_dict()) == config

    # the config's sections are the registry's dataclasses, not copies under other names
    for section in EMBEDDED_AS_IS:
        assert type(getattr(config, section)) is type(getattr(settings, section)), section
        assert getattr(config, section) == getattr(settings, section), section
    for registry_section, section in EXTENDED.items():
        ours, theirs = getattr(config, section), getattr(settings, registry_section)
        assert isinstance(ours, type(theirs)), section
        for field in dataclasses.fields(theirs):
            assert same(getattr(ours, field.name), getattr(theirs, field.name)), f"{section}.{field.name}"
    covered = {"preset", "dataset", *EMBEDDED_AS_IS, *EXTENDED}
    assert {f.name for f in dataclasses.fields(settings)} == covered, "a registry section has no config section"

    # model: the model's config is the model section under the same names, with the data's sizes
    built = model_config(config, visual_dim=8, text_dim=8, n_clips=4, n_frames=8)
    assert isinstance(built, ModelSettings) and isinstance(built, RegistryModelSettings)
    for field in dataclasses.fields(settings.model):
        if field.name not in DATA_FIELDS:
            assert same(getattr(built, field.name), getattr(settings.model, field.name)), field.name
    for field in dataclasses.fields(ModelSettings):
        if field.name not in DATA_FIELDS:
            assert same(getattr(built, field.name), getattr(config.model, field.name)), field.name
    assert (built.n_clips, built.n_frames, built.visual_dim, built.text_dim) == (4, 8, 8, 8)
    defaults = inspect.signature(load_split).parameters
    for field in DATA_FIELDS:
        assert defaults[field].default == getattr(settings.model, field) == getattr(config.model, field), field
    model = HolmesModel(built)
    assert model.frame_branch.position.embedding.num_embeddings == settings.model.position_table
    assert model.text_encoder.position.embedding.num_embeddings == settings.model.max_query_len

    # optimiser, schedule and batches
    task = HolmesTask(config, micro_split, micro_split)
    layer = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    optimizer = task.build_optimizer([layer])
    o = settings.optimizer
    optimizer_fields = {f.name for f in dataclasses.fields(o)}
    assert optimizer_fields == {"lr", "warmup_proportion", "weight_decay", "max_grad_norm", "eps", "betas",
                                "videos_per_batch"}, "a registry optimizer field has no destination"
    decayed = optimizer.param_groups[0]
    assert (decayed["lr"], decayed["weight_decay"], decayed["eps"], tuple(decayed["betas"])) == \
        (o.lr, o.weight_decay, o.eps, tuple(o.betas))
    assert (task.schedule.lr, task.schedule.grad_clip) == (o.lr, o.max_grad_norm)
    assert config.optim.warmup_proportion == o.warmup_proportion
    scheduler = task.build_scheduler(optimizer, total_steps=1000)
    factors = [scheduler.lr_lambdas[0](step) for step in (0, round(1000 * o.warmup_proportion))]
    assert factors[0] == 0.0 and factors[1] == pytest.approx(1.0)  # warm-up over warmup_proportion of the steps
    assert config.optim.videos_per_batch == o.videos_per_batch
    assert task.train_loader(seed=0).videos_per_batch == o.videos_per_batch

    sch = settings.schedule
    assert {f.name for f in dataclasses.fields(sch)} == {"epochs", "warmup_stage_epochs", "hard_negative_epoch",
                                                          "early_stop_patience"}
    assert (task.schedule.epochs, task.schedule.early_stop_patience) == (sch.epochs, sch.early_stop_patience)

    # objective
    criterion = HolmesObjective(config, config.model.hidden_size).criterion
    assert (criterion.warmup_stage_epochs, criterion.hard_negative_epoch) == \
        (sch.warmup_stage_epochs, sch.hard_negative_epoch)
    base = used(criterion.base)
    for field in dataclasses.fields(settings.base):
        assert same(base[field.name], getattr(settings.base, field.name)), f"base.{field.name}"
    w = settings.weights
    assert {f.name for f in dataclasses.fields(w)} == {"nce_clip", "nce_frame", "div", "intra", "inter"}
    assert (base["clip_nce_weight"], base["frame_nce_weight"], base["div_weight"]) == (w.nce_clip, w.nce_frame, w.div)
    assert (criterion.inter_weight, criterion.intra_weight) == (w.inter, w.intra)
    inter = used(criterion.inter)
    for field in dataclasses.fields(settings.inter):
        assert same(inter[field.name], getattr(settings.inter, field.name)), f"inter.{field.name}"
    intra = used(criterion.intra)
    for section in (settings.intra, settings.transport):
        for field in dataclasses.fields(section):
            if field.name in intra:
                assert same(intra[field.name], getattr(section, field.name)), f"{field.name}"
            else:
                assert same(getattr(criterion.intra.fot, field.name), getattr(section, field.name)), field.name


def test_a_checkpoint_config_of_release_1_is_refused_on_resume(micro_split):
    """The format of commit e4b604a (release 1.0.0: ``optim.max_query_len``, a ``loss`` section, built from
    the d77b6c1 file of the same run): version 3.0 no longer migrates it, so a resume names the old keys."""
    path = Path(__file__).parent / "previous_configs" / "activitynet_paper_d77b6c1.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    old["optim"]["max_query_len"] = old["model"].pop("max_query_len")  # where it was then
    task = HolmesTask(from_registry("activitynet", "paper"), micro_split, micro_split)
    with pytest.raises(ValueError, match=r"unknown config keys \['loss'\].*release 1.x"):
        task.config_differences(old)
    del old["loss"]
    with pytest.raises(ValueError, match=r"'max_query_len'.* in config section 'optim'"):
        task.config_differences(old)
