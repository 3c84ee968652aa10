# The two commands a new user runs: `make demo` and `make test`.
# Each bootstraps everything from nothing: Debian packages (apt-get, when missing), the Python packages into
# .venv (ranges in pyproject.toml, the exact versions the tests use in constraints/constraints-<python>.txt).
SHELL := /bin/bash
.DEFAULT_GOAL := help

# The whole suite runs on MAIN_PYTHON: 3.13, the Python of Airflow 3.3's own image, where most deployments
# run the provider. Each of OTHER_PYTHONS runs the unit layer, a Spark pipeline with a DLQ and a reference DAG
# (test-pythons); the built wheel is installed into a clean venv on WHEEL_PYTHON (test-wheel).
MAIN_PYTHON := 3.13
OTHER_PYTHONS := 3.10 3.11 3.12
WHEEL_PYTHON := 3.12
# The interpreter of Python $(1): python$(1) on PATH when it runs, else pyenv's newest $(1).x.
python_of = $(shell for p in $$(command -v python$(1) 2>/dev/null) \
  $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/$(1).*/bin/python$(1) 2>/dev/null | sort -V -r); do \
  "$$p" -c '' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
constraints_of = constraints/constraints-$(1).txt
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SYSTEM_STAMP := .venv-system-deps
# Spark's Kafka and Delta connectors and OpenLineage's Spark listener (on a run's driver only when lineage is on:
# docs/lineage.md): pinned in the package's airflow_conduit/spark/connectors/<name>/pom.xml (the installed package
# reads the same poms); a Kafka broker for the tests in jars/broker/pom.xml (the broker's Kafka is not Spark's).
# Each set's jars go to jars/<name>/lib.
CONNECTOR_SETS := kafka delta openlineage
JAR_SETS := $(CONNECTOR_SETS) broker
pom_of = $(if $(filter $(1),$(CONNECTOR_SETS)),airflow_conduit/spark/connectors/$(1)/pom.xml,jars/$(1)/pom.xml)
JAR_STAMPS := $(foreach set,$(JAR_SETS),jars/$(set)/lib/.fetched)
# The driver JVM's class data sharing archive (spark/class_archive.py): made on this machine, for its JDK and jars.
CLASS_ARCHIVE := $(VENV)/share/airflow-conduit/spark-classes.jsa
# Each other Python's venv, and the wheel's: made once, remade when pyproject.toml or its constraints change.
PYTHON_STAMPS := $(foreach v,$(OTHER_PYTHONS),.venv-$(v)/.installed)
WHEEL_VENV := .venv-wheel-$(WHEEL_PYTHON)
# The sdist and the wheel (make dist) are made of these; the stamp is older than one of them when they must be rebuilt.
DIST_SOURCES := pyproject.toml README.md $(shell find airflow_conduit -type f -not -path '*/__pycache__/*' 2>/dev/null)
DIST_STAMP := dist/.built
# What each other Python runs besides tests/unit: a Spark pipeline with a DLQ, a reference DAG under dag.test().
# One test covers both: the orders reference DAG (dag.test()) submits its pipeline to spark-submit, whose
# Python driver is that Python's, and checks the lake and the DLQ.
PYTHON_CHECKS := tests/integration/test_operator.py::test_two_transient_failures_then_success

export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python
export PATH := $(CURDIR)/$(BIN):$(PATH)

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Debian packages the project needs: Java for Spark, PostgreSQL server and its JDBC driver for the JDBC tests,
# Chromium for the UI plugin's browser test (headless), Maven to fetch the connector jars.
APT_PACKAGES := default-jre-headless postgresql libpostgresql-jdbc-java chromium maven

.PHONY: help install jars system-deps python-venvs test test-unit test-spark test-integration test-chaos test-deployment \
  test-pythons test-wheel dist constraints demo bench clean

help:
	@echo "make demo   - run the main job end to end on local Spark and Airflow (SQLite)"
	@echo "make test   - run all tests (unit, spark, integration, deployment; other Pythons; the built wheel)"
	@echo "make bench  - run the benchmarks and render docs/benchmarks.md and docs/benchmarks/"
	@echo "make dist   - build the sdist and the wheel into dist/ and check them (twine check)"

