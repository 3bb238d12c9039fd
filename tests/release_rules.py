"""An independent NumPy re-statement of the official Holmes release's loss rules, for parity tests.

Written from the release's behaviour as documented in docs/guide/inter_video.rst and
docs/guide/flexible_ot.rst (not from its code): plain loops over videos and queries, float64, so that
the library's vectorised ``release`` presets can be compared with it on padded batches and ties.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.special import logsumexp


def cosine_block(clip_emb: np.ndarray, query_emb: np.ndarray) -> np.ndarray:
    """``[C, Q]`` cosines; a zero (padded) query embedding has cosine 0 with every clip."""
    def unit(x):
        norm = np.linalg.norm(x, axis=-1, keepdims=True)
        return x / np.maximum(norm, 1e-12)
    return unit(clip_emb) @ unit(query_emb).T


def release_fot_labels(block: np.ndarray, n_valid: int, epsilon=0.1, quantile=0.3, n_iters=50):
    """Row-normalised transport labels ``[Qmax, C]`` and the normalised similarities of one video.

    ``block`` is the ``[C, Qmax]`` cosine block whose first ``n_valid`` columns are real captions and
    the rest padded slots (cosine 0). The min-max range is read over the whole block; the dustbin value
    is the k-th smallest normalised valid entry (k = int(q * count), at least 1); Sinkhorn runs in the
    log domain for ``n_iters`` iterations between the caption rows plus the dustbin row (masses
    1/(C + n) each and C/(C + n)) and the clip columns (1/C each).
    """
    n_clips, q_max = block.shape
    norm = (block - block.min()) / (block.max() - block.min() + 1e-8)
    valid = norm[:, :n_valid].ravel()
    k = min(max(1, int(quantile * valid.size)), valid.size)
    z = np.sort(valid)[k - 1]
    scores = np.vstack([norm.T, np.full((1, n_clips), z)]) / epsilon  # [Qmax + 1, C]
    log_mu = np.full(q_max + 1, -np.log(n_clips + n_valid))
    log_mu[n_valid:q_max] = -np.inf  # padded caption rows carry no mass
    log_mu[q_max] = np.log(n_clips) - np.log(n_clips + n_valid)
    log_nu = np.full(n_clips, -np.log(n_clips))
    u, v = np.zeros(q_max + 1), np.zeros(n_clips)
    for _ in range(n_iters):
        for i in range(q_max + 1):
            u[i] = log_mu[i] - logsumexp(scores[i] + v) if np.isfinite(log_mu[i]) else -np.inf
        for j in range(n_clips):
            v[j] = log_nu[j] - logsumexp(scores[:, j] + u)
    plan = np.exp(scores + u[:, None] + v[None, :])[:q_max] * n_clips
    labels = np.zeros((q_max, n_clips))
    for i in range(n_valid):
        labels[i] = plan[i] / (plan[i].sum() + 1e-8)
    return labels, norm.T


def dirichlet_mse(alpha: np.ndarray, y: np.ndarray) -> float:
    """Holmes Eq. 17 for one row."""
    s = alpha.sum()
    return float(np.sum((y - alpha / s) ** 2 + alpha * (s - alpha) / (s * s * (s + 1))))


def release_intra_loss(query_emb, query_video, clip_emb, tau) -> tuple[float, list[np.ndarray]]:
    """L_intra of a flat batch and the per-video transport labels (videos in index order)."""
    per_video, labels_of = [], []
    q_max = max(int(np.sum(query_video == v)) for v in range(clip_emb.shape[0]))
    for video in range(clip_emb.shape[0]):
        own = query_emb[query_video == video]
        if own.shape[0] == 0:
            labels_of.append(None)
            continue
        padded = np.vstack([own, np.zeros((q_max - own.shape[0], own.shape[1]))])
        labels, sim = release_fot_labels(cosine_block(clip_emb[video], padded), own.shape[0])
        labels_of.append(labels[: own.shape[0]])
        alpha = np.exp(np.tanh(sim) / tau) + 1.0
        per_video.append(np.mean([dirichlet_mse(alpha[i], labels[i]) for i in range(own.shape[0])]))
    return float(np.mean(per_video)), labels_of


def _row_sums(x: np.ndarray) -> np.ndarray:
    """Row sums rounded as the release rounds them (``torch.sum``): rows that are permutations of each
    other have equal sums mathematically, and the threshold tests compare such values exactly, so the
    rounding must be the release's for the decisions to agree. (The library's own tests check the
    digamma-based entropy against scipy; here only the decisions matter.)"""
    return torch.from_numpy(np.ascontiguousarray(x)).sum(dim=1).numpy()


def _branch_types(sim, labels, alpha, beta):
    """Release identification of one branch: 0 precise, 1 polysemous, 2 under-determined."""
    n, k = sim.shape
    matched = [int(np.argmax(sim[i])) == labels[i] for i in range(n)]  # first index on ties
    consistency = np.array([sim[i, labels[i]] for i in range(n)])
    strength = _row_sums(alpha)
    uncertainty = k / strength
    if any(matched):
        u_max = min(max(uncertainty[i] for i in range(n) if matched[i]), 1 - beta)
        c_min = max(min(consistency[i] for i in range(n) if matched[i]), beta)
    else:
        u_max, c_min = 1 - beta, beta
    # the entropy is computed with torch's digamma and sums, like the release: rows that are
    # permutations of each other tie exactly at the median only with the same rounding
    a = torch.from_numpy(alpha)
    s = a.sum(dim=1, keepdim=True)
    entropy = (a / s * (torch.digamma(s + 1) - torch.digamma(a + 1))).sum(dim=1).numpy()
    lower_median = np.sort(entropy)[(n - 1) // 2]
    types = []
    for i in range(n):
        if uncertainty[i] > u_max:
            types.append(2)
        elif consistency[i] >= c_min:
            types.append(1 if entropy[i] > lower_median else 0)
        else:
            types.append(1)
    return types


def _release_alpha(sim: np.ndarray, tau: float) -> np.ndarray:
    """``exp(tanh(s) / tau) + 1`` with torch's elementwise functions, as the release evaluates it."""
    return (torch.exp(torch.tanh(torch.from_numpy(sim)) / tau) + 1.0).numpy()


