# The two commands a new user runs: `make demo` and `make test`.
# Each bootstraps everything from nothing: Debian packages (apt-get, when missing)
# and the Python packages into .venv (pins live in pyproject.toml only).
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SYSTEM_STAMP := .venv-system-deps
# Pinned jars from Maven Central (versions in jars/<name>/pom.xml only): Spark's Kafka and Delta connectors,
# and a Kafka broker for the tests, each in its own folder (the broker's Kafka is not Spark's).
JAR_SETS := kafka delta broker
JAR_STAMPS := $(foreach set,$(JAR_SETS),jars/$(set)/lib/.fetched)
# The driver JVM's class data sharing archive (spark/class_archive.py): made on this machine, for its JDK and jars.
CLASS_ARCHIVE := $(VENV)/share/airflow-conduit/spark-classes.jsa

export SPARK_LOCAL_IP := 127.0.0.1
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python
export PATH := $(CURDIR)/$(BIN):$(PATH)

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Debian packages the project needs: Java for Spark, PostgreSQL server and its JDBC driver for the JDBC tests,
# Chromium for the UI plugin's browser test (headless), Maven to fetch the connector jars.
APT_PACKAGES := default-jre-headless postgresql libpostgresql-jdbc-java chromium maven

.PHONY: help install jars system-deps test test-unit test-spark test-integration test-deployment demo bench clean

help:
	@echo "make demo   - run the main job end to end on local Spark and Airflow (SQLite)"
	@echo "make test   - run all tests (unit, spark, integration, deployment)"
	@echo "make bench  - run the benchmarks and render docs/benchmarks.md and docs/benchmarks/"

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

$(STAMP): pyproject.toml
	$(MAKE) system-deps
	[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

jars/%/lib/.fetched: jars/%/pom.xml
	$(MAKE) system-deps
	rm -rf jars/$*/lib
	cd jars/$* && mvn -q -B dependency:copy-dependencies
	touch $@

jars: $(JAR_STAMPS)

$(CLASS_ARCHIVE): $(STAMP)
	$(BIN)/python -m airflow_conduit.spark.class_archive --path $(CLASS_ARCHIVE)

install: $(STAMP) system-deps jars $(CLASS_ARCHIVE)

test: install
	$(BIN)/python -m pytest -q tests/unit
	$(BIN)/python -m pytest -q tests/spark
	$(BIN)/python -m pytest -q tests/integration
	$(BIN)/python -m pytest -q tests/chaos
	$(BIN)/python -m pytest -q tests/deployment

test-unit: install
	$(BIN)/python -m pytest -q tests/unit

test-spark: install
	$(BIN)/python -m pytest -q tests/spark

test-integration: install
	$(BIN)/python -m pytest -q tests/integration

test-deployment: install
	$(BIN)/python -m pytest -q tests/deployment

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
	rm -rf $(VENV) .demo .pytest_cache $(foreach set,$(JAR_SETS),jars/$(set)/lib)