system-deps:
	@missing=""; \
	command -v java >/dev/null 2>&1 || missing="$$missing default-jre-headless"; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	[ -f /usr/share/java/postgresql.jar ] || missing="$$missing libpostgresql-jdbc-java"; \
	[ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

# $(1): the venv, $(2): its Python version. A venv of another Python is made anew.
define make_venv
	@[ -n "$(call python_of,$(2))" ] || { echo "Python $(2) not found: install it (e.g. pyenv install $(2))"; exit 1; }
	[ "$$($(1)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$(2)" ] \
	  || { rm -rf $(1) && $(call python_of,$(2)) -m venv $(1); }
	$(1)/bin/pip install -q --upgrade pip
endef

$(STAMP): pyproject.toml airflow_conduit/__init__.py $(call constraints_of,$(MAIN_PYTHON))
	$(MAKE) system-deps
	$(call make_venv,$(VENV),$(MAIN_PYTHON))
	$(BIN)/pip install -q -e '.[test,openlineage]' -c $(call constraints_of,$(MAIN_PYTHON))
	touch $(STAMP)

.venv-%/.installed: pyproject.toml airflow_conduit/__init__.py constraints/constraints-%.txt
	$(call make_venv,.venv-$*,$*)
	.venv-$*/bin/pip install -q -e '.[test]' -c $(call constraints_of,$*)
	touch $@

python-venvs: $(PYTHON_STAMPS)

.SECONDEXPANSION:
jars/%/lib/.fetched: $$(call pom_of,$$*)
	$(MAKE) system-deps
	rm -rf jars/$*/lib
	mvn -q -B -f $(call pom_of,$*) -Djars.lib=$(CURDIR)/jars/$*/lib dependency:copy-dependencies
	touch $@

jars: $(JAR_STAMPS)

$(CLASS_ARCHIVE): $(STAMP)
	$(BIN)/python -m airflow_conduit.spark.class_archive --path $(CLASS_ARCHIVE)

install: $(STAMP) system-deps jars $(CLASS_ARCHIVE)

# The layers one after another, the unit layer first (a failure stops `make test` there). The layers after it run
# on two pytest workers (pytest-xdist; three for the integration layer): most of their time is spent waiting on
# processes (spark-submit, Airflow, brokers, backoff delays), and a test file goes whole to one worker (--dist loadfile), so its module fixtures (a
# standalone cluster, two pipeline runs) run once. Each worker has its own SparkSession, broker, database, temp
# folders and block of ports (tests/ports.py). The chaos seeds share nothing: one test at a time to each worker.
# The deployment layer is one module (one deployment): one process, mostly waiting on Airflow's processes, so it
# runs beside the spark layer (its ports from the block after the spark workers').
WORKERS ?= 2
# The integration layer waits more than it computes (backoff delays, Airflow's polling, brokers' timeouts): one
# more worker fills the CPU there, where it makes the spark layer no faster. WORKERS=1 runs every layer in one.
INTEGRATION_WORKERS ?= $(if $(filter 1,$(WORKERS)),1,$(shell echo $$(( $(WORKERS) + 1 ))))
PYTEST := $(BIN)/python -m pytest -q
xdist = -n $(1) --dist loadfile --no-loadscope-reorder
XDIST := $(call xdist,$(WORKERS))

test: install
	$(PYTEST) $(XDIST) tests/unit
	$(MAKE) -j 2 --output-sync=target test-spark test-deployment
	$(PYTEST) $(call xdist,$(INTEGRATION_WORKERS)) tests/integration
	$(PYTEST) -n $(WORKERS) --dist load --maxschedchunk 1 tests/chaos
	$(MAKE) -j 2 --output-sync=target test-pythons test-wheel

test-unit: install
	$(PYTEST) $(XDIST) tests/unit

test-spark: install
	$(PYTEST) $(XDIST) tests/spark

test-integration: install
	$(PYTEST) $(call xdist,$(INTEGRATION_WORKERS)) tests/integration

test-chaos: install
	$(PYTEST) -n $(WORKERS) --dist load --maxschedchunk 1 tests/chaos

test-deployment: install
	CONDUIT_TEST_PORT_BLOCK=$(WORKERS) $(PYTEST) tests/deployment

# The unit layer and a Spark pipeline with a DLQ and a reference DAG on each of OTHER_PYTHONS, the Pythons side by
# side (each its own AIRFLOW_HOME, temp folders and block of ports; its output shown when it ends).
test-pythons: install $(PYTHON_STAMPS)
	@set -e; block=2; pids=(); for v in $(OTHER_PYTHONS); do \
	  ( export PATH=$(CURDIR)/.venv-$$v/bin:$$PATH PYSPARK_PYTHON=$(CURDIR)/.venv-$$v/bin/python \
	      PYSPARK_DRIVER_PYTHON=$(CURDIR)/.venv-$$v/bin/python CONDUIT_TEST_PORT_BLOCK=$$block; \
	    .venv-$$v/bin/python -m pytest -q -p no:cacheprovider tests/unit && \
	    .venv-$$v/bin/python -m pytest -q -p no:cacheprovider $(PYTHON_CHECKS) \
	  ) > .venv-$$v/test.log 2>&1 & pids+=($$!); block=$$((block + 1)); \
	done; \
	failed=""; i=0; for v in $(OTHER_PYTHONS); do \
	  status=0; wait $${pids[$$i]} || status=$$?; i=$$((i + 1)); \
	  echo "== Python $$v: tests/unit, then $(PYTHON_CHECKS): $$([ $$status = 0 ] && echo passed || echo FAILED)"; \
	  tail -n $$([ $$status = 0 ] && echo 2 || echo 200) .venv-$$v/test.log; \
	  [ $$status = 0 ] || failed="$$failed $$v"; \
	done; \
	[ -z "$$failed" ] || { echo "failed on Python$$failed (each one's output: .venv-<python>/test.log)"; exit 1; }

# The built wheel in a clean venv of WHEEL_PYTHON (its dependencies installed once per constraints; the
# wheel itself whenever it was rebuilt), driven from tests/release by the main venv.
$(WHEEL_VENV)/.installed: pyproject.toml $(call constraints_of,$(WHEEL_PYTHON)) | $(DIST_STAMP)
	rm -rf $(WHEEL_VENV)
	$(call make_venv,$(WHEEL_VENV),$(WHEEL_PYTHON))
	$(WHEEL_VENV)/bin/pip install -q dist/*.whl -c $(call constraints_of,$(WHEEL_PYTHON))
	touch $@

$(WHEEL_VENV)/.wheel: $(DIST_STAMP) $(WHEEL_VENV)/.installed
	$(WHEEL_VENV)/bin/pip install -q --no-deps --force-reinstall dist/*.whl
	touch $@

test-wheel: install $(WHEEL_VENV)/.wheel
	AIRFLOW_CONDUIT_WHEEL_VENV=$(CURDIR)/$(WHEEL_VENV) $(BIN)/python -m pytest -q -p no:cacheprovider tests/release

# The sdist and the wheel, checked as PyPI would (twine check); built again when a file they are made of changed.
dist: $(DIST_STAMP)

$(DIST_STAMP): $(DIST_SOURCES) | $(STAMP)
	rm -rf dist
	$(BIN)/python -m build -q --outdir dist . >/dev/null
	$(BIN)/python -m twine check --strict dist/*
	touch $@

# Regenerate constraints/constraints-<python>.txt: a fresh resolution of `.[test]` on each Python, with
# pyspark on pyspark-client's version (both write the pyspark/ folder).
constraints: $(foreach v,$(MAIN_PYTHON) $(OTHER_PYTHONS),constraints-for-$(v))

constraints-for-%:
	set -e; scratch=$$(mktemp -d); $(call python_of,$*) -m venv $$scratch; \
	$$scratch/bin/pip install -q --upgrade pip; $$scratch/bin/pip install -q '.[test]'; \
	$$scratch/bin/pip install -q "pyspark==$$($$scratch/bin/python -c 'from importlib.metadata import version; print(version("pyspark-client"))')"; \
	{ echo "# The exact versions the tests run with on Python $* (make install applies them; make constraints regenerates)."; \
	  $$scratch/bin/pip freeze --exclude-editable | grep -v '^airflow-conduit'; } > $(call constraints_of,$*); \
	rm -rf $$scratch

# Chaos scenarios (docs/chaos.md): `make chaos SEEDS=50` runs seeds FIRST..FIRST+SEEDS-1, `make chaos SEED=7` one
# seed again exactly, KINDS=all (or a comma list) adds the kinds kept out of `make test`.
.PHONY: chaos
SEEDS ?= 10
FIRST ?= 1
chaos: install
	$(BIN)/python tests/chaos/run.py $(if $(SEED),--seed $(SEED),--seeds $(SEEDS) --first $(FIRST)) $(if $(KINDS),--kinds $(KINDS))

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/python -m bench.run_all

clean:
	rm -rf $(VENV) .venv-3.* .venv-wheel-* dist .demo .pytest_cache $(foreach set,$(JAR_SETS),jars/$(set)/lib)

# A local single-node Kafka broker (KRaft) for the examples: examples/local_kafka.py, on localhost:$(KAFKA_PORT),
# its data and log in .kafka-local/ (the broker jars of `make install`; Python and Java only).
KAFKA_PORT ?= 9092
.PHONY: kafka-up kafka-down
kafka-up: jars/broker/lib/.fetched
	@KAFKA_PORT=$(KAFKA_PORT) python3 examples/local_kafka.py up

kafka-down:
	@KAFKA_PORT=$(KAFKA_PORT) python3 examples/local_kafka.py down
