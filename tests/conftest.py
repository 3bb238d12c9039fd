"""Test-session settings: Hypothesis profiles, one intra-op thread per test, the ``device`` fixture.

Hypothesis profile: ``HYPOTHESIS_PROFILE`` names it when set (``.ci/run`` sets ``ci``); otherwise ``ci``
when the ``CI`` variable is set, else ``default``.

``default``  40 examples per property, random (a new seed each run).
``ci``       40 examples, derandomized (the same examples every run), no example database: reproducible.
``long``     10,000 examples, random: a separate, long search for counterexamples, e.g.
             ``HYPOTHESIS_PROFILE=long python -m pytest -q tests/test_dirichlet_loss.py``.

Threads: every test runs with one intra-op thread, so that concurrent test processes on a busy machine
do not multiply their time with OpenMP threads spinning against each other. A test that needs more
threads says so with ``@pytest.mark.multithreaded`` (it gets up to two).
"""

import os
from collections.abc import Iterator, Mapping

# Before torch and NumPy are imported, so that their OpenMP / BLAS pools start with one thread.
for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.errors import InvalidArgument  # noqa: E402

# Hypothesis loads its own "ci" profile (derandomised) when CI is set, and a profile registered
# without a value inherits it; the random profiles therefore say derandomize=False themselves.
settings.register_profile(
    "default", deadline=None, max_examples=40, derandomize=False, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=40, derandomize=True, database=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", deadline=None, max_examples=10_000, derandomize=False, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def hypothesis_profile(environ: Mapping[str, str]) -> str:
    """The Hypothesis profile a test session uses, from its environment (see the module docstring)."""
    name = environ.get("HYPOTHESIS_PROFILE", "").strip()
    if name:
        try:
            settings.get_profile(name)
        except InvalidArgument:
            raise pytest.UsageError(
                f"HYPOTHESIS_PROFILE={name!r} is not a registered profile; use default, ci or long"
            ) from None
        return name
    return "ci" if environ.get("CI") else "default"


settings.load_profile(hypothesis_profile(os.environ))

#: Intra-op threads of a test, and of a test marked ``multithreaded``.
TEST_THREADS = 1
MULTITHREADED_THREADS = max(1, min(2, os.cpu_count() or 1))

torch.set_num_threads(TEST_THREADS)
try:
    torch.set_num_interop_threads(TEST_THREADS)
except RuntimeError:  # already fixed by an earlier parallel call in this process
    pass

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"multithreaded: run with {MULTITHREADED_THREADS} intra-op threads instead of {TEST_THREADS}"
    )


@pytest.fixture(autouse=True)
def _intra_op_threads(request: pytest.FixtureRequest) -> Iterator[None]:
    """One intra-op thread per test (more for ``multithreaded`` ones), reset after tests that change it."""
    wanted = MULTITHREADED_THREADS if request.node.get_closest_marker("multithreaded") else TEST_THREADS
    torch.set_num_threads(wanted)
    yield
    torch.set_num_threads(TEST_THREADS)


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Every device this machine has: tests using it run on CPU and, where present, CUDA."""
    return torch.device(request.param)
