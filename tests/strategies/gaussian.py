"""Hypothesis strategies for the Gaussian-embedding tests: sets of diagonal Gaussians and square matrices."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

LOGVAR_LOW, LOGVAR_HIGH = -6.0, 2.0


@st.composite
def gaussian_sets(draw, n: int, d: int, mu_scale: float = 3.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(mu, logvar)`` float64 ``[n, d]``; log-variances anywhere in [-6, 2], often exactly at a bound."""
    mu = draw(arrays(np.float64, (n, d), elements=st.floats(-mu_scale, mu_scale, allow_nan=False, width=64)))
    logvar_elements = st.one_of(
        st.sampled_from([LOGVAR_LOW, LOGVAR_HIGH]), st.floats(LOGVAR_LOW, LOGVAR_HIGH, allow_nan=False, width=64)
    )
    logvar = draw(arrays(np.float64, (n, d), elements=logvar_elements))
    return torch.from_numpy(mu), torch.from_numpy(logvar)


@st.composite
def gaussian_pairs(
    draw, max_n: int = 6, max_d: int = 8, mu_scale: float = 3.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(source_mu, source_logvar, target_mu, target_logvar)``: ``[N_s, D]`` and ``[N_t, D]`` float64 Gaussians."""
    n_source = draw(st.integers(1, max_n))
    n_target = draw(st.integers(1, max_n))
    d = draw(st.integers(1, max_d))
    source = draw(gaussian_sets(n_source, d, mu_scale))
    target = draw(gaussian_sets(n_target, d, mu_scale))
    return (*source, *target)


@st.composite
def square_matrices(draw, min_b: int = 1, max_b: int = 7, scale: float = 50.0) -> torch.Tensor:
    """Float64 ``[B, B]`` matrices with entries in ``[-scale, scale]`` (costs or similarities)."""
    b = draw(st.integers(min_b, max_b))
    elements = st.floats(-scale, scale, allow_nan=False, width=64)
    return torch.from_numpy(draw(arrays(np.float64, (b, b), elements=elements)))


temperatures = st.floats(0.01, 100.0, allow_nan=False, width=64)
