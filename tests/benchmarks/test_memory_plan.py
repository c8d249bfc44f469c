"""`benchmarks/memory_plan.py` without libtpu: which depths a sweep hands the compiler."""
from __future__ import annotations

import json

import jax
from conftest import REPO, repo_module

ROOT = REPO
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


PAPER = ROOT / "configs" / "qwen2_5_1_5b_gsm8k.py"


def test_the_paper_configs_assistant_is_a_7b_in_the_models_compute_dtype():
    """configs/qwen2_5_1_5b_gsm8k.py's assistant (Qwen2.5-7B-Instruct) as make_rewriter loads it:
    bfloat16 (model.dtype), 7.62B parameters, 1/8 of them per device under pure FSDP on 8."""
    mp = _memory_plan()
    config = mp.load_config(PAPER)
    name, acfg = mp.assistant_model(config, scan=True)
    assert name == "Qwen2.5-7B" and acfg.param_dtype == acfg.dtype == "bfloat16"
    assert (acfg.num_layers, acfg.hidden_size, acfg.num_kv_heads, acfg.tie_embeddings,
            acfg.scan_layers) == (28, 3584, 4, False, True)
    mesh = mp.parallel.make_mesh((1, 8, 1), jax.devices()[:8])
    params = mp.abstract_params(acfg, mesh)
    assert sum(x.size for x in jax.tree_util.tree_leaves(params)) == 7_615_616_512
    assert abs(mp.per_device_bytes(params) - 7_615_616_512 * 2 / 8) < 2 ** 20  # norms replicated
    _, prompt, settings = mp.rewrite_program(config, acfg, mesh, "xla", num_processes=1)
    # 4 prompts per step, padded to the 8 batch shards; (512 + 512 + 128) + (512 + 500) tokens
    assert prompt[0].shape == (8, 1152) and settings["max_new_tokens"] == 1012


def test_assistant_rows_add_its_params_and_the_larger_programs_temporaries(tmp_path,
                                                                           monkeypatch):
    mp = _memory_plan()
    seen = []

    def fake_compile(config, devices, mesh_shape, layers, *args, **kwargs):
        seen.append(kwargs)
        raise RuntimeError("no compile in tests")

    monkeypatch.setattr(mp, "topology_devices", lambda name: jax.devices("cpu")[:1])
    monkeypatch.setattr(mp, "compile_one", fake_compile)
    out = tmp_path / "runs.jsonl"
    mp.main(["--slices", "v5e-1", "--out", str(out), "--assistant", "on"])
    (row,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert seen == [{"assistant": True, "rewrite_kernel_impl": "auto"}]
    assert row["assistant"] is True and "error" in row
    gib = 2 ** 30
    row = dict(row, full_state_bytes=5 * gib, full_batch_bytes=0, temp_bytes=9 * gib,
               compile_s=1.0, compile_cpu_s=1.0, assistant_arch="Qwen2.5-7B",
               assistant_dtype="bfloat16", assistant_bytes=2 * gib, rewrite_temp_bytes=3 * gib,
               rewrite_compile_cpu_s=2.0, rewrite_rows=8, rewrite_prompt_len=1152,
               rewrite_new_tokens=1012)
    del row["error"]
    plain = {k: v for k, v in row.items() if not k.startswith(("assistant", "rewrite"))}
    plans = mp.plan_rows([row, plain])
    assert [(p["assistant"], p["total"] / gib) for p in plans] == [(False, 14.0), (True, 16.0)]
    assert plans[1]["step_temp"] == 9 * gib and plans[1]["rewrite_temp"] == 3 * gib
    text = "\n".join(mp.assistant_rows(plans))
    assert ("| Qwen2.5-7B (bfloat16) | 5.00 | 2.00 | 9.00 | 8 x (1152 + 1012) | 3.00 | 16.00 |"
            in text)
