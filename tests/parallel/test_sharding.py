"""Forward + gradient under (data, fsdp, tensor) meshes equal the single-device results."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import tiny_model_config
from coop_jax import models, parallel

CFG = tiny_model_config(vocab_size=64, num_layers=2, num_heads=4, num_kv_heads=2, qkv_bias=True)
RM_CFG = CFG.replace(num_labels=1)
MESHES = [(8, 1, 1), (2, 4, 1), (2, 2, 2)]


def _batch():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, CFG.vocab_size, size=(8, 12)).astype(np.int32)
    mask = np.ones_like(tokens, dtype=bool)
    mask[1::2, 9:] = False
    return jnp.asarray(tokens), jnp.asarray(mask)


def _lm_loss(params, tokens, mask):
    logits = models.lm_logits(params, CFG, tokens, mask)
    logp = jax.nn.log_softmax(logits[:, :-1])
    tok = jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
    return -(tok * mask[:, 1:]).sum() / mask[:, 1:].sum()


def _rm_loss(params, tokens, mask):
    return jnp.mean(jax.nn.log_sigmoid(models.reward_scores(params, RM_CFG, tokens, mask)))


@pytest.fixture(scope="module")
def references():
    tokens, mask = _batch()
    lm = models.init_params(CFG, jax.random.key(0))
    rm = models.init_params(RM_CFG, jax.random.key(1))
    return {
        "lm": (lm, jax.jit(jax.value_and_grad(_lm_loss))(lm, tokens, mask)),
        "rm": (rm, jax.jit(jax.value_and_grad(_rm_loss))(rm, tokens, mask)),
    }


@pytest.mark.parametrize("shape", MESHES)
@pytest.mark.parametrize("kind", ["lm", "rm"])
def test_sharded_forward_and_grad_match(shape, kind, references):
    cfg, loss = (CFG, _lm_loss) if kind == "lm" else (RM_CFG, _rm_loss)
    params, (ref_loss, ref_grad) = references[kind]
    mesh = parallel.make_mesh(shape)
    sharded = parallel.shard_params(params, cfg, mesh)
    tokens, mask = _batch()
    data = parallel.batch_sharding(mesh)
    tokens, mask = jax.device_put(tokens, data), jax.device_put(mask, data)
    shardings = parallel.param_shardings(cfg, mesh)
    step = jax.jit(jax.value_and_grad(loss), in_shardings=(shardings, data, data),
                   out_shardings=(parallel.replicated(mesh), shardings))
    value, grad = step(sharded, tokens, mask)
    np.testing.assert_allclose(value, ref_loss, atol=1e-5, rtol=1e-5)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4),
                           grad, ref_grad)
    q = sharded["layers_0"]["self_attn"]["q_proj"]["kernel"]
    fsdp, tensor = shape[1], shape[2]
    assert q.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    shard_shape = q.addressable_shards[0].data.shape
    assert shard_shape == (q.shape[0] // fsdp, q.shape[1] // tensor)
    assert tokens.addressable_shards[0].data.shape[0] == 8 // (shape[0] * shape[1])


def test_sharded_init_places_shards():
    mesh = parallel.make_mesh((2, 2, 2))
    params = parallel.sharded_init(CFG, jax.random.key(0), mesh)
    emb = params["embed_tokens"]["embedding"]
    assert emb.addressable_shards[0].data.shape == (CFG.vocab_size // 2, CFG.hidden_size // 2)
    ref = models.init_params(CFG, jax.random.key(0))
    np.testing.assert_allclose(np.asarray(emb), np.asarray(ref["embed_tokens"]["embedding"]),
                               atol=1e-6)


def test_mesh_shape_must_match_devices():
    with pytest.raises(ValueError, match="mesh.shape"):
        parallel.make_mesh((2, 2, 1))
