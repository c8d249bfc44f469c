"""What a VerifyRM training step costs as a function of how many of SmolLM2's layers the RM
keeps: the real-model VerifyRM (`coop_jax.projects.real_model.verifyrm`) keeps 4 of 30.

    python benchmarks/rm_train_cost.py [--layers=4,8,30] [--steps=6] [--num_train=6129] \
        [--out=docs/results/real_model/verifyrm/cost.json]

For each depth: the RM as coop-train-rm builds it from `configs/smollm2_arithmetic.py` (full
fine-tuning, its `rm_train` recipe: batch 16, inputs of `cooper.max_len` tokens), then the
compiled AdamW step on one fixed batch of full-length random tokens, timed `--steps` times after
one compiling call. Reported: parameters, compile seconds, the median step, and that step times
the steps of a `--num_train`-triple corpus over the recipe's epochs.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def measure(layers: int, steps: int, num_train: int) -> dict:
    import jax
    import numpy as np

    from coop_jax.config import load_config_file
    from coop_jax.rm.input import RMInputFormat
    from coop_jax.rm.train.loop import build_state, config_mesh

    config = load_config_file(os.path.join(ROOT, "configs", "smollm2_arithmetic.py"))
    config.reward_model.keep_layers = layers
    config.rm_train.mode = "train"
    opts = config.rm_train
    setup = build_state(config.reward_model, config_mesh(config), opts, num_train)
    length = RMInputFormat.from_config(config).max_len
    rng = np.random.default_rng(0)
    batch = {"tokens": rng.integers(0, 49152, (opts.batch_size, length), dtype=np.int32),
             "mask": np.ones((opts.batch_size, length), np.int32),
             "labels": rng.integers(0, 2, opts.batch_size).astype(np.float32),
             "weight": np.ones(opts.batch_size, np.float32)}
    batch = {k: jax.device_put(v, setup.batch_shardings[k]) for k, v in batch.items()}
    state = setup.state
    t0 = time.perf_counter()
    state, metrics = setup.step_fn(state, batch)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        state, metrics = setup.step_fn(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    total_steps = opts.epochs * math.ceil(num_train / opts.batch_size)
    return {"layers": layers,
            "parameters": int(sum(x.size for x in jax.tree_util.tree_leaves(state.params))),
            "compile_s": compile_s, "step_s": step_s, "step_times": times,
            "batch": opts.batch_size, "tokens_per_row": length,
            "corpus_steps": total_steps, "corpus_hours": step_s * total_steps / 3600}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="4,8,30", help="comma-separated layer counts to keep")
    p.add_argument("--steps", type=int, default=6, help="timed steps per depth")
    p.add_argument("--num_train", type=int, default=6129, help="training triples of the corpus")
    p.add_argument("--out", default="", help="write the results here as JSON")
    a = p.parse_args(argv)
    from results import run_facts, write_result
    rows = []
    for layers in [int(x) for x in a.layers.split(",")]:
        row = measure(layers, a.steps, a.num_train)
        rows.append(row)
        print(f"{layers:>2} layers: {row['parameters'] / 1e6:.1f}M parameters, step "
              f"{row['step_s']:.2f} s (compile {row['compile_s']:.0f} s), the corpus "
              f"{row['corpus_steps']} steps = {row['corpus_hours']:.2f} h", flush=True)
    report = {"facts": run_facts(), "rows": rows}
    write_result(a.out or None, report)
    return report


if __name__ == "__main__":
    main()
