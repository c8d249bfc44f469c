"""coop_jax.projects.real_model.verifyrm: the real-model VerifyRM, a reference-based reward model
for the story problems of `configs/smollm2_arithmetic.py`, trained the paper's way before any
Cooper run.

    python -m coop_jax.projects.real_model.verifyrm --config=configs/smollm2_arithmetic.py \
        --workdir=runs/real_verifyrm --results=docs/results/real_model/verifyrm [--commit] \
        [--config.rm_train.judge_url=URL --config.rm_train.judge_model=NAME]

1. Generators of different competence: the config's policy (`model.hf_path`, the RL start) and
   a rule-trained run of it (`--generator_seed`), read at each of `--generator_steps`.
2. Questions: training-split problems, split by question into the RM's train and held-out sets.
3. Triples (`SOURCES`): each generator's completions at the rollout's temperature, plus the
   programmatic error kinds of `rm_corpus`, all labelled by the rule verifier (the rule reward's
   extraction). With a judge (`rm_train.judge_url`), only triples it agrees on are kept: the
   paper's hybrid annotation. The RL start samples training questions only; the last generator
   checkpoint samples held-out questions only, so the held-out split holds a policy the RM never
   saw and none of the RL start's samples.
4. The RM: `config.reward_model` (empty `hf_path`: the policy's), fully fine-tuned with the
   config's `rm_train` recipe (`coop-train-rm`'s loop).
5. The gate: held-out accuracy >= `--min_accuracy` and ROC AUC >= `--min_auc`, with accuracy per
   source and per error kind. The RM is encoded against its public base (`plan_inputs`) and the
   decoded one is what the gate measures and what RESULTS/inputs keeps, so every machine scores
   with the same parameters.

Each stage is skipped when its output exists in WORKDIR, so a rerun resumes.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import sys
import time
from typing import Sequence

import jax
import numpy as np
from absl import flags
from ml_collections import config_flags

from coop_jax import checkpoint, console, data, hf
from coop_jax import config as config_lib
from coop_jax.data.synthetic import solution_error_kind
from coop_jax.projects.reward_hacking import plan_inputs
from coop_jax.projects import rm_corpus, run_store
from coop_jax.jsonl import read_jsonl
from coop_jax.hf.tokenizer import load_tokenizer, prepare_tokenizer
from coop_jax.trainer.setup import run_extraction_mode
from coop_jax.rm.input import check_triples, read_triples
from coop_jax.rm.scoring import evaluate_reward_model
from coop_jax.rm.train import label_balance, train_reward_model
from coop_jax.rm.train.loop import input_format
from coop_jax.rm.train.triples import build_triples, http_judge, label_triples
from coop_jax.verify import RuleVerifier, verify

log = logging.getLogger("coop_jax")
BASE = "base"
PROGRAM = "program"
QUESTION_SEED = 1009  # the RM's questions: a draw of the training split apart from the RL runs'


def define_flags(fv: flags.FlagValues, argv: list[str]) -> None:
    d = dict(flag_values=fv)
    config_flags.DEFINE_config_file("config", "configs/smollm2_arithmetic.py", "the task, the "
                                    "policy, the RM (reward_model) and its recipe (rm_train)",
                                    sys_argv=argv, **d)
    flags.DEFINE_string("workdir", "runs/real_verifyrm", "working folder (generator run, "
                        "samples, RM checkpoints)", **d)
    flags.DEFINE_string("results", "docs/results/real_model/verifyrm", "results folder: "
                        "manifest, gate report, the portable RM", **d)
    flags.DEFINE_integer("train_questions", 512, "questions of the RM's training split", **d)
    flags.DEFINE_integer("heldout_questions", 128, "questions of the RM's held-out split", **d)
    flags.DEFINE_integer("samples", 4, "completions per question and policy generator", **d)
    flags.DEFINE_integer("generator_seed", 7, "seed of the rule-trained generator run (not one "
                         "of the comparison's seeds)", **d)
    flags.DEFINE_list("generator_steps", ["20", "40"], "checkpoints of the generator run used "
                      "as generators; the last one samples held-out questions only", **d)
    flags.DEFINE_float("min_accuracy", 0.90, "the gate: held-out accuracy floor", **d)
    flags.DEFINE_float("min_auc", 0.95, "the gate: held-out ROC AUC floor", **d)
    flags.DEFINE_bool("commit", False, "git-commit the results folder after each stage", **d)


def sources(generator_steps: Sequence[int]) -> dict[str, tuple[str, ...]]:
    """generator -> the splits it samples: the RL start trains only, the last checkpoint is the
    held-out's unseen policy, the others and the programs give both."""
    steps = sorted(generator_steps)
    out = {BASE: ("train",)}
    out.update({f"rule_step{s}": ("train", "heldout") for s in steps[:-1]})
    out[f"rule_step{steps[-1]}"] = ("heldout",)
    out[PROGRAM] = ("train", "heldout")
    return out


