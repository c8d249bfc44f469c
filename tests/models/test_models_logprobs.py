"""`coop_jax.models.logprobs`: the prefix-shared forward (`grouped_response_logprobs`) against the
unshared one, in every layer layout; the kernels are the model config's choice."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from conftest import tiny_model_config
from coop_jax import kernels, models, sampling
from coop_jax.models.logprobs import (grouped_response_logprobs, resolved_kernel,
                                      response_logprobs)

B, G, P, T = 3, 4, 7, 6


def _rows(rng):
    prompt_tokens = np.repeat(rng.integers(1, 60, (B, P)), G, 0).astype(np.int32)
    prompt_mask = np.ones((B, P), bool)
    prompt_mask[0, :3], prompt_mask[1, :1] = False, False  # left padding of different widths
    response = rng.integers(1, 60, (B * G, T)).astype(np.int32)
    response_mask = np.ones((B * G, T), bool)
    response_mask[::3, 4:], response_mask[5, 1:] = False, False
    return prompt_tokens, np.repeat(prompt_mask, G, 0), response, response_mask


@pytest.mark.parametrize("scan_layers,remat", [(False, False), (True, True)])
def test_each_prompt_once_gives_the_unshared_logprobs_and_gradient(scan_layers, remat):
    cfg = tiny_model_config(vocab_size=64, num_heads=4, num_kv_heads=2, tie_embeddings=True,
                            qkv_bias=True, num_layers=2, scan_layers=scan_layers, remat=remat)
    params = models.init_params(cfg, jax.random.key(0))
    rows = _rows(np.random.default_rng(0))

    def run(fn, **kwargs):
        def total(p):
            logp, entropy = fn(p, cfg.with_kernels("xla"), *rows, temperature=0.7, **kwargs)
            return logp.sum() + 0.1 * entropy.sum(), (logp, entropy)
        return jax.jit(jax.value_and_grad(total, has_aux=True))(params)

    (_, unshared), grads = run(response_logprobs)
    (_, shared), shared_grads = run(grouped_response_logprobs, group_size=G)
    for a, b in zip(shared, unshared):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)
        assert np.all(np.asarray(a)[~rows[3]] == 0)  # masked positions stay 0
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6),
                           shared_grads, grads)


def test_the_kernels_are_the_model_configs_choice(monkeypatch):
    """Log-probs run the kernels `ModelConfig.with_kernels` chose; a sampler is compiled per
    choice (the config is its cache key); an unknown name is refused where it is set."""
    cfg = tiny_model_config(vocab_size=64, num_heads=4, num_kv_heads=2)
    params = models.init_params(cfg, jax.random.key(0))
    rows = _rows(np.random.default_rng(0))
    seen, fused = [], kernels.fused_logprobs
    monkeypatch.setattr(kernels, "fused_logprobs",
                        lambda *a, **kw: seen.append(kw["impl"]) or fused(*a, **kw))
    chosen = cfg.with_kernels("reference")
    reference, _ = response_logprobs(params, chosen, *rows)
    default, _ = response_logprobs(params, cfg, *rows)
    assert seen == ["reference", "auto"]
    np.testing.assert_allclose(reference, default, rtol=1e-5, atol=1e-6)
    hidden, unembed = jax.numpy.zeros((2, cfg.hidden_size)), models.unembed_matrix(params, cfg)
    assert resolved_kernel(chosen, hidden, unembed) == "reference"
    assert resolved_kernel(cfg, hidden, unembed) == "xla"  # auto off TPU
    scfg = sampling.SamplingConfig(max_new_tokens=2, eos_ids=(1,), pad_id=0)
    assert sampling.make(cfg, scfg) is not sampling.make(chosen, scfg)
    assert chosen != cfg and chosen.replace(kernel_impl="auto") == cfg
    with pytest.raises(ValueError, match="ModelConfig.kernel_impl"):
        cfg.with_kernels("cuda")
