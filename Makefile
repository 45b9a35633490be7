# The README's two commands:  `make run`  (the main job)  and  `make test`.
# Both create .venv on first use and install convsuite into it (editable, with
# the Cython extension compiled and the numba, test and bench extras), so a
# fresh clone needs nothing but Python 3.10+ and a C compiler.
#
# The record of performance over time is the asv suite (benchmarks/, asv.conf.json):
#   make bench-publish   asv on HEAD for this machine, then the site in .asv/html (git ignores .asv/)
#   make bench-compare   asv continuous: HEAD against its merge base with main (see below)
# `make docs` builds the site (docs/_build/html; warnings are errors) and runs its
# examples as doctests; it alone installs the docs extra (Sphinx), so `make test` does not.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.convsuite-installed
EXTRAS ?= test,numba,bench,dask,nets,sass
# torch CPU: the anchor of compare and of the torch cross-checks in the tests
# (that exact version installs a CPU build; other specs pull a CUDA build of several GB).
ANCHORS ?= torch==2.13.0

# A broken extension must fail the install here, not silently disable a backend.
export CONVSUITE_REQUIRE_EXTENSION := 1
# The dev install compiles the Cython extension for this machine's CPU
# (-march=native); wheels are portable unless this is set (see setup.py).
export CONVSUITE_NATIVE_BUILD ?= 1

# make bench-compare: asv continuous between the merge base with BENCH_MAIN
# and HEAD. Each benchmark runs in BENCH_ROUNDS fresh processes of up to 20
# samples each, so one slow moment of a shared 2-core machine cannot decide
# a verdict; a change is reported when it exceeds BENCH_FACTOR and asv's
# statistical test agrees (docs/asv.rst: how the noise was measured).
BENCH_MAIN   ?= main
BENCH_BASE   ?= $(shell git merge-base $(BENCH_MAIN) HEAD 2>/dev/null)
BENCH_FACTOR ?= 2.0
BENCH_ROUNDS ?= 4
BENCH_FILTER ?= .

.PHONY: install run test lint format clean bench-compare bench-publish docs

install: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard cython_src/*.pyx cython_src/*.pxd)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	$(BIN)/python -m pip install --quiet "$(ANCHORS)" || echo "note: $(ANCHORS) not installed: the torch anchor rows and torch cross-checks will be skipped"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/convsuite info
	$(BIN)/convsuite compare --out compare-out

test: $(STAMP)
	$(BIN)/python -m pytest -q

# ruff: the rule set and the formatter settings are in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check convsuite tests benchmarks tools setup.py
	$(BIN)/ruff format --check convsuite tests benchmarks tools setup.py

format: $(STAMP)
	$(BIN)/ruff check --fix convsuite tests benchmarks tools setup.py
	$(BIN)/ruff format convsuite tests benchmarks tools setup.py

# The docs extra's requirements, read from the installed metadata of convsuite (the
# [project.optional-dependencies] docs list), installed without rebuilding convsuite itself.
DOCS_STAMP := $(VENV)/.convsuite-docs-installed

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -c 'import importlib.metadata as m; print("\n".join(r.split(";")[0] for r in m.requires("convsuite") if r.replace(" ", "").endswith("extra==\"docs\"")))' > $(VENV)/docs-requirements.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/docs-requirements.txt
	touch $(DOCS_STAMP)

# From scratch every time: the tables of backends, algorithms and layers are read from the code.
docs: $(DOCS_STAMP)
	rm -rf docs/_build docs/api/generated
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html
	$(BIN)/sphinx-build -W --keep-going -b doctest -d docs/_build/html/.doctrees docs docs/_build/doctest

bench-compare: $(STAMP)
	@test -n "$(BENCH_BASE)" || { echo "bench-compare: no merge base with $(BENCH_MAIN); set BENCH_BASE=<commit>"; exit 2; }
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv continuous --factor $(BENCH_FACTOR) --split --show-stderr \
	    --attribute rounds=$(BENCH_ROUNDS) --attribute repeat="(5,20,20.0)" \
	    --bench "$(BENCH_FILTER)" $(BENCH_BASE) HEAD

# make bench-publish: every benchmark on HEAD, in asv's environment for this commit (built from
# asv.conf.json's matrix), results added to .asv/results; then the HTML site of every result
# recorded so far, in .asv/html (open .asv/html/index.html, or `$(BIN)/asv preview`).
bench-publish: $(STAMP)
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv run --show-stderr --bench "$(BENCH_FILTER)" HEAD^!
	$(BIN)/asv publish

clean:
	rm -rf $(VENV) build *.egg-info convsuite/_cython/*.so cython_src/*.c
