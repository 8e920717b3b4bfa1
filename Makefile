# The commands the README and CI use. `make test` and `make run` set up first.
PYTHON ?= python3
STAMP := .opsloop/setup.stamp
# The installer of the lock (uv's `pip` interface), itself pinned: `make lock` writes
# requirements.lock with it and `make setup` installs exactly that file.
UV_VERSION := 0.13.9
UV := $(PYTHON) -m uv

.PHONY: setup run test test-store-cluster test-store-sentinel lint bench lock check-lock clean image image-test

$(STAMP): pyproject.toml requirements.lock scripts/system-deps scripts/mcp-test-servers scripts/debian-kubectl scripts/helm
	scripts/system-deps
	scripts/mcp-test-servers
	scripts/debian-kubectl
	scripts/helm
	$(PYTHON) -m pip install -q --root-user-action=ignore uv==$(UV_VERSION)
	$(UV) pip install -q --compile-bytecode --python $(PYTHON) -r requirements.lock
	$(UV) pip install -q --python $(PYTHON) --no-deps -e . --config-settings editable_mode=compat
	$(PYTHON) scripts/check-lock requirements.lock
	@# pyenv finds new console scripts (opsloop, ruff, ...) only after a rehash
	@if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
	@mkdir -p $(dir $(STAMP)) && touch $(STAMP)

# Refresh the lock to today's releases within pyproject.toml's bounds (run on purpose, then
# `make test` and commit both). Every extra is locked: the tests, lint and benchmarks use them.
lock:
	$(PYTHON) -m pip install -q --root-user-action=ignore uv==$(UV_VERSION)
	$(UV) pip compile pyproject.toml --all-extras --universal --python-version 3.11 \
		--generate-hashes --upgrade --custom-compile-command 'make lock' -o requirements.lock

# Whether what is installed is what the lock says (CI runs it after setup).
check-lock:
	$(PYTHON) scripts/check-lock requirements.lock

setup: $(STAMP)

run: setup
	$(PYTHON) -m bot dev

# pytest-xdist workers: more than the cores, since most e2e time is spent waiting on real
# processes (leases running out, restarts, backoffs) rather than computing. Every fixture
# picks free ports and its own folders, and each worker starts its own Redis servers.
TEST_WORKERS ?= 4

# The store's tests on a real Redis Cluster and on Sentinel first, side by side (both spend
# much of their time waiting on their topology; each run's output is printed whole when it
# ends), then everything on a standalone Redis, ending with the 15 slowest tests.
test: setup
	$(MAKE) --no-print-directory -j2 --output-sync=target test-store-cluster test-store-sentinel
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=15

test-store-cluster test-store-sentinel: setup
	OPSLOOP_TEST_REDIS=$(@:test-store-%=%) $(PYTHON) -m pytest -q -n 2 --dist loadgroup tests/store

# The OCI image, built without a registry (mmdebstrap from Debian's packages; needs root and
# unshare): dist/opsloop-VERSION.oci.tar. The Dockerfile builds the same layout elsewhere.
IMAGE_VERSION = $(shell $(PYTHON) -c "import tomllib; print(tomllib.load(open('pyproject.toml', 'rb'))['project']['version'])")

image: setup
	scripts/image-deps
	$(PYTHON) scripts/build-image

# The built image run as its non-root user on a read-only root filesystem (unshare + chroot):
# --version, check, serve answering /healthz and a signed mention.
image-test: image
	OPSLOOP_IMAGE=dist/opsloop-$(IMAGE_VERSION).oci.tar $(PYTHON) -m pytest -q -p no:randomly tests/image

lint: setup
	$(PYTHON) -m ruff check bot tools tests benchmarks
	$(PYTHON) -m ruff format --check bot tools tests benchmarks
	$(PYTHON) -m mypy

bench: setup
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/core_loop.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/llm_client.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/store.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/tool_runs.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/mcp_tools.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/redact.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/slack_ack.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/alerts.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/cli_startup.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/knowledge.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/slack_calls.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/pack_host_http.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/pack_prometheus.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/pack_supervisor.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/pack_kubernetes.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/pack_postgres.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/takeover.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/otel.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/audit.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/chaos_soak.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/topologies.py

clean:
	rm -rf .opsloop .mypy_cache .ruff_cache .pytest_cache build *.egg-info
