"""LoRA (`model.lora`, `reward_model.lora`, coop_jax.models.lora): fresh adapters compute the base
model, a step trains only the adapters (and the RM's head) while the base stays bit-identical and
is the KL reference, AdamW state exists only for them, checkpoints hold the adapters and resume,
and coop-export merges them into an HF folder whose transformers logits match."""
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import repo_config, repo_module, save_tiny_hf_causal_lm, tiny_model_config
from coop_jax import checkpoint, config as config_lib, models, parallel
from coop_jax.checkpoint import export
from coop_jax.trainer import loop, setup
from coop_jax.hf import build
from coop_jax.hf.build import add_adapters
from coop_jax.models import lora
from coop_jax.rm.step import RMUpdate
from coop_jax.trainer.step import StepConfig, init_state, jit_step, place_state
from test_train_step import G, LOSS, RM_REWARD, RM_TX, TX, _batch

POLICY = tiny_model_config(vocab_size=64, num_heads=4, num_kv_heads=2, tie_embeddings=True,
                           qkv_bias=True)
RM = POLICY.replace(num_labels=1, tie_embeddings=False)
LORA = lora.LoraConfig(rank=4, alpha=8.0)


def _with_adapters(cfg, seed=0, lora_cfg=LORA, noise=0.0):
    """(cfg with LoRA, base params, adapters): B = 0, or B ~ N(0, noise^2) when noise > 0."""
    cfg_l = cfg.replace(lora=lora_cfg)
    base = models.init_params(cfg, jax.random.key(seed))
    adapters = lora.adapters(models.init_params(cfg_l, jax.random.key(seed + 100)))
    if noise:
        keys = iter(jax.random.split(jax.random.key(seed + 200), 64))
        adapters = jax.tree_util.tree_map_with_path(
            lambda p, x: noise * jax.random.normal(next(keys), x.shape)
            if p[-1].key == "lora_b" else x, adapters)
    return cfg_l, base, adapters


def _tokens(vocab=64, shape=(3, 9), seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(1, vocab, shape), jnp.int32)


