"""One run, every figure of the engine's machinery: allocator policies against the official release, FlexibleOT
against POT, and the demo on an idle machine against the demo beside another PyTorch job.

**Allocators.** For every allocator policy of :mod:`reference_models.engine.host_memory` (``--policies``; the
preloaded allocators ``jemalloc`` and ``tcmalloc`` are started as PyTorch's CPU launcher starts them, with
``LD_PRELOAD`` and, for jemalloc, its ``MALLOC_CONF``) a fresh process trains the reference model's
``--config`` on the set that ``release_fidelity.py data`` writes, through the engine's own training loop
(``Trainer._train_epoch`` of the first epoch, the first stage; ``--steps N`` stops after N steps, default the
whole epoch), and reports the loop's wall time, its user and system CPU time, its minor page faults, the
process's peak resident memory (``ru_maxrss``) and the epoch's mean loss terms (which must be the same under
every policy: a policy never changes a computed value, and the table says whether they were). With
``--release-src PATH`` (the ``src/`` folder of a checkout of ``lijun2005/ICML26-Holmes``, which is not part of
this project) a fresh process also runs the release's own ``train_one_epoch`` of its ``main.py`` on the same
set, with the same settings, batch size and thread count (its debugger, plotting and YAML imports stubbed and
its ``.cuda()`` calls made no-ops, data loaded in the main process as here). The processes run one at a time,
never side by side (each holds about 9-13 GiB on the release-sized set), in ``--repeats`` rounds whose order
rotates, so that a load from other processes falls on all of them alike; each figure is the median over the
rounds, each ratio one of medians. The load average and the memory available are printed before and after
every process.

**FlexibleOT.** ``benchmarks/flexible_ot.py --quick --no-scaling`` in a fresh process, its output relayed as
it prints it (the release preset, eager and under ``torch.compile``, against POT's batched log-Sinkhorn at the
release's size).

**Demo, idle and shared.** ``python -m reference_models.holmes demo`` (seed 0, the thread count its own
choice: no ``OMP_NUM_THREADS``) timed alone, then beside a two-thread PyTorch training loop started before it
and running until it ends; the ratio of the two wall times, the load average before each, and whether the two
result tables are the same.

``--no-allocators``, ``--no-flexible-ot`` and ``--no-demo`` leave a part out; ``--output`` also writes
everything as JSON. Example (the tables in the reference-model guide, "Training memory")::

    python benchmarks/release_fidelity.py data --root /tmp/rel3072
    python benchmarks/fast_and_lean.py --root /tmp/rel3072 --threads 1 --policies off,jemalloc,tcmalloc \\
        --release-src /tmp/holmes_release/src
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(ROOT / "benchmarks"))

GIB = 2**30
#: The policy the table's second set of ratios is taken against (glibc's allocator with a fixed mmap threshold).
BASELINE = "mapped"


# --- the measured processes ---------------------------------------------------------------------------------
def _usage() -> dict:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"wall": time.perf_counter(), "user": ru.ru_utime, "sys": ru.ru_stime, "minflt": ru.ru_minflt}


def _measured(before: dict, extra: dict) -> dict:
    after = _usage()
    out = {key: after[key] - before[key] for key in before}
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    out.update(extra)
    return out


class _FirstSteps:
    """A training loader cut to its first ``steps`` batches (``0``: all of them)."""

    def __init__(self, loader, steps: int) -> None:
        self.loader, self.steps = loader, steps

    def __len__(self) -> int:
        return min(len(self.loader), self.steps) if self.steps else len(self.loader)

    def __iter__(self):
        return itertools.islice(iter(self.loader), len(self))

    def __getattr__(self, name):
        return getattr(self.loader, name)


def reference_worker(args: argparse.Namespace) -> dict:
    """One epoch (or ``--steps`` steps) of the reference model under ``--policy``, through the engine's loop."""
    import torch
    from release_fidelity import load_splits, run_config

    from reference_models.engine import Trainer
    from reference_models.holmes.task import HolmesTask

    torch.set_num_threads(args.threads)
    cfg = run_config(args)
    splits = load_splits(args.root, cfg)
    with tempfile.TemporaryDirectory() as out:
        trainer = Trainer(HolmesTask(cfg, splits["train"], splits["val"]), out, seed=args.seed, show_progress=False,
                          host_memory=args.policy)
        trainer.loader = _FirstSteps(trainer.loader, args.steps)
        before = _usage()
        means, _ = trainer._train_epoch(0)
        return _measured(before, {"steps": len(trainer.loader), "losses": means,
                                  "applied": trainer.host_memory.applied, "note": trainer.host_memory.note})


