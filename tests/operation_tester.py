"""One test harness for every public operation (kornia's ``BaseTester`` idea).

An *operation* is a public function of :mod:`evidential_prvr.functional`, a public ``nn.Module``, or a function
and the module whose ``forward`` calls it. Its test class subclasses :class:`OperationTester`, says what the
operation is (``function``, ``module``, ``settings``), what a small valid call takes (:meth:`~OperationTester.inputs`),
what it returns (``outputs``) and which calls must be refused (:meth:`~OperationTester.bad_cases`); the harness
runs the same checks on every one:

``test_smoke``
    every named output has its shape and dtype (and nothing else is returned), floating outputs are finite,
    and a second call gives the same outputs;
``test_bad_input``
    each bad call raises ``ValueError`` or ``TypeError`` whose message names the argument and matches the
    expected and the received value (through the module too, when the module takes the bad keyword);
``test_gradcheck``
    ``torch.autograd.gradcheck`` in float64 on the differentiable inputs (fast mode: a random projection of
    the Jacobians, which a wrong gradient fails as well);
``test_module_equals_function``
    the module's ``forward`` gives exactly what the function gives when called with the module's attributes,
    and the module holds the settings it was built with;
``test_float32_matches_float64``
    float32 inputs give the float64 outputs to a tolerance scaled by float32's machine epsilon, and each
    dtype comes back in its own precision;
``test_half_precision``
    float16 and bfloat16 inputs under ``torch.autocast`` give finite outputs of the named shapes;
``test_compile``
    ``torch.compile(..., backend="eager", fullgraph=True)`` traces the whole call in one graph and gives
    the eager outputs, for the operations whose documentation says they compile (``compiles = True``). The
    ``eager`` back end checks what Dynamo sees without paying for code generation in the suite;
    ``benchmarks/flexible_ot.py`` measures the generated code.

A check an operation cannot owe says why in its class (``gradcheck_skip``, ``half_precision_skip``, ...), so
that a reader sees every exception beside its entry. Checks against independent references (POT, scipy,
brute force, Monte Carlo) stay in each operation's own test file; the harness holds what every operation owes
its users. :func:`missing_entries` lists the public functions and modules without an entry;
``tests/test_operations.py`` fails while it lists any.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import pytest
import torch

#: In ``outputs``: a floating tensor in the compute dtype of the inputs (float64 for float64 inputs, float32
#: for float32 ones).
FLOAT = "float"

#: Where the inputs of a float32 call are rounded from those of a float64 call, float32 results may differ
#: from float64 ones by this many float32 machine epsilons, relatively and absolutely, unless an entry says
#: otherwise in ``float32_tolerance``.
FLOAT32_TOLERANCE = 64.0


@dataclasses.dataclass(frozen=True)
class BadCase:
    """A call that must be refused: ``inputs`` with ``keywords``, and what the error message must hold."""

    argument: str  # the name the message must contain (a whole word)
    pattern: str  # a regular expression for the expected and the received value
    inputs: tuple[Any, ...]
    keywords: dict[str, Any]


def bad(argument: str, pattern: str, *inputs: Any, **keywords: Any) -> BadCase:
    """``bad("tau", r"> 0, got 0.0", sim, tau=0.0)``: calling with ``sim`` and ``tau=0.0`` is refused with a
    message that names ``tau`` and matches the pattern."""
    return BadCase(argument, pattern, inputs, keywords)


def uniform(*shape: int, dtype: torch.dtype, seed: int = 0, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """Uniform values in ``[low, high)`` drawn in float64 from ``seed``, then cast: every dtype rounds the same
    draw, so a float32 input is the float64 one rounded."""
    generator = torch.Generator().manual_seed(seed)
    return (low + (high - low) * torch.rand(*shape, generator=generator, dtype=torch.float64)).to(dtype)


def named_outputs(out: Any, path: str = "") -> dict[str, Any]:
    """Every value of an operation's output by its path: ``""`` for a plain tensor or value, field names
    (``"plan"``, ``"frame.uncertainty"``) for a dataclass or named tuple, positions for a tuple of tensors;
    fields holding ``None`` are left out."""
    prefix = f"{path}." if path else ""
    if out is None:
        return {}
    if isinstance(out, torch.Tensor):
        return {path: out}
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        fields: Iterable[tuple[str, Any]] = ((f.name, getattr(out, f.name)) for f in dataclasses.fields(out))
    elif isinstance(out, tuple) and hasattr(out, "_fields"):
        fields = zip(out._fields, out, strict=True)
    elif isinstance(out, (tuple, list)) and any(isinstance(item, torch.Tensor) for item in out):
        fields = ((str(i), item) for i, item in enumerate(out))
    else:
        return {path: out}  # a string, a number, a list of numbers, a settings object
    named: dict[str, Any] = {}
    for name, value in fields:
        named.update(named_outputs(value, prefix + name))
    return named


def output_tensors(out: Any) -> tuple[torch.Tensor, ...]:
    """The tensors of an operation's output, in the order of :func:`named_outputs`."""
    return tuple(v for v in named_outputs(out).values() if isinstance(v, torch.Tensor))


