"""The GMMFormer-style reference model, its Gaussian attention and chunked scoring."""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from evidential_prvr import BaseRetrievalLoss
from reference_models.holmes.gaussian_attention import GaussianSelfAttention, gaussian_kernel
from reference_models.holmes.model import HolmesModel, ModelConfig, ModelOutput, VideoEmbeddings
from reference_models.holmes.scoring import encode_all_queries, encode_all_videos, score_matrix

D_V, D_T = 12, 10


def small_config(**overrides) -> ModelConfig:
    kwargs = dict(visual_dim=D_V, text_dim=D_T, hidden_size=16, num_heads=2, n_clips=8, n_frames=20, max_query_len=6)
    kwargs.update(overrides)
    return ModelConfig(**kwargs)


def make_batch(num_videos=4, per_video=2, frames=20, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, frames + 1, (num_videos,), generator=gen)
    lengths[0] = 1  # edge case: a single valid frame
    frame_mask = torch.arange(frames).unsqueeze(0) < lengths.unsqueeze(1)
    query_lengths = torch.randint(1, 7, (num_videos * per_video,), generator=gen)
    batch = SimpleNamespace(
        clip_feats=torch.randn(num_videos, 8, D_V, generator=gen),
        frame_feats=torch.randn(num_videos, frames, D_V, generator=gen) * frame_mask.unsqueeze(-1),
        frame_mask=frame_mask,
        query_feats=torch.randn(num_videos * per_video, 6, D_T, generator=gen),
        query_mask=torch.arange(6).unsqueeze(0) < query_lengths.unsqueeze(1),
        query_video=torch.arange(num_videos).repeat_interleave(per_video),
    )
    for name, value in vars(batch).items():
        setattr(batch, name, value.to(device))
    return batch


