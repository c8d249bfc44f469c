"""`coop-train-rm`: build labelled (question, reference, completion) triples and train a VerifyRM.

Every setting is in the config's `rm_train` section (`--config.rm_train.x=y`):

    coop-train-rm --config.rm_train.mode=build_triples \
        (--config.rm_train.policy_checkpoint=DIR | --config.rm_train.policy_hf=PATH) \
        --config.rm_train.dataset=gsm8k --config.rm_train.data_dir=../shared/data \
        [--config.rm_train.samples_per_question=4 --config.rm_train.heldout_fraction=0.1 \
         --config.rm_train.heldout_out=HELD.jsonl --config.rm_train.judge_url=URL \
         --config.rm_train.judge_model=NAME] --config.rm_train.out=TRIPLES.jsonl
    coop-train-rm [--config=CFG.py --config.reward_model.hidden_size=...] \
        --config.rm_train.mode=train --config.rm_train.triples=TRAIN.jsonl \
        [--config.rm_train.heldout=HELD.jsonl] --config.rm_train.workdir=DIR \
        [--config.rm_train.init_hf=RM_DIR --config.rm_train.epochs=3 ...] \
        [--config.rm_train.export_hf=OUT_DIR]

Labels follow the paper's hybrid annotation (docs/ALGORITHMS.md): the rule verifier labels every
sampled completion; with a judge endpoint a triple is kept only when the judge agrees. Training is
BCE-with-logits on the RM score of the input `rm_input(config)` builds (`rm_input.RMInputFormat`:
`<question>` by `reward_model.question_format`, over-long inputs cut on
`reward_model.truncation_side`; right-padded), AdamW, batch sharded
over the (data, fsdp) mesh axes. DIR gets `checkpoints/` (readable by
`coop_jax.checkpoint.load_model(DIR, "rm")`, `coop-eval` and `cooper.rm_checkpoint`),
`rm_metrics.jsonl` and `rm_summary.json`. Single-process (one host) only.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import logging
import math
import os
import re
import time
import urllib.request
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl.app import UsageError
from ml_collections import config_flags

from coop_jax import checkpoint, data, hf, models, parallel
from coop_jax import config as config_lib
from coop_jax.build import load_model
from coop_jax.console import parse_flags, run_console
from coop_jax.metrics_writer import MetricWriter
from coop_jax.models.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer, prepare_tokenizer
from coop_jax.rm_input import (TRIPLE_KEYS, RMInputFormat, check_triples,  # noqa: F401
                               read_triples, rm_input_format, write_triples)
from coop_jax.rm_scoring import evaluate_reward_model
from coop_jax.sampling import fixed_batches, generate_completions
from coop_jax.sampling.chat import chat_completions_url
from coop_jax.train_step import (ModelState, TrainState, accumulate_gradients, apply_gradients,
                                 make_optimizer, place_state, split_micro_batches)
from coop_jax.verify import RuleVerifier
from coop_jax.verify.grouped import verify_across_hosts

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "eval", "default_config.py")
MODES = config_lib.RM_TRAIN_MODES

JUDGE_SYSTEM_PROMPT = (
    "You grade solutions to math problems. Given a problem, its reference answer and a candidate "
    "solution, decide whether the candidate's final answer is mathematically equivalent to the "
    "reference answer. Reply with one word: correct or incorrect.")

log = logging.getLogger("coop_jax.train_rm")

Judge = Callable[[Sequence[tuple[str, str, str]]], list["bool | None"]]


# ----------------------------------------------------------------------------- triples
def label_balance(triples: Sequence[dict]) -> dict:
    pos = sum(bool(t["label"]) for t in triples)
    return {"num_triples": len(triples), "num_positive": pos, "num_negative": len(triples) - pos,
            "positive_fraction": pos / len(triples) if triples else float("nan")}


def split_triples(triples: Sequence[dict], heldout_fraction: float, seed: int = 0
                  ) -> tuple[list[dict], list[dict]]:
    """(train, held-out), split by question so no question is on both sides; about
    `heldout_fraction` of the distinct questions go to held-out (at least one when > 0)."""
    if not 0 <= heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    questions = list(dict.fromkeys(t["question"] for t in triples))
    n_held = 0 if heldout_fraction == 0 else max(1, round(heldout_fraction * len(questions)))
    if n_held >= len(questions) > 0 and heldout_fraction > 0:
        raise ValueError(f"heldout_fraction={heldout_fraction} leaves no training question "
                         f"({len(questions)} questions)")
    order = np.random.default_rng(seed).permutation(len(questions))
    held = {questions[i] for i in order[:n_held]}
    return ([t for t in triples if t["question"] not in held],
            [t for t in triples if t["question"] in held])


_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)
_VERDICT = re.compile(r"\b(not\s+correct|incorrect|correct|wrong)\b")


def parse_judge_verdict(text: str | None) -> bool | None:
    """True / False from a judge reply ("correct" / "incorrect", "not correct", "wrong"; the
    last verdict word outside <think> blocks wins); None when there is none."""
    if not text:
        return None
    words = _VERDICT.findall(_THINK.sub(" ", text).lower())
    return None if not words else words[-1] == "correct"


def judge_user_message(question: str, reference: str, completion: str) -> str:
    return (f"Problem:\n{question}\n\nReference answer:\n{reference}\n\nCandidate solution:\n"
            f"{completion}\n\nIs the candidate's final answer correct? Answer \"correct\" or "
            f"\"incorrect\".")


def http_judge(url: str, model: str, *, max_tokens: int = 1024, timeout_s: float = 120.0,
               concurrency: int = 8) -> Judge:
    """A judge over an OpenAI-compatible chat-completions endpoint (temperature 0); a failed
    request or a reply without a verdict gives None."""
    endpoint = chat_completions_url(url)

    def one(item: tuple[str, str, str]) -> bool | None:
        body = {"model": model, "temperature": 0.0, "max_tokens": max_tokens,
                "messages": [{"role": "system", "content": JUDGE_SYSTEM_PROMPT},
                             {"role": "user", "content": judge_user_message(*item)}]}
        request = urllib.request.Request(endpoint, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                reply = json.load(response)
            return parse_judge_verdict(reply["choices"][0]["message"]["content"])
        except (OSError, KeyError, IndexError, TypeError, ValueError) as e:
            log.warning("judge request failed: %s", e)
            return None

    def judge(items: Sequence[tuple[str, str, str]]) -> list[bool | None]:
        with concurrent.futures.ThreadPoolExecutor(max(1, concurrency)) as pool:
            return list(pool.map(one, items))

    return judge


def label_triples(records: Sequence[dict], completions: Sequence[Sequence[str]], verifier, *,
                  judge: Judge | None = None) -> tuple[list[dict], dict]:
    """Triples from completions grouped per record, labelled by the rule verifier (`verifier` is
    a RuleVerifier, or None for in-process checks); with `judge`, only triples on which the judge
    agrees are kept. Empty and repeated completions of a question are dropped, as are verifier
    timeouts."""
    if len(records) != len(completions):
        raise ValueError(f"{len(records)} records but {len(completions)} completion groups")
    groups, stats = [], {"completions": 0, "empty": 0, "duplicates": 0, "verifier_timeouts": 0}
    for group in completions:
        stats["completions"] += len(group)
        kept = [c for c in group if c.strip()]
        stats["empty"] += len(group) - len(kept)
        unique = list(dict.fromkeys(kept))
        stats["duplicates"] += len(kept) - len(unique)
        groups.append(unique)
    results = verify_across_hosts(verifier, [r["reference"] for r in records], groups)
    triples = []
    for rec, group, res in zip(records, groups, results):
        for c, r in zip(group, res):
            if r.timed_out:
                stats["verifier_timeouts"] += 1
                continue
            triples.append({"question": rec["question"], "reference": rec["reference"],
                            "completion": c, "label": bool(r.correct)})
    stats["rule_positive"] = sum(t["label"] for t in triples)
    if judge is not None:
        verdicts = judge([(t["question"], t["reference"], t["completion"]) for t in triples])
        stats["judge/no_verdict"] = sum(v is None for v in verdicts)
        stats["judge/disagree"] = sum(v is not None and v != t["label"]
                                      for v, t in zip(verdicts, triples))
        triples = [t for t, v in zip(triples, verdicts) if v == t["label"]]
        stats["judge/agree"] = len(triples)
    stats.update(label_balance(triples))
    return triples, stats


def build_triples(params, model_cfg, tokenizer, records: Sequence[dict], *, verifier,
                  template: str, chat: bool = False, samples_per_question: int = 4,
                  temperature: float = 1.0, top_p: float = 1.0, max_prompt_len: int,
                  max_new_tokens: int, batch_size: int = 64, seed: int = 0,
                  kernel_impl: str = "auto", judge: Judge | None = None
                  ) -> tuple[list[dict], dict]:
    """Sample `samples_per_question` completions per record from a policy and label them
    (`label_triples`)."""
    if samples_per_question < 1:
        raise ValueError(f"samples_per_question must be >= 1, got {samples_per_question}")
    prompts = [data.format_prompt(template, r["question"], tokenizer=tokenizer, chat=chat)
               for r in records]
    texts, _ = generate_completions(
        params, model_cfg, tokenizer, prompts, max_prompt_len=max_prompt_len,
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
        num_samples=samples_per_question, batch_size=batch_size, seed=seed,
        kernel_impl=kernel_impl)
    return label_triples(records, texts, verifier, judge=judge)


# ----------------------------------------------------------------------------- training
def load_rm(section, mesh, seed: int, init_hf: str | None = None):
    """(ModelConfig, sharded params, tokenizer, tokenizer path, HF config or None): `init_hf`,
    else `section.hf_path` (an RM checkpoint, or a causal LM that gets a new head), or a random
    model of the section's architecture with `num_labels=1`."""
    tokenizer, tok_path = None, section.tokenizer or ""
    if not (init_hf or section.hf_path):
        tokenizer = prepare_tokenizer(load_tokenizer(tok_path or None))
    cfg, params, lm = load_model(section, tokenizer, mesh, jax.random.key(seed), num_labels=1,
                                 hf_path=init_hf or "", field="reward_model")
    if lm is None:
        return cfg, params, tokenizer, tok_path, None
    tok_path = tok_path or lm.source
    if not tok_path:
        raise ValueError(f"{init_hf or section.hf_path} has no tokenizer files; set "
                         "config.reward_model.tokenizer")
    return cfg, params, prepare_tokenizer(load_tokenizer(tok_path)), tok_path, lm.hf_config


