"""`python -m coop_jax.hf check PATH`: coop_jax vs transformers (PyTorch) on the same tokens."""
from __future__ import annotations

import argparse
import sys

import numpy as np


def check(path: str, batch: int = 2, length: int = 16, seed: int = 0) -> float:
    import torch
    import transformers

    from coop_jax import hf

    lm = hf.load(path, dtype="float32")
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, lm.config.vocab_size, size=(batch, length))
    mask = np.ones_like(tokens)
    if lm.config.is_reward_model:
        mask[:, length // 2 + 1:] = 0  # right padding on every row but exercised on the head
        mask[0] = 1
        if lm.pad_token_id is not None:
            tokens[mask == 0] = lm.pad_token_id
        ours = np.asarray(lm.scores(tokens, mask))
        ref_model = transformers.AutoModelForSequenceClassification.from_pretrained(
            path, dtype=torch.float32)
        with torch.no_grad():
            ref = ref_model(input_ids=torch.tensor(tokens), attention_mask=torch.tensor(mask)).logits
        ref = ref.numpy()[:, 0]
    else:
        ours = np.asarray(lm.logits(tokens))
        ref_model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        with torch.no_grad():
            ref = ref_model(input_ids=torch.tensor(tokens)).logits.numpy()
    return float(np.max(np.abs(ours - ref)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coop_jax.hf")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="max |logit difference| between coop_jax and transformers")
    c.add_argument("path")
    c.add_argument("--batch", type=int, default=2)
    c.add_argument("--length", type=int, default=16)
    c.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    diff = check(args.path, args.batch, args.length, args.seed)
    print(f"max_abs_logit_diff {diff:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
