import os

import pytest
import torch
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=40, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
# the soak of benchmarks/property_soak.py: at least 10,000 examples per property
settings.register_profile(
    "long", deadline=None, max_examples=10_000, suppress_health_check=list(HealthCheck), print_blob=True
)
settings.load_profile("ci" if os.environ.get("CI") else "default")

torch.set_num_threads(max(1, min(2, torch.get_num_threads())))

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Every device this machine has: tests using it run on CPU and, where present, CUDA."""
    return torch.device(request.param)