def _bce_sums(cfg):
    """(weighted BCE sum, weighted correct count) of a batch: sums, so micro-batches add up."""
    def sums(params, batch):
        scores = models.reward_scores(params, cfg, batch["tokens"], batch["mask"])
        w = batch["weight"]
        loss = (optax.sigmoid_binary_cross_entropy(scores, batch["labels"]) * w).sum()
        return loss, (((scores > 0) == (batch["labels"] > 0.5)) * w).sum()
    return sums


def _make_step(cfg, tx, mesh, shardings, micro_batches: int = 1):
    """One AdamW step on the batch's mean BCE, its gradient accumulated over `micro_batches`
    micro-batches by `lax.scan` (only one micro-batch's activations live at a time)."""
    def step(state, batch):
        (loss, correct), grads = accumulate_gradients(
            _bce_sums(cfg), state.params, split_micro_batches(batch, micro_batches))
        n = jnp.maximum(batch["weight"].sum(), 1.0)
        grads = jax.tree_util.tree_map(lambda g: g / n, grads)
        return apply_gradients(state, tx, grads), {"loss": loss / n, "accuracy": correct / n,
                                                   "grad_norm": optax.tree.norm(grads)}

    batch_sh = {k: parallel.batch_sharding(mesh, ndim) for k, ndim in
                (("tokens", 2), ("mask", 2), ("labels", 1), ("weight", 1))}
    step_fn = jax.jit(step, in_shardings=(shardings, batch_sh),
                      out_shardings=(shardings, parallel.replicated(mesh)), donate_argnums=(0,))
    return step_fn, batch_sh


