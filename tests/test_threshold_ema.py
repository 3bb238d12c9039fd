"""Identification thresholds smoothed across batches (``threshold_decay``, beyond Holmes Eq. 11)."""

from __future__ import annotations

import datetime
import io
import math
import tempfile
from pathlib import Path

import hypothesis.strategies as st
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings

from evidential_prvr import HolmesCriterion, UncertaintyGuidedIdentifier
from evidential_prvr.functional import ema_thresholds
from tests.process_helpers import free_port, run_processes
from tests.strategies.evidential import similarity_batches

YES, NO = torch.tensor(True), torch.tensor(False)
PRESETS = [("release", "tvr"), ("paper", None)]


def _matched(batch):
    """The batch with query 0 strictly best on its positive in both branches (a correctly matched query)."""
    frame, clip, target = (t.clone() for t in batch)
    frame[0, target[0]] = frame[0].max() + 0.5
    clip[0, target[0]] = clip[0].max() + 0.5
    return frame, clip, target


def _thresholds(result) -> torch.Tensor:
    return torch.stack([torch.stack([b.uncertainty_threshold, b.consistency_threshold])
                        for b in (result.frame, result.clip)])


# --- the pure update ---------------------------------------------------------------------------------------
@given(batch=st.lists(st.floats(0, 1), min_size=2, max_size=2), running=st.lists(st.floats(0, 1), min_size=2,
       max_size=2), observed=st.booleans(), seen=st.booleans(), decay=st.floats(0, 0.999))
def test_ema_thresholds_is_the_four_cases(batch, running, observed, seen, decay):
    b, r = torch.tensor(batch, dtype=torch.float64), torch.tensor(running, dtype=torch.float64)
    got = ema_thresholds(b, r, torch.tensor(observed), torch.tensor(seen), decay)
    if not seen:
        expected = b  # the in-batch value: the fallback, or the first observation
    elif observed:
        expected = torch.tensor([decay * r[i].item() + (1 - decay) * b[i].item() for i in range(2)],
                                dtype=torch.float64)
    else:
        expected = r  # a batch without a correctly matched query keeps the average
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-15)


@given(value=st.floats(0, 1), start=st.floats(0, 1), decay=st.floats(0, 0.99), steps=st.integers(1, 60))
def test_a_constant_stream_converges_geometrically_to_its_value(value, start, decay, steps):
    running = torch.tensor([start], dtype=torch.float64)
    batch = torch.tensor([value], dtype=torch.float64)
    for _ in range(steps):
        running = ema_thresholds(batch, running, YES, YES, decay)
    assert abs(running.item() - value) <= decay**steps * abs(start - value) + 1e-12


def test_gradcheck_in_the_batch_and_running_thresholds():
    batch = torch.tensor([0.2, 0.6], dtype=torch.float64, requires_grad=True)
    running = torch.tensor([0.4, 0.5], dtype=torch.float64, requires_grad=True)
    for observed, seen in ((YES, YES), (NO, YES), (YES, NO), (NO, NO)):
        assert torch.autograd.gradcheck(lambda b, r, o=observed, s=seen: ema_thresholds(b, r, o, s, 0.7),
                                        (batch, running))


@pytest.mark.parametrize("decay", [1.0, -0.1, 1.5, math.nan, math.inf])
def test_a_bad_decay_is_refused_naming_the_argument(decay):
    with pytest.raises(ValueError, match=r"decay must lie in \[0.0, 1.0\)"):
        ema_thresholds(torch.zeros(2), torch.zeros(2), YES, YES, decay)
    with pytest.raises(ValueError, match=r"threshold_decay must lie in \[0.0, 1.0\), got"):
        UncertaintyGuidedIdentifier(threshold_decay=decay)
    with pytest.raises(ValueError, match="threshold_decay must lie in"):
        HolmesCriterion.from_preset("release", "tvr", threshold_decay=decay)


@pytest.mark.parametrize("decay", [True, "0.9"])
def test_a_decay_of_the_wrong_type_is_refused(decay):
    with pytest.raises(TypeError, match="threshold_decay must be a number, got"):
        UncertaintyGuidedIdentifier(threshold_decay=decay)


def test_the_update_checks_its_tensors():
    with pytest.raises(ValueError, match=r"running must have the shape of batch \(2,\), got \(3,\)"):
        ema_thresholds(torch.zeros(2), torch.zeros(3), YES, YES, 0.5)
    with pytest.raises(TypeError, match="observed and seen must be bool tensors"):
        ema_thresholds(torch.zeros(2), torch.zeros(2), torch.tensor(1.0), YES, 0.5)


