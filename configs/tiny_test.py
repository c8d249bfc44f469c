"""A seconds-long smoke-test config (used by the test suite): 1-layer model, 2 prompts x 2 rollouts.

Needs 8 devices for its (2, 1, 4) mesh, e.g. XLA_FLAGS=--xla_force_host_platform_device_count=8.
"""
from coop_jax.config import base_config


def get_config():
    c = base_config()
    arch = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                num_kv_heads=1)
    c.model.update(arch)
    c.reward_model.update(arch)
    c.data.update(num_eval=4, synthetic_train_size=64, max_prompt_len=12)
    c.data.synthetic.update(max_operand=9)
    c.rollout.update(group_size=2, prompts_per_step=2, max_new_tokens=8)
    c.optim.update(learning_rate=1e-3, warmup_steps=0)
    c.rl.kl_coef = 0.01
    c.cooper.negative = "perturb"
    c.rm.max_len = 48
    c.train.update(steps=2, checkpoint_every=1)
    c.evals.update(policy=dict(every=0), rm_heldout=dict(every=0))
    c.eval.update(batch_size=4, k=2)
    c.verifier.update(num_workers=1)
    c.mesh.shape = (2, 1, 4)
    return c
