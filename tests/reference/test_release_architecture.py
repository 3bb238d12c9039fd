"""The release architecture of the reference model: width weighting, attention blocks, masks, the second query
encoding and the parameter count."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from evidential_prvr import IntraVideoEvidentialLoss, build_intra_video_batch
from reference_models.holmes.config import preset
from reference_models.holmes.factory import build_model
from reference_models.holmes.gaussian_attention import GaussianAttentionBlock, GaussianSelfAttention
from reference_models.holmes.model import HolmesModel, ModelConfig
from reference_models.holmes.multi_width import CrossAttentionWidthWeights, MultiWidthGaussianBlock
from reference_models.holmes.objective import HolmesObjective
from tests.reference.test_model import D_T, D_V, make_batch, small_config


@pytest.mark.parametrize(
    "visual_dim, text_dim, release_count",
    [
        (3072, 768, 32_273_440),  # TVR: I3D + ResNet frames, RoBERTa tokens
        (1024, 1024, 30_791_200),  # ActivityNet / Charades: the paper's 30.79M
    ],
)
def test_parameter_count_equals_the_release(visual_dim, text_dim, release_count):
    """The release's ``Holmes_Net`` at these sizes has ``release_count`` parameters, 384 of them an unused
    ``weight_token`` that this model does not have (counted by instantiating the release)."""
    torch.manual_seed(0)
    model = build_model(preset("tvr"), visual_dim, text_dim)
    assert sum(p.numel() for p in model.parameters()) == release_count - 384


def _outputs(batch=3, length=8, widths=4, dim=16, seed=0):
    return torch.randn(batch, length, widths, dim, generator=torch.Generator().manual_seed(seed))


def test_cross_attention_width_weights_sum_to_one_and_follow_the_temperature():
    torch.manual_seed(0)
    outputs = _outputs()
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[1, 5:] = False
    head = CrossAttentionWidthWeights(16, 2, n_positions=8, dropout=0.0, temperature=1.0).eval()
    with torch.no_grad():
        for layer in (head.hidden, head.to_positions):  # larger logits than the 0.02 initialisation
            layer.weight.normal_(std=0.5)
        weights = head(outputs, mask)
        head.temperature = 0.09
        sharp = head(outputs, mask)
    assert weights.shape == (3, 8, 4)
    assert torch.allclose(weights.sum(-1), torch.ones(3, 8), atol=1e-6)
    assert torch.allclose(sharp.sum(-1), torch.ones(3, 8), atol=1e-6)
    # softmax(z / T) ∝ softmax(z) ** (1 / T)
    powered = weights ** (1 / 0.09)
    assert torch.allclose(sharp, powered / powered.sum(-1, keepdim=True), atol=1e-5)
    with pytest.raises(ValueError, match="8 positions"):
        head(_outputs(length=6), None)


def test_cross_attention_width_weights_match_a_per_width_loop():
    """The batched predictor equals the release's per-width loop: token = mean over widths and positions, one
    shared cross-attention block per width output, then Linear → ReLU → Linear to positions, softmax / T."""
    torch.manual_seed(1)
    outputs = _outputs(seed=1)
    mask = torch.rand(3, 8, generator=torch.Generator().manual_seed(2)) > 0.3
    mask[:, 0] = True
    head = CrossAttentionWidthWeights(16, 2, n_positions=8, dropout=0.0, temperature=0.6).eval()
    with torch.no_grad():
        token = outputs.mean(dim=2).mean(dim=1, keepdim=True)  # [B, 1, d]
        per_width = torch.cat([head.cross(token, mask, keys=outputs[:, :, w]) for w in range(4)], dim=1)
        logits = head.to_positions(torch.relu(head.hidden(per_width)))  # [B, W, L]
        expected = torch.softmax(logits.permute(0, 2, 1) / 0.6, dim=-1)
        assert torch.allclose(head(outputs, mask), expected, atol=1e-6)


@pytest.mark.parametrize("weighting", ["cross_attention", "linear", "mean"])
def test_multi_width_block_mixes_the_width_outputs(weighting):
    torch.manual_seed(0)
    block = MultiWidthGaussianBlock(16, 2, (None, 0.5, 4.0), 0.0, 1, weighting=weighting, n_positions=8,
                                    temperature=0.5).eval()
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        outputs = torch.stack([b(x, None) for b in block.blocks], dim=-2)
        weights = block.width_weights(outputs)
        assert torch.allclose(weights.sum(-1), torch.ones(2, 8), atol=1e-6)
        assert torch.allclose(block(x), (weights.unsqueeze(-1) * outputs).sum(-2), atol=1e-6)
    if weighting == "mean":
        assert torch.allclose(weights, torch.full_like(weights, 1 / 3))


def test_release_block_has_no_output_projection_and_a_feed_forward_query_encoder():
    release = HolmesModel(small_config())
    earlier = HolmesModel(small_config(attention_output_projection=True, query_ffn_multiplier=0))
    block = release.clip_branch.layers[0].blocks[0]
    assert block.output is None and block.ffn is not None
    assert release.text_encoder.attention.ffn is not None and release.text_encoder.attention.output is None
    assert earlier.text_encoder.attention.ffn is None and earlier.text_encoder.attention.output is not None
    # the release's block: attention → dropout → residual → LayerNorm → FFN → dropout → residual → LayerNorm
    torch.manual_seed(0)
    layer = GaussianAttentionBlock(16, 2, None, 0.0, 4).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        h = layer.norm1(x + layer.attention(x))
        ffn = layer.ffn[3](torch.relu(layer.ffn[0](h)))
        assert torch.allclose(layer(x), layer.norm2(h + ffn), atol=1e-6)


def test_attention_masks_agree_on_partly_padded_rows_and_differ_on_fully_padded_ones():
    torch.manual_seed(0)
    additive = GaussianSelfAttention(8, 2, None, 0.0, attention_mask="additive").eval()
    exclude = GaussianSelfAttention(8, 2, None, 0.0, attention_mask="exclude").eval()
    exclude.load_state_dict(additive.state_dict())
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[True, True, True, False, False], [False] * 5])
    with torch.no_grad():
        a, e = additive(x, mask), exclude(x, mask)
        assert torch.allclose(a[0], e[0], atol=1e-6)
        # no valid key: -1e4 is a constant shift (plain attention); exclusion gives uniform weights
        assert torch.allclose(a[1], additive(x[1:])[0], atol=1e-3)  # float32 steps are ~1e-3 at 1e4
        assert torch.allclose(e[1], additive.value(x[1]).mean(0).expand(5, 8), atol=1e-5)


def test_position_table_rows():
    model = HolmesModel(small_config(position_table=128))
    assert model.clip_branch.position.embedding.num_embeddings == 128
    assert model.frame_branch.position.embedding.num_embeddings == 128
    assert HolmesModel(small_config()).clip_branch.position.embedding.num_embeddings == 8


def test_second_query_encoding_in_training_only():
    torch.manual_seed(0)
    model = HolmesModel(small_config(dropout=0.3))
    batch = make_batch()
    out = model.train()(batch)
    assert out.query_aux is not None and out.query_aux.shape == out.query.shape
    assert not torch.allclose(out.query_aux, out.query)  # independent dropout
    assert model.eval()(batch).query_aux is None
    assert HolmesModel(small_config(second_query_encoding=False)).train()(batch).query_aux is None


def test_objective_feeds_the_second_encoding_to_l_div_and_l_intra():
    """Scores (triplet, InfoNCE, L_inter) come from ``query``; L_div and L_intra from ``query_aux``."""
    cfg = preset("tvr").replace(model={"hidden_size": 16, "num_heads": 2})
    objective = HolmesObjective(cfg, 16)
    objective.set_epoch(cfg.schedule.warmup_stage_epochs)  # stage 2: L_intra on
    torch.manual_seed(0)
    model = HolmesModel(ModelConfig(visual_dim=D_V, text_dim=D_T, hidden_size=16, num_heads=2, n_clips=8,
                                    n_frames=20, max_query_len=6, dropout=0.3))
    batch = make_batch()
    batch.clip_mask = torch.ones(4, 8, dtype=torch.bool)
    out = model.train()(batch)
    seen = {}
    criterion_details = objective.criterion.details

    def spy(*args, **kwargs):
        seen["query_emb"] = kwargs["query_emb"]  # the embeddings of L_div and of the intra-video transport
        return criterion_details(*args, **kwargs)

    objective.criterion.details = spy
    terms = objective(out, batch)
    assert seen["query_emb"] is out.query_aux
    packed = build_intra_video_batch(out.query_aux, batch.query_video, out.videos.clip, batch.clip_mask)
    intra = IntraVideoEvidentialLoss.from_preset("release", dataset="tvr")(packed.sim, packed.query_mask,
                                                                           packed.clip_mask)
    torch.testing.assert_close(terms.intra, intra)
    packed_first = build_intra_video_batch(out.query, batch.query_video, out.videos.clip, batch.clip_mask)
    first = IntraVideoEvidentialLoss.from_preset("release", dataset="tvr")(packed_first.sim, packed_first.query_mask,
                                                                           packed_first.clip_mask)
    assert not torch.allclose(terms.intra, first)
    # without a second encoding the objective falls back to ``query``
    no_aux = SimpleNamespace(**{**vars(out), "query_aux": None})
    torch.testing.assert_close(objective(no_aux, batch).intra, first)


def test_release_widths_are_global_plus_powers_of_two():
    model = HolmesModel(small_config())
    widths = [b.attention.width for b in model.frame_branch.layers[0].blocks]
    assert widths == [None, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    assert math.isinf(model.config.widths[0])
