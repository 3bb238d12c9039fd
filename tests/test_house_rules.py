"""The rules of version 3.0's house, read from the source: plain constructors, real functions,
one ``from_preset``, no two files that import each other. Each test names what breaks a rule."""

from __future__ import annotations

import ast
import inspect
import pathlib
import textwrap

import pytest
import torch

import evidential_prvr as ep
from evidential_prvr import functional as F
from evidential_prvr import probabilistic

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("evidential_prvr", "reference_models")


def _files(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _module_names() -> dict[str, pathlib.Path]:
    names = {}
    for package in PACKAGES:
        for path in _files(package):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names[".".join(parts)] = path
    return names


def _imports(module: str, path: pathlib.Path, known: dict[str, pathlib.Path]) -> set[str]:
    """The project modules that ``module`` imports anywhere in its file (inside functions and
    ``TYPE_CHECKING`` blocks included)."""

    def known_prefix(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(filter(None, (known_prefix(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                name = submodule if submodule in known else known_prefix(target)
                if name:
                    found.add(name)
    found.discard(module)
    return found


def test_no_two_files_import_each_other():
    known = _module_names()
    graph = {module: _imports(module, path, known) for module, path in known.items()}
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a in graph.get(b, ())})
    assert pairs == [], f"files that import each other: {pairs}"


def test_the_circle_check_sees_an_import_inside_a_function(tmp_path):
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from a import x\n    return x\n")
    known = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    assert _imports("b", known["b"], known) == {"a"}
    assert _imports("a", known["a"], known) == {"b"}


@pytest.mark.parametrize("word", ["settings_constructor", "loss_entries", "insert_docs", "settings_properties",
                                  "module_from_settings", "__wrapped__"])
def test_no_library_file_uses_the_generating_machinery(word):
    users = [str(p.relative_to(ROOT)) for p in _files("evidential_prvr") if word in p.read_text(encoding="utf-8")]
    assert users == [], f"{word} in {users}"


def test_no_library_module_holds_its_hyperparameters_through_properties():
    """torch.nn's idiom: a module stores its arguments as plain attributes, so no property has a setter and no
    settings object is held (and rebuilt) inside a module."""
    offenders = []
    for path in _files("evidential_prvr"):
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Attribute) and d.attr == "setter" for d in node.decorator_list):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}.setter")
        if "self._settings" in text:
            offenders.append(f"{path.relative_to(ROOT)}: self._settings")
    assert offenders == []


@pytest.mark.parametrize("attribute", ["__signature__", "__doc__"])
def test_no_library_file_assigns_a_signature_or_a_docstring(attribute):
    offenders = []
    for path in _files("evidential_prvr"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            if any(isinstance(t, ast.Attribute) and t.attr == attribute for t in targets):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_every_public_function_is_a_def_of_its_own_name():
    for name in F.__all__:
        obj = getattr(F, name)
        if not inspect.isfunction(obj):
            continue
        assert obj.__name__ == name and obj.__code__.co_name == name, name
        tree = ast.parse(pathlib.Path(inspect.getsourcefile(obj) or "").read_text(encoding="utf-8"))
        defs = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == name]
        assert defs, f"grep 'def {name}' finds nothing in its file"
        assert obj.__doc__ and ast.get_docstring(defs[0], clean=False) == obj.__doc__, \
            f"{name}: the docstring shown is not the one written in its def"


def _public_modules() -> list[type[torch.nn.Module]]:
    classes = [getattr(space, name) for space in (ep, probabilistic) for name in space.__all__]
    bases = {ep.PresetModule}  # constructed through its subclasses only
    return sorted({c for c in classes if inspect.isclass(c) and issubclass(c, torch.nn.Module) and c not in bases},
                  key=lambda c: c.__qualname__)


@pytest.mark.parametrize("module", _public_modules(), ids=lambda c: c.__qualname__)
def test_every_public_constructor_names_its_parameters(module):
    init = module.__dict__.get("__init__")
    assert init is not None and inspect.isfunction(init), f"{module.__qualname__} has no __init__ of its own"
    kinds = {p.kind for p in inspect.signature(init).parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}, module.__qualname__


def test_from_preset_is_written_once():
    writers = [str(p.relative_to(ROOT)) for package in PACKAGES for p in _files(package)
               if "def from_preset(" in p.read_text(encoding="utf-8")]
    assert writers == ["evidential_prvr/_module_bases.py"]


def _functional_files() -> dict[str, str]:
    """Each public function of ``evidential_prvr.functional`` and its private kernel (``_name``, which a module may
    call with the same arguments) -> the name of the file that defines it."""
    owners = {}
    for path in (ROOT / "evidential_prvr" / "functional").glob("_*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name.removeprefix("_") in F.__all__:
                owners[node.name] = path.name
    return owners


def _called_functional_files(module: type[torch.nn.Module], owners: dict[str, str]) -> set[str]:
    called = set()
    for method in ("forward", "details"):
        if method in module.__dict__:
            tree = ast.parse(textwrap.dedent(inspect.getsource(module.__dict__[method])))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    is_method = isinstance(func, ast.Attribute) and getattr(func.value, "id", None) == "self"
                    name = getattr(func, "id", None) or getattr(func, "attr", None)
                    if name in owners and not is_method:
                        called.add(owners[name])
    return called


#: The modules that compose others of the package, each in a file named for what it holds: HUD's objective holds
#: HUD's attention, composition and similarity modules and calls HUD's two loss functions with its own ``tau``.
COMPOSITES = ("HUDObjective",)


@pytest.mark.parametrize("module", _public_modules(), ids=lambda c: c.__qualname__)
def test_a_module_lives_in_the_file_named_like_its_function(module):
    """The contributing guide's rule (mirrored trees): the module whose ``forward`` calls the function of
    ``functional/_x.py`` is written in ``_x.py`` (``evidential_prvr/`` or ``probabilistic/``). A module that
    composes others (the criterion, HUD's objective, the heads) has a file named for what it holds."""
    called = _called_functional_files(module, _functional_files())
    if called and module.__qualname__ not in COMPOSITES:
        assert called == {pathlib.Path(inspect.getfile(module)).name}, (module.__qualname__, called)


def test_the_file_rule_sees_a_module_in_the_wrong_file():
    class Misplaced(torch.nn.Module):  # defined in this test file, calling the function of _flexible_ot.py
        def forward(self, sim):
            return F.flexible_ot(sim)

    assert _called_functional_files(Misplaced, _functional_files()) == {"_flexible_ot.py"}
    assert pathlib.Path(inspect.getfile(Misplaced)).name != "_flexible_ot.py"


def test_no_underscore_twins():
    """No folder holds both ``x.py`` and ``_x.py``."""
    twins = [str(p.relative_to(ROOT)) for package in PACKAGES for p in _files(package)
             if p.name.startswith("_") and not p.name.startswith("__") and (p.parent / p.name[1:]).exists()]
    assert twins == []