def _floating(out: Any) -> tuple[torch.Tensor, ...]:
    return tuple(t for t in output_tensors(out) if t.is_floating_point())


def _all_finite(out: Any) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in _floating(out))


def _same(a: Any, b: Any) -> bool:
    """Bit-for-bit equal outputs: the same paths, equal tensors (NaN equal to NaN) and equal plain values."""
    first, second = named_outputs(a), named_outputs(b)
    if first.keys() != second.keys():
        return False
    for name, x in first.items():
        y = second[name]
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x.nan_to_num(), y.nan_to_num())
                    and torch.equal(x.isnan(), y.isnan())):
                return False
        elif x != y:
            return False
    return True


def _assert_refused(case: BadCase, bad_call: Callable[[], Any]) -> None:
    """``bad_call`` raises ``ValueError`` or ``TypeError`` whose message names ``case.argument`` and matches
    ``case.pattern``."""
    with pytest.raises((ValueError, TypeError)) as error:
        bad_call()
    message = str(error.value)
    assert re.search(rf"(?<![\w.]){re.escape(case.argument)}(?!\w)", message), \
        f"{case.argument!r} is not named in: {message}"
    assert re.search(case.pattern, message), f"{case.pattern!r} not in: {message}"


def input_dtype(inputs: tuple[Any, ...]) -> torch.dtype:
    """The widest floating dtype among the inputs (float32 when none is floating)."""
    dtypes = [x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
    return torch.float64 if torch.float64 in dtypes else torch.float32


class OperationTester:
    """Subclass, set the attributes below and write :meth:`inputs` and :meth:`bad_cases`; pytest collects the
    inherited tests."""

    #: The public function (wrap it in ``staticmethod``); None for a module without a function of its own.
    function: ClassVar[Callable[..., Any] | None] = None
    #: The public module, built with ``module(**settings)`` and called with the same positional inputs.
    module: ClassVar[type[torch.nn.Module] | None] = None
    #: Keywords of the function and the module's constructor (for a module alone: its constructor's).
    settings: ClassVar[dict[str, Any]] = {}
    #: The module's constructor keywords where they differ from ``settings`` (a module holding a submodule).
    module_settings: ClassVar[dict[str, Any] | None] = None
    #: Why the module's ``forward`` is not checked against a function (a module alone says so here).
    module_equals_function_skip: ClassVar[str | None] = None
    #: What a call with float32 inputs returns: path (see :func:`named_outputs`) -> ``(shape, dtype)``, the
    #: dtype a ``torch.dtype`` or :data:`FLOAT`; or path -> a Python type for a value that is not a tensor.
    outputs: ClassVar[dict[str, Any]]
    #: Positions of the inputs ``gradcheck`` differentiates.
    differentiable: ClassVar[tuple[int, ...]] = (0,)
    #: Why ``gradcheck`` cannot check the operation (None: it can).
    gradcheck_skip: ClassVar[str | None] = None
    #: Float32 results may differ from float64 ones by this many float32 machine epsilons.
    float32_tolerance: ClassVar[float] = FLOAT32_TOLERANCE
    #: Why float32 and float64 calls are not compared (None: they are).
    float64_skip: ClassVar[str | None] = None
    #: Why float16/bfloat16 inputs are not checked (None: they are).
    half_precision_skip: ClassVar[str | None] = None
    #: The documentation says the operation compiles whole with ``validate_args=False``.
    compiles: ClassVar[bool] = False

    # --- what an entry writes ------------------------------------------------------------------------------------
    def inputs(self, dtype: torch.dtype) -> tuple[Any, ...]:
        """Positional inputs of a small, valid call, floating tensors in ``dtype``."""
        raise NotImplementedError

    def bad_cases(self) -> list[BadCase]:
        """Calls that must be refused (:func:`bad`); at least one."""
        raise NotImplementedError

    def per_call(self) -> dict[str, Any]:
        """Keywords given afresh to every call of the function and of ``forward`` (a seeded generator)."""
        return {}

    def module_forward(self, module: torch.nn.Module, *inputs: Any) -> Any:
        """What the module computes for the function's inputs (default: its ``forward``)."""
        return module(*inputs, **self.per_call())

    def attributes(self, module: torch.nn.Module) -> dict[str, Any]:
        """The function's keywords read off a built module (default: its attributes named like ``settings``)."""
        return {name: getattr(module, name) for name in self.settings}

    # --- how the harness calls the operation -------------------------------------------------------------------
    def build(self, dtype: torch.dtype = torch.float32, **settings: Any) -> torch.nn.Module:
        """The module, built with ``module_settings`` (or ``settings``) updated by ``settings``, its parameters
        drawn from a fixed seed (the same values whatever the dtype) and cast to ``dtype``."""
        module_class = type(self).module
        assert module_class is not None
        given = self.settings if self.module_settings is None else self.module_settings
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            module = module_class(**{**given, **settings})
        return module.to(dtype)

    def call(self, *inputs: Any, **keywords: Any) -> Any:
        """The function with ``settings``; for a module alone, a module built with the keywords it takes
        (the others go to ``forward``), in the dtype of the inputs."""
        function = type(self).function
        if function is not None:
            return function(*inputs, **{**self.settings, **self.per_call(), **keywords})
        built = inspect.signature(type(self).module).parameters  # type: ignore[arg-type]
        module = self.build(input_dtype(inputs), **{k: v for k, v in keywords.items() if k in built})
        return module(*inputs, **{**self.per_call(), **{k: v for k, v in keywords.items() if k not in built}})

    def grad_output(self, out: Any) -> Any:
        """What ``gradcheck`` differentiates: the outputs (those with a gradient)."""
        return out

    # --- the checks --------------------------------------------------------------------------------------------
    def _check_outputs(self, out: Any, dtype: torch.dtype) -> None:
        named = named_outputs(out)
        assert set(named) == set(self.outputs), f"outputs {sorted(named)}, described {sorted(self.outputs)}"
        for path, want in self.outputs.items():
            got = named[path]
            if isinstance(want, type):
                assert isinstance(got, want), f"{path}: {type(got).__name__}, not {want.__name__}"
                continue
            shape, kind = want
            assert isinstance(got, torch.Tensor), f"{path}: {type(got).__name__}, not a tensor"
            assert tuple(got.shape) == tuple(shape), f"{path}: shape {tuple(got.shape)}, not {tuple(shape)}"
            expected = dtype if kind == FLOAT else kind
            assert got.dtype == expected, f"{path}: {got.dtype}, not {expected}"

    def test_smoke(self) -> None:
        inputs = self.inputs(torch.float32)
        first, second = self.call(*inputs), self.call(*inputs)
        self._check_outputs(first, torch.float32)
        assert _all_finite(first)
        assert _same(first, second)

    def test_bad_input(self) -> None:
        cases = self.bad_cases()
        assert cases, "an operation refuses at least one bad call"
        module_class = type(self).module
        takes = set() if module_class is None else set(inspect.signature(module_class).parameters)
        for case in cases:
            _assert_refused(case, lambda case=case: self.call(*case.inputs, **case.keywords))
            if type(self).function is not None and self.module_settings is None and case.keywords \
                    and set(case.keywords) <= takes:
                # the module refuses the same setting, when it is built or at its first call
                _assert_refused(case, lambda case=case: self.module_forward(self.build(**case.keywords), *case.inputs))

    def test_gradcheck(self) -> None:
        if self.gradcheck_skip is not None:
            pytest.skip(self.gradcheck_skip)
        assert self.differentiable, "say in gradcheck_skip why the operation has no gradient"
        inputs = list(self.inputs(torch.float64))
        for i in self.differentiable:
            inputs[i] = inputs[i].detach().requires_grad_(True)

        def of(*wanted: torch.Tensor) -> tuple[torch.Tensor, ...]:
            full = list(inputs)
            for i, tensor in zip(self.differentiable, wanted, strict=True):
                full[i] = tensor
            named = named_outputs(self.grad_output(self.call(*full)))
            return tuple(named[path] for path in paths)

        # the outputs with a gradient (a detached output, such as a label, is no function of the inputs' gradient)
        paths = [path for path, value in named_outputs(self.grad_output(self.call(*inputs))).items()
                 if isinstance(value, torch.Tensor) and value.requires_grad]
        assert paths, "no output has a gradient: say why in gradcheck_skip"
        # fast mode compares one random projection of the Jacobians: a wrong gradient fails it all the same
        assert torch.autograd.gradcheck(of, tuple(inputs[i] for i in self.differentiable), fast_mode=True)

    def test_module_equals_function(self) -> None:
        if self.module_equals_function_skip is not None:
            pytest.skip(self.module_equals_function_skip)
        function = type(self).function
        assert function is not None and type(self).module is not None, \
            "say in module_equals_function_skip why there is no module, or no function"
        inputs = self.inputs(torch.float32)
        module = self.build()
        attributes = self.attributes(module)
        if self.module_settings is None:
            assert attributes == self.settings, "the module holds the settings it was built with"
        from_module = self.module_forward(module, *inputs)
        from_function = function(*inputs, **{**attributes, **self.per_call()})
        assert _same(output_tensors(from_module), output_tensors(from_function))

    def test_float32_matches_float64(self) -> None:
        if self.float64_skip is not None:
            pytest.skip(self.float64_skip)
        single, double = self.call(*self.inputs(torch.float32)), self.call(*self.inputs(torch.float64))
        self._check_outputs(double, torch.float64)
        tolerance = self.float32_tolerance * torch.finfo(torch.float32).eps
        for path, value in named_outputs(double).items():
            other = named_outputs(single)[path]
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                torch.testing.assert_close(other.double(), value, rtol=tolerance, atol=tolerance, msg=path)
            elif isinstance(value, torch.Tensor):
                assert torch.equal(other, value), path
            elif isinstance(value, float):
                assert other == value or abs(other - value) <= tolerance * max(1.0, abs(value)), path
            else:
                assert other == value, path

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_half_precision(self, dtype: torch.dtype) -> None:
        if self.half_precision_skip is not None:
            pytest.skip(self.half_precision_skip)
        with torch.autocast("cpu", dtype=dtype):
            out = self.call(*self.inputs(dtype))
        named = named_outputs(out)
        assert set(named) == set(self.outputs)
        for path, want in self.outputs.items():
            if not isinstance(want, type):
                assert tuple(named[path].shape) == tuple(want[0]), path
        assert _all_finite(out)

    def test_compile(self) -> None:
        if not self.compiles:
            pytest.skip("the documentation does not say that this operation compiles whole")
        function = type(self).function
        assert function is not None
        torch._dynamo.reset()
        inputs = self.inputs(torch.float32)
        compiled = torch.compile(function, backend="eager", fullgraph=True)

        def run(operation: Callable[..., Any]) -> Any:
            # without value checks (their host synchronisations are what a compiled caller turns off) and with
            # the global random source in place of a torch.Generator, which Dynamo does not trace
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                return operation(*inputs, **{**self.settings, "validate_args": False})

        assert _same(run(compiled), run(function))


def public_functions() -> set[str]:
    """The names of :mod:`evidential_prvr.functional`'s ``__all__``."""
    from evidential_prvr import functional

    return set(functional.__all__)


def public_modules() -> set[type[torch.nn.Module]]:
    """Every ``nn.Module`` class exported by :mod:`evidential_prvr` or one of its public submodules, except the
    base class :class:`~evidential_prvr.PresetModule` (no operation of its own)."""
    import evidential_prvr

    namespaces = [evidential_prvr] + [getattr(evidential_prvr, name) for name in evidential_prvr.__all__
                                      if isinstance(getattr(evidential_prvr, name), types.ModuleType)]
    found = set()
    for namespace in namespaces:
        for name in getattr(namespace, "__all__", ()):
            value = getattr(namespace, name)
            if isinstance(value, type) and issubclass(value, torch.nn.Module):
                found.add(value)
    return found - {evidential_prvr.PresetModule}


def missing_entries(entries: Iterable[type[OperationTester]]) -> tuple[list[str], list[str]]:
    """The public functions and modules that no entry among ``entries`` names, sorted."""
    entries = list(entries)
    functions = {entry.function.__name__ for entry in entries if entry.function is not None}
    modules = {entry.module for entry in entries if entry.module is not None}
    return (sorted(public_functions() - functions),
            sorted(m.__name__ for m in public_modules() - modules))
