# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Two torch processes on 2 cores (the DDP tests, torchrun) whose OpenMP threads spin while waiting (the default)
# starve each other in MKL's eigensolvers: a 1024 x 1024 eigh took > 100 s instead of 0.18 s. Passive waiting
# prevents it; its price is ~20 ms more per small eigh in an idle single process (docs/benchmarks.md).
OMP_WAIT_POLICY ?= PASSIVE
export OMP_WAIT_POLICY
# A CPU-only machine: `make demo TORCH_INDEX=https://download.pytorch.org/whl/cpu` installs torch and torchvision
# from that index first (CPU wheels, ~0.2 GB) instead of PyPI's, which pull ~6 GB of CUDA libraries.
TORCH_INDEX ?=

# The lowest torchmetrics and Lightning that pyproject allows: `make test` also runs the tests of the API surface the
# library uses (metrics, sync, checkpoints, callbacks) with them, overlaid on the venv (the highest allowed are the
# ones pip installed there). tests/test_torchmetrics_api.py keeps these pins equal to pyproject's floors.
LOWEST := torchmetrics==1.3.2 lightning==2.6.0
API_TESTS := tests/test_torchmetrics_api.py tests/test_checkpoints.py tests/test_lightning.py tests/test_embedding_metrics.py tests/test_new_method.py

.PHONY: demo test bench docs clean

# The stamp files re-run the install only when pyproject.toml changes, so a second run is quick.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(PIP) install --quiet --disable-pip-version-check torch torchvision --index-url $(TORCH_INDEX))
	$(PIP) install --quiet --disable-pip-version-check -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PIP) install --quiet --disable-pip-version-check -e '.[dev,docs]'
	touch $@

$(VENV)/lowest/.installed: Makefile | $(VENV)/.installed-dev
	$(PIP) install --quiet --disable-pip-version-check --no-deps --target $(VENV)/lowest $(LOWEST)
	touch $@

demo: $(VENV)/.installed
	$(PY) recipes/align_clip.py --config recipes/configs/tiny.yaml

test: $(VENV)/.installed-dev $(VENV)/lowest/.installed
	$(PY) -m pytest
	PYTHONPATH=$(VENV)/lowest $(PY) -m pytest -p no:cacheprovider -q $(API_TESTS)   # the lowest allowed versions
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict   # the docs site; any warning fails the build

docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_covariance.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache
