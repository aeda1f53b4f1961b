# Two commands for a new user: `make demo` and `make test`. Both install what they
# need (idempotently) into .venv, made from the system Python so that Debian's
# Mininet package is visible to it.
PYTHON_SYS := /usr/bin/python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo demo-ha plan-demo test setup bench load simulate-cluster iteration-bench iteration-goals clean p4

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PYTHON_SYS) || { echo "error: $(PYTHON_SYS) not found (Debian 12 ships it)"; exit 1; }
	@$(PYTHON_SYS) -c 'import venv, ensurepip' 2>/dev/null || { apt-get update -q && apt-get install -y -q python3-venv; }
	@if [ "$$(id -u)" = 0 ] && { ! command -v ovs-vswitchd || ! command -v mn || ! command -v ethtool || ! command -v ping || ! command -v ip || ! command -v chromium || ! command -v etcd || ! /sbin/ldconfig -p | grep -q 'libnorm\.so\.1 '; } >/dev/null; then \
		echo "installing Open vSwitch, Mininet, ethtool, ping, iproute2, Chromium (the web UI's browser test), libnorm1 (NORM, the model broadcast) and etcd (docs/ha.md) from Debian"; \
		apt-get update -q && apt-get install -y -q openvswitch-switch mininet ethtool iputils-ping iproute2 chromium libnorm1 etcd-server; \
	fi
	@test -x $(PY) || $(PYTHON_SYS) -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,openflow,p4runtime,etcd]'
	@touch $(STAMP)

# The emulation demo (root): Open vSwitch, the controller and a Mininet k=4 fat-tree
# with real multicast traffic; writes build/demo-report.json (docs/emulation.md).
# BACKEND=p4: BMv2 simple_switch_grpc switches over P4Runtime (simple_switch_grpc on PATH).
# TLS=1: the southbound over TLS, with certificates of the run's own (docs/security.md).
BACKEND ?= ovs
TLS ?=
demo: setup
	$(PY) mininet/demo.py --backend $(BACKEND) $(if $(TLS),--tls)

# High availability (docs/ha.md, root): three controller instances on one etcd store,
# the k=4 fat-tree with traffic, the leader killed mid-stream; build/demo-ha-report.json.
demo-ha: setup
	$(PY) mininet/demo_ha.py

# Training iterations with real bytes (docs/emulation.md, "Training iterations on an
# oversubscribed fabric", root): 6 jobs x 3 iterations, every broadcast policy in its own
# emulation, each under an flock of EMU_LOCK; build/iteration-bench.json and .md.
# ITER_ARGS=--full-bisection (every link 10 Mbit/s), ITER_ARGS=--quick (the smoke run).
EMU_LOCK ?= /tmp/emu.lock
ITER_ARGS ?=
iteration-bench: setup
	$(PY) mininet/iteration_bench.py --lock $(EMU_LOCK) $(ITER_ARGS)

# The setting the broadcast goals are judged on (docs/emulation.md, "The goals (issue 24)"),
# root, about 30 min: the oversubscribed fabric with mixed core budgets, every policy 3 times,
# then full bisection, lp-rounding and the chain 3 times; build/iteration-goals-*.json/.md.
GOAL_ARGS := --mb 1 --planned-class 46 --phase-rates --stagger 15 --core-groups 2,2,0,0 --runs 3
iteration-goals: setup
	$(PY) mininet/iteration_bench.py --lock $(EMU_LOCK) $(GOAL_ARGS) --out build/iteration-goals-oversubscribed
	$(PY) mininet/iteration_bench.py --lock $(EMU_LOCK) $(GOAL_ARGS) --full-bisection \
		--policies lp-rounding,tcp-chain --out build/iteration-goals-full-bisection

# The planning table of every algorithm on a k=8 fat-tree (no emulation, no root).
plan-demo: setup
	$(PY) -m controller plan --fattree 8 --jobs 40 --group-capacity 4 --algorithm all

# pytest exits 5 when it collected no tests: a failure here, not a pass.
test: setup
	@$(PY) -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: setup
	$(PY) -m controller bench

# The load test (docs/performance.md): 50 tenants registering and deleting jobs for
# 60 s against the controller process on a k=8 fat-tree (locust, headless, loopback);
# build/load-report.json.
load: setup
	$(PY) -m controller bench-load