def brute_force_max_cosine(queries: np.ndarray, positions: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    out = np.empty((queries.shape[0], positions.shape[0]))
    for i, q in enumerate(queries):
        for j, video in enumerate(positions):
            cos = [
                float(q @ p / (np.linalg.norm(q) * np.linalg.norm(p)))
                for m, p in enumerate(video)
                if mask is None or mask[j, m]
            ]
            out[i, j] = max(cos)
    return out


def test_output_shapes_and_device(device):
    torch.manual_seed(0)
    model = HolmesModel(small_config()).to(device)
    batch = make_batch(device=device)
    out = model(batch)
    assert isinstance(out, ModelOutput) and isinstance(out.videos, VideoEmbeddings)
    q, v = 8, 4
    assert out.query.shape == (q, 16)
    assert out.videos.clip.shape == (v, 8, 16) and out.videos.frame.shape == (v, 20, 16)
    for name in ("clip_sim", "frame_sim", "score", "clip_logits", "frame_logits"):
        assert getattr(out, name).shape == (q, v)
        assert getattr(out, name).device.type == device.type
    assert out.query_clip_sim.shape == (q, 8)
    assert torch.allclose(out.score, 0.4 * out.frame_sim + 0.6 * out.clip_sim)


def test_forward_without_batch_scores_encodes_the_same():
    """``score_batch=False`` (the distributed step, which scores against the global batch): no ``[Q, V]`` scores,
    every other output bit for bit the same."""
    model = HolmesModel(small_config(dropout=0.0)).eval()
    batch = make_batch()
    full, bare = model(batch), model(batch, score_batch=False)
    for name in ("clip_sim", "frame_sim", "score", "clip_logits", "frame_logits"):
        assert getattr(bare, name) is None
    assert torch.equal(bare.query, full.query) and torch.equal(bare.query_clip_sim, full.query_clip_sim)
    assert torch.equal(bare.videos.clip, full.videos.clip) and torch.equal(bare.videos.frame, full.videos.frame)


@pytest.mark.parametrize("padded_frames", ["zero", "mask"])
def test_scores_match_brute_force_and_padded_frames(padded_frames):
    """``"mask"``: padded frames never win the max; ``"zero"`` (release): they score cosine 0 (and dot 0)."""
    torch.manual_seed(1)
    model = HolmesModel(small_config(padded_frames=padded_frames)).eval()
    batch = make_batch(seed=1)
    with torch.no_grad():
        out = model(batch)
        # replacing the padded frames' content changes nothing: zeroed on input, masked as keys
        noisy = SimpleNamespace(**vars(batch))
        noisy.frame_feats = batch.frame_feats + 100.0 * (~batch.frame_mask).unsqueeze(-1)
        out_noisy = model(noisy)
    mask = batch.frame_mask.numpy()
    padded = ~mask.all(axis=1)  # videos with at least one padded frame
    q = out.query.double().numpy()
    frame = brute_force_max_cosine(q, out.videos.frame.double().numpy(), mask)
    clip = brute_force_max_cosine(q, out.videos.clip.double().numpy(), None)
    dots = torch.einsum("qd,vmd->qvm", out.query, out.videos.frame).masked_fill(~batch.frame_mask, -1e30).amax(-1)
    if padded_frames == "zero":
        frame = np.where(padded[None, :], np.maximum(frame, 0.0), frame)
        dots = torch.where(torch.from_numpy(padded)[None, :], dots.clamp_min(0.0), dots)
        assert torch.all(out.videos.frame[~batch.frame_mask] == 0)
        assert (out.frame_sim[:, torch.from_numpy(padded)] >= 0).all()
    np.testing.assert_allclose(out.frame_sim.numpy(), frame, atol=1e-5)
    np.testing.assert_allclose(out.clip_sim.numpy(), clip, atol=1e-5)
    assert torch.allclose(out.frame_sim, out_noisy.frame_sim, atol=1e-6)
    # own-video query-clip cosines
    for i, video in enumerate(batch.query_video.tolist()):
        expected = F.cosine_similarity(out.query[i].unsqueeze(0), out.videos.clip[video], dim=-1)
        assert torch.allclose(out.query_clip_sim[i], expected, atol=1e-5)
    # unnormalised logits: max raw dot product over positions
    assert torch.allclose(out.frame_logits, dots, atol=1e-5)
    # scoring in blocks applies the same rule
    chunked = score_matrix(model, out.videos, out.query, query_chunk=3, video_chunk=2)
    assert torch.allclose(chunked.frame, out.frame_sim, atol=1e-6)


@functools.cache
def _scored_batch(seed: int):
    torch.manual_seed(seed)
    model = HolmesModel(small_config(widths=(math.inf, 1.0))).eval()
    batch = make_batch(num_videos=5, seed=seed)
    with torch.no_grad():
        out = model(batch)
        full = model.similarity(out.query, out.videos)
    return model, out, full


@given(st.integers(1, 9), st.integers(1, 5), st.integers(0, 1))
def test_chunked_scoring_equals_unchunked(query_chunk, video_chunk, seed):
    model, out, full = _scored_batch(seed)
    chunked = score_matrix(model, out.videos, out.query, query_chunk=query_chunk, video_chunk=video_chunk)
    for name in ("clip", "frame", "score"):
        assert torch.allclose(getattr(chunked, name), getattr(full, name), atol=1e-6)


def test_gaussian_attention_infinite_width_is_plain_attention():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 8)
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3, [True] + [False] * 6])
    wide = GaussianSelfAttention(8, 2, width=1e9, dropout=0.0).eval()
    glob = GaussianSelfAttention(8, 2, width=math.inf, dropout=0.0).eval()
    glob.load_state_dict(wide.state_dict())
    q = wide.query(x).view(3, 7, 2, 4).transpose(1, 2)
    k = wide.key(x).view(3, 7, 2, 4).transpose(1, 2)
    v = wide.value(x).view(3, 7, 2, 4).transpose(1, 2)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
    reference = reference.transpose(1, 2).reshape(3, 7, 8)
    with torch.no_grad():
        assert torch.allclose(wide(x, mask), reference, atol=1e-5)
        assert torch.allclose(glob(x, mask), reference, atol=1e-6)
        narrow = GaussianSelfAttention(8, 2, width=0.1, dropout=0.0).eval()
        narrow.load_state_dict(wide.state_dict())
        assert not torch.allclose(narrow(x, mask), reference, atol=1e-3)


@pytest.mark.parametrize("length, width", [(9, 2.0), (32, 0.5), (128, 1.0), (128, 32.0), (201, 0.005), (1, 1.0)])
@pytest.mark.parametrize("kernel", ["release", "symmetric", "paper"])
def test_gaussian_kernel_formula(kernel, length, width):
    got = gaussian_kernel(length, width, kernel=kernel, dtype=torch.float64).numpy()
    i, j = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    grid = j / max(length - 1, 1)
    if kernel == "release":  # centred at i / L on the grid j / (L - 1); width clamped to 1e-2; rows scaled to max 1
        std = max(width, 1e-2) / 9
        rows = 0.3989422804014327 / std * np.exp(-((grid - i / length) ** 2) / (2 * std**2))
        expected = rows / rows.max(axis=1, keepdims=True)
    elif kernel == "symmetric":
        std = width / 9
        expected = np.exp(-((j - i) / max(length - 1, 1)) ** 2 / (2 * std**2))
    else:
        expected = np.exp(-((j - i) ** 2) / width**2) / (2 * np.pi)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_gaussian_kernel_release_centres_and_errors():
    kernel = gaussian_kernel(32, 0.5)
    assert torch.allclose(kernel.amax(dim=1), torch.ones(32))
    assert not torch.allclose(kernel, kernel.t())  # centres i / L drift off the diagonal
    # row 31's centre 31/32 lies between grid points 30/31 (0.9677) and 31/31: its peak is at column 30
    assert int(kernel[31].argmax()) == 30
    # widths below 1e-2 are clamped; rows that underflow everywhere stay finite (peak 1)
    assert torch.equal(gaussian_kernel(7, 0.001), gaussian_kernel(7, 0.01))
    narrow = gaussian_kernel(7, 0.01)
    assert torch.isfinite(narrow).all() and torch.allclose(narrow.amax(dim=1), torch.ones(7))
    with pytest.raises(ValueError, match="kernel"):
        gaussian_kernel(3, 1.0, kernel="box")
    with pytest.raises(ValueError, match="width"):
        gaussian_kernel(3, 0.0)
    with pytest.raises(ValueError, match="length"):
        gaussian_kernel(0, 1.0)


