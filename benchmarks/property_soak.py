"""Soak every public function with the long Hypothesis profile and report the examples run.

Runs ``tests/test_finite_outputs.py`` (finite outputs and gradients of every function of
``evidential_prvr.functional`` across extreme inputs) under the ``long`` profile — at least 10,000
examples per function — and prints, per function, the examples run and the outcome, then the total
and the wall time. Exit status 1 if any example produced a NaN/Inf or an error.

Example::

    python benchmarks/property_soak.py            # outputs alone took 10-20 minutes on two CPU cores;
                                                  # the gradient checks run the differentiable ones again
    python benchmarks/property_soak.py -k evidence
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="keyword", help="only the functions matching this pytest -k expression")
    parser.add_argument("--profile", default="long", help="Hypothesis profile (default: long)")
    args = parser.parse_args(argv)

    tests = "(test_outputs_are_finite or test_gradients_are_finite)"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_finite_outputs.py",
               "--hypothesis-show-statistics", "-k",
               f"{tests}{' and (' + args.keyword + ')' if args.keyword else ''}"]
    start = time.perf_counter()
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HYPOTHESIS_PROFILE": args.profile})
    seconds = time.perf_counter() - start
    examples = re.findall(r"test_(outputs|gradients)_are_finite\[(\w+)\]:\s*\n\s*- during generate phase.*?(\d+) passing",
                          run.stdout, re.S)
    total = 0
    print(f"{'function':>38} | {'checks':>9} | {'examples':>8}")
    print("-" * 62)
    for kind, name, count in examples:
        total += int(count)
        print(f"{name:>38} | {kind:>9} | {int(count):>8}")
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr.strip()
    print("-" * 62)
    print(f"{'total':>38} | {'':>9} | {total:>8}")
    print(f"pytest: {summary}  ({seconds:.0f} s, profile {args.profile})")
    if run.returncode:
        print(run.stdout[-4000:], run.stderr[-2000:], sep="\n")
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
