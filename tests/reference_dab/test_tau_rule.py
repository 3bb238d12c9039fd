"""DAB's PAC temperature on the base's footing: the matched temperature gives DAB the base's
starting inverse temperature, the learned one trains with a gradient and the base's cap, and the written selection
rule decides as the guide says."""

from __future__ import annotations

import math

import pytest
import torch

from reference_models.dab.config import matched_tau, preset
from reference_models.dab.model import T2VModel
from reference_models.dab.task import T2VObjective
from reference_models.dab.tau_selection import decide

CONFIG = preset("msrvtt-regime").replace(backbone={"hidden": 16, "temporal_layers": 1, "heads": 2, "max_frames": 6},
                                         head={"gaussian_dim": 16}, bridge={"n_steps": 2, "time_dim": 8})


def _centred_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    text, frames = torch.randn(20, 16, generator=g), torch.randn(15, 6, 16, generator=g)
    return text - text.mean(-1, keepdim=True), frames - frames.mean(-1, keepdim=True), torch.ones(15, 6, dtype=bool)


def test_the_matched_temperature_is_d_e_squared_over_the_logit_scale() -> None:
    head = preset("msrvtt-regime").head
    assert head.tau_rule == "learned" and preset("embedded").head.tau_rule == "fixed"  # the rule's choice (the guide)
    assert matched_tau(head) == pytest.approx(256 * math.e**2 / 20)
    assert round(matched_tau(head), 1) == 94.6 and round(256 * math.e**2 / head.tau) == 473


@torch.no_grad()
def test_at_the_identity_start_the_matched_pac_logits_are_the_bases_logits_shifted() -> None:
    text, frames, mask = _centred_data()
    config = CONFIG.replace(head={"tau_rule": "matched"})
    torch.manual_seed(0)
    dab = T2VModel(16, 16, config).eval()
    torch.manual_seed(0)
    base = T2VModel(16, 16, config.replace(head={"variant": "base"})).eval()
    pac_logits = -dab(text, frames, mask).cost / dab.pac_tau()  # type: ignore[operator]
    # -C / tau = s0 (cos - 1): the base's logits less its scale (up to the layer norm's epsilon)
    torch.testing.assert_close(pac_logits, base(text, frames, mask).logits - 20.0, rtol=0, atol=5e-3 * 20)
    assert T2VObjective(config.head).tau == pytest.approx(matched_tau(config.head))


def test_the_learned_temperature_gets_a_gradient_and_the_bases_cap() -> None:
    text, frames, mask = _centred_data()
    model = T2VModel(16, 16, CONFIG.replace(head={"tau_rule": "learned"}))
    assert isinstance(model.log_tau, torch.nn.Parameter)
    assert float(model.pac_tau().detach()) == pytest.approx(matched_tau(model.config.head), rel=1e-6)
    out = model(text[:15], frames, mask)
    assert out.tau is not None
    loss = T2VObjective(model.config.head)(out).total
    loss.backward()
    assert model.log_tau.grad is not None and float(model.log_tau.grad.abs()) > 0
    with torch.no_grad():
        model.log_tau.fill_(-10.0)
    assert float(model.pac_tau().detach()) == pytest.approx(model.tau_floor) and model.tau_floor == pytest.approx(
        matched_tau(model.config.head) * 20 / 100)
    fixed = T2VModel(16, 16, CONFIG.replace(head={"tau_rule": "fixed"}))  # head.tau, no parameter
    assert fixed.log_tau is None and float(fixed.pac_tau()) == CONFIG.head.tau
    with pytest.raises(ValueError, match="head.tau_rule must be one of"):
        CONFIG.replace(head={"tau_rule": "tuned"})


def test_the_selection_rule_decides_as_written() -> None:
    assert decide({"matched": {"val_R@1": 50.0, "val_MnR": 9.0}, "learned": {"val_R@1": 51.2, "val_MnR": 10.0}})[0] \
        == "learned"  # more than 1.0 point ahead
    assert decide({"matched": {"val_R@1": 50.0, "val_MnR": 9.0}, "learned": {"val_R@1": 50.8, "val_MnR": 10.0}})[0] \
        == "matched"  # within the margin: the lower MnR
    assert decide({"matched": {"val_R@1": 50.0, "val_MnR": 9.0}, "learned": {"val_R@1": 50.0, "val_MnR": 9.0}})[0] \
        == "matched"  # a tie: the rule without a parameter
    with pytest.raises(ValueError, match="figures must map rules of fixed, matched, learned"):
        decide({"tuned": {"val_R@1": 1.0, "val_MnR": 1.0}})