# A cluster over time (docs/evaluation.md, "A cluster over time"): JCT and tables under
# job arrivals and departures; the figures into docs/figures/ (15–20 min on two cores).
simulate-cluster: setup
	$(PY) -m controller simulate-cluster

clean:
	rm -rf $(VENV) build *.egg-info

# The P4 programs' P4Info and device configs (p4src/build/), for every target whose
# compiler is installed: BMv2 (p4c-bm2-ss, or p4c with its bmv2 backend) and Tofino 1
# and 2 (bf-p4c's driver, /opt/p4tofino/install/bin/p4c: ../shared/p4tools/install-tofino.sh).
# Without any compiler it fails and leaves the committed files as they are.
P4C := $(shell command -v p4c-bm2-ss || command -v p4c)
TOFINO_P4C ?= /opt/p4tofino/install/bin/p4c
# bf-p4c's full output (tofino.bin, context.json, the resource logs in pipe/logs/) for
# each Tofino target; only the P4Info and bfrt.json are committed (docs/p4.md, "Tofino").
# A bfrt.json that differs from the committed one only where bf-p4c varies from run to
# run (p4src/tna/bfrt_same.py) leaves the committed one in place.
TOFINO_OUT := build/p4-tofino
TOFINO_FLAGS := -g --p4runtime-force-std-externs
p4:
	@if [ -z "$(P4C)" ] && [ ! -x "$(TOFINO_P4C)" ]; then \
		echo "error: p4c is missing (neither p4c-bm2-ss nor p4c is on PATH, nor $(TOFINO_P4C)): p4src/build/ was not regenerated;" >&2; \
		echo "       the committed p4src/build/ files stay as they are (see docs/p4.md)" >&2; \
		exit 1; \
	fi
	@mkdir -p p4src/build
	@case "$(P4C)" in \
		"") echo "p4c for BMv2 is missing: p4src/build/mcast.json and mcast.p4info.txt left as they are" ;; \
		$(TOFINO_P4C)) echo "only the Tofino p4c is installed: p4src/build/mcast.json and mcast.p4info.txt left as they are" ;; \
		*p4c-bm2-ss) $(P4C) --arch v1model -o p4src/build/mcast.json --p4runtime-files p4src/build/mcast.p4info.txt p4src/mcast.p4 \
			&& echo "p4src/build/mcast.json and p4src/build/mcast.p4info.txt regenerated with $(P4C)" ;; \
		*) $(P4C) --target bmv2 --arch v1model -o p4src/build --p4runtime-files p4src/build/mcast.p4info.txt p4src/mcast.p4 \
			&& echo "p4src/build/mcast.json and p4src/build/mcast.p4info.txt regenerated with $(P4C)" ;; \
	esac
	@if [ -x "$(TOFINO_P4C)" ]; then \
		for t in tofino:tna tofino2:t2na; do \
			target=$${t%%:*}; arch=$${t#*:}; out=$(TOFINO_OUT)/$$target; \
			rm -rf $$out && mkdir -p $$out p4src/build/$$target && \
			$(TOFINO_P4C) --target $$target --arch $$arch $(TOFINO_FLAGS) \
				--p4runtime-files $$out/mcast.p4info.txt -o $$out p4src/tna/mcast.p4 >$(TOFINO_OUT)/$$target.log 2>&1 \
				|| { cat $(TOFINO_OUT)/$$target.log >&2; echo "error: $$target: p4src/tna/mcast.p4 did not compile" >&2; exit 1; }; \
			cp $$out/mcast.p4info.txt p4src/build/$$target/ && \
			{ python3 p4src/tna/bfrt_same.py $$out/bfrt.json p4src/build/$$target/bfrt.json 2>/dev/null \
				|| cp $$out/bfrt.json p4src/build/$$target/; } && \
			echo "p4src/build/$$target/mcast.p4info.txt and bfrt.json regenerated ($$out has the binary and pipe/logs/)"; \
		done; \
	else \
		echo "the Tofino p4c ($(TOFINO_P4C)) is missing: p4src/build/tofino*/ left as they are"; \
	fi
