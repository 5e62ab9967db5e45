# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Two torch processes on 2 cores (the DDP tests, torchrun) whose OpenMP threads spin while waiting (the default)
# starve each other in MKL's eigensolvers: a 1024 x 1024 eigh took > 100 s instead of 0.18 s. Passive waiting
# prevents it; its price is ~20 ms more per small eigh in an idle single process (docs/benchmarks/index.md, "Machine").
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

.PHONY: demo test bench gpu-check docs clean

# The stamp files re-run the install only when pyproject.toml changes, so a second run is quick.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(PIP) install --quiet --disable-pip-version-check torch torchvision --index-url $(TORCH_INDEX))
	$(PIP) install --quiet --disable-pip-version-check -e '.[recipes]'
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

# `make bench`: every script in benchmarks/, every mode, once at small sizes (12 minutes on 2 shared cores): each one
# runs and prints its table. The sizes behind the numbers in docs/benchmarks/ are the commands given there, per
# section (`make bench BENCH_PY=...` runs them with another interpreter). tests/test_docs_site.py checks that every
# script in benchmarks/ is named here.
BENCH_PY ?= $(PY)
BENCH_OUT ?= $(or $(TMPDIR),/tmp)
bench: $(VENV)/.installed
	$(BENCH_PY) benchmarks/bench_covariance.py --n 4096 --repeats 1
	$(BENCH_PY) benchmarks/bench_updates.py --d 64 --n-frequencies 256 --rows 1024
	$(BENCH_PY) benchmarks/bench_checkpoint.py --d 64
	$(BENCH_PY) benchmarks/bench_fkea_finc.py exact --sizes 1000 --frequencies 256
	$(BENCH_PY) benchmarks/bench_fkea_finc.py stream --n 20000
	$(BENCH_PY) benchmarks/bench_fkea_finc.py finc --n 5000
	$(BENCH_PY) benchmarks/bench_finc_fpr.py fpr --trials 2 --r 64 --n 500 --data mixture digits
	$(BENCH_PY) benchmarks/bench_finc_fpr.py power --trials 2 --r 64 --n 750 --data digits --prevalence 0.1
	$(BENCH_PY) benchmarks/bench_dropped_modes.py --data digits --embedding pixels --factor 0.5 --r 64 --n 400 --trials 1
	$(BENCH_PY) benchmarks/bench_noise_floor.py --data digits --embedding pixels --r 64 --trials 1 --splits 2
	$(BENCH_PY) benchmarks/bench_null_variants.py --data digits --splits 2 --r 64 --n 900 630
	$(BENCH_PY) benchmarks/bench_null_variants.py --data digits --splits 2 --r 64 --n 900 630 --draws 2 --permutations 5 --sigma-from pooled --first-split 3
	$(BENCH_PY) benchmarks/bench_mode_shares.py --data digits --prevalence 0.2 --trials 1 --r 128
	$(BENCH_PY) benchmarks/bench_count_stability.py --data digits --sets 3 --n 400
	$(BENCH_PY) benchmarks/bench_eigh.py floor --n 2000 --repeats 1
	$(BENCH_PY) benchmarks/bench_eigh.py large --r 512 --n 2000 --repeats 1
	$(BENCH_PY) benchmarks/bench_mmd.py calibration --trials 20 --frequencies 128
	$(BENCH_PY) benchmarks/bench_mmd.py digits --trials 5 --splits 100 --frequencies 128
	$(BENCH_PY) benchmarks/bench_mmd.py moments --trials 10
	$(BENCH_PY) benchmarks/bench_mmd.py power --trials 5
	$(BENCH_PY) benchmarks/bench_mmd.py exact --sizes 2000
	$(BENCH_PY) benchmarks/bench_mmd.py stream --n 20000
	$(BENCH_PY) benchmarks/bench_mmd_speed.py statistic --n 2000 --seeds 1
	$(BENCH_PY) benchmarks/bench_mmd_speed.py bandwidths --n 500
	$(BENCH_PY) benchmarks/bench_ood.py --sizes 2000 --exact-max 2000
	$(BENCH_PY) benchmarks/bench_ood.py --accuracy
	$(BENCH_PY) benchmarks/bench_spec.py overhead --encoder mlp --steps 2
	$(BENCH_PY) benchmarks/bench_spec.py routes --sizes 1000
	$(BENCH_PY) benchmarks/bench_spec.py reference --n 1000 --r 256 --repeats 1
	$(BENCH_PY) benchmarks/bench_spec_align.py penalty --steps 5
	$(BENCH_PY) benchmarks/bench_spec_align.py omp --size 256 --seconds 5
	$(BENCH_PY) benchmarks/bench_truncated_vendi.py n --data digits --sizes 400 800 --features 512 --t 10 50 --draws 1
	$(BENCH_PY) benchmarks/bench_truncated_vendi.py r --data digits --n 400 --features 256 512 --t 10 50 --draws 1
	$(BENCH_PY) benchmarks/bench_truncated_vendi.py drop --data digits --n 400 --features 256 --t 10 50 --draws 2 --classes 0
	$(BENCH_PY) benchmarks/bench_generated.py --n-samples 1000 --frequencies 256
	$(BENCH_PY) benchmarks/bench_alongside.py --n-samples 1000 --steps 1 --repeats 1
	$(BENCH_PY) benchmarks/bench_cli_images.py --n 200 --encoders pixels
	$(BENCH_PY) benchmarks/bench_width.py --n 200 --widths auto 256
	$(BENCH_PY) benchmarks/bench_repeats.py --n 500 --r 128 --k 2
	$(BENCH_PY) benchmarks/bench_epoch_cost.py --n 500 --data digits --r 128
	$(BENCH_PY) benchmarks/bench_conditional.py agreement --frequencies 128
	$(BENCH_PY) benchmarks/bench_conditional.py cost --frequencies 128 --repeats 1
	$(BENCH_PY) benchmarks/bench_drift.py --epochs 1
	$(BENCH_PY) benchmarks/bench_forgetting.py --data digits --seeds 0 --pretrain-epochs 1 --finetune-epochs 1 --out $(BENCH_OUT)/forgetting.json
	$(BENCH_PY) benchmarks/bench_drift_kernels.py --data digits --seeds 0 --encoders mlp --splits kept-0-4 --pretrain-epochs 1 --finetune-epochs 1 --kernels cosine sphere:0.15 sphere:0.15@64 --out $(BENCH_OUT)/drift_kernels.json
	$(BENCH_PY) benchmarks/idx_files.py
	$(BENCH_PY) benchmarks/bench_coverage.py --reps 5 --population 5000 --r 32 --draws 2
	$(BENCH_PY) benchmarks/bench_coverage.py --cost --n 2000 --r 64 --repeats 1
	$(BENCH_PY) benchmarks/bench_rke_coverage.py --reps 3 --r 64
	$(BENCH_PY) benchmarks/bench_vendi_bias.py --cases 64:200 --reps 3
	$(BENCH_PY) benchmarks/bench_diversity_guidance.py --batches 2 --batch 20 --scales 0 1 --seeds 0
	$(BENCH_PY) benchmarks/bench_diversity_gan.py --data digits --seeds 0 --steps 50
	$(BENCH_PY) benchmarks/bench_diversity_recipe.py --seeds 0 --epochs 2
	$(BENCH_PY) benchmarks/bench_diversity_cost.py --r 64 --steps 3 --pairs 1
	$(BENCH_PY) benchmarks/bench_align_recipe.py --seeds 0 --epochs 1 --out $(BENCH_OUT)/align_recipe_evidence.json
	$(BENCH_PY) benchmarks/bench_logged_keys.py
	$(BENCH_PY) benchmarks/bench_state_memory.py --widths 512 1024
	$(BENCH_PY) benchmarks/gpu_check.py --plan   # the GPU-size commands of `make gpu-check`, none run

# `make gpu-check`: on a machine with CUDA, the tests marked `cuda` and the benchmarks at GPU sizes (2r = 8,192,
# n = 10^5 .. 10^6); their tables replace the marked section of docs/benchmarks/gpu.md, with the device's name. Without
# CUDA it prints one line saying so and exits 0.
gpu-check: $(VENV)/.installed-dev
	$(BENCH_PY) benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache
