# TrinityLake reference implementation. `make help` lists the targets.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
AIRFLOW_VENV ?= .venv-airflow
PYTEST_ARGS ?=
# `make dist`'s archive (see dist below). Defined before any rule that names it as a
# prerequisite: make expands a rule's prerequisites when it reads the rule.
DIST_ARCHIVE := dist/trinitylake-env.tar.gz
# The tests' JVM class-data-sharing archive (tests/jvm_archive.py).
SPARK_CDS := build/spark-cds.jsa
DIST_SOURCES := pyproject.toml $(shell find lib -name '*.py' -o -name '*.proto' -o -name '*.properties' 2>/dev/null)

.PHONY: tools jars rck help setup venv test test-setup test-fast test-dags demo bench bench-large bench-objstore objstore lint fmt dist acceptance clean reliability-full

help: ## show this help
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-22s %s\n", $$1, $$2}'

# Packages are installed with uv, pip's interface with parallel downloads and installs: the main
# venv took 149 s (115 CPU-s) with pip and its cache warm, 67 s (90 CPU-s, bytecode included)
# with uv and its cache cold; the Airflow venv 94 s against about 8. uv itself comes from PyPI
# into the main venv, which `python -m venv` makes (pip stays in it).
UV := $(BIN)/uv
UV_INSTALL = $(UV) pip install -q
# Each install first tries uv's cache alone (--offline), then the index. This machine's package
# mirror answers every revalidation as modified, so uv downloaded pyspark's 450 MB sdist and
# rebuilt its wheel at each install: the main venv took 77 s that way and 32 s from the cache
# (measured one after the other). A fresh machine has no cache: the offline try fails at once and
# the index is used. Versions stay within pyproject.toml's ranges either way; `UV_CACHED=`
# (empty) resolves against the index only, for the newest versions those ranges allow.
UV_CACHED ?= --offline
comma := ,
uv_install = $(if $(UV_CACHED),$(UV_INSTALL) $(UV_CACHED) $(1) 2>/dev/null || )$(UV_INSTALL) $(1)
# Bytecode: the main venv and the packed environment get it at install, as pip did: where
# PYTHONDONTWRITEBYTECODE is set (our sandboxes) Python never writes it, and every `tlake`, job
# and executor would compile pyarrow's, s3fs's or pyspark's modules again at each start. The
# Airflow venv, which only the DAG tests use, gets it at first import instead (compiling all of
# Airflow added about 40 CPU-s to the set-up): make's recipes run without that variable.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(UV): | $(BIN)/python
	$(BIN)/pip install -q 'uv>=0.5,<1'

$(BIN)/tlake: pyproject.toml | $(UV)
	$(call uv_install,--compile-bytecode -p $(BIN)/python -e '.[dev]')
	@touch $(BIN)/tlake

# Bytecode of our own modules, written even where PYTHONDONTWRITEBYTECODE is set (as on our
# sandboxes): Python still reads it, and compiling them at every start cost each tlake command
# and each export copy worker 0.2-0.4 s. Only changed files are recompiled.
venv: $(BIN)/tlake ## create .venv (the project and its dev tools), once
	@$(BIN)/python -m compileall -q lib jobs >/dev/null

setup: venv ## create the virtualenv and install the project with its dev tools

# What the tests need besides Python 3.11, a JDK and make: Maven (`make jars` fetches Delta's
# Spark JARs with it), a Java runtime, and chromium (the HTML report's browser test). Each one
# missing is installed with apt-get (sudo unless root); without apt-get, one line says what to
# install and make stops. `make test` and `make jars` depend on it; `make demo` needs none of it.
SYSTEM_TOOLS := mvn:maven java:openjdk-17-jre-headless chromium:chromium
tools: ## install Maven and chromium when missing (apt-get), or say in one line what to install
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $${t%%:*} >/dev/null 2>&1 || missing="$$missing $${t#*:}"; done; \
	[ -z "$$missing" ] && exit 0; \
	if command -v apt-get >/dev/null 2>&1; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  echo "make: installing$$missing (apt-get)"; \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null || \
	  { echo "make: could not install$$missing with apt-get: install them (Debian package names), then run make again"; exit 1; }; \
	else \
	  echo "make: missing$$missing (Debian package names): install Maven, a Java 17 runtime and chromium, then run make again"; exit 1; \
	fi

