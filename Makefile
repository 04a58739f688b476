# kafkalog: every target creates .venv and installs the project on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Every Python tree of the repository that ruff lints and formats.
LINTED := src tests benchmarks tools fuzz

.PHONY: demo test bench reliability lint check-java kcat zookeeper chromium clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "kafkalog needs Python 3.11 or newer; found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	@touch $(STAMP)

# Spark (the pipeline, the demo and its tests) needs a JDK 17 or newer.
check-java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "kafkalog: Java 17 or newer is required (Spark runs on it) but 'java' is not on PATH." >&2; \
	  echo "          Install a JDK 17+, e.g. 'apt-get install openjdk-17-jre-headless', then retry." >&2; exit 1; }
	@java -version 2>&1 | awk -F'"' '/version/ { split($$2, v, "."); if (v[1] + 0 < 17) { \
	  print "kafkalog: Java 17 or newer is required; found " $$2 > "/dev/stderr"; exit 1 } }'

demo: check-java $(STAMP)
	$(BIN)/python -m kafkalog.demo

# The broker tests drive kcat (librdkafka's command-line client): installed here when missing, as root with apt.
kcat:
	@command -v kcat >/dev/null 2>&1 || command -v kafkacat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get install -y -qq kcat >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null 2>&1)) || \
	    echo "kafkalog: installing kcat with apt-get failed; the kcat tests will skip" >&2; \
	  else \
	    echo "kafkalog: kcat is not installed (apt-get install kcat as root); the kcat tests will skip" >&2; \
	  fi; }

# The retention timeline test loads `explain retention --html`'s page in a headless Chromium (Debian's package):
# installed here when missing, as root with apt, as kcat is.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1)) || \
	    echo "kafkalog: installing chromium with apt-get failed; the headless-browser test will skip" >&2; \
	  else \
	    echo "kafkalog: chromium is not installed (apt-get install chromium as root); the headless-browser test will skip" >&2; \
	  fi; }

# The replication tests start a private ZooKeeper from Debian's zookeeper package (its jars, run with java):
# installed here when missing, as root with apt, as kcat is.
zookeeper:
	@test -f /usr/share/java/zookeeper.jar || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null 2>&1 || \
	     (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq zookeeper >/dev/null 2>&1)) || \
	    echo "kafkalog: installing zookeeper with apt-get failed; the replication tests will skip" >&2; \
	  else \
	    echo "kafkalog: zookeeper is not installed (apt-get install zookeeper as root); the replication tests will skip" >&2; \
	  fi; }

# The whole suite but the quick forms of the slow benchmarks (marker bench_smoke), which `make bench` runs first.
test: check-java kcat zookeeper chromium $(STAMP) lint
	$(BIN)/python -m pytest -m "not bench_smoke"

# First the smoke tests of the slow benchmarks' quick forms (each writes well-formed results), then the benchmarks.
bench: $(STAMP)
	$(BIN)/python -m pytest -q -m bench_smoke
	$(BIN)/python -m benchmarks.run

# kill -9 and injected I/O-fault checks, one table (about 60 minutes: 13 of them the partition layer's 200 kill -9
# HW-property runs, about 25 the broker's 2 x 200 kill -9 rounds under librdkafka clients, about 15 the 50
# exactly-once runs; `--broker-only` and `--eos-only` run just those; `--quick` is what the tests run).
reliability: zookeeper $(STAMP)
	$(BIN)/python -m tools.reliability $(RELIABILITY_ARGS)

# ruff over every tree, and mypy over src/ (configured in pyproject.toml: strict on record/ and most of storage/).
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache demo-output
