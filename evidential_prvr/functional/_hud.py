"""Pure tensor functions of HUD (Hierarchical Uncertainty-aware Disambiguation, composed video retrieval).

Equation numbers refer to the HUD paper. Similarity matrices are ``[B, B]`` with rows = composed
queries and columns = target videos; the positive of row ``i`` is column ``i``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from evidential_prvr._checks import (
    check_choice,
    check_finite,
    check_nonempty,
    check_positive,
    check_same_shape,
    check_square_scores,
    check_tensor,
    compute_dtype,
    should_validate,
)

TOKEN_MATCHING = ("max", "paired")


def biased_max_similarity(
    composed_tokens: torch.Tensor,
    target_tokens: torch.Tensor,
    bias: torch.Tensor,
    *,
    token_matching: str = "max",
    validate_args: bool | None = None,
) -> torch.Tensor:
    """Learnable-bias similarity between token sets, for all query/target pairs (HUD Eq. 10-11).

    For composed query :math:`q` with tokens :math:`c_{q,1..K}` and target :math:`t` with tokens
    :math:`g_{t,1..M}`, the per-token similarity is

    .. math::

        s_{qt,k} = \\max_{m=1}^{M} \\langle c_{q,k}, g_{t,m} \\rangle
        \\quad(\\texttt{token\\_matching="max"}),\\qquad
        s_{qt,k} = \\langle c_{q,k}, g_{t,k} \\rangle \\quad(\\texttt{"paired"}, K = M),

    then (Eq. 10) :math:`\\mathcal{B}_{qt} = \\operatorname{softmax}_k(s_{qt}) + \\mathbf{b}` and
    (Eq. 11) :math:`\\mathcal{S}_{qt} = \\sum_{k} \\mathcal{B}_{qt,k}\\, s_{qt,k}`.

    HUD's notation :math:`\\max_{i=1}^{1+U}(F_{c(i)} F_{t(i)}^\\top)` is ambiguous. ``"max"``
    (default) takes, for each composed token, its best-matching target token (BLIP-2-style
    query scoring); when the target tokens are copies of one holistic token (HUD "extends" the
    target to :math:`1+U` tokens) it equals ``"paired"``. No temperature is applied inside the
    softmax and tokens are used as given (normalise them beforehand for cosine similarities).

    The max over target tokens is ``torch.max`` (with indices): at an exact tie between target
    tokens its gradient goes to one of them, where ``amax`` would split it among them; the
    similarity and every gradient away from ties are the same. Exact ties come from duplicated
    target tokens (e.g. padded tokens filled with copies of a valid one), whose gradients reach the
    same source either way. ``max`` is used because ``amax``'s backward (an equality mask, a count
    and a division over all :math:`B_q B_t K M` scores) costs about as much as the scores themselves.

    Parameters
    ----------
    composed_tokens : torch.Tensor
        ``[B_q, K, D]`` composed-query tokens (holistic: :math:`K = 1 + U`).
    target_tokens : torch.Tensor
        ``[B_t, M, D]`` target tokens.
    bias : torch.Tensor
        ``[K]`` learnable bias :math:`\\mathbf{b}`.
    token_matching : {"max", "paired"}
        How a composed token is matched to target tokens (see above).
    validate_args : bool, optional
        Check that the tokens and the bias are finite (host synchronisations).

    Returns
    -------
    torch.Tensor
        ``[B_q, B_t]`` similarities. Memory is :math:`O(B_q B_t K M)` for ``"max"``.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import biased_max_similarity
    >>> biased_max_similarity(torch.randn(2, 3, 4), torch.randn(5, 3, 4), torch.zeros(3)).shape
    torch.Size([2, 5])

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 10-11.
    """
    check_tensor(composed_tokens, "composed_tokens", ndim=3, floating=True)
    check_tensor(target_tokens, "target_tokens", ndim=3, floating=True)
    check_tensor(bias, "bias", ndim=1, floating=True)
    check_choice(token_matching, "token_matching", TOKEN_MATCHING)
    check_nonempty(composed_tokens, "composed_tokens")
    check_nonempty(target_tokens, "target_tokens")
    if should_validate(validate_args):
        for name, tensor in (("composed_tokens", composed_tokens), ("target_tokens", target_tokens), ("bias", bias)):
            check_finite(tensor, name)
    if composed_tokens.shape[2] != target_tokens.shape[2]:
        raise ValueError(
            "composed_tokens and target_tokens must have the same token dimension D, got shapes "
            f"{tuple(composed_tokens.shape)} and {tuple(target_tokens.shape)}"
        )
    if bias.shape[0] != composed_tokens.shape[1]:
        raise ValueError(
            f"bias must have K={composed_tokens.shape[1]} entries (one per composed token), got shape {tuple(bias.shape)}"
        )
    if token_matching == "paired" and target_tokens.shape[1] != composed_tokens.shape[1]:
        raise ValueError(
            "token_matching='paired' needs as many target tokens as composed tokens, got shapes "
            f"{tuple(composed_tokens.shape)} and {tuple(target_tokens.shape)}"
        )
    dtype = torch.promote_types(compute_dtype(composed_tokens), compute_dtype(target_tokens))
    composed, target = composed_tokens.to(dtype), target_tokens.to(dtype)
    if token_matching == "max":
        token_sim = max_token_similarity(composed, target)
    else:
        token_sim = torch.einsum("qkd,tkd->qkt", composed, target)
    weights = torch.softmax(token_sim, dim=1) + bias.to(dtype).unsqueeze(-1)
    return (weights * token_sim).sum(dim=1)


def max_token_similarity(composed: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``[B_q, K, B_t]`` best match :math:`s_{qt,k} = \\max_m \\langle c_{q,k}, g_{t,m} \\rangle` (HUD Eq. 10-11).

    ``composed`` ``[B_q, K, D]`` and ``target`` ``[B_t, M, D]`` of one dtype, unchecked (callers validate). One
    matrix product ``[B_q K, D] @ [D, B_t M]`` whose ``[B_q, K, B_t, M]`` view is reduced over its last,
    contiguous axis (no permuted copy); with one target token (a holistic target) there is nothing to reduce.
    Gradients at exact ties: see :func:`biased_max_similarity`.
    """
    n_query, n_composed, dim = composed.shape
    n_target, n_tokens, _ = target.shape
    scores = composed.reshape(n_query * n_composed, dim) @ target.reshape(n_target * n_tokens, dim).T
    if n_tokens == 1:
        return scores.view(n_query, n_composed, n_target)
    return scores.view(n_query, n_composed, n_target, n_tokens).max(dim=-1).values