def test_gradient_flows_to_every_parameter():
    torch.manual_seed(0)
    model = HolmesModel(small_config())
    batch = make_batch()
    out = model(batch)
    loss = BaseRetrievalLoss()(
        out.frame_sim,
        out.clip_sim,
        out.query,
        batch.query_video,
        clip_logits=out.clip_logits,
        frame_logits=out.frame_logits,
    )
    (loss + out.query_clip_sim.mean()).backward()
    for name, param in model.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
    assert sum(int(p.grad.abs().sum() > 0) for p in model.parameters()) > 0.9 * len(list(model.parameters()))


def test_encode_all_helpers_pad_and_restore_mode():
    torch.manual_seed(0)
    model = HolmesModel(small_config()).train()
    a, b = make_batch(num_videos=2, seed=0), make_batch(num_videos=3, frames=11, seed=1)
    videos = encode_all_videos(model, [a, b], "cpu")
    queries = encode_all_queries(model, [a, b], "cpu")
    assert model.training
    assert videos.frame.shape == (5, 20, 16) and videos.frame_mask.shape == (5, 20)
    assert not videos.frame_mask[2:, 11:].any()
    assert queries.shape == (10, 16)
    model.eval()
    with torch.no_grad():
        direct = model.encode_videos(b.clip_feats, b.frame_feats, b.frame_mask)
    assert direct.frame.shape == (3, 20, 16)  # frames are padded to n_frames, as the release does
    assert torch.allclose(videos.frame[2:], direct.frame, atol=1e-6)
    with pytest.raises(ValueError, match="no batch"):
        encode_all_videos(model, [], "cpu")


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(hidden_size=15), "divisible"),
        (dict(frame_weight=0.5, clip_weight=0.6), "must be 1"),
        (dict(widths=()), "widths"),
        (dict(kernel="box"), "kernel"),
        (dict(width_weighting="fusion"), "width_weighting"),
        (dict(attention_mask="none"), "attention_mask"),
        (dict(padded_frames="drop"), "padded_frames"),
        (dict(width_temperature=0.0), "width_temperature"),
        (dict(position_table=10), "position_table"),
        (dict(query_ffn_multiplier=-1), "query_ffn_multiplier"),
        (dict(n_clips=0), "n_clips"),
    ],
)
def test_config_validation(overrides, match):
    with pytest.raises(ValueError, match=match):
        small_config(**overrides)


def test_input_validation():
    model = HolmesModel(small_config())
    batch = make_batch()
    with pytest.raises(ValueError, match="clip_feats"):
        model.encode_videos(batch.clip_feats[..., :5], batch.frame_feats, batch.frame_mask)
    with pytest.raises(ValueError, match=r"clip_feats must have shape \[N, 8, 12\]"):  # the weight head needs M_c
        model.encode_videos(batch.clip_feats[:, :5], batch.frame_feats, batch.frame_mask)
    with pytest.raises(ValueError, match="frame_mask"):
        model.encode_videos(batch.clip_feats, batch.frame_feats, batch.frame_mask[:, :5])
    with pytest.raises(ValueError, match="query_feats"):
        model.encode_queries(torch.randn(2, 7, D_T), torch.ones(2, 7, dtype=torch.bool))
    with pytest.raises(TypeError, match="config"):
        HolmesModel({"visual_dim": 3})
    with pytest.raises(ValueError, match="query_chunk"):
        score_matrix(model, model.encode_videos(batch.clip_feats, batch.frame_feats, batch.frame_mask),
                     torch.randn(2, 16), query_chunk=0)


def test_model_config_takes_the_registry_names_only():
    for old in ("n_heads", "n_layers"):  # the names of release 1.x
        with pytest.raises(TypeError, match=old):
            small_config(**{old: 2})
    assert small_config(num_heads=2, num_blocks=2).num_blocks == 2
    with pytest.raises(ValueError, match="ModelConfig.num_blocks must be an int >= 1"):
        small_config(num_blocks=0)