def _batches(n: int, batch_size: int, rng: np.random.Generator):
    """Shuffled index arrays of `batch_size` rows and their 0/1 weights (the last batch is padded
    with weight-0 repeats, so every step has one shape)."""
    for idx, real in fixed_batches(rng.permutation(n), batch_size):
        weight = np.zeros(batch_size, np.float32)
        weight[:real] = 1.0
        yield idx, weight


def _truncated_fraction(tokenizer, triples: Sequence[dict], fmt: RMInputFormat) -> float:
    ids = tokenizer(fmt.texts(triples), add_special_tokens=False)["input_ids"]
    return sum(len(x) > fmt.max_len for x in ids) / len(triples)


def _heldout_row(params, cfg, tokenizer, heldout, fmt: RMInputFormat, batch_size: int) -> dict:
    report, _ = evaluate_reward_model(params, cfg, tokenizer, heldout, fmt=fmt,
                                      batch_size=batch_size)
    return {"heldout/accuracy": report["accuracy"]["mean"],
            "heldout/accuracy_ci": [report["accuracy"]["ci_low"], report["accuracy"]["ci_high"]],
            "heldout/auc": report["roc_auc"]["mean"]}


def drop_overlong(triples: Sequence[dict], opts) -> tuple[list[dict], int]:
    """`rm_train.overlong="drop"` (the reference): leave out triples whose question, reference and
    completion have more than `rm_train.max_chars` characters together; "truncate" keeps them all
    (the token input is cut to `max_len` tokens on `reward_model.truncation_side`)."""
    if opts.overlong == "truncate":
        return list(triples), 0
    kept = [t for t in triples
            if len(t["question"]) + len(t["reference"]) + len(t["completion"]) <= opts.max_chars]
    if not kept:
        raise ValueError(f"every training triple is over config.rm_train.max_chars "
                         f"({opts.max_chars}); raise it or set rm_train.overlong='truncate'")
    if len(kept) < len(triples):
        log.warning("dropped %d of %d training triples over rm_train.max_chars=%d",
                    len(triples) - len(kept), len(triples), opts.max_chars)
    return kept, len(triples) - len(kept)


