# RedVox builder. `make help` lists the targets; every target creates what it needs.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RELEASE_CONFIG ?=
# build folder: out for the demo, out/<config file name without .yaml> for RELEASE_CONFIG,
# so a release of your inputs never lands in (or replaces) the demo's out/<version>
OUT ?= $(if $(RELEASE_CONFIG),out/$(basename $(notdir $(RELEASE_CONFIG))),out)
VERSION ?=
REPO_ID ?=
PUBLIC ?=
# a reason to release despite a failed representativeness gate (printed in the card)
OVERRIDE_GATE ?=
# scales of `make bench-scale` (fractions of the paper's 1,530 recordings) and its workers
SCALES ?= 0.5,1,10
BENCH_WORKERS ?= 2
# pytest-xdist processes of `make test` (each test file runs whole in one of them)
TEST_WORKERS ?= 2
# extra pip arguments, e.g. PyTorch's CPU wheel index on machines without a local CPU wheel
PIP_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help venv system-deps test lint release bench bench-scale lock demo-corpus clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 16

venv: $(STAMP) system-deps ## create .venv with the pinned dependencies (idempotent)

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing the pinned dependencies into $(VENV) (PyTorch included: a few minutes the first time)"
	$(BIN)/python -m pip install --progress-bar on --disable-pip-version-check $(PIP_ARGS) -c requirements.lock -e '.[dev]'
	@touch $(STAMP)

# datasets 5.x decodes audio through torchcodec, which needs FFmpeg (required).
# espeak-ng only speaks the demo corpus (make demo-corpus) and extra VAD test
# utterances: installed when we can, otherwise those tests use the demo alone.
# bubblewrap (bwrap) is the sandbox of `redvox serve` jobs (required: serve run and its
# tests refuse to go on without it).
system-deps:
	@missing=""; for tool in ffmpeg espeak-ng bwrap; do command -v $$tool >/dev/null || missing="$$missing $${tool/bwrap/bubblewrap}"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing$$missing (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi; \
	command -v espeak-ng >/dev/null || echo "note: espeak-ng is missing ('sudo apt-get install espeak-ng'): make demo-corpus needs it"; \
	command -v ffmpeg >/dev/null || { echo "FFmpeg is missing: run 'sudo apt-get install ffmpeg' (datasets needs it to decode audio)" >&2; exit 1; }; \
	command -v bwrap >/dev/null || { echo "bubblewrap is missing: run 'sudo apt-get install bubblewrap' (redvox serve sandboxes each model with it)" >&2; exit 1; }

# CI= : pytest stops truncating assertion explanations when CI is set, and a failed
# comparison of two long values (a clip's bytes) then builds a full difflib diff, which is
# quadratic: one such assert took over an hour in CI. Cleared, CI runs as a local run does.
test: venv ## run the test suite (TEST_WORKERS processes, default 2; a test file stays in one)
	CI= BUILD_NUMBER= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15 --durations-min=10

lint: venv ## ruff check and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

release: venv ## build -> representativeness -> stage -> verify -> push into OUT/<version>/staged (dry run without HF_TOKEN and REPO_ID)
	$(BIN)/redvox release run --out $(OUT) $(if $(VERSION),--version $(VERSION)) $(if $(RELEASE_CONFIG),--config $(RELEASE_CONFIG)) $(if $(REPO_ID),--repo-id $(REPO_ID)) $(if $(PUBLIC),--public) $(if $(OVERRIDE_GATE),--override-gate "$(OVERRIDE_GATE)")
	@echo "the staged Hub folder: $(OUT)/$$($(BIN)/python -c 'from redvox.builder.versions import get_version; print(get_version($(if $(VERSION),"$(VERSION)",None)).version)')/staged"
	@echo "redvox is not on your PATH: run $(BIN)/redvox, or 'source $(BIN)/activate' first"

bench: venv ## benchmarks: build at the paper's scale vs a naive baseline, stage + verify of it, the ownership check's price (~10 min), resource bounds, evaluator reporting, inference harness, covert channel of serve results (~8 min)
	$(BIN)/python bench/bench_build.py
	$(BIN)/python bench/bench_limits.py
	$(BIN)/python bench/bench_evaluate.py
	$(BIN)/python bench/bench_infer.py
	$(BIN)/python bench/bench_covert.py --scale 1

bench-scale: venv ## cold builds at SCALES (default 0.5,1,10; 10 is ~15k recordings, 17 h): seconds per audio hour and peak RSS per scale
	$(BIN)/python bench/bench_scale.py --scales $(SCALES) --workers $(BENCH_WORKERS)

lock: ## re-resolve and rewrite requirements.lock (needs the package registry)
	rm -rf /tmp/redvox-lock && $(PYTHON) -m venv /tmp/redvox-lock
	/tmp/redvox-lock/bin/pip install --quiet '.[dev]'
	( echo "# Exact pins of every runtime and dev dependency (Python 3.11, CPU)."; echo "# Regenerate: make lock"; \
	  /tmp/redvox-lock/bin/pip freeze --exclude redvox | sed 's/^torch==\(.*\)+cpu/torch==\1/' ) > requirements.lock

demo-corpus: $(STAMP) ## regenerate the synthetic demo corpus in sources/demo (needs espeak-ng)
	$(BIN)/python sources/demo/make_demo.py

clean: ## remove build outputs (keeps .venv)
	rm -rf $(OUT) build *.egg-info .pytest_cache .ruff_cache
