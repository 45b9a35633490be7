# The README's two commands:  `make run`  (the main job)  and  `make test`.  `make help` lists every target.
# Both create .venv on first use and install convsuite into it (editable, with the Cython extension
# compiled), so a fresh clone needs nothing but Python 3.10+ and a C compiler.
#
# The record of performance over time is the asv suite (benchmarks/, asv.conf.json):
#   make bench-publish   asv on HEAD for this machine, then the site in .asv/html (git ignores .asv/)
#   make bench-compare   asv continuous: HEAD against its merge base with main (see below)
# `make docs` builds the site (docs/_build/html; warnings are errors) and runs its
# examples as doctests. asv and Sphinx are installed by the targets that use them, on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.convsuite-installed
comma  := ,

# What `make install` puts in .venv: what `make run` and `make test` use on this machine, nothing more.
#   numba  the multicore rung (make run compares every CPU rung; the tests check it)
#   bench  compare's plots (matplotlib), the joblib rung, compare --cases FILE.yaml (make run, the tests)
#   nets   the bundled digits of `convsuite train` (scikit-learn; the tests train on them)
#   test   pytest, pytest-xdist, hypothesis, ruff (make test)
#   lint   ruff and mypy (make lint)
#   dask   Dask arrays in and out: 134 tests of the fast tier need it (tests/test_distributed_dask.py,
#          test_reliability_objects.py, two more) and would skip without it. Measured from a fresh clone
#          on the 2-core machine: 36 MB of the 1.59 GB venv, ~2 s of CPU, no wall-time difference above
#          the noise (69-77 s with or without it).
#   cuda   CuPy, only where `nvidia-smi -L` lists a GPU (elsewhere the GPU tests skip with the reason).
# Not here: asv (the bench-* targets install it on first use) and Sphinx (make docs, likewise).
GPU    := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
EXTRAS ?= test,lint,numba,bench,dask,nets$(if $(GPU),$(comma)cuda)
# torch, CPU build, in the default install on purpose: it is the anchor `make run` compares every
# backend against (a user's first question is "how does this compare to PyTorch?") and the tests'
# cross-check (the nn layers, convsuite.torch, torch tensors in and out: they skip without it).
# With its own dependencies (sympy, networkx) it is 862 MB of the 1.59 GB venv and ~13 s of the
# install. A CPU build because nothing here needs CUDA from torch; that exact version is one where
# pip finds it: on this machine, the +cpu wheel on disk (pip's find-links); elsewhere pass
# ANCHORS_PIP="--index-url https://download.pytorch.org/whl/cpu" (PyPI's Linux torch is the CUDA
# build, several GB). `make install ANCHORS=` leaves torch out: the anchor rows and cross-checks skip.
ANCHORS ?= torch==2.13.0
ANCHORS_PIP ?=

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

# make test: the fast tier, every backend, algorithm, option class and error path once (what a
# change must pass); make test-all adds the exhaustive tier (tests/conftest.py marks it). Both
# spread the tests over the cores (pytest-xdist) and write no .pytest_cache.
PYTEST := $(BIN)/python -m pytest -q -n auto -p no:cacheprovider

.PHONY: help install install-bench run test test-all lint format docs bench-check bench-compare bench-publish clean

help:  ## list the targets, one line each
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: $(STAMP)  ## create .venv and install convsuite (editable) with what run and test use here

$(STAMP): pyproject.toml setup.py $(wildcard cython_src/*.pyx cython_src/*.pxd)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	$(if $(ANCHORS),$(BIN)/python -m pip install --quiet $(ANCHORS_PIP) "$(ANCHORS)" || echo "note: $(ANCHORS) not installed: the torch anchor rows and torch cross-checks will be skipped")
	touch $(STAMP)

run: $(STAMP)  ## the main job: this machine and its backends, then every backend on the default workload
	$(BIN)/convsuite info
	$(BIN)/convsuite compare --out compare-out

test: $(STAMP)  ## the fast tier of the test suite (what CI runs)
	$(PYTEST) -m "not exhaustive"

test-all: $(STAMP)  ## every test, the exhaustive tier included
	$(PYTEST)

# ruff: the rule set and the formatter settings are in pyproject.toml; .pre-commit-config.yaml runs the same.
LINTED := convsuite tests benchmarks tools setup.py

lint: $(STAMP)  ## ruff check, ruff format --check and mypy (the public API and the core), as CI runs them
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

format: $(STAMP)  ## apply ruff's fixes and formatting
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)

# An extra's requirements, read from the installed metadata of convsuite (its [project.optional-dependencies]
# list), installed without rebuilding convsuite itself.
extra_requirements = $(BIN)/python -c 'import importlib.metadata as m; print("\n".join(r.split(";")[0] for r in m.requires("convsuite") if r.replace(" ", "").endswith("extra==\"$(1)\"")))'

DOCS_STAMP := $(VENV)/.convsuite-docs-installed
BENCH_STAMP := $(VENV)/.convsuite-asv-installed

$(DOCS_STAMP): $(STAMP)
	$(call extra_requirements,docs) > $(VENV)/docs-requirements.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/docs-requirements.txt
	touch $(DOCS_STAMP)

$(BENCH_STAMP): $(STAMP)
	$(call extra_requirements,asv) > $(VENV)/asv-requirements.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/asv-requirements.txt
	touch $(BENCH_STAMP)

install-bench: $(BENCH_STAMP)  ## add asv to .venv (the bench-* targets do it on first use)

# From scratch every time: the tables of backends, algorithms and layers are read from the code.
docs: $(DOCS_STAMP)  ## build the site in docs/_build/html (warnings are errors) and run its doctests
	rm -rf docs/_build docs/api/generated
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html
	$(BIN)/sphinx-build -W --keep-going -b doctest -d docs/_build/html/.doctrees docs docs/_build/doctest

bench-check: $(BENCH_STAMP)  ## asv check: every benchmark imports and sets up, in this environment
	$(BIN)/asv check --python=same

bench-compare: $(BENCH_STAMP)  ## asv continuous: HEAD against its merge base with main; says what got slower
	@test -n "$(BENCH_BASE)" || { echo "bench-compare: no merge base with $(BENCH_MAIN); set BENCH_BASE=<commit>"; exit 2; }
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv continuous --factor $(BENCH_FACTOR) --split --show-stderr \
	    --attribute rounds=$(BENCH_ROUNDS) --attribute repeat="(5,20,20.0)" \
	    --bench "$(BENCH_FILTER)" $(BENCH_BASE) HEAD

# make bench-publish: every benchmark on HEAD, in asv's environment for this commit (built from
# asv.conf.json's matrix), results added to .asv/results; then the HTML site of every result
# recorded so far, in .asv/html (open .asv/html/index.html, or `$(BIN)/asv preview`).
bench-publish: $(BENCH_STAMP)  ## asv on HEAD for this machine, then the HTML site in .asv/html
	$(BIN)/asv machine --yes >/dev/null
	$(BIN)/asv run --show-stderr --bench "$(BENCH_FILTER)" HEAD^!
	$(BIN)/asv publish

clean:  ## remove .venv, the build folders and the compiled extension
	rm -rf $(VENV) build *.egg-info convsuite/_cython/*.so cython_src/*.c