def _stub_release_imports() -> None:
    """Modules the release imports for its debugger, plots and YAML configs, unused by its training step."""
    for name in ("ipdb", "seaborn", "yaml"):
        sys.modules.setdefault(name, types.ModuleType(name))
    try:
        import easydict  # noqa: F401
    except ImportError:
        class EasyDict(dict):
            """A dict whose keys read and write as attributes."""

            def __getattr__(self, name):
                try:
                    return self[name]
                except KeyError:
                    raise AttributeError(name) from None

            def __setattr__(self, name, value):
                self[name] = value

        module = types.ModuleType("easydict")
        module.EasyDict = EasyDict
        sys.modules["easydict"] = module


def release_worker(args: argparse.Namespace) -> dict:
    """One epoch (or ``--steps`` steps) of the release's ``train_one_epoch`` on the same set, on the CPU."""
    import h5py
    import torch

    torch.set_num_threads(args.threads)
    _stub_release_imports()
    torch.Tensor.cuda = lambda self, *a, **k: self  # the release calls .cuda() on its batches and a few tensors
    torch.nn.Module.cuda = lambda self, *a, **k: self
    src = Path(args.release_src).resolve()
    sys.path.insert(0, str(src))
    sys.argv = [str(src / "main.py"), "-d", "tvr"]  # its main.py parses its arguments on import
    spec = importlib.util.spec_from_file_location("release_main", src / "main.py")
    release = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(release)
    data = args.root / "tvr"
    with h5py.File(data / "FeatureData" / "synthetic" / "feature.hdf5", "r") as f:
        visual_dim = f[next(iter(f))].shape[1]
    with h5py.File(data / "TextData" / "roberta_tvr_query_feat.hdf5", "r") as f:
        text_dim = f[next(iter(f))].shape[1]
    cfg = release.get_configs("tvr")
    cfg.update(data_root=str(args.root), collection="tvr", visual_feature="synthetic", visual_feat_dim=visual_dim,
               q_feat_size=text_dim, num_workers=0, pin_memory=False, batchsize=args.videos_per_batch,
               n_epoch=args.epochs, warmup_epoch=args.warmup_stage, hard_negative_start_epoch=args.hard_negative_epoch,
               seed=args.seed)
    release.set_seed(cfg["seed"])
    cfg, train_loader, *_ = release.get_datasets(cfg)
    model = release.get_models(cfg)
    criterion = release.get_losses(cfg)
    optimizer = release.get_opts(cfg, model, train_loader)
    loader = _FirstSteps(train_loader, args.steps)
    before = _usage()
    loss = release.train_one_epoch(0, loader, model, criterion, cfg, optimizer)
    return _measured(before, {"steps": len(loader), "losses": {"total": float(loss)}, "applied": False,
                              "note": "the release (the allocator as it is)"})


# --- the driver ---------------------------------------------------------------------------------------------
def machine_state() -> str:
    """The load average and the memory available, for the record."""
    with open("/proc/meminfo", encoding="ascii") as f:
        available = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) * 1024 / GIB
    return f"load {os.getloadavg()[0]:.2f}, {available:.1f} GiB available"


def run_worker(args: argparse.Namespace, run: str) -> dict:
    """Measure ``run`` (a policy, or ``"release"``) in a fresh process with ``--threads`` threads."""
    command = [sys.executable, str(Path(__file__).resolve()), "--root", str(args.root), "--config", args.config,
               "--steps", str(args.steps), "--threads", str(args.threads), "--seed", str(args.seed),
               "--epochs", str(args.epochs), "--warmup-stage", str(args.warmup_stage),
               "--hard-negative-epoch", str(args.hard_negative_epoch), "--videos-per-batch", str(args.videos_per_batch)]
    command += ["--worker", "release", "--release-src", str(args.release_src)] if run == "release" else \
        ["--worker", "reference", "--policy", run]
    from reference_models.engine.host_memory import PRELOADED_ALLOCATORS, preload_environment

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    if run in PRELOADED_ALLOCATORS:
        preloaded = preload_environment(run, env)
        if preloaded is None:
            raise SystemExit(f"{run}: not installed (e.g. apt-get install libjemalloc2 / libgoogle-perftools4)")
        env = preloaded
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{run}: the measured process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def relay_flexible_ot(threads: int) -> list[str]:
    """Run ``flexible_ot.py --quick --no-scaling`` in a fresh process and print its output as it comes;
    returns its lines (whatever that script prints: this benchmark does not parse it)."""
    command = [sys.executable, str(ROOT / "benchmarks" / "flexible_ot.py"), "--quick", "--no-scaling",
               "--threads", str(threads)]
    print(f"\nFlexibleOT against POT ({' '.join(command[1:])}; {machine_state()}):", flush=True)
    lines = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(f"  {line.rstrip()}", flush=True)
            lines.append(line.rstrip())
    if process.returncode != 0:
        print(f"  (flexible_ot.py exited with status {process.returncode})")
    return lines


