# Faultline: `make demo` runs the pipeline end to end; `make test` runs the suite. Both set up first.
# On a GPU host (detected, or PROFILE=gpu) setup installs the gpu extra, Horovod with NCCL, Spark's Java runtime
# and the RAPIDS Accelerator jar; `make bundle BUNDLE=dir [TARGET=...]` + `make setup BUNDLE=dir` install offline.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo local)
export FAULTLINE_CACHE ?= $(HOME)/.cache/faultline

.PHONY: setup bundle demo test test-fast lint ui browser-deps bench clean disk-check

# Idempotent and cached: a second run does nothing; a fresh clone installs from ~/.cache/faultline (no download).
setup:
	$(PYTHON) -m deployments.setup install --venv $(VENV) $(if $(BUNDLE),--bundle $(BUNDLE))

bundle:
	@test -n "$(BUNDLE)" || { echo "usage: make bundle BUNDLE=<dir> [TARGET=host|cpu-py311|cpu-py312|cu13-py312]"; exit 2; }
	$(PYTHON) -m deployments.setup bundle --out $(BUNDLE) --target $(or $(TARGET),host) $(if $(NOJAR),--no-jar)

demo: setup
	$(VENV)/bin/faultline run --profile $(PROFILE)

# Every test, real engines included, on TEST_WORKERS processes (a file's tests stay together unless it says
# SPREAD_OVER_WORKERS); prints the 25 slowest.
TEST_WORKERS ?= 3
test: setup browser-deps lint disk-check
	$(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadgroup --durations=25

# The suite writes about 8 GB under the temporary folder; a full disk kills JVMs mid-start with no clear word.
TEST_DISK_GB ?= 12
disk-check:
	@tmp=$${TMPDIR:-/tmp}; free=$$(df -Pk "$$tmp" | awk 'NR==2 {print int($$4 / 1048576)}'); \
	test "$$free" -ge $(TEST_DISK_GB) || { echo "make test: $$tmp has $$free GB free, the suite needs $(TEST_DISK_GB) GB" >&2; exit 2; }

# The inner loop (about a minute): logic, rules, config, the checklist on literal evidence, the kernels' NumPy
# references. No JVM, cluster, Prefect API or CLI run: a test in this lane that starts one fails, naming the marker.
test-fast: setup
	FAULTLINE_TEST_LANE=fast $(PY) -m pytest tests -m "not engine" -q --durations=10 -p no:cacheprovider

lint: setup
	$(VENV)/bin/ruff check flows tasks gpu_kernels deployments tests
	$(VENV)/bin/ruff format --check flows tasks gpu_kernels deployments tests

# A local Prefect stack: server (PostgreSQL) + pools + every deployment in prefect.yaml + a worker; prints the URL.
ui: setup
	$(PY) -m deployments.stack up --port $${PORT:-4200}

# The browser tests drive Debian's Chromium (no Playwright browser download); an offline host skips them.
browser-deps:
	@test -x /usr/bin/chromium || test -n "$(BUNDLE)" || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

bench: setup
	$(VENV)/bin/faultline bench all --profile $(PROFILE)

clean:
	rm -rf .faultline
