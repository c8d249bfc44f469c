"""coop-export: an orbax checkpoint's policy (or RM) as a Hugging Face folder.

    coop-export --checkpoint=runs/demo [--which=policy|rm] [--step=N] --out=exported/

Writes config.json, model.safetensors and the tokenizer files of the run (a LoRA run's adapters
merged into the weights), readable by `transformers` and by `coop-eval --hf`.
"""
from __future__ import annotations

import jax
from absl import flags
from absl.app import UsageError

from coop_jax import checkpoint, console, hf, parallel
from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer


def export(checkpoint_dir: str, out_dir: str, which: str = "policy", step: int | None = None
           ) -> str:
    try:
        cfg, params, meta = checkpoint.load_model(checkpoint_dir, which, step)
    except (ValueError, FileNotFoundError) as e:  # no checkpoint, or none with that model
        raise UsageError(f"--checkpoint {checkpoint_dir}: {e}") from e
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


def define_flags(fv: flags.FlagValues, argv: list[str]) -> None:
    del argv
    flags.DEFINE_string("checkpoint", None, "coop-train (or coop-train-rm) workdir, or its "
                        "checkpoints/ folder", flag_values=fv)
    flags.DEFINE_string("out", None, "output folder (Hugging Face format)", flag_values=fv)
    flags.DEFINE_enum("which", "policy", ["policy", "rm"], "the model to export: the policy or "
                      "the reward model", flag_values=fv)
    flags.DEFINE_integer("step", None, "checkpoint step (default: the newest)", flag_values=fv)


def main(argv: list[str]) -> str:
    """Parse `argv` (argv[0] is the program name), export, print and return the output folder."""
    fv = console.parse_flags(define_flags, argv, __doc__)
    if not fv.checkpoint or not fv.out:
        raise UsageError("--checkpoint and --out are required")
    console.check_folder("--checkpoint", fv.checkpoint)
    out = export(fv.checkpoint, fv.out, fv.which, fv.step)
    print(out)
    return out


def run() -> None:
    console.run_console(main, "coop-export")


if __name__ == "__main__":
    run()
