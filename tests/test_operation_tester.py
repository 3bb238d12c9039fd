"""The harness of :mod:`tests.operation_tester` fails an operation that breaks what it checks."""

from __future__ import annotations

import pytest
import torch

from .operation_tester import OperationTester


def _scale(x: torch.Tensor, factor: float = 2.0, *, validate_args: bool | None = None) -> torch.Tensor:
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    return x * factor


class _Scale(torch.nn.Module):
    def __init__(self, factor: float = 2.0) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (self.factor + 1e-3)  # not the function


class _Tester(OperationTester):
    function = staticmethod(_scale)
    module = _Scale
    settings = {"factor": 3.0}

    def inputs(self, dtype):
        return (torch.linspace(-1.0, 1.0, 5, dtype=dtype),)

    def bad_cases(self):
        return [((torch.ones(2),), {"factor": 0.0}, "factor must be > 0, got 0.0")]


def test_a_correct_function_passes_what_it_should():
    tester = _Tester()
    tester.test_smoke()
    tester.test_bad_input()
    tester.test_gradcheck()
    tester.test_half_precision(torch.bfloat16)
    tester.test_compile()


def test_a_module_that_is_not_its_function_fails():
    with pytest.raises(AssertionError):
        _Tester().test_module_equals_function()


def test_an_unchecked_argument_fails():
    class Unchecked(_Tester):
        function = staticmethod(lambda x, factor=2.0, validate_args=None: x * factor)

    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        Unchecked().test_bad_input()


def test_an_overflow_in_half_precision_fails():
    class Overflowing(_Tester):
        settings = {"factor": 1e6}

    with pytest.raises(AssertionError):
        Overflowing().test_half_precision(torch.float16)


def test_a_wrong_gradient_fails():
    class WrongGradient(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return 2.0 * x

        @staticmethod
        def backward(ctx, grad):
            return 3.0 * grad

    class Wrong(_Tester):
        function = staticmethod(lambda x, factor=2.0, validate_args=None: WrongGradient.apply(x))

    with pytest.raises(RuntimeError, match="Jacobian mismatch"):
        Wrong().test_gradcheck()


def test_a_graph_break_fails():
    def branching(x: torch.Tensor, factor: float = 2.0, *, validate_args: bool | None = None) -> torch.Tensor:
        if x.sum() > 0:  # control flow on a tensor's value
            return x * factor
        return x

    class Breaking(_Tester):
        function = staticmethod(branching)

    with pytest.raises(Exception, match="(?i)graph break|data-dependent|Unsupported"):
        Breaking().test_compile()