# The suite runs on TEST_WORKERS pytest-xdist workers, a file at a time (`--dist loadfile`: a
# file's module fixtures, e.g. the cluster path's four spark-submits, are set up once), longest
# files first (tests/conftest.py). Most of its time is spent waiting on subprocesses, JVMs and
# the S3 server, so two workers use a 2-core machine better than one. The DAG tests run beside
# it in their own virtualenv; their output follows the suite's.
TEST_WORKERS ?= 2
# Each run leaves every test's time in build/junit-suite.xml and build/junit-dags.xml: where to cut
# when the suite outgrows its 20 minutes.
# make runs a recipe line that names $(MAKE) even under `make -n`: the line that starts the DAG
# tests also runs the suite, so it names the sub-make by another variable (`make -n test` prints
# the suite's command instead of running it for 13 minutes).
SUBMAKE = $(MAKE)
test: export TLAKE_TEST_JVM_ARCHIVE = $(CURDIR)/$(SPARK_CDS)
test: tools ## run the whole test suite (unit, Spark, S3, reliability, DAGs)
	@$(MAKE) --no-print-directory -j3 -Otarget test-setup
	@mkdir -p build
	@$(MAKE) --no-print-directory $(SPARK_CDS) >build/spark-cds.log 2>&1 || \
	  echo "make: the tests' JVM archive was not built (build/spark-cds.log); the JVMs started without it" &
	@$(SUBMAKE) --no-print-directory test-dags >build/test-dags.log 2>&1 & dags=$$!; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --junitxml=build/junit-suite.xml $(PYTEST_ARGS); suite=$$?; \
	wait $$dags; dags_rc=$$?; \
	echo "---- make test-dags (ran beside the suite) ----"; cat build/test-dags.log; \
	[ $$suite -eq 0 ] && [ $$dags_rc -eq 0 ]

# What the suite and the DAG tests beside it need, built side by side (`make -j`): on a fresh
# machine the venvs, Delta's JARs (Maven, network-bound) and the packed environment took about
# 4 minutes one after another.
test-setup: venv jars rck spark41 $(DIST_ARCHIVE) $(AIRFLOW_VENV)/bin/airflow

# The tests' Spark drivers start from a class-data-sharing archive of Spark's classes
# (tests/jvm_archive.py): one local walk in a JVM that writes it at exit, about 50 s. `make test`
# builds it beside the suite's first minute instead of before it (TLAKE_TEST_JVM_ARCHIVE names it
# to the tests: a JVM started before it exists runs without it); each of the dozens of drivers
# started after it then uses 5-6 CPU-s less.
$(SPARK_CDS): $(BIN)/tlake tests/jvm_archive.py
	$(BIN)/python -m tests.jvm_archive $@

test-fast: venv ## unit tests only (no Spark, no S3 server)
	$(BIN)/python -m pytest -q -m "not spark and not s3 and not slow" $(PYTEST_ARGS)

$(AIRFLOW_VENV)/bin/airflow: airflow_dags/requirements.txt | $(UV)
	$(PY) -m venv --without-pip $(AIRFLOW_VENV)
	$(call uv_install,-p $(AIRFLOW_VENV)/bin/python -r airflow_dags/requirements.txt)
	@touch $(AIRFLOW_VENV)/bin/airflow

# The DAG tests run `airflow dags test` of the spark-submit DAG against a real lakehouse: they
# need the main venv (tlake, pyspark's spark-submit) and the packed environment of `make dist`.
test-dags: $(AIRFLOW_VENV)/bin/airflow venv $(DIST_ARCHIVE) ## the Airflow DAGs in their own virtualenv, with a live `airflow dags test`
	$(AIRFLOW_VENV)/bin/python -m pytest -q -p no:cacheprovider --junitxml=build/junit-dags.xml tests/dags

