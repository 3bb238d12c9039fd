"""
Flexible optimal transport against POT, and the dustbin
=======================================================

Holmes (§3.3) softly assigns each caption of a video to the clips of that video with entropic optimal
transport, and adds a *dustbin* row that absorbs the clips no caption describes (Eq. 19-20). This
example builds one video with four captions, solves the transport with :class:`evidential_prvr.FlexibleOT`
and with POT's :func:`ot.sinkhorn`, and draws the plan with and without the dustbin: the analogue of the
paper's Fig. 4.
"""

# %%
# A video with four captions and sixteen clips
# --------------------------------------------
# Captions 0-3 describe clip spans 0-3, 4-7, 6-9 and 10-11; clips 12-15 are unrelated to every caption.

import time

import matplotlib.pyplot as plt
import numpy as np
import ot
import torch

from evidential_prvr import FlexibleOT

gen = torch.Generator().manual_seed(0)
n_queries, n_clips = 4, 16
spans = [(0, 4), (4, 8), (6, 10), (10, 12)]
sim = 0.1 + 0.05 * torch.randn(1, n_queries, n_clips, generator=gen, dtype=torch.float64)
for q, (start, end) in enumerate(spans):
    sim[0, q, start:end] += 0.6
print(sim[0].numpy().round(2))

# %%
# Flexible OT and plain OT
# ------------------------
# The release's settings: min-max normalised similarities, the dustbin value at the 0.3 quantile,
# SuperGlue-style marginals (each caption :math:`1/(M_c+M_q)`, the dustbin :math:`M_c/(M_c+M_q)`),
# :math:`\varepsilon = 0.1`. :meth:`~evidential_prvr.FlexibleOT.without_dustbin` is plain OT (Eq. 19,
# Table 3 row 12), where the unrelated clips must go to some caption.

fot = FlexibleOT.from_preset("release", dataset="tvr", n_iters=500)
with_dustbin = fot(sim, return_dustbin_value=True)
without_dustbin = fot.without_dustbin()(sim)
print("dustbin value z:", with_dustbin.dustbin_value.numpy().round(3))
print("mass of clips 12-15 sent to the dustbin:", with_dustbin.dustbin[0, 12:].sum().item(),
      "of", 4 / n_clips)

# %%
# The same problems with POT
# --------------------------
# :meth:`~evidential_prvr.FlexibleOT.pot_problem` returns, per video, the marginals ``a`` and ``b``, the cost
# ``M`` (minus the normalised similarities, the dustbin row appended) and ``reg`` that :func:`ot.sinkhorn`
# solves. Both solvers run POT's log-domain update order, so the plans agree to rounding.

problem = fot.pot_problem(sim)[0]
reference = ot.sinkhorn(problem.a, problem.b, problem.M, problem.reg, method="sinkhorn_log", numItermax=500,
                        stopThr=0.0, warn=False)
ours = torch.cat([with_dustbin.plan[0], with_dustbin.dustbin]).numpy()
print("largest difference to ot.sinkhorn:", np.abs(ours - reference).max())

# %%
# The library solves a whole batch of videos in one batched loop, where POT solves one problem per call.
# A batch of 128 such videos (50 iterations, the release's setting):

batch = sim.repeat(128, 1, 1) + 0.05 * torch.randn(128, n_queries, n_clips, generator=gen, dtype=torch.float64)
release = FlexibleOT.from_preset("release", dataset="tvr")
start = time.perf_counter()
plans = release(batch).plan
batched_ms = 1000 * (time.perf_counter() - start)
start = time.perf_counter()
for p in release.pot_problem(batch):
    ot.sinkhorn(p.a, p.b, p.M, p.reg, method="sinkhorn_log", numItermax=50, stopThr=0.0, warn=False)
loop_ms = 1000 * (time.perf_counter() - start)
print(f"FlexibleOT on 128 videos: {batched_ms:.1f} ms; a loop of ot.sinkhorn: {loop_ms:.1f} ms")

# %%
# The plans
# ---------
# Rows are the captions (and the dustbin ``Z``), columns the clips. Without the dustbin the unrelated
# clips 12-15 are spread over the captions; with it they go to the dustbin. With the release's marginals
# the dustbin carries most of the mass (:math:`M_c/(M_c+M_q)`), so each caption keeps only its best clips;
# its row, normalised (``assignment``), is its soft label in L_intra.


def show(ax, plan, rows, title):
    image = ax.imshow(plan, cmap="viridis", aspect="auto")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xticks(range(0, n_clips, 2))
    ax.set_xlabel("clip")
    ax.set_title(title)
    return image


captions = [f"q{i}" for i in range(n_queries)]
fig, axes = plt.subplots(2, 2, figsize=(10, 6))
show(axes[0, 0], sim[0].numpy(), captions, "similarity")
show(axes[0, 1], without_dustbin.plan[0].numpy(), captions, "OT plan (no dustbin)")
fig.colorbar(show(axes[1, 0], ours, captions + ["Z"], "flexible OT plan with the dustbin row Z"), ax=axes[1, 0])
show(axes[1, 1], with_dustbin.assignment[0].numpy(), captions, "assignment: rows normalised (soft labels)")
fig.tight_layout()
plt.show()

# %%
# The dustbin value does not change the plan
# ------------------------------------------
# The dustbin row is constant and its mass is fixed, so its value :math:`z` only shifts the objective by a
# constant; what makes it absorb clips is its flat profile and its mass. The library therefore computes
# :math:`z` only when asked (``return_dustbin_value=True``). Solving with any other constant row gives the
# same plan:

for z in (0.0, 0.3, 0.9):
    problem_z = fot.pot_problem(sim)[0]
    problem_z.M[-1] = -z
    plan_z = ot.sinkhorn(problem_z.a, problem_z.b, problem_z.M, problem_z.reg, method="sinkhorn_log",
                         numItermax=500, stopThr=0.0, warn=False)
    print(f"z = {z}: largest change of the plan {np.abs(plan_z - reference).max():.1e}")