def _check_similarity_pair(holistic_sim: torch.Tensor, atomistic_sim: torch.Tensor, tau: float) -> torch.dtype:
    """Validate the arguments of the two HUD losses; return the dtype to compute them in."""
    check_square_scores(holistic_sim, "holistic_sim", None)
    check_square_scores(atomistic_sim, "atomistic_sim", None)
    check_same_shape(holistic_sim, atomistic_sim, "holistic_sim", "atomistic_sim")
    check_positive(tau, "tau")
    return torch.promote_types(compute_dtype(holistic_sim), compute_dtype(atomistic_sim))


def batch_classification_loss(holistic_sim: torch.Tensor, atomistic_sim: torch.Tensor, tau: float = 0.1) -> torch.Tensor:
    """Batch-based classification loss on summed holistic and atomistic similarities (HUD Eq. 12).

    .. math::

        \\mathcal{L}_{rank} = \\frac1B \\sum_{i=1}^{B} -\\log
            \\frac{\\exp\\{(S^H_{ii} + S^A_{ii})/\\tau\\}}{\\sum_{j=1}^{B} \\exp\\{(S^H_{ij} + S^A_{ij})/\\tau\\}}.

    Only the query-to-target direction, as in HUD.

    Parameters
    ----------
    holistic_sim, atomistic_sim : torch.Tensor
        ``[B, B]`` similarities (rows = composed queries, columns = targets).
    tau : float, default 0.1
        Temperature (HUD uses 0.1).

    Returns
    -------
    torch.Tensor
        Scalar loss.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import batch_classification_loss
    >>> batch_classification_loss(torch.zeros(2, 2), torch.zeros(2, 2))  # chance: log 2
    tensor(0.6931)

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 12.
    """
    dtype = _check_similarity_pair(holistic_sim, atomistic_sim, tau)
    logits = (holistic_sim.to(dtype) + atomistic_sim.to(dtype)) / tau
    labels = torch.arange(logits.shape[0], device=logits.device)
    return F.cross_entropy(logits, labels)


