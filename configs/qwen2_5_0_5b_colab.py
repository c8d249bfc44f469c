"""Cooper on GSM8K on one Colab TPU chip (v5e-1, 16 GiB HBM): Qwen2.5-0.5B-Instruct.

    coop-train --config=configs/qwen2_5_0_5b_colab.py --workdir=/content/run_qwen \
      --config.data.data_dir=/content/data/gsm8k

The policy and the RM come from the Hub id (`huggingface_hub.snapshot_download` on first use,
the Hub cache afterwards). The RM starts from the same instruct LM: its first 8 of 24 layers and a
new scalar head (`hf.load(..., num_labels=1, keep_layers=8)`). Negatives are the policy's own
rule-wrong rollouts (`cooper.negative="rollout"`): no assistant model has to fit beside them.

Memory of the compiled Cooper step on v5e-1 (fp32 master weights and AdamW, bf16 compute,
remat, `scan_layers`, no KL reference with kl_coef=0), from libtpu's ahead-of-time compile:

    python benchmarks/memory_plan.py --config configs/qwen2_5_0_5b_colab.py \
        --slices v5e-1 --layers 0 --scan on     # in a venv with jax[tpu] (libtpu)

  state (policy 494M + AdamW, RM 255M + AdamW, fp32)  8.38 GiB
  compiled.memory_analysis() temporaries              7.16 GiB
  state + temporaries                                 15.53 GiB of 15.75 usable (98.6%)
libtpu accepts the compile (it refuses programs over 15.75 GiB). Its buffer assignment
(XLA_FLAGS=--xla_dump_to=DIR, *memory-usage-report.txt) puts the HBM heap, arguments included, at
13.00 GiB: the 15.53 GiB sum is the conservative figure. rl.micro_batches=2 makes it worse (8.52
GiB of temporaries: the accumulated fp32 gradient outweighs the halved activations); keep 1.
The temporaries' largest buffers: the fp32 attention scores of one layer ([32, 14, 512, 512],
448 MiB each), the stacked fp32 gradients of the 24 policy layers (399 MiB per MLP matrix), the
24 layers' remat inputs (bf16, 672 MiB), the tied embedding's bf16 copies and fp32 gradient
(260 / 519 MiB); the fused log-prob kernels never materialise [rows, T, 151,936] logits.
Rollout sampling is a separate program (not in this plan). If the runtime reports
out-of-memory, lower rollout.group_size or reward_model.keep_layers.
"""
from coop_jax.config import base_config

QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


def get_config():
    c = base_config()
    c.model.update(hf_path=QWEN, param_dtype="float32", dtype="bfloat16", remat=True,
                   scan_layers=True)
    c.reward_model.update(hf_path=QWEN, keep_layers=8, param_dtype="float32", dtype="bfloat16",
                          remat=True, scan_layers=True)
    c.data.update(dataset="gsm8k", data_dir="/content/data/gsm8k", prompt_template="gsm8k",
                  chat_template=True, max_prompt_len=256, num_eval=256)
    c.rollout.update(group_size=8, prompts_per_step=4, max_new_tokens=256, temperature=1.0)
    c.rl.update(advantage="grpo", aggregation="token_mean", clip_eps_low=0.2, clip_eps_high=0.2,
                kl_coef=0.0)
    c.optim.update(learning_rate=1e-6, warmup_steps=10, schedule="constant", weight_decay=0.01,
                   grad_clip=1.0)
    c.reward.type = "cooper"
    c.cooper.update(negative="rollout", learning_rate=1e-5, warmup_ratio=0.01, weight_decay=0.01,
                    grad_clip=1.0)
    c.rm.max_len = 512
    c.verifier.update(num_workers=2, timeout_s=5.0)
    c.train.update(steps=200, checkpoint_every=50, keep_checkpoints=2)
    c.evals.update(policy=dict(every=50), rm_heldout=dict(every=0))
    c.eval.update(temperature=0.7, top_p=0.95, batch_size=64)
    c.mesh.update(shape=(-1, 1, 1), distributed=False)
    return c