def rm_input(config) -> RMInputFormat:
    """The RM input coop-train-rm trains on: `rm_train.max_len` (else `cooper.max_len`) tokens,
    `<question>` by `reward_model.question_format` with the prompt template `rm_train.template`
    (else `rm_train.dataset`'s default template, else `data.prompt_template`)."""
    r = config.rm_train
    template = r.template or data.DEFAULT_TEMPLATES.get(r.dataset, config.data.prompt_template)
    return rm_input_format(config, max_len=r.max_len, template=template)


# rm_training entries a rerun must share with the run in its workdir to resume it
RESUME_KEYS = ("num_train", "epochs", "batch_size", "micro_batches", "seed", "learning_rate",
               "weight_decay", "warmup_ratio", "schedule", "grad_clip", "overlong", "max_chars",
               "init_hf", "max_len", "template", "question_format", "truncation_side")


def _checkpoint_meta(config, fmt: RMInputFormat, cfg, tok_path: str, num_train: int) -> dict:
    """The meta every checkpoint carries: what `checkpoint.load_model(DIR, "rm")`, coop-eval and
    coop-train's `cooper.rm_checkpoint` read, and the settings a resume must match."""
    saved_config = config.copy_and_resolve_references()
    # coop-eval and coop-train read the RM's input settings here
    saved_config.cooper.max_len, saved_config.data.prompt_template = fmt.max_len, fmt.template
    if config.rm_train.init_hf:
        saved_config.reward_model.hf_path = config.rm_train.init_hf
    return {"config": json.loads(json.dumps(saved_config.to_dict())),
            "tokenizer": tok_path, "rm_tokenizer": tok_path,
            "rm_model_config": checkpoint.model_config_to_dict(cfg),
            "rm_training": config.rm_train.to_dict() | dataclasses.asdict(fmt)
            | {"num_train": num_train}}