def holistic_atomistic_consistency_loss(
    holistic_sim: torch.Tensor, atomistic_sim: torch.Tensor, tau: float = 0.1
) -> torch.Tensor:
    """Holistic-to-atomistic distribution regularisation :math:`\\mathcal{L}_{H\\leftrightarrow A}` (HUD Eq. 13-14).

    Row distributions (Eq. 13) :math:`s_{c,i} = \\operatorname{softmax}(S_{i,:}/\\tau)` (query
    :math:`i` over targets) and :math:`s_{t,i} = \\operatorname{softmax}(S_{:,i}/\\tau)` (target
    :math:`i` over queries, i.e. row :math:`i` of :math:`S^\\top`), for both levels; then

    .. math::

        \\mathcal{L}_{H\\leftrightarrow A} = \\frac{1}{2B} \\sum_{i=1}^{B} \\Big[
            \\mathrm{KL}(s^{A}_{t,i} \\,\\|\\, s^{H}_{c,i}) + \\mathrm{KL}(s^{H}_{t,i} \\,\\|\\, s^{A}_{c,i}) \\Big],
        \\qquad \\mathrm{KL}(p\\|q) = \\sum_j p_j (\\log p_j - \\log q_j).

    Gradients flow into both arguments of each KL (HUD mentions no stop-gradient). Computed from
    ``log_softmax`` in float32 or wider.

    Parameters
    ----------
    holistic_sim, atomistic_sim : torch.Tensor
        ``[B, B]`` similarities (rows = composed queries, columns = targets).
    tau : float, default 0.1
        Temperature (HUD uses 0.1).

    Returns
    -------
    torch.Tensor
        Scalar, non-negative.

    Notes
    -----
    The loss is computed in float32 at least, but its gradient returns in the inputs' dtype and grows like
    :math:`|s| / \\tau^2`: half-precision inputs far outside the cosine range (e.g. scores of 1000 at
    :math:`\\tau = 0.01`, a true gradient of about :math:`2 \\cdot 10^5`) overflow float16's range. Cosine
    similarities, or float32 scores, stay finite.

    Examples
    --------
    >>> import torch
    >>> from evidential_prvr.functional import holistic_atomistic_consistency_loss
    >>> holistic_atomistic_consistency_loss(torch.zeros(2, 2), torch.zeros(2, 2))  # equal distributions
    tensor(0.)

    References
    ----------
    HUD: "Hierarchical Uncertainty-Aware Disambiguation Network for Composed Video Retrieval", Eq. 13-14.
    """
    dtype = _check_similarity_pair(holistic_sim, atomistic_sim, tau)
    hol, atom = holistic_sim.to(dtype) / tau, atomistic_sim.to(dtype) / tau
    log_c_h, log_c_a = hol.log_softmax(dim=1), atom.log_softmax(dim=1)
    log_t_h, log_t_a = hol.T.log_softmax(dim=1), atom.T.log_softmax(dim=1)
    kl_a_h = (log_t_a.exp() * (log_t_a - log_c_h)).sum()
    kl_h_a = (log_t_h.exp() * (log_t_h - log_c_a)).sum()
    return (kl_a_h + kl_h_a) / (2 * holistic_sim.shape[0])
