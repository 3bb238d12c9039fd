"""The independent reference for transport plans: POT's log-domain Sinkhorn on each problem of a batch."""

from __future__ import annotations

import numpy as np
import ot


def assert_plans_match_pot(fot, out, sim, query_mask=None, clip_mask=None, atol: float = 1e-6) -> None:
    """Each problem of ``fot(sim, ...)``'s result ``out`` (plan rows and dustbin) equals POT's converged
    ``ot.sinkhorn`` on the same problem (:meth:`FlexibleOT.pot_problem`) to ``atol``."""
    for k, problem in enumerate(fot.pot_problem(sim, query_mask, clip_mask)):
        q = ot.sinkhorn(problem.a, problem.b, problem.M, problem.reg, method="sinkhorn_log", stopThr=1e-13,
                        numItermax=200000)
        nq = len(problem.query_index)
        ours = out.plan[k].numpy()[np.ix_(problem.query_index, problem.clip_index)]
        np.testing.assert_allclose(ours, q[:nq], atol=atol, rtol=0)
        np.testing.assert_allclose(out.dustbin[k].numpy()[problem.clip_index], q[nq], atol=atol, rtol=0)