def _saved_progress(ckpt: checkpoint.Checkpointer, meta: dict, workdir: str) -> dict | None:
    """The progress saved by the run in `workdir` (None: nothing to resume); a checkpoint of
    another run there is an error naming the setting that differs."""
    if ckpt.latest_step() is None:
        return None
    saved = ckpt.read_meta()
    if "rm_progress" not in saved:
        raise ValueError(f"workdir {workdir!r} holds checkpoints/ that coop-train-rm cannot "
                         "resume (another kind of run, or an RM saved before resumable "
                         "training); pass a fresh workdir")
    for key in RESUME_KEYS:
        was, now = saved["rm_training"].get(key), meta["rm_training"].get(key)
        if was != now:
            raise ValueError(f"workdir {workdir!r} holds an RM training with {key}={was!r}, this "
                             f"run has {now!r}; rerun with the same settings to resume it, or "
                             "pass a fresh workdir")
    return saved["rm_progress"]


def train_reward_model(config, train_triples: Sequence[dict], workdir: str, *,
                       heldout_triples: Sequence[dict] | None = None) -> dict:
    """Train `config.reward_model` (or `rm_train.init_hf`) with BCE on labelled triples, with
    the `rm_train` section's settings; writes checkpoints/, rm_metrics.jsonl, rm_summary.json (and
    an HF folder with `rm_train.export_hf`).

    Every `rm_train.checkpoint_every` steps a checkpoint holds the RM's parameters and AdamW
    state, and its meta the data position (epoch, batch, the shuffling RNG at the epoch's start,
    the epoch's losses so far): rerun on the same workdir, training resumes from the latest one
    and writes the same rm_metrics.jsonl rows and final parameters as an uninterrupted run. The
    final checkpoint holds the parameters only (an RM is for scoring; AdamW's moments would
    triple its size); a rerun of a finished run only re-exports and rewrites the summary.
    """
    t0 = time.time()
    config_lib.validate_rm_train(config.rm_train)
    opts, fmt = config.rm_train, rm_input(config)
    eval_batch = config.eval.batch_size
    check_triples(train_triples)
    if heldout_triples:
        check_triples(heldout_triples)
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape,
                                                            jax.device_count()))
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    hosts = jax.process_count()
    if opts.batch_size % hosts:
        raise ValueError(f"config.rm_train.batch_size ({opts.batch_size}) must be a multiple of "
                         f"the number of processes ({hosts})")
    if opts.batch_size % (shards * opts.micro_batches):
        raise ValueError(f"config.rm_train.batch_size ({opts.batch_size}) must be a multiple of "
                         f"the data x fsdp mesh size ({shards}) x rm_train.micro_batches "
                         f"({opts.micro_batches})")
    train_triples, dropped = drop_overlong(train_triples, opts)
    labels = np.asarray(check_triples(train_triples), np.float32)
    cfg, params, tokenizer, tok_path, base_hf = load_rm(config.reward_model, mesh, opts.seed,
                                                        opts.init_hf or None)
    steps_per_epoch = math.ceil(len(train_triples) / opts.batch_size)
    total = opts.epochs * steps_per_epoch
    tx = make_optimizer(opts.learning_rate, warmup_steps=int(opts.warmup_ratio * total),
                        total_steps=total, schedule=opts.schedule,
                        weight_decay=opts.weight_decay, grad_clip=opts.grad_clip)
    state = place_state(ModelState(params, tx.init(params)), mesh)
    shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
    step_fn, batch_sh = _make_step(cfg, tx, mesh, shardings, opts.micro_batches)
    truncated = _truncated_fraction(tokenizer, train_triples, fmt)
    if truncated:
        log.warning("%.1f%% of the training inputs exceed max_len=%d and lose their %s",
                    100 * truncated, fmt.max_len,
                    "start" if fmt.truncation_side == "left" else "end")

    os.makedirs(workdir, exist_ok=True)
    meta = _checkpoint_meta(config, fmt, cfg, tok_path, len(train_triples))
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), keep=1)
    rng = np.random.default_rng(opts.seed)
    progress = _saved_progress(ckpt, meta, workdir)
    resumed_from = None if progress is None else ckpt.latest_step()
    if progress is None:
        progress = {"epoch": 1, "batch": 0, "rng": rng.bit_generator.state, "losses": [],
                    "epoch_loss": float("nan"), "held": {}, "done": False}
    elif not progress["done"]:
        state = ckpt.restore(TrainState(np.asarray(0, np.int32), None, None, state))[0].rm
        log.info("resuming RM training from step %d", resumed_from)
    step = resumed_from or 0
    writer = MetricWriter(workdir, resumed_from, tensorboard=False, filename="rm_metrics.jsonl",
                          primary=jax.process_index() == 0)
    try:
        if heldout_triples and resumed_from is None:
            progress["held"] = _heldout_row(state.params, cfg, tokenizer, heldout_triples, fmt,
                                            eval_batch)
            writer.write(0, {"epoch": 0} | progress["held"])
        rng.bit_generator.state = progress["rng"]
        # a finished run's progress is past the last epoch
        for epoch in range(progress["epoch"], opts.epochs + 1):
            epoch_rng = rng.bit_generator.state
            batches = list(_batches(len(train_triples), opts.batch_size, rng))
            losses = list(progress["losses"])
            for b in range(progress["batch"], len(batches)):
                idx, weight = batches[b]
                block = parallel.host.row_block(len(idx) // hosts)  # this host's rows
                idx, weight = idx[block], weight[block]
                ids, mask = fmt.tokenize_triples(tokenizer, [train_triples[i] for i in idx])
                rows = {"tokens": ids, "mask": mask, "labels": labels[idx], "weight": weight}
                batch = {k: parallel.host.global_rows(v, batch_sh[k]) for k, v in rows.items()}
                state, metrics = step_fn(state, batch)
                step += 1
                metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
                if not math.isfinite(metrics["loss"]):
                    raise FloatingPointError(f"non-finite RM loss at step {step}")
                losses.append(metrics["loss"])
                if step % opts.log_every == 0:
                    writer.write(step, {"epoch": epoch} | metrics)
                if heldout_triples and opts.heldout_every and step % opts.heldout_every == 0:
                    writer.write(step, {"epoch": epoch} | _heldout_row(
                        state.params, cfg, tokenizer, heldout_triples, fmt, eval_batch))
                if b + 1 < len(batches):
                    progress |= {"epoch": epoch, "batch": b + 1, "rng": epoch_rng,
                                 "losses": list(losses)}
                else:  # the epoch's end: its row, then the next epoch's start
                    row = {"epoch": epoch, "train/epoch_loss": float(np.mean(losses))}
                    if heldout_triples:
                        progress["held"] = _heldout_row(state.params, cfg, tokenizer,
                                                        heldout_triples, fmt, eval_batch)
                        row |= progress["held"]
                    writer.write(step, row)
                    log.info("epoch %d: %s", epoch, row)
                    progress |= {"epoch": epoch + 1, "batch": 0, "rng": rng.bit_generator.state,
                                 "losses": [], "epoch_loss": row["train/epoch_loss"]}
                if opts.checkpoint_every and step % opts.checkpoint_every == 0 and step < total:
                    ckpt.save(step, TrainState(np.asarray(step, np.int32), None, None, state),
                              meta | {"step": step, "rm_progress": progress})
        if progress["done"]:
            host_params = parallel.host.fetch(ckpt.load_item("rm_params"))
        else:
            # gathered to every host first (orbax writes host arrays fast)
            host_params = parallel.host.fetch(state.params)
            progress["done"] = True
            ckpt.save(step, TrainState(np.asarray(step, np.int32), None, None,
                                       ModelState(host_params, None)),
                      meta | {"step": step, "rm_progress": progress})
    finally:
        writer.close()
        ckpt.close()
    if opts.export_hf and jax.process_index() == 0:
        pad = int(tokenizer.pad_token_id)
        hf_config = dict(base_hf or {}, pad_token_id=pad)
        hf.save(hf.HFModel(cfg, host_params, hf_config, source=tok_path or CHAR_TOKENIZER_DIR),
                opts.export_hf)
    held = progress["held"]
    summary = {"num_train": len(train_triples),
               "num_heldout": len(heldout_triples) if heldout_triples else 0,
               "train_balance": label_balance(train_triples), "epochs": opts.epochs,
               "steps": step, "final_train_loss": progress["epoch_loss"],
               "heldout_accuracy": held.get("heldout/accuracy"),
               "heldout_accuracy_ci": held.get("heldout/accuracy_ci"),
               "heldout_auc": held.get("heldout/auc"), "truncated_fraction": truncated,
               "dropped_overlong": dropped,
               "effective_batch": opts.batch_size, "micro_batches": opts.micro_batches,
               "max_len": fmt.max_len, "question_format": fmt.question_format,
               "truncation_side": fmt.truncation_side, "template": fmt.template,
               "resumed_from_step": resumed_from, "wall_seconds": time.time() - t0,
               "checkpoint": os.path.join(os.path.abspath(workdir), "checkpoints"),
               "export_hf": os.path.abspath(opts.export_hf) if opts.export_hf else None}
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "rm_summary.json"), "w") as fh:
            json.dump(summary, fh, indent=2)
    return summary


