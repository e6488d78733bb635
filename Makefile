# kraftlog: every target sets up what it needs (a virtualenv in .venv) first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DIST   ?= dist
STAMP  := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup test test-fast proptest run jvm-archive bench lint dist clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[spark,dev,airflow]"
	touch $(STAMP)

## the test suite, corpus-wide (slow) checks included: its files shared out over TEST_WORKERS processes, each
## with its own SparkSession (pytest-xdist; TEST_WORKERS=0 runs them all in this one), the longest files first
## (tests/conftest.py RUN_FIRST)
TEST_WORKERS ?= 2
PYTEST_SHARED := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: $(STAMP)
	$(PYTEST_SHARED)

## everything but the corpus-wide checks
test-fast: $(STAMP)
	$(PYTEST_SHARED) -m "not slow"

## the Spark-built properties (random logs: Spark equals the local replay, any split equals a build from
## scratch) with 20x the examples CI runs: about 2,000 random clusters of each
proptest: $(STAMP)
	KRAFTLOG_EXAMPLES=$${KRAFTLOG_EXAMPLES:-20} $(BIN)/python -m pytest -p no:cacheprovider \
		tests/test_history.py tests/test_increments.py -k random_logs

## the main job, end to end, on the bundled sample: local Spark, Delta tables under ./warehouse
run: $(STAMP)
	$(BIN)/kraftlog run samples/scenario-a --warehouse warehouse --verify --report-dir out/reports

## a class-data archive of the JVM classes a run loads, for the driver of an hourly application (kraftlog jvm-archive:
## it prints the Java options that use it)
jvm-archive: $(STAMP)
	$(BIN)/kraftlog jvm-archive out/kraftlog.jsa samples/scenario-a

## decoder rate vs. the framing floor (one core); the land pass, the replay and topic deletions of a big cluster on
## one core without Spark (bench_replay); ingest and history build on local[2] (corpus, 10x corpus);
## the pipeline's wall time on each deployment path (local, S3, standalone cluster, Spark Connect); the pipeline on
## a generated big cluster (1x and 4x) and the 10x corpus, full and an hourly increment (bench_fleet); the hourly run
## (ingest, reconstruct, verify, analyze) of a quiet cluster with a snapshot an hour, at 100 and 400 hours of history
## (bench_quiet); the hourly ingest against a ledger of 0, 1M and 4M rows of history (bench_ledger); the hourly run of
## a cluster with a broker down for 4, 16 and 64 rolling restarts (bench_window); ingest
## of one big segment, 60 and 240 MB, from one node and three (bench_segment); the fixed cost of a Python task in a
## plain PySpark worker and in one that loaded kraftlog (bench_tasks)
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_decode.py --json out/bench-decode.json
	$(BIN)/python benchmarks/bench_replay.py --json out/bench-replay.json
	$(BIN)/python benchmarks/bench_ingest.py --json out/bench-ingest.json
	$(BIN)/python benchmarks/bench_history.py --json out/bench-history.json
	$(BIN)/python benchmarks/bench_deploy.py --json out/bench-deploy.json
	$(BIN)/python benchmarks/bench_fleet.py --json out/bench-fleet.json
	$(BIN)/python benchmarks/bench_quiet.py --json out/bench-quiet.json
	$(BIN)/python benchmarks/bench_ledger.py --json out/bench-ledger.json
	$(BIN)/python benchmarks/bench_window.py --json out/bench-window.json
	$(BIN)/python benchmarks/bench_segment.py --json out/bench-segment.json
	$(BIN)/python benchmarks/bench_tasks.py --json out/bench-tasks.json
	$(BIN)/python benchmarks/bench_interpreted.py --json out/bench-interpreted.json

## what a Spark cluster needs: the wheel, and a packed Python environment (kraftlog and its native
## dependencies, pyspark excluded: Spark ships its own to the workers) for spark-submit --archives
dist: $(STAMP)
	rm -rf $(DIST)
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir $(DIST) .
	$(PYTHON) -m venv $(DIST)/env
	$(DIST)/env/bin/python -m pip install --quiet "$$(ls $(DIST)/kraftlog-*.whl)[cluster]"
	$(BIN)/venv-pack --quiet --prefix $(DIST)/env --output $(DIST)/kraftlog-env.tar.gz
	rm -rf $(DIST)/env
	@ls -l $(DIST)

lint: $(STAMP)
	$(BIN)/ruff check kraftlog jobs tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf out warehouse spark-warehouse dist build .pytest_cache .mypy_cache .ruff_cache
