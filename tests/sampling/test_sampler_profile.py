"""`benchmarks/sampler_profile.py`'s trace of one generate call, on the tiny test model."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from coop_jax import models, sampling
from conftest import repo_module, tiny_model_config


def _sampler_profile():
    return repo_module("benchmarks/sampler_profile.py", "sampler_profile")


def test_profile_splits_a_generate_call_into_the_decode_steps_parts():
    sp = _sampler_profile()
    cfg = tiny_model_config(num_layers=2)
    params = models.init_params(cfg, jax.random.key(0))
    scfg = sampling.SamplingConfig(max_new_tokens=6, eos_ids=(cfg.vocab_size - 1,), pad_id=0,
                                   valid_vocab=cfg.vocab_size - 1, temperature=1.0)
    sample = sampling.make(cfg, scfg)
    tokens = jnp.arange(1, 13, dtype=jnp.int32).reshape(3, 4)
    parts, thunks = sp.profile(sample, params, tokens, jnp.ones(tokens.shape, bool),
                               jax.random.key(1))
    assert thunks > 0 and all(sec >= 0 for sec in parts.values())
    known = {sp.PREFILL} | {name for name, _ in sp.DECODE_PARTS}
    assert set(parts) <= known
    for part in (sp.PREFILL, "weight matmuls (q, k, v, o, gate, up, down)",
                 "attention matmuls over the KV cache", "unembedding matmul (sampler)",
                 "sampling: Gumbel noise, argmax, bookkeeping"):
        assert parts.get(part, 0.0) > 0, (part, parts)


def test_op_names_are_classified_by_where_they_run():
    sp = _sampler_profile()
    body = "jit(<lambda>)/while/body/Transformer/layers_3/"
    assert sp._part(["jit(<lambda>)/Transformer/layers_0/mlp/up_proj/dot_general"]) == sp.PREFILL
    assert sp._part([body + "mlp/up_proj/dot_general"]).startswith("weight matmuls")
    assert sp._part([body + "self_attn/bkgts,bkds->btkgd/dot_general"]).startswith("attention")
    assert sp._part([body + "self_attn/dynamic_update_slice",
                     body + "self_attn/v_proj/dot_general"]) .startswith("KV cache writes")
    assert sp._part(["jit(<lambda>)/while/body/dot_general"]).startswith("unembedding")
    assert sp._part(["jit(<lambda>)/while/body/jit(_threefry_split)/add"]).startswith("sampling")