# Spark SQL through `tlake catalog serve` (tests/rest_catalog/test_spark_sql.py, `make demo-catalog`)
# runs in an environment of its own: the main venv's pyspark 4.2 cannot load any Iceberg Spark
# runtime Maven serves (4.0's 1.10.0 and 4.1's 1.12.0 both fail at the first statement with
# IncompatibleClassChangeError on SparkView). pyspark 4.1 from PyPI and Iceberg's runtime for
# it from Maven Central; the JAR is one shaded file.
SPARK41_VENV ?= .venv-spark41
ICEBERG_SPARK41 := org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0
ICEBERG_SPARK41_JAR := build/iceberg-spark41/iceberg-spark-runtime-4.1_2.13-1.12.0.jar
.PHONY: spark41 spark41-venv demo-catalog
$(SPARK41_VENV)/bin/pyspark: | $(UV)
	$(PY) -m venv --without-pip $(SPARK41_VENV)
	$(call uv_install,-p $(SPARK41_VENV)/bin/python 'pyspark>=4.1$(comma)<4.2')
	@touch $@
$(ICEBERG_SPARK41_JAR): | tools
	mvn -q -B dependency:copy -Dartifact=$(ICEBERG_SPARK41) -DoutputDirectory=$(dir $@)
	@touch $@
spark41: spark41-venv $(ICEBERG_SPARK41_JAR) ## Spark 4.1 with Iceberg's runtime JAR (.venv-spark41 + Maven), for the tests' Spark SQL through the catalog server
spark41-venv: $(SPARK41_VENV)/bin/pyspark ## pyspark 4.1 in .venv-spark41 (pip only); the demos' Spark fetches Iceberg's runtime itself (Ivy)

# The demos need neither Maven nor apt-get: their Spark resolves Iceberg's runtime through Ivy
# (spark.jars.packages, cached in build/ivy; trinitylake.rest_catalog.demo).
demo-catalog: venv spark41-venv ## serve a demo lakehouse (in build/demo-catalog) over the Iceberg REST protocol and query it with Spark SQL
	$(BIN)/python -m trinitylake.demo --dir build/demo-catalog --catalog-only

demo: venv spark41-venv ## build a demo lakehouse (demo-lakehouse/), run every maintenance job on it, and query its tables with Spark SQL over the catalog server
	$(BIN)/python -m trinitylake.demo $(DEMO_ARGS)

bench: venv ## run the small default benchmarks (a few minutes)
	$(BIN)/python -m bench.run_all $(BENCH_ARGS)

bench-large: venv ## run the benchmarks at scale
	$(BIN)/python -m bench.run_all --scale large $(BENCH_ARGS)

# An S3 endpoint with latency (bench/objstore.py): s3s-fs 0.14.1, patched, built once with cargo
# into .cache/s3s (about 2.5 minutes); bench-objstore starts it behind the delaying proxy, runs
# bench/bench_objstore.py (walk, export, orphans x local/distributed/auto at 20 and 100 ms) and
# stops it. The tests need neither: they put the same proxy in front of the moto server.
objstore: venv ## build the object-store server for the latency benchmarks (s3s-fs, needs cargo)
	$(BIN)/python -m bench.objstore build

bench-objstore: objstore ## object-store benchmark at 20 and 100 ms a request (BENCH_ARGS='--scale large', ...)
	$(BIN)/python -m bench.bench_objstore $(BENCH_ARGS)

# The anchor on object stores (bench/bench_objstore_anchor.py): s5cmd, and latproxy (a delaying
# proxy in Go, so that the proxy takes no CPU from the client under test), built once with Go into
# .cache/gotools (about a minute) unless the acceptance checks' cache already has them.
.PHONY: gotools bench-objstore-anchor
gotools: venv ## build s5cmd and latproxy for the anchored object-store benchmark (needs go)
	$(BIN)/python -m bench.objstore gotools

