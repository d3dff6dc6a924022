# The two entry points a newcomer needs: `make run` and `make test`.
# Each creates .venv on first use and installs the project with what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test dist completion e2e-control-plane conformance-upstream browser upstream-integration

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[fast,test,release]'
	touch $(STAMP)

# Extra `dra-extender serve` flags go in ARGS, e.g. `make run ARGS="--extender-port 9000 --debug-port 9001"`.
ARGS ?=
run: $(STAMP)
	$(BIN)/dra-extender serve --snapshot examples/cluster $(ARGS)

# kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and etcd for the end-to-end tests,
# built from tests/e2e/go.mod once per machine (about 10 minutes on 2 cores), then reused.
e2e-control-plane: $(STAMP)
	$(BIN)/python tests/e2e/build_control_plane.py

# The upstream reference (k8s.io/dynamic-resource-allocation v0.37.1) for the differential tests in
# tests/conformance, built once per machine into the same cache (about two minutes), then reused.
conformance-upstream: $(STAMP)
	$(BIN)/python tests/conformance/upstream_runner.py

# bash and zsh completion generated from the CLI's parser (shtab, a build-time dependency only) into
# dist/completion/{bash/dra-extender,zsh/_dra-extender}.
completion: $(STAMP)
	$(BIN)/python release/completion.py dist/completion

# Debian's chromium for the device map's browser test: installed when missing and this user may
# (root with apt-get, as on CI); otherwise that test skips and says how to install it.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
		&& apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
		|| echo "chromium is not installed: the device map's browser test will skip"

# Every release artifact in dist/, each checked: wheel and sdist (installed into fresh virtualenvs), the
# Helm chart package, the krew archive and manifest (validated, installed with krew), the container image
# where docker, podman or buildah works (else skipped, saying why). See release/dist.py.
dist: $(STAMP)
	$(BIN)/python release/dist.py $(if $(TAG),--tag $(TAG))

# Upstream's test/integration/dra with DRA Extender as the scheduler's DRA (tests/upstream_integration):
# all four packages here; `make test` runs default and ga only, .ci/run then runs all and api here.
# UPSTREAM_PACKAGES picks some of the four, e.g. all.
UPSTREAM_PACKAGES ?= default,ga,all,api
upstream-integration: $(STAMP) e2e-control-plane
	DRA_UPSTREAM_PACKAGES=$(UPSTREAM_PACKAGES) $(BIN)/python -m pytest tests/upstream_integration -q

test: $(STAMP) e2e-control-plane conformance-upstream browser
	$(BIN)/ruff check .
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest
