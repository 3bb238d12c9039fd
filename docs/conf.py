"""Sphinx configuration for the evidential-prvr documentation.

Build (as CI does)::

    python -m sphinx -n -W --keep-going -b html docs docs/_build/html -q

No network is needed: the intersphinx inventories of Python, PyTorch, NumPy, SciPy and POT are shipped
in ``docs/_intersphinx`` (regenerate them with ``python docs/_intersphinx/make_inventories.py``), and
the gallery examples run locally at build time.
"""

import os
import re
import sys
import typing

DOCS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(DOCS)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(DOCS, "_ext"))

import evidential_prvr  # noqa: E402  (after the path set-up)

project = "evidential-prvr"
author = "evidential-prvr developers"
copyright = "2026, evidential-prvr developers"
release = evidential_prvr.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 served from _static/mathjax: the math renders without a CDN
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
    "sphinx_gallery.gen_gallery",
    "presets_table",
]

# --- autodoc / napoleon -------------------------------------------------------------------------------
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_preprocess_types = True
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the NumPy-style docstrings carry the types
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_inherit_docstrings = False  # nn.Module's own docstrings are not ours to render

# --- cross-references: every reference must resolve (-n) -----------------------------------------------
nitpicky = True
# Empty on purpose: every reference resolves, through the shipped inventories and the helpers at the end
# of this file. A name that cannot resolve is a documentation bug to fix, not to ignore.
nitpick_ignore = []
nitpick_ignore_regex = []
napoleon_type_aliases = {
    # short spellings used in NumPy-style type descriptions
    "Tensor": ":class:`torch.Tensor`",
    "ndarray": ":class:`numpy.ndarray`",
    "Path": ":class:`pathlib.Path`",
    "sequence": ":term:`sequence`",
    "iterable": ":term:`iterable`",
}

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", os.path.join(DOCS, "_intersphinx", "python-objects.inv")),
    "torch": ("https://pytorch.org/docs/stable", os.path.join(DOCS, "_intersphinx", "torch-objects.inv")),
    "numpy": ("https://numpy.org/doc/stable", os.path.join(DOCS, "_intersphinx", "numpy-objects.inv")),
    "scipy": ("https://docs.scipy.org/doc/scipy", os.path.join(DOCS, "_intersphinx", "scipy-objects.inv")),
    "pot": ("https://pythonot.github.io", os.path.join(DOCS, "_intersphinx", "pot-objects.inv")),
}

# --- gallery: examples/ at the repository root, executed at build time ------------------------------------
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "abort_on_example_error": True,
    "remove_config_comments": True,
    "download_all_examples": False,
    "min_reported_time": 0,
    "reset_modules": ("matplotlib", "gallery_setup.one_torch_thread"),
    "reference_url": {"evidential_prvr": None},
    "show_signature": False,
}

exclude_patterns = ["_build", "_intersphinx", "_ext", "auto_examples/*.ipynb", "auto_examples/*.py",
                    "auto_examples/*.zip", "auto_examples/*.md5", "auto_examples/*.codeobj.json"]
templates_path = []
# furo (as kornia's docs use): a wide content column, code blocks that scroll instead of being cut, a dark mode.
html_theme = "furo"
html_static_path = []
html_title = f"evidential-prvr {release}"


# --- reference resolution helpers ---------------------------------------------------------------------------
def _public_bases(app, name, obj, options, bases):
    """Show a class's nearest public ancestor instead of a private helper base (``_LogVarHead`` -> ``Module``)."""
    for i, base in enumerate(bases):
        base = typing.get_origin(base) or base  # a generic base, e.g. Generic[T]
        if isinstance(base, type) and base.__qualname__.startswith("_"):
            bases[i] = next(b for b in base.__mro__[1:] if not b.__qualname__.startswith("_"))
    if len(bases) > 1:  # a private mixin of declarations (its public ancestor is object) is not worth showing
        bases[:] = [b for b in bases if b is not object]


def _resolve_short_names(app, env, node, contnode):
    """Resolve a name written without its module (``HolmesConfig`` in a type description) when exactly one
    documented object of this project ends with it, as Sphinx already does for ``:type:`` fields."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if not target or target.startswith(("evidential_prvr.", "reference_models.", "torch.", "numpy.")):
        return None
    domain = env.get_domain("py")
    suffix = "." + target
    matches = sorted(  # canonical aliases (the private defining module) are the same object: skip them
        name for name, entry in domain.objects.items()
        if name.endswith(suffix) and name.startswith(("evidential_prvr.", "reference_models.")) and not entry.aliased
    )
    if len(matches) != 1:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, "obj", matches[0], node, contnode)


_SHAPE_IN_TYPE = re.compile(
    r"^(?P<head>\s*[\w*][\w, *]* : .*?),\s*shape\s*(?P<shape>\[[^\]]*\]|\([^)]*\))(?P<tail>.*)$"
)


def _shape_out_of_type(app, what, name, obj, options, lines):
    """Move a NumPy-style shape out of a parameter's type into its description.

    ``x : Tensor, shape [Q, V]`` is a common docstring convention, but napoleon would turn ``shape [Q``
    and ``V]`` into class references. The type keeps ``Tensor`` and the description starts with the shape.
    Runs before napoleon.
    """
    for i, line in enumerate(lines):
        match = _SHAPE_IN_TYPE.match(line)
        if not match:
            continue
        lines[i] = match["head"] + match["tail"]
        own_indent = len(line) - len(line.lstrip())
        shape = f"Shape ``{match['shape']}``."
        body = lines[i + 1] if i + 1 < len(lines) else ""
        body_indent = len(body) - len(body.lstrip())
        if body.strip() and body_indent > own_indent:  # the parameter has a description: prepend the shape
            lines[i + 1] = f"{body[:body_indent]}{shape} {body.lstrip()}"
        else:  # no description: the shape becomes it
            lines.insert(i + 1, " " * (own_indent + 4) + shape)


def setup(app):
    app.connect("autodoc-process-docstring", _shape_out_of_type, priority=400)
    app.connect("autodoc-process-bases", _public_bases)
    app.connect("missing-reference", _resolve_short_names)
