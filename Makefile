# torchx_datapipes: the two set-up commands are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip

.PHONY: demo test install install-dev services lint typecheck pytest test-slurm test-ray bench bench-cache clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# torch goes first and pinned, so the resolver never fetches a multi-GB CUDA build;
# matplotlib goes before the rest so pip does not backtrack through old sdists.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q "matplotlib>=3.8"
	$(PIP) install -q -e ".[parquet,zstd,stats]"
	$(BIN)/python -m compileall -q torchx_datapipes   # see below
	touch $@

# An editable install writes no bytecode, and with PYTHONDONTWRITEBYTECODE set Python never does:
# each rank of each job would compile the package again (~0.1 s of its start). pip writes it for a
# wheel; `compileall` writes it here (a file edited later is compiled again when it is imported).

# litdata (a reference of the images and reader benchmarks, whose smoke tests run in `make test`)
# requires torchvision, which pip resolves to a multi-GB CUDA torch: it is installed with --no-deps
# after `pip check` (which would report the missing torchvision); the dev and bench extras list
# its other requirements.
LITDATA_SPEC ?= litdata==0.2.76

# ray[default] (~25 s on top of torch; the Ray e2e test runs in `make test`) with torch pinned as
# a constraint, so it never resolves another torch.
RAY_SPEC ?= ray[default]>=2.40

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml tests/plugins/tdp_testfmt/tdp_testfmt.py tests/plugins/tdp_testfmt/pyproject.toml
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q ./tests/plugins/tdp_testfmt   # a plug-in format known by its entry points alone
	$(PIP) install -q "$(RAY_SPEC)" "$(TORCH_SPEC)"
	$(PIP) check
	$(PIP) install -q --no-deps "$(LITDATA_SPEC)"
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

services:
	bash scripts/services.sh

demo: install
	source $(BIN)/activate && bash examples/run_demo.sh

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/lint-imports .importlinter
	$(BIN)/ruff format --check torchx_datapipes tests components examples benchmarks

typecheck: install-dev
	$(BIN)/mypy

# pytest-xdist: PYTEST_WORKERS processes, each taking whole test files (--dist loadfile), so a file's
# module-scoped fixtures (a Slurm cluster, a Ray head, shared launches) are set up once; the longest
# files go first (tests/xdist_order.py). Servers a test starts or stops are private, on free ports;
# multi-node launches pass a --rdzv_port of their own per file. Three workers on the 2 cores: a test
# spends much of its time waiting (for a launch, a broker, a polled state), so a third worker uses that
# time: 6:46 of pytest against 8:11 with two, same machine, same hour (2026-12-06).
PYTEST_WORKERS ?= 3
pytest: install-dev services
	source $(BIN)/activate && pytest -q --durations=30 -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

test: install-dev services lint typecheck pytest

# Only the cluster-scheduler end-to-end tests (both also run in `make test`): a private two-node
# Slurm cluster, and a private local Ray head (docs/cluster.md "Run on Slurm", "Run on Ray").
test-slurm: install-dev services
	source $(BIN)/activate && pytest -q tests/test_slurm.py tests/test_slurm_client.py

test-ray: install-dev
	source $(BIN)/activate && pytest -q tests/test_ray.py

bench: install
	$(PIP) install -q -e ".[bench]"
	$(PIP) install -q --no-deps "$(LITDATA_SPEC)"
	source $(BIN)/activate && python benchmarks/bench_transform.py && python benchmarks/bench_images.py

bench-cache: install-dev services
	source $(BIN)/activate && python benchmarks/bench_cache.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .torchx .tdp demo-out