bench-objstore-anchor: objstore gotools ## tlake against s5cmd on s3s-fs at 20 and 100 ms (BENCH_ARGS='--scale large', ...)
	$(BIN)/python -m bench.bench_objstore_anchor $(BENCH_ARGS)

lint: venv ## ruff, and mypy on lib/trinitylake (settings in pyproject.toml)
	$(BIN)/ruff check lib jobs tests bench airflow_dags conf
	$(BIN)/mypy

fmt: venv
	$(BIN)/ruff format lib jobs tests bench airflow_dags conf

DIST_ENV ?= build/dist-env
DELTA_JARS := spark-jars/lib/.fetched

# The wheel, and the packed environment spark-submit ships with --archives (venv-pack of a
# fresh venv holding the wheel and its runtime dependencies; pyspark comes from the cluster).
# pandas too: pyspark's Arrow paths (mapInArrow on the driver and in the Python workers) import
# it, and a cluster's bare Python does not have it (tests/integration/test_cluster_path.py).
# (DIST_ARCHIVE and DIST_SOURCES are defined at the top: rules above this point name them.)

dist: venv ## build the wheel and dist/trinitylake-env.tar.gz for spark-submit --archives
	rm -rf dist $(DIST_ENV)
	$(MAKE) --no-print-directory $(DIST_ARCHIVE)

# Rebuilt only when the library changed (the DAG tests depend on it; `make dist` always rebuilds).
# It needs uv, not the main venv's packages: `make -j` builds both side by side.
$(DIST_ARCHIVE): $(DIST_SOURCES) | $(UV)
	rm -rf dist $(DIST_ENV)
	$(UV) build -q --wheel -o dist .
	$(PY) -m venv --copies --without-pip $(DIST_ENV)
	$(call uv_install,--compile-bytecode --link-mode=copy -p $(DIST_ENV)/bin/python dist/trinitylake-*.whl 'pandas>=2.2$(comma)<3' venv-pack)
	$(DIST_ENV)/bin/venv-pack -q -p $(DIST_ENV) -o dist/trinitylake-env.tar.gz --exclude 'lib/python*/site-packages/venv_pack*'
	@ls -la dist

# Delta's Spark JARs (spark-jars/pom.xml) from Maven Central, for get_spark(delta=True).
$(DELTA_JARS): spark-jars/pom.xml | tools
	rm -rf spark-jars/lib
	mvn -q -B -f spark-jars/pom.xml dependency:copy-dependencies -DoutputDirectory=lib -DincludeScope=runtime
	@touch $@

jars: $(DELTA_JARS) ## fetch Delta's Spark JARs into spark-jars/lib (Maven)

# Iceberg's REST Compatibility Kit (tests/rest_catalog/rck/pom.xml: the published test jars of
# Iceberg 1.11.0, what they run on, JUnit's console launcher) from Maven Central, for
# tests/rest_catalog/test_rck.py, which runs it against `tlake catalog serve`. Nothing is compiled.
RCK_JARS := tests/rest_catalog/rck/lib/.fetched
$(RCK_JARS): tests/rest_catalog/rck/pom.xml | tools
	rm -rf tests/rest_catalog/rck/lib
	mvn -q -B -f tests/rest_catalog/rck/pom.xml dependency:copy-dependencies -DoutputDirectory=lib -DincludeScope=runtime
	@touch $@

rck: $(RCK_JARS) ## fetch Iceberg's REST Compatibility Kit into tests/rest_catalog/rck/lib (Maven)

reliability-full: venv ## the reliability and oracle suites at full scale; records their figures, re-renders RELIABILITY.md
	TLAKE_RELIABILITY_SCALE=full $(BIN)/python -m pytest -q tests/reliability tests/oracle
	$(BIN)/python -m tests.reliability.report

acceptance: venv ## outside-in checks from ../shared/acceptance
	../shared/acceptance/run-all

clean:
	rm -rf $(VENV) $(AIRFLOW_VENV) dist build *.egg-info .pytest_cache