# ----------------------------------------------------------------------------- command line
def define_flags(fv, argv: list[str]) -> None:
    config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "config file (default: the schema "
                                    "defaults); every coop-train-rm setting is in its rm_train "
                                    "section", flag_values=fv, sys_argv=argv)


def _load_policy(fv, r, config, mesh):
    """(ModelConfig, params, tokenizer, config, template default) of the sampling policy. Without
    --config, a coop-train checkpoint's own config applies (with the command line's overrides)."""
    saved_template = None
    if r.policy_hf:
        lm = hf.load(r.policy_hf, mesh=mesh)
        if lm.source is None:
            raise UsageError(f"config.rm_train.policy_hf {r.policy_hf!r} has no tokenizer files")
        cfg, params, tok = lm.config, lm.params, lm.source
    else:
        try:
            cfg, params, meta = checkpoint.load_model(r.policy_checkpoint, "policy", mesh=mesh)
        except (ValueError, FileNotFoundError) as e:
            raise UsageError(f"config.rm_train.policy_checkpoint {r.policy_checkpoint}: "
                             f"{e}") from e
        tok = meta.get("tokenizer") or ""
        if not fv["config"].present and isinstance(meta.get("config"), dict):
            config = config_lib.base_config()
            config.update(ml_collections.ConfigDict(meta["config"]))
            config.update_from_flattened_dict(config_flags.get_override_values(fv["config"]))
            saved_template = config.data.prompt_template
    if cfg.is_reward_model:
        raise UsageError("the sampling policy must be a causal LM, got a reward model")
    return cfg, params, prepare_tokenizer(load_tokenizer(tok or None)), config, saved_template


