# The two commands of the README work on a fresh machine: each makes the virtual
# environment it needs. `make demo` runs the main job, `make test` the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHARED ?= ../shared

.PHONY: setup demo test lint scenarios bench ci clean image base-image

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

# The container image (Containerfile; docs/install.md). Podman with hack/containers.conf
# (runc, no default ulimits, cgroupfs: see the comments there), or docker with a running
# daemon. `make base-image` makes the Containerfile's base from Debian's packages, for
# machines that reach no container registry. tests/integration/test_image.py runs the image.
IMAGE_REPOSITORY ?= ghcr.io/waterline/waterline
VERSION = $(shell $(PYTHON) -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
IMAGE ?= $(IMAGE_REPOSITORY):$(VERSION)
BASE_IMAGE ?= docker.io/library/debian:bookworm-slim
# The python3 of BASE_IMAGE's Debian release: the dependencies' wheels are fetched for it.
IMAGE_PYTHON ?= 3.11
export CONTAINERS_CONF ?= $(CURDIR)/hack/containers.conf

base-image:
	BASE_IMAGE=$(BASE_IMAGE) hack/base-image

image: setup
	PIP=$(BIN)/pip IMAGE=$(IMAGE) VERSION=$(VERSION) BASE_IMAGE=$(BASE_IMAGE) \
		IMAGE_PYTHON=$(IMAGE_PYTHON) hack/build-image
