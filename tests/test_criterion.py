"""HolmesCriterion: the whole objective with its schedule, dropped into a lineage-shaped training step."""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch
from torch import nn

import evidential_prvr as ep


class TinyLineageModel(nn.Module):
    """The shape of an MS-SL / GMMFormer / Holmes-release model: a query vector, clip and frame tokens,
    max-cosine scores per branch and their unnormalised max-dot logits; the queries are encoded twice
    (with dropout) as the release does, the second copy for L_div and the transport."""

    def __init__(self, text_dim=12, visual_dim=10, hidden=16):
        super().__init__()
        self.query = nn.Sequential(nn.Dropout(0.1), nn.Linear(text_dim, hidden))
        self.clip = nn.Linear(visual_dim, hidden)
        self.frame = nn.Linear(visual_dim, hidden)

    @staticmethod
    def _scores(query, tokens):
        dots = torch.einsum("qd,vmd->qvm", query, tokens)
        cos = torch.einsum("qd,vmd->qvm", nn.functional.normalize(query, dim=-1),
                           nn.functional.normalize(tokens, dim=-1))
        return cos.amax(-1), dots.amax(-1)

    def forward(self, text, clip_feats, frame_feats):
        query = self.query(text)
        clips, frames = self.clip(clip_feats), self.frame(frame_feats)
        clip_sim, clip_logits = self._scores(query, clips)
        frame_sim, frame_logits = self._scores(query, frames)
        return dict(clip_sim=clip_sim, clip_logits=clip_logits, frame_sim=frame_sim, frame_logits=frame_logits,
                    query_aux=self.query(text), clips=clips)


def _batch(seed=0):
    gen = torch.Generator().manual_seed(seed)
    labels = [0, 0, 0, 1, 1, 2, 3, 3, 3, 3]  # the release's text_labels
    return (torch.randn(10, 12, generator=gen), torch.randn(4, 8, 10, generator=gen),
            torch.randn(4, 16, 10, generator=gen), labels)


def _step(criterion, model, optimizer, batch, epoch):
    text, clip_feats, frame_feats, labels = batch
    criterion.set_epoch(epoch)
    out = model(text, clip_feats, frame_feats)
    details = criterion.details(out["frame_sim"], out["clip_sim"], labels, frame_logits=out["frame_logits"],
                                clip_logits=out["clip_logits"], query_emb=out["query_aux"], clip_emb=out["clips"])
    optimizer.zero_grad()
    details.loss.backward()
    optimizer.step()
    return details


@pytest.mark.parametrize("dataset", ["tvr", "act", "cha"])
def test_one_training_step_of_a_lineage_shaped_model(dataset):
    torch.manual_seed(0)
    model = TinyLineageModel()
    criterion = ep.HolmesCriterion.from_preset("release", dataset)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    warm = _step(criterion, model, optimizer, _batch(), epoch=0)
    assert warm.stage == 1 and float(warm.intra.detach()) == 0.0 and warm.intra_details is None
    assert warm.inter_details is not None and torch.equal(warm.inter_details.target,
                                                          warm.inter_details.target.round())  # plain labels
    second = _step(criterion, model, optimizer, _batch(), epoch=criterion.warmup_stage_epochs)
    assert second.stage == 2 and float(second.intra.detach()) > 0 and second.intra_details is not None
    weights = ep.presets.holmes_settings("release", dataset).weights
    torch.testing.assert_close(second.loss, second.base + weights.inter * second.inter + weights.intra * second.intra)
    assert all(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))


def test_schedule_switches_calibration_intra_and_hard_negatives():
    criterion = ep.HolmesCriterion.from_preset("release", "tvr", warmup_stage_epochs=2, hard_negative_epoch=3)
    seen = []
    for epoch in range(4):
        criterion.set_epoch(epoch)
        seen.append((criterion.stage, criterion.hard_negatives))
    assert seen == [(1, False), (1, False), (2, False), (2, True)]
    frame, clip = torch.rand(6, 3), torch.rand(6, 3)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    criterion.set_epoch(0)
    warm = criterion.details(frame, clip, labels, query_emb=torch.randn(6, 8))
    expected = ep.EvidentialRetrievalLoss.from_preset("release", "tvr", calibrate=False)(frame, clip, labels)
    torch.testing.assert_close(warm.inter, expected)
    criterion.set_epoch(2)
    calibrated = criterion.details(frame, clip, labels, query_emb=torch.randn(6, 8), clip_emb=torch.randn(3, 4, 8))
    torch.testing.assert_close(calibrated.inter, ep.EvidentialRetrievalLoss.from_preset("release", "tvr")(
        frame, clip, labels))


def test_terms_can_be_dropped_and_the_baseline_is_l_base():
    frame, clip = torch.rand(6, 3), torch.rand(6, 3)
    labels = torch.tensor([0, 0, 1, 1, 2, 2])
    emb = torch.randn(6, 8)
    baseline = ep.HolmesCriterion.from_preset("release", "tvr", inter=None, intra=None)
    baseline.set_epoch(50)
    base = ep.BaseRetrievalLoss.from_preset("release", "tvr", use_hard_negatives=True)
    gen = lambda: torch.Generator().manual_seed(1)  # noqa: E731
    torch.testing.assert_close(baseline(frame, clip, labels, query_emb=emb, generator=gen()),
                               base(frame, clip, emb, labels, generator=gen()))


