# The two commands of the README work on a fresh machine: each makes the virtual
# environment it needs. `make demo` runs the main job, `make test` the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SHARED ?= ../shared

.PHONY: setup demo test-programs test test-fast lint scenarios bench ci clean image base-image lock test-latest

# The environment is exactly requirements/dev.lock (versions and hashes; --no-deps: nothing
# the lock does not name), then Waterline itself, editable, built by the locked setuptools
# (whose boxed warning that folders named like the package are importable here is silenced:
# they are the package).
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/dev.lock
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r requirements/dev.lock
	PYTHONWARNINGS=ignore $(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Refresh both locks to the newest versions pyproject.toml's ranges (and
# requirements/constraints.txt) admit; commit the refresh on its own, listing what moved.
lock: setup
	PATH=$(CURDIR)/$(BIN):$$PATH hack/lock

# The test suite on the newest versions the ranges admit, not the lock: a throw-away
# environment (.venv-latest, made anew each time), to see a coming break before `make lock`.
LATEST_VENV ?= .venv-latest
test-latest:
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/pip install --quiet --upgrade pip
	$(LATEST_VENV)/bin/pip install --quiet -e '.[test]'
	$(LATEST_VENV)/bin/pip freeze --exclude-editable
	$(LATEST_VENV)/bin/python -m pytest -rs $(PYTEST_ARGS)

# The dev tools (devtools/) are not installed: they run from this checkout, as
# `python -m devtools COMMAND` from its root (that puts the checkout on the path).
demo: setup
	$(BIN)/python -m devtools demo

# The tests talk to a real cluster (devtools/harness/cluster.py), render, lint and install the Helm
# chart with the real helm, and join this host as a real node (tests/e2e): their programs
# are built first (a no-op once built). Where they cannot be built, those tests skip,
# except in CI (CI=true), where that is a failure. `test-programs` builds them, for
# `make test` and `make test-vm-node`.
test-programs:
	@hack/cluster/build || [ "$$CI" != true ]
	@hack/cluster/build helm || [ "$$CI" != true ]
	@hack/cluster/build $(NODE_TOOLS) || [ "$$CI" != true ]

test: setup test-programs
	$(BIN)/python -m pytest -rs

# The quick part while iterating (under a minute): every test not marked slow, which
# leaves out tests/integration (real cgroups, processes, servers) and the longest
# property tests. `make test` runs everything and is what CI runs.
test-fast: setup
	$(BIN)/python -m pytest -rs -m "not slow"

lint: setup
	$(BIN)/ruff check agent collectors engine executors devtools tests bench
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
	rm -rf $(VENV) $(LATEST_VENV) build *.egg-info

# A real Kubernetes control plane on loopback (docs/cluster.md): kube-apiserver, etcd,
# kube-controller-manager, kube-scheduler and kwok nodes, built from their Go modules
# (hack/cluster/build: cold ~15 min on 2 cores, then a no-op). `make cluster-down` stops it
# and removes its state (.cluster/run, .cluster/kubeconfig).
CLUSTER_NODES ?= 3
.PHONY: cluster cluster-build cluster-down
cluster-build:
	hack/cluster/build

cluster: cluster-build
	$(PYTHON) -m devtools.cluster up --nodes $(CLUSTER_NODES)

cluster-down:
	@$(PYTHON) -m devtools.vm node-down --if-running  # a guest node first: its record is under .cluster/run
	$(PYTHON) -m devtools.cluster down

# This machine as a real node of that cluster (root; docs/node.md): containerd, the
# kubelet and kube-proxy, the project's image and its base loaded from local archives.
NODE_TOOLS = kubelet kube-proxy containerd containerd-shim-runc-v2 ctr crictl
.PHONY: node node-build node-down
node-build:
	hack/cluster/build $(NODE_TOOLS)

node: node-build
	$(PYTHON) -m devtools.cluster node

node-down:
	$(PYTHON) -m devtools.cluster node-down

# charts/waterline's copies of what Helm takes verbatim from deploy/ (the CRDs, the
# dashboard JSON, the alert rules), its version (pyproject.toml's), and the RBAC rules of
# deploy/ and the chart from the access tables in code (devtools/rbac.py): run after
# editing those in deploy/, the version or an access table (tests/unit/test_chart.py
# fails until then). The
# templated objects are written in both places; the same test renders the chart and
# compares it with `kubectl kustomize deploy/`, object by object (charts/waterline/README.md).
.PHONY: chart
chart:
	$(PYTHON) -m devtools.chart

# A real cgroup v2 + systemd host (docs/vm.md): a Debian 12 guest made from Debian's
# packages (hack/vm/build: debootstrap, mkfs.ext4 -d; root), cached under
# ~/.cache/waterline/vm/<hash of its inputs>, booted under qemu (software emulation;
# VM_ACCEL=kvm where KVM works). `make vm` builds it when needed and boots it once;
# tests/vm/ (part of `make test`) boots it once and runs every guest check in that boot.
.PHONY: vm vm-build
vm: setup
	$(BIN)/python -m devtools.vm up

vm-build: setup
	$(BIN)/python -m devtools.vm build

# The guest as a real node of `make cluster`'s control plane (docs/vm.md): containerd,
# runc, the kubelet (systemd driver, cgroup v2) and kube-proxy, Waterline's image imported,
# deploy/ applied; prints each step's time; the guest runs until `make vm-node-down`.
# VM_NODE_IMAGE: a local image to run under the project's name (default: `make image`'s).
# `make test-vm-node` runs tests/vm_node/ alone (its own cluster and guest); `make test`
# runs them last (the cold CI's figures: docs/vm.md).
.PHONY: vm-node vm-node-down test-vm-node
vm-node: setup node-build
	$(BIN)/python -m devtools.vm node $(if $(VM_NODE_IMAGE),--image $(VM_NODE_IMAGE))

vm-node-down: setup
	$(BIN)/python -m devtools.vm node-down

test-vm-node: setup test-programs
	$(BIN)/python -m pytest tests/vm_node -rs

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