def _build_mode(fv) -> dict:
    config = fv.config
    r = config.rm_train
    if bool(r.policy_checkpoint) == bool(r.policy_hf):
        raise UsageError("set exactly one of config.rm_train.policy_checkpoint and "
                         "config.rm_train.policy_hf")
    if not r.out:
        raise UsageError("config.rm_train.out is required (the triples JSONL)")
    if bool(r.judge_url) != bool(r.judge_model):
        raise UsageError("config.rm_train.judge_url and config.rm_train.judge_model go together")
    if r.heldout_fraction and not r.heldout_out:
        raise UsageError("config.rm_train.heldout_fraction needs config.rm_train.heldout_out")
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape,
                                                            jax.device_count()))
    cfg, params, tokenizer, config, saved_template = _load_policy(fv, r, config, mesh)
    r = config.rm_train
    dataset = r.dataset or config.data.dataset
    if dataset not in data.DATASETS:
        raise UsageError(f"config.rm_train.dataset must be one of {list(data.DATASETS)}, got "
                         f"{dataset!r}")
    data_dir = r.data_dir or config.data.data_dir or None
    synthetic = (data.SyntheticConfig(**config.data.synthetic.to_dict())
                 if dataset == "synthetic" else None)
    try:
        records = data.load_split(dataset, r.split, data_dir=data_dir,
                                  num_examples=r.num_examples or None, seed=int(config.seed),
                                  synthetic=synthetic)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"config.rm_train.dataset={dataset} split={r.split}: {e}") from e
    judge = None
    if r.judge_url:
        judge = http_judge(r.judge_url, r.judge_model, max_tokens=r.judge_max_tokens,
                           concurrency=r.judge_concurrency)
    template = r.template or saved_template or data.DEFAULT_TEMPLATES[dataset]
    with RuleVerifier(int(config.verifier.num_workers), float(config.verifier.timeout_s)) as v:
        triples, stats = build_triples(
            params, cfg, tokenizer, records, verifier=v, template=template, chat=r.chat,
            samples_per_question=r.samples_per_question, temperature=r.temperature,
            top_p=r.top_p, max_prompt_len=r.max_prompt_len or config.data.max_prompt_len,
            max_new_tokens=r.max_new_tokens or config.rollout.max_new_tokens,
            batch_size=config.eval.batch_size, seed=r.seed, kernel_impl=config.kernels.impl,
            judge=judge)
    if not triples:
        raise UsageError(f"no triples kept ({stats})")
    train, held = split_triples(triples, r.heldout_fraction, r.seed)
    primary = jax.process_index() == 0  # every host holds every triple
    if primary:
        write_triples(r.out, train)
    if r.heldout_out:
        if primary:
            write_triples(r.heldout_out, held)
        stats["heldout"] = label_balance(held)
    stats["train"] = label_balance(train)
    b = stats["train"]
    print(f"triples: {b['num_triples']} ({b['num_positive']} positive, {b['num_negative']} "
          f"negative, {100 * b['positive_fraction']:.1f}% positive) -> {r.out}")
    if judge is not None:
        print(f"judge: {stats['judge/agree']} agree, {stats['judge/disagree']} disagree, "
              f"{stats['judge/no_verdict']} without a verdict (dropped)")
    return stats


