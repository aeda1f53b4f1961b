# Two commands for a new user: `make demo` and `make test`. Both install what they
# need (idempotently) into .venv, made from the system Python so that Debian's
# Mininet package is visible to it.
PYTHON_SYS := /usr/bin/python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test setup bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PYTHON_SYS) || { echo "error: $(PYTHON_SYS) not found (Debian 12 ships it)"; exit 1; }
	@$(PYTHON_SYS) -c 'import venv, ensurepip' 2>/dev/null || { apt-get update -q && apt-get install -y -q python3-venv; }
	@if [ "$$(id -u)" = 0 ] && { ! command -v ovs-vswitchd || ! command -v mn || ! command -v ethtool || ! command -v ping || ! command -v ip; } >/dev/null; then \
		echo "installing Open vSwitch, Mininet, ethtool, ping and iproute2 from Debian"; \
		apt-get update -q && apt-get install -y -q openvswitch-switch mininet ethtool iputils-ping iproute2; \
	fi
	@test -x $(PY) || $(PYTHON_SYS) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,openflow]'
	@touch $(STAMP)

demo: setup
	$(PY) -m controller plan --fattree 8 --jobs 40 --group-capacity 4 --algorithm all

# pytest exits 5 when it collected no tests: a failure here, not a pass.
test: setup
	@$(PY) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: setup
	$(PY) -m controller bench

clean:
	rm -rf $(VENV) build *.egg-info
