"""One test harness for every operation that is a function and a module (kornia's ``BaseTester`` idea).

A test class of one operation subclasses :class:`OperationTester` and says what the operation is and what
it takes; the harness runs the same checks on each:

``test_smoke``
    finite outputs, the same on a second call;
``test_bad_input``
    each bad case raises ``ValueError`` (or ``TypeError``) whose message matches;
``test_gradcheck``
    ``torch.autograd.gradcheck`` in float64 on the differentiable inputs;
``test_module_equals_function``
    ``module(**settings)(*inputs)`` gives exactly ``function(*inputs, **settings)``;
``test_half_precision``
    float16 and bfloat16 inputs give finite outputs;
``test_compile``
    ``torch.compile(function, backend="eager", fullgraph=True)`` traces the whole function in one graph
    (no graph break) and gives the eager outputs. The ``eager`` back end checks what Dynamo sees without
    paying for code generation in the suite; ``benchmarks/flexible_ot.py`` measures the generated code.

Checks against independent references (POT, brute force, Monte Carlo) stay in each operation's own test file;
the harness holds what every operation owes its users.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch


def output_tensors(out: Any) -> tuple[torch.Tensor, ...]:
    """The tensors of an operation's output: the tensor itself, or the tensor fields of a dataclass."""
    if isinstance(out, torch.Tensor):
        return (out,)
    if dataclasses.is_dataclass(out):
        fields = (getattr(out, f.name) for f in dataclasses.fields(out))
        return tuple(t for f in fields for t in output_tensors(f) if isinstance(t, torch.Tensor))
    if isinstance(out, (tuple, list)):
        return tuple(t for item in out for t in output_tensors(item))
    return ()


def _finite(tensors: tuple[torch.Tensor, ...]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point())


class OperationTester:
    """Subclass, set the attributes below and write :meth:`inputs`; pytest collects the inherited tests."""

    #: The public function (wrap it in ``staticmethod``).
    function: ClassVar[Callable[..., Any]]
    #: Its module, built with ``module(**settings)`` and called with the same positional inputs; None: none.
    module: ClassVar[type[torch.nn.Module] | None] = None
    #: Keywords taken both by the function and by the module's constructor (values other than the defaults).
    settings: ClassVar[dict[str, Any]] = {}
    #: The module's constructor keywords where they differ from ``settings`` (a module holding a submodule).
    module_settings: ClassVar[dict[str, Any] | None] = None
    #: Positions of the inputs ``gradcheck`` differentiates; empty: the operation has no gradient.
    differentiable: ClassVar[tuple[int, ...]] = (0,)
    #: Why ``gradcheck`` cannot check the operation's gradient (None: it can).
    gradcheck_skip: ClassVar[str | None] = None
    #: Why the operation cannot be traced in one graph (None: it can, and ``test_compile`` checks it).
    graph_break: ClassVar[str | None] = None

    def inputs(self, dtype: torch.dtype) -> tuple[Any, ...]:
        """Positional inputs of a small, valid call, floating tensors in ``dtype``."""
        raise NotImplementedError

    def bad_cases(self) -> list[tuple[tuple[Any, ...], dict[str, Any], str]]:
        """``(inputs, extra keywords, message pattern)`` of calls that must be refused."""
        return []

    def per_call(self) -> dict[str, Any]:
        """Keywords given afresh to every call of the function and of ``forward`` (a seeded generator)."""
        return {}

    def call(self, *inputs: Any, **keywords: Any) -> Any:
        return type(self).function(*inputs, **{**self.settings, **self.per_call(), **keywords})

    def grad_output(self, out: Any) -> torch.Tensor:
        """The output ``gradcheck`` differentiates (the first floating tensor)."""
        return next(t for t in output_tensors(out) if t.is_floating_point())

    def test_smoke(self) -> None:
        inputs = self.inputs(torch.float32)
        first, second = output_tensors(self.call(*inputs)), output_tensors(self.call(*inputs))
        assert first and _finite(first)
        assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))

    def test_bad_input(self) -> None:
        for inputs, keywords, pattern in self.bad_cases():
            with pytest.raises((ValueError, TypeError), match=pattern):
                self.call(*inputs, **keywords)

    def test_gradcheck(self) -> None:
        if not self.differentiable or self.gradcheck_skip is not None:
            pytest.skip(self.gradcheck_skip or "the operation has no gradient")
        inputs = list(self.inputs(torch.float64))
        for i in self.differentiable:
            inputs[i] = inputs[i].detach().requires_grad_(True)

        def scalar_of(*wanted: torch.Tensor) -> torch.Tensor:
            full = list(inputs)
            for i, tensor in zip(self.differentiable, wanted, strict=True):
                full[i] = tensor
            return self.grad_output(self.call(*full))

        assert torch.autograd.gradcheck(scalar_of, tuple(inputs[i] for i in self.differentiable))

    def test_module_equals_function(self) -> None:
        module_class = type(self).module
        if module_class is None:
            pytest.skip("the operation has no module")
        inputs = self.inputs(torch.float32)
        module = module_class(**(self.settings if self.module_settings is None else self.module_settings))
        from_module = output_tensors(module(*inputs, **self.per_call()))
        from_function = output_tensors(self.call(*inputs))
        assert len(from_module) == len(from_function)
        assert all(torch.equal(a, b) for a, b in zip(from_module, from_function, strict=True))

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_half_precision(self, dtype: torch.dtype) -> None:
        assert _finite(output_tensors(self.call(*self.inputs(dtype))))

    def test_compile(self) -> None:
        if self.graph_break is not None:
            pytest.skip(self.graph_break)
        torch._dynamo.reset()
        inputs = self.inputs(torch.float32)
        compiled = torch.compile(self.call, backend="eager", fullgraph=True)
        # without value checks (their host synchronisations are what a compiled caller turns off)
        checks = {"validate_args": False} if "validate_args" in inspect.signature(type(self).function).parameters else {}
        eager = output_tensors(self.call(*inputs, **checks))
        traced = output_tensors(compiled(*inputs, **checks))
        assert all(torch.equal(a, b) for a, b in zip(eager, traced, strict=True))