@pytest.mark.parametrize("scan", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fresh_adapters_compute_exactly_the_base_model(scan, dtype):
    tokens, mask = _tokens(), jnp.ones((3, 9), bool).at[0, :3].set(False)
    for cfg in (POLICY, RM):
        cfg = cfg.replace(scan_layers=scan, dtype=dtype)
        cfg_l, base, adapters = _with_adapters(cfg)
        full = lora.combine(base, adapters)
        if cfg.is_reward_model:
            got, want = (models.reward_scores(p, c, tokens, mask)
                         for p, c in ((full, cfg_l), (base, cfg)))
        else:
            got, want = (models.lm_logits(p, c, tokens, mask)
                         for p, c in ((full, cfg_l), (base, cfg)))
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        # every targeted projection of every layer has its pair; the stacked axis with scan
        leaves = jax.tree_util.tree_leaves_with_path(adapters)
        assert len(leaves) == 2 * len(lora.TARGETS) * (1 if scan else cfg.num_layers)
        a = adapters["layers" if scan else "layers_0"]["self_attn"]["q_proj"]["lora_a"]
        assert a.dtype == jnp.float32 and a.shape[-2:] == (cfg.hidden_size, LORA.rank)


@pytest.mark.parametrize("scan", [False, True])
def test_merge_split_and_combine(scan):
    cfg = POLICY.replace(scan_layers=scan)
    cfg_l, base, adapters = _with_adapters(cfg, noise=0.3)
    full = lora.combine(base, adapters)
    merged = lora.merge(full, cfg_l)
    tokens = _tokens()
    adapted = models.lm_logits(full, cfg_l, tokens)
    assert float(jnp.max(jnp.abs(adapted - models.lm_logits(base, cfg, tokens)))) > 1e-2
    np.testing.assert_allclose(models.lm_logits(merged, lora.without(cfg_l), tokens), adapted,
                               atol=2e-5)
    assert jax.tree_util.tree_structure(merged) == jax.tree_util.tree_structure(base)
    b, t = lora.split(full, cfg_l)
    assert jax.tree_util.tree_structure(b) == jax.tree_util.tree_structure(base)
    assert jax.tree_util.tree_structure(t) == jax.tree_util.tree_structure(adapters)
    # the RM's head trains with its adapters; without LoRA everything trains
    rm_l, rm_base, rm_adapters = _with_adapters(RM)
    rm_frozen, rm_train = lora.split(lora.combine(rm_base, rm_adapters), rm_l)
    assert "score" in rm_train and "score" not in rm_frozen
    assert lora.split(base, cfg) == (None, base)


def _lora_state(mesh, kl_to_base=True):
    cfg_l, base, adapters = _with_adapters(POLICY)
    rm_l, rm_base, rm_adapters = _with_adapters(RM, seed=1)
    put = lambda tree, cfg: jax.device_put(tree, parallel.param_shardings(cfg, mesh))
    policy = put(lora.combine(base, adapters), cfg_l)
    rm = put(lora.combine(rm_base, rm_adapters), rm_l)
    policy_base, policy_train = lora.split(policy, cfg_l)
    rm_frozen, rm_train = lora.split(rm, rm_l)
    state = init_state(policy_train, TX, rm_params=rm_train, rm_tx=RM_TX,
                       policy_base=policy_base, rm_base=rm_frozen,
                       ref_params=None if kl_to_base else policy)  # a copy (B = 0)
    step_cfg = StepConfig(policy=cfg_l.with_kernels("xla"), loss=LOSS, group_size=G,
                          kl_to_base=kl_to_base, **(RM_REWARD | {"rm": rm_l}),
                          rm_update=RMUpdate())
    return place_state(state, mesh), step_cfg


def test_a_step_trains_only_the_adapters_and_the_base_is_the_kl_reference():
    mesh = parallel.make_mesh((2, 2, 2))
    state, cfg = _lora_state(mesh)
    before = jax.device_get(state)
    # adapters are sharded like their kernels: A's in-dim, B's out-dim
    q = state.policy.params["layers_0"]["self_attn"]["q_proj"]
    assert q["lora_a"].sharding.spec == jax.sharding.PartitionSpec("fsdp", None)
    assert q["lora_b"].sharding.spec == jax.sharding.PartitionSpec(None, "tensor")
    # AdamW moments only for the trainable parts: the adapters (+ the RM's head)
    for model in (state.policy, state.rm):
        mu = model.opt_state[1][0].mu  # chain(clip, adamw): adamw's ScaleByAdamState
        assert jax.tree_util.tree_structure(mu) == jax.tree_util.tree_structure(model.params)
    assert lora.count(state.policy.params) < lora.count(state.policy_base) / 5
    new, outputs = jit_step(cfg, TX, RM_TX, donate=False)(state, _batch(1))
    after = jax.device_get(new)
    same = lambda a, b: jax.tree_util.tree_map(np.testing.assert_array_equal, a, b)
    same(after.policy_base, before.policy_base)
    same(after.rm_base, before.rm_base)
    moved = lambda a, b: max(float(np.max(np.abs(x - y))) for x, y in zip(
        jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))
    b_after = after.policy.params["layers_0"]["mlp"]["down_proj"]["lora_b"]
    assert np.any(b_after != 0) and moved(after.policy.params, before.policy.params) > 1e-4
    assert moved(after.rm.params["score"], before.rm.params["score"]) > 1e-4
    # fresh adapters: the policy is its base, so the KL to the base is 0 in the first step
    assert float(outputs.metrics["kl"]) == 0.0
    assert outputs.rm_scores_after is None or np.all(np.isfinite(outputs.rm_scores_after))
    # the base as the reference (no copy) gives the update an explicit reference copy gives
    explicit, cfg_explicit = _lora_state(mesh, kl_to_base=False)
    new2, _ = jit_step(cfg_explicit, TX, RM_TX, donate=False)(explicit, _batch(1))
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6),
                           jax.device_get(new2.policy.params), after.policy.params)


def _tiny_lora_config(hf_path="", **lora_ranks):
    c = repo_config("tiny_test")
    c.model.hf_path = hf_path
    c.model.lora.update(rank=lora_ranks.get("policy", 4), alpha=8.0)
    c.reward_model.lora.update(rank=lora_ranks.get("rm", 0), alpha=8.0)
    c.optim.learning_rate = 1e-2
    return c


