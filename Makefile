# The commands the README and CI use. `make test` and `make run` set up first.
PYTHON ?= python3
STAMP := .opsloop/setup.stamp

.PHONY: setup run test lint bench clean

$(STAMP): pyproject.toml scripts/system-deps scripts/mcp-test-servers scripts/debian-kubectl
	scripts/system-deps
	scripts/mcp-test-servers
	scripts/debian-kubectl
	$(PYTHON) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	@mkdir -p $(dir $(STAMP)) && touch $(STAMP)

setup: $(STAMP)

run: setup
	opsloop dev

test: setup
	$(PYTHON) -m pytest
	OPSLOOP_TEST_REDIS=cluster $(PYTHON) -m pytest -q tests/store
	OPSLOOP_TEST_REDIS=sentinel $(PYTHON) -m pytest -q tests/store

lint: setup
	ruff check bot tools tests benchmarks
	ruff format --check bot tools tests benchmarks
	mypy

bench: setup
	$(PYTHON) -m pip install -q -e '.[bench]' --config-settings editable_mode=compat
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/core_loop.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/llm_client.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/store.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/tool_runs.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/mcp_tools.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/redact.py
	PYTHONPATH=$(CURDIR) $(PYTHON) benchmarks/slack_ack.py
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
