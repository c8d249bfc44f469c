"""Co-rewarding on GSM8K with the hyper-parameters of the released scripts (tmlr-group/Co-rewarding:
Co-rewarding-I/run_corewarding-I.sh and Co-rewarding-II/run_corewarding-II.sh).

The variant is the config argument: `:1` (Co-rewarding-I, cross-view labels from a rephrased
question) or `:2` (Co-rewarding-II, labels from a slowly-updated EMA teacher).
  coop-rephrase --config.dataset=gsm8k --config.data_dir=/data/gsm8k --config.split=train \
    --config.out_dir=/data/gsm8k_rephrased --config.url=http://localhost:8000/v1 \
    --config.model=Qwen3-32B                                  # I only: write the second view
  coop-train --config=configs/corewarding_gsm8k.py:1 --workdir=runs/corewarding_1 \
    --config.model.hf_path=/models/Qwen2.5-3B --config.data.data_dir=/data/gsm8k_rephrased
  coop-train --config=configs/corewarding_gsm8k.py:2 --workdir=runs/corewarding_2 \
    --config.model.hf_path=/models/Qwen2.5-3B --config.data.data_dir=/data/gsm8k
Shared: actor lr 3e-6 with a cosine schedule after a 10% linear warm-up (`optim.warmup_steps`
follows `train.steps`), G = 8, 128 prompts per step in one mini-batch (ppo_mini_batch = batch),
clip 0.2, token-mean, low-variance (k3) KL loss, no entropy bonus, prompts/responses 512/3072,
answers in \\boxed{} under the model's chat template, 3 epochs. KL coefficient 0.005 for I and 0.001
for II; II's teacher decay runs from 0.01 to 1e-5 over the run (docs/ALGORITHMS.md).
"""
from coop_jax.config import base_config

KL_COEF = {"1": 0.005, "2": 0.001}
GSM8K_TRAIN_ROWS, PROMPTS_PER_STEP, EPOCHS = 7473, 128, 3


def get_config(variant: str = "1"):
    if variant not in KL_COEF:
        raise ValueError(f"configs/corewarding_gsm8k.py takes the variant '1' or '2' "
                         f"(e.g. --config=configs/corewarding_gsm8k.py:1), got {variant!r}")
    c = base_config()
    c.model.update(hf_path="/models/Qwen2.5-3B", param_dtype="float32", dtype="bfloat16",
                   remat=True)
    c.data.update(dataset="gsm8k", prompt_template="boxed", chat_template=True,
                  max_prompt_len=512, num_eval=1319,
                  data_dir="/data/gsm8k_rephrased" if variant == "1" else "/data/gsm8k")
    c.rollout.update(group_size=8, prompts_per_step=PROMPTS_PER_STEP, max_new_tokens=3072,
                     temperature=1.0)
    c.rl.update(advantage="grpo", aggregation="token_mean", clip_eps_low=0.2, clip_eps_high=0.2,
                kl_coef=KL_COEF[variant], kl_estimator="low_var_kl", kl_in_reward=False,
                entropy_coef=0.0, ppo_epochs=1, num_minibatches=1)
    c.train.update(steps=EPOCHS * GSM8K_TRAIN_ROWS // PROMPTS_PER_STEP, checkpoint_every=10,
                   keep_checkpoints=3)
    c.evals.policy.every = 10
    c.optim.update(learning_rate=3e-6, schedule="cosine", weight_decay=0.01, grad_clip=1.0)
    c.optim.warmup_steps = c.train.get_ref("steps") // 10  # verl: int(0.1 * total steps)
    c.reward.type = f"corewarding_{variant}"
    c.corewarding.update(a_start=0.01, a_end=1e-5, decay_steps=0)
    c.verifier.update(num_workers=8, timeout_s=5.0)
    c.eval.update(temperature=0.7, top_p=0.95, batch_size=64)
    c.mesh.update(shape=(2, 4, 1), distributed=False)
    return c
