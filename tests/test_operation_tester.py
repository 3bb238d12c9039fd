"""The harness of :mod:`tests.operation_tester` fails an operation that breaks what it checks."""

from __future__ import annotations

import pytest
import torch

from .operation_tester import FLOAT, OperationTester, bad, missing_entries


def _scale(x: torch.Tensor, factor: float = 2.0, *, validate_args: bool | None = None) -> torch.Tensor:
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor}")
    return x * factor


class _Scale(torch.nn.Module):
    def __init__(self, factor: float = 2.0) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _scale(x, self.factor)


class _Tester(OperationTester):
    function = staticmethod(_scale)
    module = _Scale
    settings = {"factor": 3.0}
    outputs = {"": ((5,), FLOAT)}
    compiles = True

    def inputs(self, dtype):
        return (torch.linspace(-1.0, 1.0, 5, dtype=dtype),)

    def bad_cases(self):
        return [bad("factor", "> 0, got 0.0", torch.ones(5), factor=0.0)]


def test_a_correct_operation_passes_every_check():
    tester = _Tester()
    tester.test_smoke()
    tester.test_bad_input()
    tester.test_gradcheck()
    tester.test_module_equals_function()
    tester.test_float32_matches_float64()
    tester.test_half_precision(torch.bfloat16)
    tester.test_compile()


def test_a_module_that_is_not_its_function_fails():
    class Off(_Scale):
        def forward(self, x):
            return x * (self.factor + 1e-3)

    class Tester(_Tester):
        module = Off

    with pytest.raises(AssertionError):
        Tester().test_module_equals_function()


def test_a_module_that_does_not_hold_its_settings_fails():
    class Forgetful(_Scale):
        def __init__(self, factor=2.0):
            super().__init__(factor)
            self.factor = 2.0

    class Tester(_Tester):
        module = Forgetful

    with pytest.raises(AssertionError, match="holds the settings"):
        Tester().test_module_equals_function()


def test_an_unchecked_argument_fails():
    class Unchecked(_Tester):
        function = staticmethod(lambda x, factor=2.0, validate_args=None: x * factor)
        module = None

    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        Unchecked().test_bad_input()


def test_a_message_without_the_argument_fails():
    def vague(x, factor=2.0, *, validate_args=None):
        if not factor > 0:
            raise ValueError(f"must be > 0, got {factor}")
        return x * factor

    class Vague(_Tester):
        function = staticmethod(vague)
        module = None

    with pytest.raises(AssertionError, match="'factor' is not named"):
        Vague().test_bad_input()


def test_a_module_that_accepts_a_bad_setting_fails():
    class Lenient(_Scale):
        def forward(self, x):
            return x * abs(self.factor)

    class Tester(_Tester):
        module = Lenient

    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        Tester().test_bad_input()


def test_an_output_of_another_shape_or_dtype_or_undescribed_fails():
    for outputs in ({"": ((4,), FLOAT)}, {"": ((5,), torch.float64)}, {"": ((5,), FLOAT), "extra": ((), FLOAT)}):
        class Tester(_Tester):
            pass

        Tester.outputs = outputs
        with pytest.raises(AssertionError):
            Tester().test_smoke()


def test_float32_far_from_float64_fails():
    class Imprecise(_Tester):
        function = staticmethod(lambda x, factor=2.0, validate_args=None: x * factor + 1e-4 * (x.dtype == torch.float32))

    with pytest.raises(AssertionError):
        Imprecise().test_float32_matches_float64()


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


def test_an_operation_without_an_entry_is_listed():
    functions, modules = missing_entries([_Tester])
    assert "flexible_ot" in functions and "FlexibleOT" in modules and "PresetModule" not in modules
