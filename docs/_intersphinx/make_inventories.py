"""Write the intersphinx inventories the documentation links against, so that it builds offline.

Sphinx resolves a reference such as ``:class:`torch.Tensor``` through the ``objects.inv`` of the
project that documents it. Neither this machine nor CI can download those files, so this script writes
small inventories (Sphinx inventory format version 2) that list exactly the external names these docs
reference, each with its real address on the project's site. ``docs/conf.py`` points
``intersphinx_mapping`` at the generated files; links in the built pages go to the real sites.

Run after adding a reference to a new external name (the ``-n`` build reports it as unresolved)::

    python docs/_intersphinx/make_inventories.py

Each entry is ``(name, domain:role, uri)``; ``uri`` is relative to the project's base address in
``intersphinx_mapping`` and a trailing ``$`` stands for the name (the format's shorthand).
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

INVENTORIES: dict[str, tuple[str, str, list[tuple[str, str, str]]]] = {
    "python-objects.inv": ("Python", "3", [
        ("bool", "py:class", "library/functions.html#$"),
        ("int", "py:class", "library/functions.html#$"),
        ("float", "py:class", "library/functions.html#$"),
        ("str", "py:class", "library/stdtypes.html#$"),
        ("tuple", "py:class", "library/stdtypes.html#$"),
        ("list", "py:class", "library/stdtypes.html#$"),
        ("dict", "py:class", "library/stdtypes.html#$"),
        ("object", "py:class", "library/functions.html#$"),
        ("True", "py:data", "library/constants.html#$"),
        ("False", "py:data", "library/constants.html#$"),
        ("None", "py:data", "library/constants.html#$"),
        ("TypeError", "py:exception", "library/exceptions.html#$"),
        ("ValueError", "py:exception", "library/exceptions.html#$"),
        ("FileNotFoundError", "py:exception", "library/exceptions.html#$"),
        ("enum.IntEnum", "py:class", "library/enum.html#$"),
        ("typing.NamedTuple", "py:class", "library/typing.html#$"),
        ("collections.abc.Callable", "py:class", "library/collections.abc.html#$"),
        ("dataclasses.replace", "py:function", "library/dataclasses.html#$"),
        ("ast.literal_eval", "py:function", "library/ast.html#$"),
        ("pathlib.Path", "py:class", "library/pathlib.html#$"),
        ("os.replace", "py:function", "library/os.html#$"),
        ("sequence", "std:term", "glossary.html#term-sequence"),
        ("iterable", "std:term", "glossary.html#term-iterable"),
    ]),
    "torch-objects.inv": ("PyTorch", "stable", [
        ("torch.Tensor", "py:class", "tensors.html#$"),
        ("torch.LongTensor", "py:class", "tensors.html#data-types"),
        ("torch.dtype", "py:class", "tensor_attributes.html#$"),
        ("torch.device", "py:class", "tensor_attributes.html#$"),
        ("torch.Generator", "py:class", "generated/torch.Generator.html#$"),
        ("torch.nn.Module", "py:class", "generated/torch.nn.Module.html#$"),
        # the defining module's name, under which autodoc writes the base class of every nn.Module
        ("torch.nn.modules.module.Module", "py:class", "generated/torch.nn.Module.html#torch.nn.Module"),
        ("torch.optim.Optimizer", "py:class", "optim.html#torch.optim.Optimizer"),
        ("torch.optim.optimizer.Optimizer", "py:class", "optim.html#torch.optim.Optimizer"),
        ("torch.nn.MultiheadAttention", "py:class", "generated/torch.nn.MultiheadAttention.html#$"),
        ("torch.compile", "py:function", "generated/torch.compile.html#$"),
        ("torch.kthvalue", "py:function", "generated/torch.kthvalue.html#$"),
        ("torch.median", "py:function", "generated/torch.median.html#$"),
        ("torch.autocast", "py:class", "amp.html#$"),
        ("torch.utils.data.DataLoader", "py:class", "data.html#$"),
        ("torch.utils.tensorboard", "py:module", "tensorboard.html#module-torch.utils.tensorboard"),
        ("torch.distributions.Distribution.set_default_validate_args", "py:method",
         "distributions.html#torch.distributions.distribution.Distribution.set_default_validate_args"),
    ]),
    "numpy-objects.inv": ("NumPy", "stable", [
        ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#$"),
        ("numpy.median", "py:function", "reference/generated/numpy.median.html#$"),
        ("numpy.memmap", "py:class", "reference/generated/numpy.memmap.html#$"),
        ("numpy.random.default_rng", "py:function", "reference/random/generator.html#$"),
        ("numpy.random.Generator", "py:class", "reference/random/generator.html#$"),
    ]),
    "scipy-objects.inv": ("SciPy", "stable", [
        ("scipy.special.digamma", "py:data", "reference/generated/scipy.special.digamma.html#$"),
        ("scipy.stats.dirichlet", "py:data", "reference/generated/scipy.stats.dirichlet.html#$"),
    ]),
    "pot-objects.inv": ("POT Python Optimal Transport", "0.9", [
        ("ot.sinkhorn", "py:function", "all.html#$"),
        ("ot.solve_batch", "py:function", "all.html#$"),
        ("ot.emd", "py:function", "all.html#$"),
    ]),
}


def inventory_bytes(project: str, version: str, entries: list[tuple[str, str, str]]) -> bytes:
    """An ``objects.inv`` (format version 2) holding ``entries``, sorted for a stable file."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        f"# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    ).encode()
    lines = "".join(f"{name} {role} 1 {uri} -\n" for name, role, uri in sorted(entries))
    return header + zlib.compress(lines.encode(), 9)


def main() -> None:
    for filename, (project, version, entries) in INVENTORIES.items():
        path = HERE / filename
        path.write_bytes(inventory_bytes(project, version, entries))
        print(f"{path.relative_to(HERE.parent.parent)}: {len(entries)} names")


if __name__ == "__main__":
    main()
