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

demo: $(VENV)/.installed
	$(PY) recipes/align_clip.py --config recipes/configs/tiny.yaml

test: $(VENV)/.installed-dev
	$(PY) -m pytest
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict   # the docs site; any warning fails the build

docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

bench: $(VENV)/.installed
	$(PY) benchmarks/bench_covariance.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache
