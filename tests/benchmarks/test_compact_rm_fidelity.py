"""benchmarks/compact_rm_fidelity.py: how the compact RMs' scores compare with the exact RMs'."""
import json

import numpy as np
from conftest import REPO, repo_module


def test_score_differences_and_flipped_orderings():
    bench = repo_module("benchmarks/compact_rm_fidelity.py", "compact_rm_fidelity")
    exact = np.array([2.0, 1.0, -1.0, -1.5])
    compact = np.array([2.0, -1.2, -1.1, -1.5])  # triple 1 falls below 2: two orderings flip
    labels = np.array([True, True, False, False])
    out = bench.compare(exact, compact, labels)
    assert out["max_abs_score_diff"] == 2.2 and out["predictions_changed"] == 1
    assert out["pairs"] == 6 and out["pairs_flipped"] == 1
    assert out["right_wrong_pairs"] == 4 and out["right_wrong_pairs_flipped"] == 1


def test_the_committed_fidelity_names_the_shipped_rms():
    """The committed figures are of the folders the configs name, with their kept digests."""
    bench = repo_module("benchmarks/compact_rm_fidelity.py", "compact_rm_fidelity")
    result = json.loads((REPO / "docs/results/compact_rm/fidelity.json").read_text())
    assert set(result["rms"]) == set(bench.RMS)
    for name, r in result["rms"].items():
        summary = json.loads((REPO / r["compact"] / "rm_summary.json").read_text())
        assert r["compact_rm"]["rm_params"] == summary["digests"]["rm_params"]
        assert r["exact_rm"]["rm_params"] == summary["compact_of"]["rm_params"]
        assert r["predictions_changed"] == 0
