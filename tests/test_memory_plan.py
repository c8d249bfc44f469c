"""`benchmarks/memory_plan.py` without libtpu: which depths a sweep hands the compiler."""
from __future__ import annotations

import json
import pathlib

import jax
from conftest import repo_module

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLAB = ROOT / "configs" / "qwen2_5_0_5b_colab.py"


def _memory_plan():
    return repo_module("benchmarks/memory_plan.py", "memory_plan")


def test_full_depth_compiles_each_model_at_its_own_depth(tmp_path, monkeypatch):
    """The Colab config's RM keeps 8 of 24 layers: the full-depth compile must not give it the
    policy's 24 (it did, and the plan reported the 24-layer RM's memory as the config's)."""
    mp = _memory_plan()
    seen = []

    def fake_compile(config, devices, mesh_shape, layers, *args):
        seen.append(layers)
        raise RuntimeError("no compile in tests")

    monkeypatch.setattr(mp, "topology_devices", lambda name: jax.devices("cpu")[:1])
    monkeypatch.setattr(mp, "compile_one", fake_compile)
    out = tmp_path / "runs.jsonl"
    mp.main(["--config", str(COLAB), "--slices", "v5e-1", "--layers", "0", "2",
             "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert seen == [None, 2]
    assert [(r["layers"], r["rm_layers"]) for r in rows] == [(24, 8), (2, 2)]
    cfg, _, _ = mp.step_setup(mp.load_config(COLAB), None, True, "xla", scan=True)
    assert (cfg.policy.num_layers, cfg.rm.num_layers) == (24, 8)
