"""The log-variance gain of DAB's heads: the same head and start for every gain, an AdamW step that moves the
log-variance ``g`` times as far, float64 gradients, clear errors."""

from __future__ import annotations

import pytest
import torch

from evidential_prvr.probabilistic import DABAlignment, GaussianEmbeddingHead, TokenUncertaintyHead

HEADS = (GaussianEmbeddingHead, TokenUncertaintyHead)


def _logvar(head: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    if isinstance(head, TokenUncertaintyHead):
        return head(x)
    return head(x).logvar


def _inputs(cls: type, generator: torch.Generator) -> torch.Tensor:
    return torch.randn((5, 4, 6) if cls is TokenUncertaintyHead else (5, 6), generator=generator)


@pytest.mark.parametrize("cls", HEADS)
@pytest.mark.parametrize("start", ["zero", "small", "pytorch"])
def test_every_gain_starts_as_the_plain_head(cls: type, start: str) -> None:
    x = _inputs(cls, torch.Generator().manual_seed(0))
    outputs = []
    for gain in (1.0, 7.0, 100.0):
        torch.manual_seed(3)
        head = cls(6, 4, logvar_weight_init=start, logvar_gain=gain)
        outputs.append(_logvar(head, x))
        assert head.logvar_gain == gain
    for other in outputs[1:]:
        torch.testing.assert_close(other, outputs[0], rtol=1e-5, atol=1e-6)


def test_gain_one_is_the_plain_linear_head_bit_for_bit() -> None:
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(4)
    head = GaussianEmbeddingHead(6, 4, logvar_weight_init="pytorch")
    with torch.no_grad():
        expected = head.logvar(head.logvar_norm(torch.nn.functional.normalize(x, dim=-1))).clamp(-6.0, 2.0)
        assert torch.equal(head(x).logvar, expected)


@pytest.mark.parametrize("cls", HEADS)
def test_an_adamw_step_moves_the_log_variance_gain_times_as_far(cls: type) -> None:
    """Adam's step hardly depends on the gradient's scale, so the gain multiplies the log-variance's move."""
    x = _inputs(cls, torch.Generator().manual_seed(2))
    target = torch.randn(5, 4, generator=torch.Generator().manual_seed(5))
    moves = {}
    for gain in (1.0, 10.0):
        torch.manual_seed(6)
        head = cls(6, 4, logvar_weight_init="small", logvar_gain=gain)
        before = _logvar(head, x).detach()
        optimizer = torch.optim.AdamW(head.logvar.parameters(), lr=1e-3, weight_decay=0.0)  # the layer alone
        (_logvar(head, x) - target).square().sum().backward()
        optimizer.step()
        moves[gain] = _logvar(head, x).detach() - before
    assert moves[1.0].abs().max() > 1e-5
    torch.testing.assert_close(moves[10.0], 10.0 * moves[1.0], rtol=0.02, atol=1e-6)


@pytest.mark.parametrize("cls", HEADS)
def test_gradcheck_with_a_gain(cls: type) -> None:
    torch.manual_seed(7)
    head = cls(6, 4, logvar_weight_init="pytorch", logvar_gain=3.0).double()
    x = _inputs(cls, torch.Generator().manual_seed(8)).double().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: _logvar(head, t), (x,))


def test_dab_alignment_passes_the_gain_to_both_heads() -> None:
    dab = DABAlignment(6, 4, tau=2.0, n_steps=2, logvar_gain=25.0)
    assert dab.text_head.logvar_gain == dab.token_head.logvar_gain == 25.0
    assert DABAlignment(6, 4, tau=2.0, n_steps=2).text_head.logvar_gain == 1.0  # DAB's plain heads by default
    separate = DABAlignment(6, 4, tau=2.0, n_steps=2, share_head=False, logvar_gain=25.0)
    assert separate.video_head.logvar_gain == 25.0


@pytest.mark.parametrize("cls", HEADS)
@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_gain_names_the_argument(cls: type, bad: float) -> None:
    with pytest.raises(ValueError, match="logvar_gain"):
        cls(6, 4, logvar_gain=bad)