#: The other job of the shared demo: a small two-thread PyTorch training loop, as a second user's job would be.
SHARED_LOOP = """
import sys, torch
torch.set_num_threads(2)
m = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256))
o = torch.optim.AdamW(m.parameters()); x = torch.randn(64, 256)
for step in range(10**12):
    l = m(x).square().mean(); o.zero_grad(); l.backward(); o.step()
    if step == 50:
        print("running", flush=True)
"""


def _time_demo(out: Path) -> tuple[float, dict, str]:
    """Wall time, results and one-line notes (the thread count, the allocator) of the README's demo command
    writing into ``out``."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "reference_models.holmes", "demo", "--output-dir", str(out), "--no-progress"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"demo failed ({done.returncode}):\n{done.stderr[-3000:]}")
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    notes = [line for line in done.stderr.splitlines() if line.startswith("note: ")]  # not the training log
    return wall, results, " ".join(notes)


def _recalls(result: dict) -> dict:
    """One model's test recalls, overall and per query type (the demo table's numbers, without its timings)."""
    return {"recall": result["recall"], "per_type_r1": result["per_type_r1"]}


def demo_idle_and_shared() -> dict:
    """The demo alone, then beside :data:`SHARED_LOOP` (started first, stopped after); both times and their
    ratio, and whether the two runs' test results are the same."""
    with tempfile.TemporaryDirectory() as tmp:
        state_idle = machine_state()
        print(f"\ndemo alone ({state_idle})", flush=True)
        idle, idle_results, idle_note = _time_demo(Path(tmp) / "idle")
        print(f"  {idle:.1f} s{'; ' + idle_note if idle_note else ''}", flush=True)
        with subprocess.Popen([sys.executable, "-c", SHARED_LOOP], stdout=subprocess.PIPE, text=True) as loop:
            assert loop.stdout is not None
            loop.stdout.readline()  # the loop is past its start and training
            state_shared = machine_state()
            print(f"demo beside a two-thread PyTorch training loop ({state_shared})", flush=True)
            try:
                shared, shared_results, shared_note = _time_demo(Path(tmp) / "shared")
            finally:
                loop.kill()
        print(f"  {shared:.1f} s{'; ' + shared_note if shared_note else ''}", flush=True)
    same = all(_recalls(idle_results[m]) == _recalls(shared_results[m]) for m in ("holmes", "baseline"))
    return {"idle_s": idle, "shared_s": shared, "ratio": shared / idle, "load_before_idle": state_idle,
            "load_before_shared": state_shared, "same_results": same, "idle_note": idle_note,
            "shared_note": shared_note}


