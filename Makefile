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

.PHONY: demo test system venv images ts lint proto clean constraints

system:
	@bash scripts/setup-system.sh

# The llama-cpp-python wheel takes minutes to compile on 2 cores: build it once
# into a cache outside the tree, then every later venv installs it in seconds.
# Portable x86-64-v3 code (AVX2/FMA/F16C), never the build machine's own flags:
# some VMs advertise AMX without granting its register state, and natively
# compiled ggml dies there with a general protection fault. The cache folder is
# keyed by version AND flags, and pip's own wheel cache is bypassed (it would
# silently reuse an earlier build made with other flags).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
LLAMA_KEY := $(shell printf '%s %s' '$(LLAMA_VERSION)' '$(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-12)
LLAMA_WHEELS := $(WHEEL_CACHE)/llama-$(LLAMA_VERSION)-$(LLAMA_KEY)

$(LLAMA_WHEELS)/.built:
	@mkdir -p $(LLAMA_WHEELS)
	@echo "[setup] compiling llama-cpp-python $(LLAMA_VERSION) once, portable x86-64-v3 (about 5 minutes on 2 cores)"
	@CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(PYTHON) -m pip wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python \
	  llama-cpp-python==$(LLAMA_VERSION) -w $(LLAMA_WHEELS)
	@printf '%s\n' '$(LLAMA_CMAKE_ARGS)' > $(LLAMA_WHEELS)/cmake-args.txt
	@touch $@

# Two distributions from the tree, in one pip command so the daemon's
# requirement `sclate` is met by the client next to it: the client `sclate`
# (the CLI and the stubs, clients/python) and the daemon `sclated` (the root).
$(VENV)/.stamp: pyproject.toml clients/python/pyproject.toml constraints.txt $(LLAMA_WHEELS)/.built
	@echo "[setup] Python environment in $(VENV)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q --find-links $(LLAMA_WHEELS) "llama-cpp-python==$(LLAMA_VERSION)"
	@$(PY) -m pip install -q --find-links $(LLAMA_WHEELS) -c constraints.txt -e ./clients/python -e ".[dev,model,ray]"
	@touch $@

# Gaia2's engine (ARE) pins numpy, pandas and pydantic exactly: it gets its own
# environment, which the Gaia2 world process runs in (adapters/gaia2/_world.py).
ARE_VENV := .venv-are
$(ARE_VENV)/.stamp: adapters/gaia2/requirements-are.txt
	@echo "[setup] Gaia2's engine (ARE) in $(ARE_VENV)"
	@test -x $(ARE_VENV)/bin/python || $(PYTHON) -m venv $(ARE_VENV)
	@$(ARE_VENV)/bin/python -m pip install -q --upgrade pip
	@$(ARE_VENV)/bin/python -m pip install -q -r adapters/gaia2/requirements-are.txt
	@touch $@

# SWE-bench's grading (the swebench package) brings datasets, modal and docker: its own
# environment too, which the grading process runs in (adapters/swebench/_grading.py).
SWEBENCH_VENV := .venv-swebench
$(SWEBENCH_VENV)/.stamp: adapters/swebench/requirements-swebench.txt
	@echo "[setup] SWE-bench's grading (swebench) in $(SWEBENCH_VENV)"
	@test -x $(SWEBENCH_VENV)/bin/python || $(PYTHON) -m venv $(SWEBENCH_VENV)
	@$(SWEBENCH_VENV)/bin/python -m pip install -q --upgrade pip
	@$(SWEBENCH_VENV)/bin/python -m pip install -q -r adapters/swebench/requirements-swebench.txt
	@touch $@

# The trainers' own code (SkyRL, verl, CPU torch) checks our exports
# (tests/trainers/validate_exports.py): its own environment, about 2 GB and 3
# minutes. Pinned with --no-deps: skyrl declares Python >= 3.12 and is run on 3.11
# (see the script), so pip must not re-resolve its requirements.
TRAINERS_VENV := .venv-trainers
$(TRAINERS_VENV)/.stamp: tests/trainers/requirements-trainers.txt
	@echo "[setup] the trainers' validation environment (SkyRL, verl) in $(TRAINERS_VENV)"
	@test -x $(TRAINERS_VENV)/bin/python || $(PYTHON) -m venv $(TRAINERS_VENV)
	@$(TRAINERS_VENV)/bin/python -m pip install -q --upgrade pip
	@$(TRAINERS_VENV)/bin/python -m pip install -q --no-deps --ignore-requires-python -r tests/trainers/requirements-trainers.txt
	@touch $@

venv: $(VENV)/.stamp $(ARE_VENV)/.stamp $(SWEBENCH_VENV)/.stamp $(TRAINERS_VENV)/.stamp

# Sandbox images are built locally (debootstrap base, then layers); content-hashed
# tags make this a no-op when no recipe changed.
images: system venv
	@$(VENV)/bin/sclated images build

# The TypeScript client's dependencies, from its lock file.
clients/typescript/node_modules/.package-lock.json: clients/typescript/package-lock.json
	@echo "[setup] TypeScript client dependencies (npm ci)"
	@cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error

ts: clients/typescript/node_modules/.package-lock.json

demo: system venv images
	@$(VENV)/bin/sclated demo $(if $(DATA),--data-dir $(DATA),)

test: system venv images ts
	@echo "[test] ruff"
	@$(VENV)/bin/ruff check .
	@echo "[test] mypy"
	@$(VENV)/bin/mypy
	@echo "[test] pytest (unit, API, real daemon processes, Docker sandboxes, the embedded model)"
	@$(PY) -m pytest -q -p no:cacheprovider -rs --durations=25
	@echo "[test] TypeScript client against a real daemon"
	@cd clients/typescript && SCLATED=$(CURDIR)/$(VENV)/bin/sclated npm test --silent

# Pin what the venv resolved (run after changing dependencies in pyproject.toml).
constraints: venv
	@{ sed -n '1,3p' constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v '^sclate'; } > constraints.txt.new && mv constraints.txt.new constraints.txt

lint: venv
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/mypy

proto: venv
	@$(PY) -m sclated.api.protogen

clean:
	rm -rf $(VENV) $(ARE_VENV) $(SWEBENCH_VENV) $(TRAINERS_VENV) build dist .pytest_cache .mypy_cache .ruff_cache
