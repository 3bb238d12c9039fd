"""Regression of the Holmes losses across refactors, on any processor.

``tests/data/holmes_golden.npz`` holds losses and gradients computed by the code before the
one-schema-per-operation restructuring, on fixed seeded inputs: every ``HolmesCriterion``
preset (release tvr/act/cha, paper tvr/act/cha) in both stages, the four part modules, and the
identifier. The test recomputes them with today's code: discrete outputs (query types, assignments) must be
equal, float32 ones within :data:`ULPS` units in the last place of each array's largest magnitude. The file
was written on one x86-64 processor; other processors' kernels (or ``MKL_CBWR=COMPATIBLE``,
``ATEN_CPU_CAPABILITY=default``) round differently, by at most 13 such units on these inputs (measured
under both settings), while scaling one input by ``1 + 1e-5`` (the transport scores) already moves 14
values by 72 to 84 units, and ``1 + 1e-4`` (the frame scores) 62 values by a median 300.

Regenerate (only when a number is *meant* to change) from the repository root with
``python tests/test_golden_outputs.py --write tests/data/holmes_golden.npz``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

GOLDEN = Path(__file__).parent / "data" / "holmes_golden.npz"
PRESETS = [("release", "tvr"), ("release", "act"), ("release", "cha"),
           ("paper", "tvr"), ("paper", "act"), ("paper", "cha")]


def _inputs(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    q, v, mc, d = 12, 4, 8, 16
    return {
        "frame_sim": torch.rand(q, v, generator=g) * 2 - 1,
        "clip_sim": torch.rand(q, v, generator=g) * 2 - 1,
        "frame_logits": torch.randn(q, v, generator=g) * 5,
        "clip_logits": torch.randn(q, v, generator=g) * 5,
        "query_emb": torch.randn(q, d, generator=g),
        "clip_emb": torch.randn(v, mc, d, generator=g),
        "clip_mask": torch.rand(v, mc, generator=g) > 0.2,
        "query_video": torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 0]),
        "ot_sim": torch.rand(3, 5, mc, generator=g),
        "ot_query_mask": torch.tensor([[1, 1, 1, 0, 0], [1] * 5, [1, 1, 0, 0, 0]], dtype=torch.bool),
    }


def _leaves(x: dict[str, torch.Tensor], names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    return {n: x[n].clone().requires_grad_(True) for n in names}


def _record(out: dict[str, np.ndarray], prefix: str, loss: torch.Tensor, leaves: dict[str, torch.Tensor]) -> None:
    out[f"{prefix}/loss"] = loss.detach().numpy()
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    for name, grad in zip(leaves, grads):
        if grad is not None:
            out[f"{prefix}/grad_{name}"] = grad.numpy()


def compute_golden() -> dict[str, np.ndarray]:
    """Every recorded value, keyed ``"<case>/<quantity>"``."""
    import evidential_prvr as ep

    x = _inputs(0)
    out: dict[str, np.ndarray] = {}
    sims = ("frame_sim", "clip_sim", "frame_logits", "clip_logits", "query_emb", "clip_emb")
    for preset, dataset in PRESETS:
        for epoch in (0, 25):
            criterion = ep.HolmesCriterion.from_preset(preset, dataset=dataset)
            criterion.set_epoch(epoch)
            leaves = _leaves(x, sims)
            details = criterion.details(leaves["frame_sim"], leaves["clip_sim"], x["query_video"],
                                        query_emb=leaves["query_emb"], clip_emb=leaves["clip_emb"],
                                        frame_logits=leaves["frame_logits"], clip_logits=leaves["clip_logits"],
                                        clip_mask=x["clip_mask"], generator=torch.Generator().manual_seed(7))
            prefix = f"criterion_{preset}_{dataset}_{epoch}"
            for part in ("base", "inter", "intra"):
                out[f"{prefix}/{part}"] = getattr(details, part).detach().numpy()
            _record(out, prefix, details.loss, leaves)

    for preset, dataset in PRESETS[:4]:
        leaves = _leaves(x, ("frame_sim", "clip_sim"))
        inter = ep.EvidentialRetrievalLoss.from_preset(preset, dataset=dataset)
        _record(out, f"inter_{preset}_{dataset}", inter(leaves["frame_sim"], leaves["clip_sim"], x["query_video"]),
                leaves)
        ident = ep.UncertaintyGuidedIdentifier.from_preset(preset, dataset=dataset)(
            x["frame_sim"], x["clip_sim"], x["query_video"])
        out[f"identify_{preset}_{dataset}/query_type"] = ident.query_type.numpy()
        out[f"identify_{preset}_{dataset}/initial_query_type"] = ident.initial_query_type.numpy()
        out[f"identify_{preset}_{dataset}/frame_epistemic"] = ident.frame.epistemic.numpy()
        out[f"identify_{preset}_{dataset}/clip_aleatoric"] = ident.clip.aleatoric.numpy()

        leaves = _leaves(x, ("ot_sim",))
        intra = ep.IntraVideoEvidentialLoss.from_preset(preset, dataset=dataset)
        _record(out, f"intra_{preset}_{dataset}", intra(leaves["ot_sim"], x["ot_query_mask"]), leaves)
        for assignment in ("ot", "softmax"):
            leaves = _leaves(x, ("ot_sim",))
            ablation = ep.IntraVideoEvidentialLoss.from_preset(preset, dataset=dataset, assignment=assignment,
                                                               fot=ep.FlexibleOT.from_preset(preset, dataset)
                                                               .without_dustbin() if assignment == "ot" else
                                                               ep.FlexibleOT.from_preset(preset, dataset))
            _record(out, f"intra_{assignment}_{preset}_{dataset}", ablation(leaves["ot_sim"], x["ot_query_mask"]),
                    leaves)

        fot = ep.FlexibleOT.from_preset(preset, dataset=dataset)
        result = fot(x["ot_sim"], x["ot_query_mask"], return_dustbin_value=True)
        for field in ("plan", "dustbin", "assignment", "similarity", "dustbin_value"):
            out[f"fot_{preset}_{dataset}/{field}"] = getattr(result, field).numpy()

        leaves = _leaves(x, sims[:5])
        base = ep.BaseRetrievalLoss.from_preset(preset, dataset=dataset, use_hard_negatives=True)
        loss = base(leaves["frame_sim"], leaves["clip_sim"], leaves["query_emb"], x["query_video"],
                    frame_logits=leaves["frame_logits"], clip_logits=leaves["clip_logits"],
                    generator=torch.Generator().manual_seed(3))
        _record(out, f"base_{preset}_{dataset}", loss, leaves)
    return out


#: Tolerance of a float result, in units of ``eps(dtype) * max |expected|`` of its array.
ULPS = 64


def golden_differences(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> dict[str, float]:
    """The recorded values that ``actual`` does not reproduce: key -> error in units of
    ``eps * max|expected|`` (``inf`` for a discrete value that differs)."""
    differing = {}
    for key, want in expected.items():
        got = actual[key]
        if want.dtype.kind != "f":
            if not np.array_equal(got, want):
                differing[key] = float("inf")
            continue
        scale = np.finfo(want.dtype).eps * max(float(np.abs(want).max(initial=0.0)), np.finfo(want.dtype).tiny)
        error = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max(initial=0.0)) / scale
        if got.dtype != want.dtype or got.shape != want.shape or not error <= ULPS:
            differing[key] = error
    return differing


def test_outputs_match_the_pre_refactor_code():
    expected = dict(np.load(GOLDEN))
    actual = compute_golden()
    assert sorted(actual) == sorted(expected)
    assert golden_differences(actual, expected) == {}


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--write":
        raise SystemExit("usage: python tests/test_golden_outputs.py --write PATH.npz")
    np.savez(sys.argv[2], **compute_golden())
