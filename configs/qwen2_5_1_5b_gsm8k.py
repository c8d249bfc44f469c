"""Cooper on GSM8K as in the paper: Qwen2.5-1.5B-Instruct policy + a 1.5B reference-based VerifyRM.

Point the HF paths at local folders (no downloads at run time), e.g.
  coop-train --config=configs/qwen2_5_1_5b_gsm8k.py --workdir=gs://bucket/cooper \
    --config.model.hf_path=/models/Qwen2.5-1.5B-Instruct \
    --config.reward_model.hf_path=/models/VerifyRM-1.5B \
    --config.cooper.assistant_hf_path=/models/Qwen2.5-7B-Instruct \
    --config.data.data_dir=/data/gsm8k
Hyper-parameters follow the released 1-GPU script (recipe/cooper/test_qwen2.5-1.5B-Instruct.sh,
docs/ALGORITHMS.md §1): G=16, 4 prompts/step, 15 epochs of GSM8K's 7,473 training problems
(7473 // 4 = 1,868 steps an epoch, the last partial batch dropped as verl's loader does: 28,020
steps), policy lr 1e-6 (20 warm-up steps, constant, wd 0.01), RM lr 1e-5 (wd 0.01, clip 1.0,
constant), clip 0.2 with dual clip 3.0, token-mean, low-var (clamped k3) KL 0.001,
prompt/response 512/512, T=1.0; validation at T=0.7, top-p 0.95.
RM warm-up: `cooper.warmup_ratio=0.0`. The script passes lr_warmup_steps_ratio=0.01, but its RM
optimiser's effective warm-up is 0; this config keeps the effective value (docs/ALGORITHMS.md §5).
One deliberate difference: the script validates every 5 steps with one sample per problem; here
every 100 steps with greedy and avg@8 (9 generations of the 1,319 test problems each time).
"""
from coop_jax.config import base_config


def get_config():
    c = base_config()
    c.model.update(hf_path="/models/Qwen2.5-1.5B-Instruct", param_dtype="float32",
                   dtype="bfloat16", remat=True)
    c.reward_model.update(hf_path="/models/VerifyRM-1.5B", param_dtype="float32",
                          dtype="bfloat16", remat=True)
    c.data.update(dataset="gsm8k", data_dir="/data/gsm8k", prompt_template="gsm8k",
                  chat_template=True, max_prompt_len=512, num_eval=1319)
    c.rollout.update(group_size=16, prompts_per_step=4, max_new_tokens=512, temperature=1.0)
    c.rl.update(advantage="grpo", aggregation="token_mean", clip_eps_low=0.2, clip_eps_high=0.2,
                kl_coef=0.001, kl_estimator="low_var_kl", entropy_coef=0.0, ppo_epochs=1,
                num_minibatches=1)
    c.optim.update(learning_rate=1e-6, warmup_steps=20, schedule="constant", weight_decay=0.01,
                   grad_clip=1.0)
    c.reward.type = "cooper"
    c.cooper.update(negative="rewrite", learning_rate=1e-5, warmup_ratio=0.0, weight_decay=0.01,
                    grad_clip=1.0, assistant_hf_path="/models/Qwen2.5-7B-Instruct",
                    rewrite_temperature=0.7, rewrite_tries=3)
    c.verifier.update(num_workers=8, timeout_s=5.0)
    c.rm.max_len = 1024
    c.train.update(steps=15 * (7473 // 4), checkpoint_every=50, keep_checkpoints=3)
    c.evals.policy.every = 100
    c.eval.update(temperature=0.7, top_p=0.95, batch_size=64)
    # 8 chips: data-parallel rollouts, FSDP for the optimizer state (e.g. v4-8 / 8x H100).
    c.mesh.update(shape=(2, 4, 1), distributed=False)
    return c
