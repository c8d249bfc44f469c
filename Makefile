# The two Quickstart commands: `make demo` (train the embedded default) and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
WORKDIR ?= runs/demo

.PHONY: install demo test hacking

install:
	$(PIP) install -q -e ".[test]"

demo: install
	coop-train --config=configs/default.py --workdir=$(WORKDIR)

test: install
	$(PYTHON) -m pytest -q -n 2 --durations=15 tests

hacking: install
	$(PYTHON) -m coop_jax.experiments.reward_hacking --config=configs/toy_hacking.py --workdir=runs/hacking
