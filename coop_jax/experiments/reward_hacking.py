"""The reward-hacking experiment: rule vs static RM vs Cooper from one SFT start, several seeds.

    python -m coop_jax.experiments.reward_hacking --config=configs/toy_hacking.py --workdir=DIR

1. SFT warm start once -> DIR/sft_policy (an HF folder every run starts from).
2. Triples from that initial policy (rule-labelled samples on training questions), split into
   train / held-out; a real static RM is trained on them -> DIR/static_rm.
3. For every method x seed: `coop-train` from the SFT policy (static_rm and cooper start from the
   trained RM; cooper keeps training it on rule-labelled pairs) -> DIR/runs/<method>_s<seed>.
4. `coop-report` over the runs -> DIR/report.md (final held-out accuracy, mean +- 95% CI) and
   DIR/curves.png (held-out rule accuracy, proxy reward, RM agreement ... vs step, one line per
   method).
"""
from __future__ import annotations

import json
import logging
import os

import jax

from coop_jax import hf, parallel, sft, train, train_rm
from coop_jax import config as config_lib
from coop_jax.models.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer
from coop_jax.verify import RuleVerifier

log = logging.getLogger("coop_jax")


def sft_policy(config, out_dir: str) -> str:
    """Train the shared SFT start once and export it as an HF folder."""
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    tokenizer = load_tokenizer()
    records, _, _ = train.load_records(config)
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape, jax.device_count()))
    cfg, params = train.build_model(config.model, tokenizer, mesh, jax.random.key(config.seed))
    params, losses = sft.warm_start_from_config(params, cfg, tokenizer, records, config)
    log.info("SFT: loss %.3f -> %.3f", losses[0], losses[-1])
    hf.save(hf.from_params(cfg, jax.device_get(params), tokenizer_dir=CHAR_TOKENIZER_DIR,
                           pad_token_id=tokenizer.pad_token_id), out_dir)
    return out_dir


def static_rm(config, policy_dir: str, out_dir: str) -> tuple[str, str]:
    """Train the static RM on triples sampled from the initial policy; returns (rm dir,
    held-out triples file)."""
    heldout_path = os.path.join(out_dir, "heldout_triples.jsonl")
    if os.path.exists(os.path.join(out_dir, "rm_summary.json")):
        return out_dir, heldout_path
    e = config.experiment
    lm = hf.load(policy_dir)
    tokenizer = lm.tokenizer()
    records, _, _ = train.load_records(config)
    with RuleVerifier(config.verifier.num_workers, config.verifier.timeout_s) as verifier:
        triples, stats = train_rm.build_triples(
            lm.params, lm.config, tokenizer, records[:e.triple_questions], verifier=verifier,
            template=config.data.prompt_template, samples_per_question=e.samples_per_question,
            temperature=config.rollout.temperature, max_prompt_len=config.data.max_prompt_len,
            max_new_tokens=config.rollout.max_new_tokens, seed=config.seed)
    log.info("RM triples: %s", json.dumps(stats))
    train_set, heldout = train_rm.split_triples(triples, e.heldout_fraction, config.seed)
    os.makedirs(out_dir, exist_ok=True)
    train_rm.write_triples(os.path.join(out_dir, "train_triples.jsonl"), train_set)
    train_rm.write_triples(heldout_path, heldout)
    options = train_rm.RMTrainOptions(epochs=e.rm_epochs, learning_rate=e.rm_learning_rate,
                                      batch_size=e.rm_batch_size, max_len=config.cooper.max_len,
                                      weight_decay=0.01, seed=config.seed)
    summary = train_rm.train_reward_model(config, train_set, out_dir, heldout_triples=heldout,
                                          options=options)
    log.info("static RM: %s", json.dumps(summary))
    return out_dir, heldout_path


def run_config(config, method: str, seed: int, policy_dir: str, rm_dir: str, heldout: str):
    c = config.copy_and_resolve_references()
    c.seed = seed
    c.reward.type = method
    c.model.hf_path = policy_dir
    c.sft.steps = 0
    if method in config_lib.RM_REWARD_TYPES:
        c.cooper.rm_checkpoint = rm_dir
        c.cooper.heldout_triples = heldout
    return c


def main(config, workdir: str) -> dict:
    e = config.experiment
    policy_dir = sft_policy(config, os.path.join(workdir, "sft_policy"))
    rm_dir, heldout = static_rm(config, policy_dir, os.path.join(workdir, "static_rm"))
    run_dirs = []
    for method in e.methods:
        for seed in e.seeds:
            run_dir = os.path.join(workdir, "runs", f"{method}_s{seed}")
            run_dirs.append(run_dir)
            if os.path.exists(os.path.join(run_dir, "summary.json")):
                continue
            log.info("run %s seed %d", method, seed)
            train.train(run_config(config, method, seed, policy_dir, rm_dir, heldout), run_dir)
    from coop_jax.eval.report import write_report
    return write_report(run_dirs, workdir, group_by="method")


def run() -> None:
    from absl import app, flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file("config", "configs/toy_hacking.py", "experiment config")
    flags.DEFINE_string("workdir", "runs/hacking", "output folder")

    def _main(argv):
        del argv
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
        from absl import logging as absl_logging
        absl_logging.set_verbosity(absl_logging.WARNING)
        print(json.dumps(main(flags.FLAGS.config, flags.FLAGS.workdir), indent=2, default=str))

    app.run(_main)


if __name__ == "__main__":
    run()