# --- the identifier ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("preset", "dataset"), PRESETS)
@settings(max_examples=30, deadline=None)
@given(stream=st.lists(similarity_batches(min_rows=2, max_rows=8, min_cols=2, max_cols=6), min_size=1, max_size=5))
def test_decay_zero_is_the_in_batch_rule(preset, dataset, stream):
    smoothed = UncertaintyGuidedIdentifier.from_preset(preset, dataset, threshold_decay=0.0)
    plain = UncertaintyGuidedIdentifier.from_preset(preset, dataset)
    for batch in stream:
        frame, clip, target = _matched(batch)
        got, expected = smoothed(frame, clip, target), plain(frame, clip, target)
        assert torch.equal(got.query_type, expected.query_type)
        assert torch.equal(got.initial_query_type, expected.initial_query_type)
        assert torch.equal(_thresholds(got), _thresholds(expected))


@settings(max_examples=30, deadline=None)
@given(batch=similarity_batches(min_rows=2, max_rows=8, min_cols=2, max_cols=6), decay=st.floats(0.1, 0.9))
def test_a_repeated_batch_converges_to_its_in_batch_thresholds(batch, decay):
    frame, clip, target = _matched(batch)
    identifier = UncertaintyGuidedIdentifier.from_preset("paper", threshold_decay=decay)
    identifier.threshold_ema.thresholds.fill_(0.5)  # a state left by another stream
    identifier.threshold_ema.seen.fill_(True)
    expected = _thresholds(UncertaintyGuidedIdentifier.from_preset("paper")(frame, clip, target)).double()
    start = (identifier.threshold_ema.thresholds - expected).abs()
    for step in range(1, 40):
        got = _thresholds(identifier(frame, clip, target)).double()
        assert ((got - expected).abs() <= decay**step * start + 1e-6).all()
    assert torch.allclose(got, expected, atol=1e-6 + decay**39)


def test_before_the_first_match_the_fallback_then_a_batch_without_one_keeps_the_average():
    identifier = UncertaintyGuidedIdentifier.from_preset("paper", threshold_decay=0.5)
    target = torch.tensor([0, 1])
    unmatched = torch.tensor([[0.1, 0.9], [0.8, 0.2]])  # each query's best video is the wrong one
    result = identifier(unmatched, unmatched, target)
    beta = identifier.beta
    torch.testing.assert_close(_thresholds(result).float(), torch.tensor([[1 - beta, beta]] * 2))
    assert not identifier.threshold_ema.seen.any()
    matched = torch.tensor([[0.9, 0.1], [0.3, 0.7]])
    first = _thresholds(identifier(matched, matched, target))
    torch.testing.assert_close(first, _thresholds(UncertaintyGuidedIdentifier.from_preset("paper")(
        matched, matched, target)))
    assert identifier.threshold_ema.seen.all()
    kept = _thresholds(identifier(unmatched, unmatched, target))
    assert torch.equal(kept, first)  # the in-batch rule would fall back to (1 - beta, beta) here


def test_eval_mode_reads_the_state_without_changing_it():
    identifier = UncertaintyGuidedIdentifier.from_preset("release", "tvr", threshold_decay=0.9)
    sim, target = torch.tensor([[0.9, 0.2], [0.3, 0.8]]), torch.tensor([0, 1])
    identifier(sim, sim, target)
    before = {k: v.clone() for k, v in identifier.state_dict().items()}
    identifier.eval()
    identifier(sim * 0.5, sim, target)
    assert all(torch.equal(before[k], v) for k, v in identifier.state_dict().items())


@settings(max_examples=20, deadline=None)
@given(stream=st.lists(similarity_batches(min_rows=2, max_rows=8, min_cols=2, max_cols=6), min_size=2, max_size=6),
       cut=st.integers(1, 5))
def test_the_state_survives_save_and_load(stream, cut):
    cut = min(cut, len(stream) - 1)
    first = UncertaintyGuidedIdentifier.from_preset("release", "tvr", threshold_decay=0.8)
    for batch in stream[:cut]:
        first(*batch)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    second = UncertaintyGuidedIdentifier.from_preset("release", "tvr", threshold_decay=0.8)
    second.load_state_dict(torch.load(buffer, weights_only=True))
    for batch in stream[cut:]:
        a, b = first(*batch), second(*batch)
        assert torch.equal(a.query_type, b.query_type) and torch.equal(_thresholds(a), _thresholds(b))
    assert all(torch.equal(v, second.state_dict()[k]) for k, v in first.state_dict().items())