def _train_mode(fv) -> dict:
    config = fv.config
    r = config.rm_train
    for name in ("triples", "workdir"):
        if not r[name]:
            raise UsageError(f"config.rm_train.{name} is required for rm_train.mode='train'")
    for name in ("triples", "heldout"):
        if r[name] and not os.path.isfile(r[name]):
            raise UsageError(f"config.rm_train.{name}: no such file {r[name]!r}")
    try:
        train = read_triples(r.triples)
        held = read_triples(r.heldout) if r.heldout else None
        summary = train_reward_model(config, train, r.workdir, heldout_triples=held)
    except ValueError as e:
        raise UsageError(str(e)) from e
    if jax.process_index() == 0:
        print(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str]) -> dict[str, Any]:
    """Parse `argv` (argv[0] is the program name) and run `config.rm_train.mode`."""
    fv = parse_flags(define_flags, argv)
    try:
        config_lib.validate_rm_train(fv.config.rm_train)
    except ValueError as e:
        raise UsageError(str(e)) from e
    parallel.maybe_initialize_distributed(fv.config.mesh)
    return _build_mode(fv) if fv.config.rm_train.mode == "build_triples" else _train_mode(fv)


def run() -> None:
    """Console-script entry point."""
    run_console(main, "coop-train-rm")


if __name__ == "__main__":
    run()