# ----------------------------------------------------------------------------- questions
def split_questions(config, n_train: int, n_held: int) -> dict[str, list[dict]]:
    """{"train": records, "heldout": records} with no question text on both sides."""
    synthetic = data.SyntheticConfig(**config.data.synthetic.to_dict())
    records = data.load_split(config.data.dataset, "train", num_examples=4 * (n_train + n_held),
                              seed=QUESTION_SEED, data_dir=config.data.data_dir or None,
                              synthetic=synthetic)
    unique = list({r["question"]: r for r in records}.values())
    if len(unique) < n_train + n_held:
        raise ValueError(f"the training split holds {len(unique)} distinct questions, fewer than "
                         f"--train_questions + --heldout_questions = {n_train + n_held}")
    order = np.random.default_rng(QUESTION_SEED).permutation(len(unique))
    picked = [unique[i] for i in order[:n_train + n_held]]
    return {"train": picked[:n_train], "heldout": picked[n_train:]}


# ----------------------------------------------------------------------------- generators
def _override_args(fv: flags.FlagValues) -> list[str]:
    return [f"--config.{k}={v}" for k, v in
            config_flags.get_override_values(fv["config"]).items()]


def generator_run(fv: flags.FlagValues, steps: Sequence[int]) -> str:
    """`coop-train` with the rule reward and `--generator_seed`, checkpointed at every step in
    `steps` (a rerun resumes it); its workdir."""
    work = os.path.join(fv.workdir, "generator")
    every = int(np.gcd.reduce(steps))
    cmd = [sys.executable, "-m", "coop_jax.trainer.cli",
           f"--config={config_flags.get_config_filename(fv['config'])}", *_override_args(fv),
           f"--workdir={work}", f"--config.seed={fv.generator_seed}", "--config.reward.type=rule",
           f"--config.train.steps={max(steps)}", f"--config.train.checkpoint_every={every}",
           f"--config.train.keep_checkpoints={max(steps) // every + 1}"]
    if not os.path.exists(os.path.join(work, "summary.json")):
        os.makedirs(fv.workdir, exist_ok=True)
        with open(work + ".log", "a") as log:
            if subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode:
                raise RuntimeError(f"the generator run failed; its log: {work}.log")
    return work


def load_generator(config, name: str, generator_dir: str):
    """(ModelConfig, params, tokenizer) of a generator: the config's policy, or a checkpoint;
    the config runs the config's kernels."""
    if name == BASE:
        lm = hf.load(config.model.hf_path, dtype=config.model.param_dtype)
        return (lm.config.with_kernels(config.kernels.impl), lm.params,
                prepare_tokenizer(load_tokenizer(lm.source)))
    step = int(name.removeprefix("rule_step"))
    cfg, params, meta = checkpoint.load_model(generator_dir, "policy", step=step)
    return (cfg.with_kernels(config.kernels.impl), params,
            prepare_tokenizer(load_tokenizer(meta.get("tokenizer") or None)))