@pytest.mark.parametrize(("preset", "dataset"), PRESETS)
def test_the_presets_keep_the_in_batch_rule_and_no_state(preset, dataset):
    identifier = UncertaintyGuidedIdentifier.from_preset(preset, dataset)
    criterion = HolmesCriterion.from_preset(preset, dataset)
    assert identifier.threshold_decay is None and identifier.threshold_ema is None
    assert criterion.threshold_ema is None
    assert not dict(identifier.state_dict()) and not dict(criterion.state_dict())


# --- the criterion -----------------------------------------------------------------------------------------
def _criterion_stream(criterion: HolmesCriterion, batches: int, seed: int) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    q, v, mc, d = 8, 4, 5, 6
    losses = []
    for step in range(batches):
        criterion.set_epoch(step)
        frame, clip = torch.rand(q, v, dtype=torch.float64), torch.rand(q, v, dtype=torch.float64)
        target = torch.arange(q) % v
        frame[0, 0], clip[0, 0] = 2.0, 2.0  # a correctly matched query in every batch
        details = criterion.details(frame, clip, target, query_emb=torch.randn(q, d, dtype=torch.float64),
                                    clip_emb=torch.randn(v, mc, d, dtype=torch.float64),
                                    generator=torch.Generator().manual_seed(step))
        losses.append(details.loss)
    return losses


@pytest.mark.parametrize(("preset", "dataset"), PRESETS)
def test_the_criterion_with_decay_zero_is_the_preset(preset, dataset):
    schedule = {"warmup_stage_epochs": 2, "hard_negative_epoch": 2}
    smoothed = HolmesCriterion.from_preset(preset, dataset, **schedule, threshold_decay=0.0)
    plain = HolmesCriterion.from_preset(preset, dataset, **schedule)
    assert torch.equal(torch.stack(_criterion_stream(smoothed, 5, 0)), torch.stack(_criterion_stream(plain, 5, 0)))
    assert int(smoothed.threshold_ema.batches) == 5  # updated in the first stage too


def test_the_criterion_smooths_the_thresholds_of_its_calibration():
    schedule = {"warmup_stage_epochs": 1, "hard_negative_epoch": 1}
    smoothed = HolmesCriterion.from_preset("release", "tvr", **schedule, threshold_decay=0.9)
    plain = HolmesCriterion.from_preset("release", "tvr", **schedule)
    a, b = _criterion_stream(smoothed, 6, 1), _criterion_stream(plain, 6, 1)
    assert torch.equal(a[0], b[0])  # the first stage does not calibrate: the same loss
    assert any(not torch.equal(x, y) for x, y in zip(a[1:], b[1:]))
    assert sorted(smoothed.state_dict()) == ["threshold_ema.batches", "threshold_ema.seen", "threshold_ema.thresholds"]


def test_the_criterion_needs_its_inter_loss_to_smooth():
    base = HolmesCriterion.from_preset("release", "tvr").base
    with pytest.raises(ValueError, match="inter must be an EvidentialRetrievalLoss, got NoneType"):
        HolmesCriterion(base, None, None, threshold_decay=0.9)


# --- several processes -------------------------------------------------------------------------------------
WORLD, TIMEOUT_S = 2, 120


def _stream(seed: int) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(4):
        frame, clip = torch.rand(6, 4, generator=generator), torch.rand(6, 4, generator=generator)
        out.append((frame, clip, torch.arange(6) % 4))
    return out


def _worker(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    try:
        identifier = UncertaintyGuidedIdentifier.from_preset("release", "tvr", threshold_decay=0.7, distributed=True)
        rows = slice(3 * rank, 3 * rank + 3)
        for frame, clip, target in _stream(0):
            identifier(frame[rows], clip[rows], target[rows])
        torch.save(dict(identifier.state_dict()), Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_distributed_ranks_hold_the_single_process_state():
    with tempfile.TemporaryDirectory() as out:
        run_processes(_worker, (free_port(), out), nprocs=WORLD, limit_s=TIMEOUT_S)
        states = [torch.load(Path(out) / f"rank{rank}.pt", weights_only=True) for rank in range(WORLD)]
    single = UncertaintyGuidedIdentifier.from_preset("release", "tvr", threshold_decay=0.7)
    for batch in _stream(0):
        single(*batch)
    for state in states:
        assert all(torch.equal(state[k], v) for k, v in single.state_dict().items())