def report(args: argparse.Namespace, samples: dict[str, list[dict]]) -> dict:
    """Print the table of medians and ratios; return everything for ``--output``."""
    summary = {}
    for run, rows in samples.items():
        for row in rows:
            row["cpu"] = row["user"] + row["sys"]
        summary[run] = {key: median(rows, key) for key in ("wall", "cpu", "user", "sys", "minflt", "peak_rss_gib")}
        summary[run]["steps"] = rows[0]["steps"]
        summary[run]["wall_s_per_step"] = summary[run]["wall"] / rows[0]["steps"]
    what = f"{args.steps} steps" if args.steps else "one epoch"
    print(f"\n{what} of the first stage, {args.threads} thread(s), medians of {args.repeats} round(s); time: wall, "
          "cpu: user + system (on a loaded machine the fairer measure of one thread's work):")
    columns = ("run", "wall s", "cpu s", "user s", "sys s", "faults M", "peak GiB", "time/mapped", "cpu/mapped",
               "RSS/mapped", "time/release", "cpu/release", "RSS/release")
    print("  ".join(f"{c:>12}" for c in columns))
    for run, row in summary.items():
        cells = [run, f"{row['wall']:.1f}", f"{row['cpu']:.1f}", f"{row['user']:.1f}", f"{row['sys']:.1f}",
                 f"{row['minflt'] / 1e6:.2f}", f"{row['peak_rss_gib']:.2f}"]
        for base in (BASELINE, "release"):
            if base in summary:
                row[f"time_over_{base}"] = row["wall"] / summary[base]["wall"]
                row[f"cpu_over_{base}"] = row["cpu"] / summary[base]["cpu"]
                row[f"rss_over_{base}"] = row["peak_rss_gib"] / summary[base]["peak_rss_gib"]
                cells += [f"{row[f'{name}_over_{base}']:.3f}" for name in ("time", "cpu", "rss")]
            else:
                cells += ["-", "-", "-"]
        print("  ".join(f"{c:>12}" for c in cells))
    policies = [run for run in samples if run != "release"]
    losses = {json.dumps(row["losses"], sort_keys=True) for run in policies for row in samples[run]}
    same = len(losses) <= 1
    if policies:
        print(f"mean loss terms identical under every policy and round ({len(policies)} policies): "
              f"{'yes' if same else 'NO'}")
    return {"summary": summary, "samples": samples, "same_losses": same}


def main(argv: list[str] | None = None) -> int:
    from release_fidelity import add_run_arguments

    from reference_models.engine.host_memory import HOST_MEMORY_POLICIES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.set_defaults(threads=1)
    parser.add_argument("--steps", type=int, default=0, help="training steps per measurement (0: the whole epoch)")
    parser.add_argument("--policies", default="off,jemalloc,tcmalloc",
                        help="allocator policies to measure, comma-separated (default: off,jemalloc,tcmalloc; "
                             f"any of {','.join(HOST_MEMORY_POLICIES)})")
    parser.add_argument("--repeats", type=int, default=1, help="rounds; each figure is a median over them")
    parser.add_argument("--release-src", type=Path, help="the src/ folder of a checkout of the official release")
    parser.add_argument("--no-allocators", action="store_true", help="leave out the allocator policies and the release")
    parser.add_argument("--no-flexible-ot", action="store_true", help="leave out the FlexibleOT / POT ratios")
    parser.add_argument("--no-demo", action="store_true", help="leave out the demo idle and beside another job")
    parser.add_argument("--output", type=Path, help="also write every measurement here (JSON)")
    parser.add_argument("--worker", choices=("reference", "release"), help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker == "reference":
        print(json.dumps(reference_worker(args)))
        return 0
    if args.worker == "release":
        print(json.dumps(release_worker(args)))
        return 0
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = sorted(set(policies) - set(HOST_MEMORY_POLICIES))
    if unknown:
        parser.error(f"--policies: unknown {', '.join(unknown)} (choose from {', '.join(HOST_MEMORY_POLICIES)})")
    if args.release_src is not None and not (args.release_src / "main.py").is_file():
        parser.error(f"--release-src {args.release_src}: no main.py there (give the release's src/ folder)")
    runs = [] if args.no_allocators else policies + (["release"] if args.release_src is not None else [])
    samples: dict[str, list[dict]] = {run: [] for run in runs}
    for round_ in range(args.repeats if runs else 0):
        order = runs[round_ % len(runs):] + runs[:round_ % len(runs)]
        for run in order:
            print(f"round {round_ + 1}/{args.repeats}: {run} ({machine_state()})", flush=True)
            row = run_worker(args, run)
            samples[run].append(row)
            print(f"  {row['wall']:.1f} s wall ({row['user']:.1f} user, {row['sys']:.1f} sys), "
                  f"{row['minflt'] / 1e6:.2f} M faults, peak {row['peak_rss_gib']:.2f} GiB; {row['note']} "
                  f"({machine_state()})", flush=True)
    result = report(args, samples) if runs else {}
    if not args.no_flexible_ot:
        result["flexible_ot"] = relay_flexible_ot(args.threads)
    if not args.no_demo:
        demo = result["demo"] = demo_idle_and_shared()
        print(f"demo alone {demo['idle_s']:.1f} s, beside a two-thread PyTorch training loop {demo['shared_s']:.1f} s: "
              f"{demo['ratio']:.2f}x; same test results: {'yes' if demo['same_results'] else 'NO'}")
    if args.output:
        args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