def _logits_vs_transformers(folder, params, cfg, tokens, classifier=False):
    import torch
    import transformers
    auto = (transformers.AutoModelForSequenceClassification if classifier
            else transformers.AutoModelForCausalLM)
    model = auto.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(torch.as_tensor(np.array(tokens), dtype=torch.long)).logits.numpy()
    if classifier:
        ours = models.reward_scores(params, cfg, tokens, jnp.ones(tokens.shape, bool))
        return float(np.max(np.abs(out[:, 0] - np.asarray(ours))))
    return float(np.max(np.abs(out - np.asarray(models.lm_logits(params, cfg, tokens)))))


def test_lora_run_checkpoints_the_adapters_resumes_and_exports(tmp_path):
    """A LoRA run on an HF base: its checkpoints hold the adapters and AdamW state (no base, no
    reference copy), their meta the base's hf_path; a resumed run restores the adapters onto the
    base loaded again; coop-export merges them and transformers loads the folder."""
    hf_dir = save_tiny_hf_causal_lm(tmp_path / "hf")
    c = _tiny_lora_config(hf_dir)
    c.train.update(steps=2, checkpoint_every=1)
    work = tmp_path / "run"
    loop.train(c, str(work))
    ckpt_dir = work / "checkpoints"
    items = set(os.listdir(ckpt_dir / "2"))
    assert {"policy_params", "policy_opt_state"} <= items
    assert not items & {"policy_base", "ref_params"}  # kl_coef 0.01: the base is the reference
    meta = checkpoint.Checkpointer(str(ckpt_dir)).read_meta()
    assert meta["policy_base"] == hf_dir and meta["policy_model_config"]["lora"]["rank"] == 4
    saved = checkpoint.Checkpointer(str(ckpt_dir)).load_item("policy_params")
    assert all(k in lora.ADAPTERS for p, _ in jax.tree_util.tree_leaves_with_path(saved)
               for k in [p[-1].key])

    c.train.steps = 3
    resumed = loop.Trainer(c, str(work))
    assert resumed.resuming
    state, _ = resumed.ckpt.restore(resumed.state)
    jax.tree_util.tree_map(np.testing.assert_array_equal, jax.device_get(state.policy.params),
                           jax.device_get(saved))
    resumed.ckpt.close()
    loop.train(c, str(work))
    with open(work / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [0, 1, 2, 3]

    out = export.export(str(work), str(tmp_path / "export"))
    cfg, merged, _ = checkpoint.load_model(str(work))
    assert cfg.lora is None
    tokens = _tokens(vocab=128)
    assert _logits_vs_transformers(out, merged, cfg, tokens) <= 2e-4


@pytest.mark.parametrize("which", ["policy", "rm"])
def test_merged_export_matches_transformers_logits(tmp_path, which):
    """coop-export of a LoRA checkpoint whose adapters move the logits a lot: transformers'
    logits of the exported folder match coop_jax's adapted (unmerged) model within 2e-4."""
    is_rm = which == "rm"
    cfg = tiny_model_config(qkv_bias=True, tie_embeddings=not is_rm, num_labels=int(is_rm),
                            num_layers=2, scan_layers=True)
    cfg_l, base, adapters = _with_adapters(cfg, noise=0.5)
    full = lora.combine(base, adapters)
    frozen, trainable = lora.split(full, cfg_l)
    model = types.SimpleNamespace(params=trainable, opt_state={"count": np.zeros((), np.int32)})
    state = types.SimpleNamespace(**({"ref_params": None, "policy": None, "rm": None}
                                     | {which: model, f"{which}_base": frozen}))
    config = _tiny_lora_config()
    meta = {f"{which}_model_config": checkpoint.model_config_to_dict(cfg_l),
            f"{which}_base": "checkpoint", "tokenizer": "", "config": config.to_dict()}
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"))
    ckpt.save(1, state, meta, bases=(f"{which}_base",))
    ckpt.close()
    out = export.export(str(tmp_path), str(tmp_path / "export"), which)
    tokens = _tokens(vocab=128, shape=(2, 11))
    assert _logits_vs_transformers(out, full, cfg_l, tokens, classifier=is_rm) <= 2e-4
    moved = (models.reward_scores(full, cfg_l, tokens, jnp.ones(tokens.shape, bool))
             - models.reward_scores(base, cfg, tokens, jnp.ones(tokens.shape, bool))) if is_rm \
        else models.lm_logits(full, cfg_l, tokens) - models.lm_logits(base, cfg, tokens)
    assert float(jnp.max(jnp.abs(moved))) > 1e-2  # the adapters matter


def test_sft_base_and_rm_lora_are_checkpointed(tmp_path):
    """An SFT warm start's result (no hf_path to reload) is the frozen base and is saved; so is
    a random RM's base under `reward_model.lora` (Cooper)."""
    c = _tiny_lora_config(policy=4, rm=2)
    c.reward.type, c.cooper.negative = "cooper", "perturb"
    c.sft.update(steps=2, batch_size=4, max_len=20)
    c.train.update(steps=1, checkpoint_every=1)
    loop.train(c, str(tmp_path))
    items = set(os.listdir(tmp_path / "checkpoints" / "1"))
    assert {"policy_base", "rm_base", "policy_params", "rm_params"} <= items
    base = checkpoint.Checkpointer(str(tmp_path / "checkpoints")).load_item("rm_base")
    assert "score" not in base  # the RM's head trains with the adapters
    for which in ("policy", "rm"):
        cfg, params, meta = checkpoint.load_model(str(tmp_path), which)
        assert cfg.lora is None and meta[f"{which}_base"] == "checkpoint"
        assert "lora_a" not in json.dumps(jax.tree_util.tree_map(lambda x: 0, params))


def test_lora_config_validation():
    c = repo_config("tiny_test")
    config_lib.validate(c)
    for field, value, match in (("rank", -1, "model.lora.rank"),
                                ("alpha", 0.0, "model.lora.alpha"),
                                ("dropout", 0.1, "model.lora.dropout must be 0.0"),
                                ("targets", "q_proj,lm_head", "model.lora.targets"),
                                ("targets", "", "model.lora.targets")):
        bad = repo_config("tiny_test")
        bad.model.lora.rank = 4
        bad.model.lora[field] = value
        with pytest.raises(ValueError, match=match):
            config_lib.validate(bad)
    bad = repo_config("tiny_test")
    bad.reward.type, bad.model.lora.rank = "corewarding_2", 4
    with pytest.raises(ValueError, match="model.lora.rank must be 0 with reward.type"):
        setup.validate_config(bad)
    bad = repo_config("tiny_test")
    bad.reward.type, bad.reward_model.lora.rank = "static_rm", 4
    with pytest.raises(ValueError, match="reward_model.lora.rank must be 0"):
        setup.validate_config(bad)
    assert build.lora_config(c.model) is None
    c.model.lora.update(rank=8, targets="q_proj, v_proj")
    assert build.lora_config(c.model) == lora.LoraConfig(8, 32.0, 0.0, ("q_proj", "v_proj"))
    with pytest.raises(ValueError, match="LoraConfig.dropout"):
        lora.LoraConfig(4, dropout=0.1)


def test_add_adapters_and_the_memory_plans_lora_state():
    """The trainer's adapters on a mesh, and memory_plan's abstract LoRA state: AdamW for the
    adapters only, no reference copy (the paper config, kl_coef 0.001)."""
    mesh = parallel.make_mesh((1, 8, 1))
    base = parallel.sharded_init(POLICY, jax.random.key(0), mesh)
    cfg_l, full = add_adapters(POLICY, base, LORA, mesh, jax.random.key(1))
    assert cfg_l.lora == LORA and lora.split(full, cfg_l)[0] is not None
    mp = repo_module("benchmarks/memory_plan.py", "memory_plan")
    config = mp.load_config(mp.DEFAULT_CONFIG)
    mp.apply_lora(config, 16)
    cfg, tx, rm_tx = mp.step_setup(config, 1, True, "xla", scan=True)
    assert cfg.policy.lora.rank == cfg.rm.lora.rank == 16 and cfg.kl_to_base
    state = mp.abstract_state(cfg, tx, rm_tx, mesh)
    assert state.ref_params is None
    n_adapters = lora.count(state.policy.params)
    assert n_adapters == 16 * sum(i + o for i, o in (
        (1536, 1536), (1536, 256), (1536, 256), (1536, 1536), (1536, 8960), (1536, 8960),
        (8960, 1536)))  # one layer of Qwen2.5-1.5B
    assert lora.count(state.policy.opt_state) < 3 * n_adapters
    assert lora.count(state.policy_base) > 100 * n_adapters
