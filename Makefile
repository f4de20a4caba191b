# Faultline: `make demo` runs the pipeline end to end; `make test` runs the suite. Both set up first.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.faultline-setup
export FAULTLINE_CACHE ?= $(HOME)/.cache/faultline

.PHONY: setup demo test lint ui browser-deps bench clean

setup: $(STAMP)

# Idempotent: a second run does nothing; a fresh clone reuses pip's cache and the cached Horovod wheel.
$(STAMP): requirements.lock pyproject.toml deployments/setup/build_horovod.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip==25.3 wheel setuptools
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.lock
	wheel=$$(bash deployments/setup/build_horovod.sh $(PY)) && \
	  $(PY) -m pip install -q --disable-pip-version-check --no-deps "$$wheel"
	$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

demo: setup
	$(VENV)/bin/faultline run --profile local

test: setup browser-deps
	$(PY) -m pytest tests

lint: setup
	$(VENV)/bin/ruff check flows tasks gpu_kernels deployments tests
	$(VENV)/bin/ruff format --check flows tasks gpu_kernels deployments tests

# A local Prefect stack: server (SQLite) + pools + every deployment in prefect.yaml + a worker; prints the URL.
ui: setup
	$(PY) -m deployments.stack up --port $${PORT:-4200}

# The browser tests drive Debian's Chromium (no Playwright browser download).
browser-deps:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

bench: setup
	$(VENV)/bin/faultline bench all

clean:
	rm -rf .faultline