def _softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def release_inter_loss(frame_sim, clip_sim, labels, tau, calibrate=True, beta=0.3, gamma=0.2) -> float:
    """L_inter of the release: three L_U terms (frame, clip, Dempster-Shafer fused) against the
    labels, calibrated for the queries both branches call precise or polysemous with at least one
    polysemous (when ``calibrate``)."""
    n, k = frame_sim.shape
    one_hot = np.eye(k)[labels]
    alpha_f, alpha_c = _release_alpha(frame_sim, tau), _release_alpha(clip_sim, tau)
    target = one_hot.copy()
    if calibrate:
        tf, tc = _branch_types(frame_sim, labels, alpha_f, beta), _branch_types(clip_sim, labels, alpha_c, beta)
        for i in range(n):
            if max(tf[i], tc[i]) == 1:
                soft = 0.5 * (_softmax(frame_sim[i]) + _softmax(clip_sim[i]))
                target[i] = (1 - gamma) * one_hot[i] + gamma * soft
    total = 0.0
    for i in range(n):
        bf, bc = (alpha_f[i] - 1) / alpha_f[i].sum(), (alpha_c[i] - 1) / alpha_c[i].sum()
        uf, uc = k / alpha_f[i].sum(), k / alpha_c[i].sum()
        conflict = sum(bf[a] * bc[b] for a in range(k) for b in range(k) if a != b)
        b_o = (bf * bc + bf * uc + bc * uf) / (1 - conflict)
        u_o = uf * uc / (1 - conflict)
        alpha_o = b_o * (k / u_o) + 1.0
        total += dirichlet_mse(alpha_f[i], target[i]) + dirichlet_mse(alpha_c[i], target[i])
        total += dirichlet_mse(alpha_o, target[i])
    return total / n
