"""Sphinx configuration for the evidential-prvr API documentation."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "evidential-prvr"
author = "evidential-prvr developers"
copyright = "2026, evidential-prvr developers"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
nitpicky = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