def test_bad_arguments_are_named():
    criterion = ep.HolmesCriterion.from_preset("release", "tvr")
    criterion.set_epoch(30)
    frame, clip = torch.rand(4, 2), torch.rand(4, 2)
    with pytest.raises(ValueError, match="clip_emb"):
        criterion(frame, clip, [0, 0, 1, 1], query_emb=torch.randn(4, 8))
    with pytest.raises(TypeError, match="query_video"):
        criterion(frame, clip, [0.0, 0.0, 1.0, 1.0], query_emb=torch.randn(4, 8))
    with pytest.raises(ValueError, match="epoch"):
        criterion.set_epoch(-1)
    with pytest.raises(TypeError, match="inter"):
        ep.HolmesCriterion(ep.BaseRetrievalLoss(), inter=ep.BaseRetrievalLoss())
    with pytest.raises(ValueError, match="reduction"):
        ep.HolmesCriterion(ep.BaseRetrievalLoss(reduction="none"))
    assert repr(ep.HolmesCriterion.from_preset("paper")) == repr(ep.HolmesCriterion.from_preset("paper", "tvr"))
    with pytest.raises(TypeError, match="'weights'"):
        ep.HolmesCriterion.from_preset("release", "tvr", weights=[1, 2])


def test_from_preset_is_the_one_of_every_module_with_presets():
    """The criterion's ``from_preset`` is :class:`PresetModule`'s: its overrides are the constructor's arguments,
    and the parts it builds take the call's ``validate_args`` and ``distributed``."""
    assert issubclass(ep.HolmesCriterion, ep.PresetModule) and "from_preset" not in vars(ep.HolmesCriterion)
    checked = ep.HolmesCriterion.from_preset("release", "tvr", validate_args=False)
    assert checked.validate_args is False
    assert all(part.validate_args is False for part in (checked.base, checked.inter, checked.intra))
    base = ep.BaseRetrievalLoss.from_preset("release", "act")
    own = ep.HolmesCriterion.from_preset("release", "act", base, intra=None, total_epochs=50)
    assert own.base is base and own.intra is None and own.inter is not None
    assert (own.warmup_stage_epochs, own.hard_negative_epoch, own.total_epochs) == (10, 10, 50)
    assert repr(ep.HolmesCriterion().base) == repr(ep.BaseRetrievalLoss())  # base=None: BaseRetrievalLoss()
    with pytest.raises(TypeError, match="'schedule'"):
        ep.HolmesCriterion.from_preset("release", "tvr", schedule=6)


def test_forward_and_details_are_defs_with_their_own_docstrings():
    """``forward`` and ``details`` are written out in the class (version 3.0): their own names, the same
    parameters, and the docstring of their ``def``; nothing patches a signature onto them."""
    cls = ep.HolmesCriterion
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    defs = {node.name: node for node in tree.body[0].body if isinstance(node, ast.FunctionDef)}
    for name in ("forward", "details"):
        method = cls.__dict__[name]
        assert inspect.isfunction(method) and method.__name__ == method.__code__.co_name == name
        assert not hasattr(method, "__signature__") and not hasattr(method, "__wrapped__")
        assert method.__doc__ and ast.get_docstring(defs[name], clean=False) == method.__doc__
    forward, details = inspect.signature(cls.forward), inspect.signature(cls.details)
    assert list(forward.parameters.values()) == list(details.parameters.values())
    assert list(forward.parameters)[:4] == ["self", "frame_sim", "clip_sim", "query_video"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(forward.parameters.values())[4:])
    assert (forward.return_annotation, details.return_annotation) == ("torch.Tensor", "HolmesLossDetails")
    for helper in (cls._loss, cls._batch_loss):  # the private steps take their many arguments by keyword
        parameters = list(inspect.signature(helper).parameters.values())[1:]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters), helper.__name__


@pytest.mark.parametrize("epoch", [0, 30])
def test_forward_is_the_details_loss_and_runs_the_parts_forward_only(epoch, monkeypatch):
    """``criterion(...)`` equals ``details(...).loss`` and, like before version 3.0, calls only the
    ``forward`` of L_inter (no identification it would throw away)."""
    torch.manual_seed(0)
    criterion = ep.HolmesCriterion.from_preset("release", "tvr")
    criterion.set_epoch(epoch)
    frame, clip = torch.rand(6, 3), torch.rand(6, 3)
    embeddings = dict(query_emb=torch.randn(6, 8), clip_emb=torch.randn(3, 4, 8))
    labels = [0, 0, 1, 1, 2, 2]
    expected = criterion.details(frame, clip, labels, **embeddings, generator=torch.Generator().manual_seed(1))
    assert expected.stage == (1 if epoch == 0 else 2)
    called = []
    monkeypatch.setattr(criterion.inter, "details", lambda *a, **k: called.append("inter.details"))
    total = criterion(frame, clip, labels, **embeddings, generator=torch.Generator().manual_seed(1))
    assert called == []
    torch.testing.assert_close(total, expected.loss, rtol=0, atol=0)
