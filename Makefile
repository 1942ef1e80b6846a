# pdeladder: the two commands of the Quick start are `make demo` and `make test`.
# Both create the virtual environment on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Python 3.12 from pyenv (through .python-version) or whatever python3.12 is on PATH.
PYTHON ?= $(shell command -v python3.12 2>/dev/null || echo python3)
export RAY_USAGE_STATS_ENABLED := 0
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export OMP_NUM_THREADS ?= 1

.PHONY: venv browser demo test test-all lint bench clean

venv: $(STAMP)

# The worked plugin family (examples/plugins/helmholtz) is installed too: its end-to-end test
# runs in `make test`.
$(STAMP): pyproject.toml examples/plugins/helmholtz/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet -e examples/plugins/helmholtz
	touch $(STAMP)

# Debian's chromium + chromedriver for the Prefect UI test (idempotent; apt, needs root).
browser:
	bash deploy/install-browser.sh

demo: venv
	$(VENV)/bin/pdeladder demo

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Tests marked `serial` need the machine to themselves: they run after the parallel ones.
test: lint browser
	$(VENV)/bin/pytest -m "not slow and not serial" -n 2 --durations=25
	$(VENV)/bin/pytest -m "serial and not slow" --durations=5

test-all: lint browser
	$(VENV)/bin/pytest -m "not serial" -n 2
	$(VENV)/bin/pytest -m serial

bench: venv
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	for b in benchmarks/[a-z]*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
