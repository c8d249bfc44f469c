"""coop-export: an orbax checkpoint's policy (or RM) as a Hugging Face folder.

    coop-export --checkpoint=runs/demo [--which=policy|rm] [--step=N] --out=exported/
"""
from __future__ import annotations

import argparse
import os
import sys

import jax

from coop_jax import checkpoint, hf, parallel
from coop_jax.models.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer


def export(checkpoint_dir: str, out_dir: str, which: str = "policy", step: int | None = None
           ) -> str:
    cfg, params, meta = checkpoint.load_model(checkpoint_dir, which, step)
    tokenizer_dir = meta.get("rm_tokenizer" if which == "rm" else "tokenizer") or ""
    if not tokenizer_dir and which == "rm":
        tokenizer_dir = meta.get("tokenizer", "")
    tokenizer_dir = tokenizer_dir or CHAR_TOKENIZER_DIR
    pad = load_tokenizer(tokenizer_dir).pad_token_id
    # gathered on every process (a collective in a multi-process job), written by the first
    lm = hf.from_params(cfg, parallel.host.fetch(params), tokenizer_dir=tokenizer_dir,
                        pad_token_id=pad)
    if jax.process_index() == 0:
        hf.save(lm, out_dir)
    return out_dir


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="coop-export", description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="workdir or its checkpoints/ folder")
    parser.add_argument("--out", required=True, help="output folder (HF format)")
    parser.add_argument("--which", choices=("policy", "rm"), default="policy")
    parser.add_argument("--step", type=int, default=None, help="default: the newest step")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.checkpoint):
        parser.error(f"--checkpoint: no such folder {args.checkpoint!r}")
    print(export(args.checkpoint, args.out, args.which, args.step))
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
