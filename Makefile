# The two commands of the README work on a fresh machine: each makes the virtual
# environment it needs. `make demo` runs the main job, `make test` the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHARED ?= ../shared

.PHONY: setup demo test lint scenarios bench ci clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

demo: setup
	$(BIN)/waterline demo

test: setup
	$(BIN)/python -m pytest -rs

lint: setup
	$(BIN)/ruff check agent collectors executors devtools tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache --no-logo

# The shared example scenarios, through the installed `waterline`.
scenarios: setup
	@if [ -d $(SHARED)/scenarios ]; then \
		WATERLINE=$(BIN)/waterline $(PYTHON) $(SHARED)/bin/check-scenarios $(SHARED)/scenarios; \
	else echo "no $(SHARED)/scenarios here: skipped"; fi

bench: setup
	$(BIN)/python -m bench

ci: lint test scenarios

clean:
	rm -rf $(VENV) build *.egg-info

# The Grafana dashboard's queries and the alert rules against a real Prometheus (Debian's
# `prometheus` package; .ci/run installs it) scraping a real agent on a fake node; prints
# each dashboard query with the number of series it returned.
.PHONY: prometheus-check
prometheus-check: setup
	$(BIN)/python -m pytest tests/integration/test_prometheus.py tests/unit/test_dashboards.py -v -rs -s
