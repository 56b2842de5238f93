# The two commands of the README, which work on a fresh machine:
#   make demo   sets up and runs the main job
#   make test   sets up and runs the tests (and lint), exactly what CI runs
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint docs docs-serve bench clean

# A virtual environment with the suite installed in editable mode. Torch goes first, pinned: a bare `torch`
# requirement would pull a multi-GB CUDA build where a CPU build is at hand.
$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

# PPO on CartPole-v1 with the shipped settings, until its evaluation over 100 episodes reaches 475.
demo: setup
	$(VENV)/bin/rl-suite train ppo CartPole-v1

lint: setup
	$(VENV)/bin/ruff check .

# pytest exits non-zero (5) when it collects no tests, so an empty run fails here too.
test: lint
	$(PY) -m pytest -q

# The documentation site (mkdocs.yml) into site/, with --strict as CI builds it: a broken link, a page missing from
# the navigation or a docstring reference that does not resolve fails the build.
docs: setup
	$(VENV)/bin/mkdocs build --strict

docs-serve: setup
	$(VENV)/bin/mkdocs serve

bench: setup
	$(PY) benchmarks/env_throughput.py
	$(PY) benchmarks/vs_sb3.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info site
