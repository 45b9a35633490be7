"""Sphinx configuration of convsuite's documentation site.

Built by ``make docs``: ``sphinx-build -W --keep-going -b html docs docs/_build/html``
(every warning is an error), then the doctest builder over the same doctrees.
The site documents the convsuite that is installed (``make install`` puts the
checkout there, editable); the tables of backends, algorithms and layers are
generated from it by ``_ext/convsuite_docs.py`` at build time.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

import convsuite

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

project = "convsuite"
author = "the convsuite authors"
copyright = "the convsuite authors, MIT licence"  # noqa: A001 (Sphinx's name)
release = convsuite.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.doctest",
    "numpydoc",
    "convsuite_docs",
]

root_doc = "index"
source_suffix = {".rst": "restructuredtext"}
# measurements/ holds the dated records (linked with :record:, copied as they are);
# sample-compare/ a sample run's files, shown as figures.
exclude_patterns = ["_build", "measurements", "sample-compare", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
default_role = "literal"  # `name` in a page is code, as in the docstrings' Markdown habit
pygments_style = "default"

# --- API reference: autosummary over each module's __all__ ------------------------------------
autosummary_generate = True
autosummary_ignore_module_all = False  # a module's members are its __all__
autosummary_imported_members = True  # convsuite.__all__ re-exports names defined in private modules
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
autodoc_member_order = "bysource"
autodoc_default_options = {"exclude-members": "__init__, __new__"}
# A name convsuite re-exports from one of its public subpackages (convsuite.Conv2D is
# convsuite.nn.Conv2D) is documented once, under the subpackage, and linked from convsuite's page.
# Data (a constant, a table) in a module's __all__ is listed too, though autosummary finds
# only data with a doc comment in the module itself: its names are read here from the
# modules the API page lists.
_API_MODULES = [
    line.strip()
    for line in (Path(__file__).resolve().parent / "api" / "index.rst").read_text().splitlines()
    if line.startswith("   convsuite")
]


def _data_names(name: str) -> list[str]:
    module = importlib.import_module(name)
    return [
        item
        for item in getattr(module, "__all__", ())
        if not (callable(getattr(module, item)) or inspect.ismodule(getattr(module, item)))
    ]


autosummary_context = {
    "home_of": {
        name: f"{sub.__name__.removeprefix('convsuite.')}.{name}"
        for sub in (convsuite.nn, convsuite.nets)
        for name in convsuite.__all__
        if name in sub.__all__ and getattr(sub, name) is getattr(convsuite, name)
    },
    "data_of": {name: _data_names(name) for name in _API_MODULES},
}
numpydoc_show_class_members = False  # the class template lists members through autodoc
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
# Checks that would let a reader down: no docstring, an unknown or out-of-order
# section, parameters documented that the signature does not have.
numpydoc_validation_checks = {"GL06", "GL07", "GL08", "PR02", "PR10", "SS01"}

# --- doctests: the examples of the guide pages ------------------------------------------------
# Only explicit ``.. doctest::``/``.. testcode::`` blocks run: docstrings may show GPU
# examples, the pages' examples are CPU-only and quick.
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import os, tempfile
import numpy as np
import convsuite as cs
# A private tuning cache, the settings of a fresh process, and the numpy backend
# for ``auto`` (no JIT compile: the examples run in seconds, whatever is installed).
_docs_cache = tempfile.TemporaryDirectory()
os.environ["CONVSUITE_CACHE_DIR"] = _docs_cache.name
for _name in ("CONVSUITE_BACKEND", "CONVSUITE_AUTOTUNE", "CONVSUITE_PRECISION", "CONVSUITE_TUNE_BUDGET"):
    os.environ.pop(_name, None)
cs.set_autotune(None)
cs.set_precision(None)
cs.set_backend("numpy")
"""
doctest_global_cleanup = """
cs.set_backend(None)
_docs_cache.cleanup()
"""

# --- HTML ---------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"convsuite {release}"
html_static_path = ["_static"]
html_css_files = ["convsuite.css"]
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": []}
