# Every target does its own set-up on a fresh machine: a virtual environment with the
# project installed, the Debian data packages the real test beds read (Fashion-MNIST:
# `datasets`, a no-op once installed); the test harness installs and starts Kafka, Redis
# and Prometheus.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-fast docs flake-check long-test datasets compose-test lock lint bench chaos soak fuzz fuzz-api stall-test services-up services-down clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,docs]'
	# the linear kernel built ahead of time (numba.pycc; needs cc): `replay --direct`
	# then starts without numba; without it the JIT serves, same weights (ranking/aot.py)
	$(BIN)/python -m rankstream.ranking.aot || true
	touch $(STAMP)

# apt-get install what is missing (as root; otherwise it names the package to install).
datasets: $(STAMP)
	$(BIN)/python -m rankstream.harness.datasets

demo: $(STAMP) datasets
	$(BIN)/rankstream demo --out report

test: $(STAMP) datasets
	$(BIN)/ruff check .
	$(MAKE) docs
	$(BIN)/python -m pytest -q -m "not engine and not long" --durations=25 tests
	$(MAKE) compose-test

# The documentation site (mkdocs.yml) into build/site, --strict: a broken link, a missing
# page or a page left out of the nav fails the build. The CLI and route references are
# generated from the code while it builds (docs/hooks/generated.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# deploy/docker-compose.yml on a real Docker engine (root; installs docker.io and
# chromium, builds Compose v2, a Debian base and the images, caches them under
# ~/.cache/rankstream/cache/compose-test; ~10 min fresh, ~6 min cached, of which ~1-2 min
# for the clicks-alone project after the main stack). Artifacts: report/compose-test/
# (Prometheus graph screenshot, stage timings, container logs).
compose-test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=0 -m engine tests/test_compose_engine.py

# Regenerate deploy/constraints.txt (the image's pins) from pyproject.toml, inside the
# bookworm Python base the engine test builds (its Python 3.11.2 decides environment
# markers), or with the host's python3 if that image is not there.
lock:
	if docker image inspect rankstream-test/python:3.11-bookworm > /dev/null 2>&1; then \
		docker run --rm --network host -v "$(CURDIR):/src" -w /src \
			rankstream-test/python:3.11-bookworm python deploy/lock.py; \
	else $(PYTHON) deploy/lock.py; fi

# Unit tests only: no Kafka, Redis or Prometheus.
test-fast: $(STAMP) datasets
	$(BIN)/python -m pytest -q -m "not services and not long" tests

# The long runs `make test` leaves out to stay within CI's 30 minutes (pytest marker
# `long`): CMDSDMLCV at its defaults against Euclidean kNN on rotated digits, digits' ink
# quintiles and PubFig (tests/test_dml_defaults_vs_euclidean.py, ~4-9 min: an inner
# cross-validation per split; the CV's choices are unit-tested in make test,
# tests/test_dml_model_selection.py), and the short chaos on the replicated set
# (tests/test_chaos_cluster.py, ~2-3 min: three KRaft JVMs, Redis under three Sentinels;
# `make chaos` runs its long form; make test keeps the one-node chaos, tests/test_chaos.py).
long-test: $(STAMP) datasets
	$(BIN)/python -m pytest -q -p no:cacheprovider -m long --durations=0 tests

# N consecutive runs of the integration tests that wait on a learning outcome (a champion
# switch, a learned model beating Uni-Con, panels filling with data); stops at the first
# failure and names the run. `make flake-check N=20 TESTS="tests/test_serve_engine_loop.py"`.
N ?= 20
TESTS ?= tests/test_serve_engine_loop.py tests/test_champion.py tests/test_width_pipeline.py \
	tests/test_readme_serving_quickstart.py tests/test_prometheus_dashboard.py
flake-check: $(STAMP)
	@for i in $$(seq 1 $(N)); do \
		start=$$(date +%s); \
		$(BIN)/python -m pytest -q -p no:cacheprovider $(TESTS) > .flake-check.log 2>&1 \
			|| { tail -40 .flake-check.log; echo "flake-check: run $$i of $(N) FAILED"; exit 1; }; \
		echo "flake-check: run $$i of $(N) passed ($$(tail -1 .flake-check.log), $$(( $$(date +%s) - start )) s)"; \
	done; echo "flake-check: $(N) of $(N) runs passed: $(TESTS)"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Every benchmark prints one JSON object; the last two go through the local Kafka and
# Redis (started here if need be; `make services-down` stops them).
bench: $(STAMP)
	$(BIN)/rankstream bench learners --json
	$(BIN)/rankstream bench replay --json
	eval "$$($(BIN)/rankstream services up --env)" && \
	$(BIN)/rankstream bench pipeline --json && \
	$(BIN)/rankstream bench scaleout --json

# 10 minutes of the real pipeline at a sustained rate; RSS and lag must stay bounded.
soak: $(STAMP)
	$(BIN)/python -m rankstream.harness.soak --out report/soak

# The full hostile-input run (>= 100,000 cases); `make test` runs a short form.
fuzz: $(STAMP)
	RANKSTREAM_FUZZ_EXAMPLES=10500 RANKSTREAM_FUZZ_REPORT=report/fuzz.json \
		$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz.py

# The HTTP API against its OpenAPI document (schemathesis, every phase, a random seed it
# prints; ~10 min): no 5xx, every answer described, no valid request refused, without a
# token and with one. `make test` runs a short derandomized form.
fuzz-api: $(STAMP)
	RANKSTREAM_OPENAPI_EXAMPLES=200 $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/test_openapi_contract.py

# The serving API with the real broker, then Redis, paused (SIGSTOP) for the issue's 75 s
# while a client posts feedback (and, with the broker paused, clicks) every second;
# `make test` runs the same with 15 s pauses.
stall-test: $(STAMP)
	RANKSTREAM_STALL_SECONDS=75 $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/test_serve_stall.py

# Faults on the local services (started here if need be): 10 worker SIGKILLs over 3M
# triplets, then broker/Redis restarts, Redis crashes, lost checkpoints and zombies;
# then the replicated set (3 KRaft nodes, Redis under 3 Sentinels, its own root, stopped
# after): 5 leader SIGKILLs, a paused broker, 3 Redis failovers, a serve killed, 2M triplets.
CLUSTER_ROOT := $(CURDIR)/report/chaos-cluster/services
chaos: $(STAMP)
	eval "$$($(BIN)/rankstream services up --env)" && \
	$(BIN)/rankstream chaos --kills 10 --triplets 3000000 --json && \
	$(BIN)/rankstream chaos --kills 2 --restart-kafka 2 --restart-redis 2 --crash-redis 2 \
		--lose-checkpoints 2 --zombies 2 --triplets 1000000 --seed 1 --json
	eval "$$($(BIN)/rankstream services up --cluster --root $(CLUSTER_ROOT) --env)" && \
	$(BIN)/rankstream chaos --cluster --triplets 2000000 --services-root $(CLUSTER_ROOT) \
		--json; status=$$?; $(BIN)/rankstream services down --root $(CLUSTER_ROOT); exit $$status

services-up: $(STAMP)
	$(BIN)/rankstream services up

services-down: $(STAMP)
	$(BIN)/rankstream services down

clean:
	rm -rf $(VENV) report build *.egg-info .pytest_cache .ruff_cache .hypothesis
