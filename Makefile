# The README's two commands:  `make run`  (the main job)  and  `make test`.
# Both create .venv on first use and install convsuite into it (editable, with
# the Cython extension compiled and the numba, test and bench extras), so a
# fresh clone needs nothing but Python 3.10+ and a C compiler.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.convsuite-installed
EXTRAS ?= test,numba,bench,dask,nets,sass

# A broken extension must fail the install here, not silently disable a backend.
export CONVSUITE_REQUIRE_EXTENSION := 1

.PHONY: install run test lint format clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard cython_src/*.pyx cython_src/*.pxd)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
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

clean:
	rm -rf $(VENV) build *.egg-info convsuite/_cython/*.so cython_src/*.c