# ----------------------------------------------------------------------------- triples
def write_tagged(path: str, triples: Sequence[dict]) -> None:
    """Triples with their tags (generator, kind, strict_agrees) as JSONL; `read_triples` reads
    them (the RM's input uses the four triple keys only)."""
    if triples:
        check_triples(triples)
    with open(path, "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(t) + "\n" for t in triples)


def _with_label_checks(triples: list[dict], generator: str) -> list[dict]:
    """The triples tagged with their generator, their error kind, and whether the strict
    numeric verifier gives the rule verifier's label."""
    return [dict(t, generator=generator,
                 kind=solution_error_kind(t["question"], t["reference"], t["completion"]),
                 strict_agrees=verify(t["reference"], t["completion"], "strict_numeric")
                 == t["label"]) for t in triples]


def program_completions(config, records: Sequence[dict], seed: int) -> list[list[str]]:
    """Each record's programmatic completions (rm_corpus.GENERATORS) in the task's format."""
    rng = np.random.default_rng([seed, 58])
    fmt = config.data.synthetic.answer_format
    return [[c for make in rm_corpus.GENERATORS.values()
             if (c := make(r, rng, fmt)) is not None] for r in records]


def sample_triples(config, name: str, generator_dir: str, records: Sequence[dict], verifier,
                   judge, seed: int, samples: int) -> tuple[list[dict], dict]:
    """(labelled triples, label stats) of one generator on `records`."""
    if name == PROGRAM:
        triples, stats = label_triples(records, program_completions(config, records, seed),
                                       verifier, judge=judge)
    else:
        cfg, params, tokenizer = load_generator(config, name, generator_dir)
        triples, stats = build_triples(
            params, cfg, tokenizer, records, verifier=verifier,
            template=config.data.prompt_template, chat=config.data.chat_template,
            samples_per_question=samples, temperature=config.rollout.temperature,
            top_p=config.rollout.top_p, max_prompt_len=config.data.max_prompt_len,
            max_new_tokens=config.rollout.max_new_tokens, batch_size=config.eval.batch_size,
            seed=seed, judge=judge)
    triples = _with_label_checks(triples, name)
    stats["strict_numeric_agreement"] = (float(np.mean([t["strict_agrees"] for t in triples]))
                                         if triples else None)
    return triples, stats


def corpus(fv, config, generator_dir: str, plan: dict) -> tuple[str, str]:
    """The train and held-out triples (TRIPLES/train.jsonl, heldout.jsonl; each source's file
    and stats kept, so a rerun samples only what is missing); their paths."""
    out = os.path.join(fv.workdir, "triples")
    os.makedirs(out, exist_ok=True)
    questions = split_questions(config, fv.train_questions, fv.heldout_questions)
    judge = None
    if config.rm_train.judge_url:
        judge = http_judge(config.rm_train.judge_url, config.rm_train.judge_model,
                           max_tokens=config.rm_train.judge_max_tokens,
                           concurrency=config.rm_train.judge_concurrency)
    extraction = run_extraction_mode(config)
    with RuleVerifier(int(config.verifier.num_workers), float(config.verifier.timeout_s),
                      extraction=extraction) as verifier:
        for i, (name, splits) in enumerate(plan.items()):
            for j, split in enumerate(splits):
                path = os.path.join(out, f"{name}.{split}.jsonl")
                if os.path.exists(path):
                    continue
                t0 = time.time()
                triples, stats = sample_triples(config, name, generator_dir, questions[split],
                                                verifier, judge, seed=100 * i + j,
                                                samples=fv.samples)
                stats.update(seconds=time.time() - t0, extraction=extraction)
                with open(path + ".stats.json", "w") as fh:
                    json.dump(stats, fh, indent=2)
                write_tagged(path, triples)
    paths = {}
    for split in ("train", "heldout"):
        merged = [t for name, splits in plan.items() if split in splits
                  for t in read_jsonl(os.path.join(out, f"{name}.{split}.jsonl"))]
        paths[split] = os.path.join(out, f"{split}.jsonl")
        write_tagged(paths[split], merged)
    return paths["train"], paths["heldout"]


def manifest(workdir: str, plan: dict, generator_dir: str, base_path: str) -> dict:
    """Counts, label balance and label agreement per source and split, and the split rules."""
    out = os.path.join(workdir, "triples")
    rows = {}
    for name, splits in plan.items():
        for split in splits:
            path = os.path.join(out, f"{name}.{split}.jsonl")
            triples = read_jsonl(path)
            with open(path + ".stats.json") as fh:
                stats = json.load(fh)
            kinds = {}
            for t in triples:
                kinds[t["kind"]] = kinds.get(t["kind"], 0) + 1
            rows[f"{name}/{split}"] = dict(label_balance(triples), kinds=kinds, stats=stats)
    return {"sources": rows, "rl_start": base_path, "generator_run": generator_dir,
            "rl_start_in_heldout": any(s.startswith(f"{BASE}/heldout") for s in rows),
            "question_seed": QUESTION_SEED}


# ----------------------------------------------------------------------------- RM and gate
def train_rm(config, train_path: str, heldout_path: str, out_dir: str) -> dict:
    """Train (or resume) the RM; its summary with the CPU seconds it took."""
    cpu = time.process_time()
    summary = train_reward_model(config, read_triples(train_path), out_dir,
                                 heldout_triples=read_triples(heldout_path))
    summary["cpu_seconds_this_session"] = time.process_time() - cpu
    return summary


def gate_report(config, rm_dir: str, heldout_path: str, fv) -> dict:
    """The decoded RM's held-out accuracy and AUC (overall, per source, per kind), balanced
    accuracy, and whether it passes the gate."""
    cfg, params, meta = checkpoint.load_model(rm_dir, "rm")
    heldout = read_triples(heldout_path)
    tokenizer = load_tokenizer(meta.get("rm_tokenizer") or None)
    report, rows = evaluate_reward_model(params, cfg, tokenizer, heldout,
                                         fmt=input_format(config),
                                         batch_size=config.eval.batch_size)
    by_label = rm_corpus.accuracy_by([str(t["label"]) for t in heldout], rows)
    acc, auc = report["accuracy"]["mean"], report["roc_auc"]["mean"]
    return {"heldout": report, "balanced_accuracy": float(np.mean(
                [v["accuracy"] for v in by_label.values()])),
            "by_source": rm_corpus.accuracy_by([t["generator"] for t in heldout], rows),
            "by_kind": rm_corpus.accuracy_by([t["kind"] for t in heldout], rows),
            "gate": {"min_accuracy": fv.min_accuracy, "min_auc": fv.min_auc,
                     "passed": bool(acc >= fv.min_accuracy and auc >= fv.min_auc)}}


def rm_config(config):
    """The config with the RM's source filled in: `reward_model.hf_path`, else the policy's."""
    c = config.copy_and_resolve_references()
    c.rm_train.mode = "train"
    if not c.reward_model.hf_path:
        c.reward_model.hf_path = c.model.hf_path
    if c.reward_model.lora.rank:
        raise ValueError("config.reward_model.lora.rank must be 0: the VerifyRM is fully "
                         "fine-tuned (the paper's recipe)")
    return c


def main(fv: flags.FlagValues, command: str) -> dict:
    config = rm_config(fv.config)
    steps = sorted(int(s) for s in fv.generator_steps)
    plan = sources(steps)
    generator_dir = generator_run(fv, steps)
    train_path, heldout_path = corpus(fv, config, generator_dir, plan)
    os.makedirs(fv.results, exist_ok=True)
    facts = manifest(fv.workdir, plan, generator_dir, config.model.hf_path)
    trained_dir = os.path.join(fv.workdir, "rm")
    summary = train_rm(config, train_path, heldout_path, trained_dir)
    portable = os.path.join(fv.workdir, "rm_portable")
    plan_inputs.portable_rm(config, trained_dir, train_path, heldout_path, portable)
    report = gate_report(config, portable, heldout_path, fv)
    report.update(command=command, training=summary)
    _keep(fv, portable, facts, report)
    return report


def _keep(fv, portable: str, facts: dict, report: dict) -> None:
    """The manifest, the gate report and the RM's summary and curve into RESULTS; the portable RM
    itself (RESULTS/inputs, what `rm.checkpoint` names) only when it passed the gate."""
    dest = fv.results
    with open(os.path.join(dest, "corpus_manifest.json"), "w") as fh:
        json.dump(facts, fh, indent=2)
    with open(os.path.join(dest, "gate_report.json"), "w") as fh:
        json.dump(report, fh, indent=2, default=str)
    run_store.copy_files(os.path.join(fv.workdir, "rm"), ("rm_summary.json", "rm_metrics.jsonl"),
                         dest)
    passed = report["gate"]["passed"]
    if passed:
        run_store.copy_files(portable, plan_inputs.KEPT_RM_FILES, os.path.join(dest, "inputs"))
    if fv.commit:
        run_store.git_commit(dest, "real-model VerifyRM: corpus manifest, gate report"
                             + (", the portable RM (gate passed)" if passed else
                                " (gate FAILED: no RM kept)"))


def cli(argv: list[str]) -> dict:
    fv = console.parse_flags(define_flags, argv, __doc__)
    with console.usage_errors():
        config_lib.validate(fv.config, device_count=jax.device_count())
        config_lib.validate_rm_train(rm_config(fv.config).rm_train)
        if len(fv.generator_steps) < 1:
            raise ValueError("--generator_steps needs at least one step")
    command = "python -m coop_jax.projects.real_model.verifyrm " + shlex.join(argv[1:])
    report = main(fv, command)
    if not report["gate"]["passed"]:
        log.warning("the VerifyRM FAILED its gate (held-out accuracy %.3f, ROC AUC %.3f; floors "
                    "%.2f and %.2f): it is not kept, and no Cooper run may start from it",
                    report["heldout"]["accuracy"]["mean"], report["heldout"]["roc_auc"]["mean"],
                    fv.min_accuracy, fv.min_auc)
    print(json.dumps({k: report[k] for k in ("balanced_accuracy", "gate")}
                     | {"accuracy": report["heldout"]["accuracy"]["mean"],
                        "auc": report["heldout"]["roc_auc"]["mean"]}, indent=2))
    return report


def run() -> None:
    console.run_console(cli, "coop_jax.projects.real_model.verifyrm")


if __name__ == "__main__":
    run()
