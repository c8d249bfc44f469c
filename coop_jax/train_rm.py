"""`coop-train-rm`: build labelled (question, reference, completion) triples and train a VerifyRM.

    coop-train-rm --mode=build_triples (--policy_checkpoint=DIR | --policy_hf=PATH) \
        --dataset=gsm8k --data_dir=../shared/data [--num_examples=N] [--samples_per_question=4] \
        [--temperature=1.0] [--judge_url=URL --judge_model=NAME] \
        [--heldout_fraction=0.1 --heldout_out=HELD.jsonl] --out=TRIPLES.jsonl
    coop-train-rm --mode=train --triples=TRAIN.jsonl [--heldout=HELD.jsonl] --workdir=DIR \
        [--config=CFG.py --config.reward_model.hidden_size=...] [--init_hf=RM_DIR] [--epochs=3] \
        [--learning_rate=2e-5] [--batch_size=16] [--max_len=N] [--export_hf=OUT_DIR]

Labels follow the paper's hybrid annotation (ALGORITHMS.md §1): the rule verifier labels every
sampled completion; with a judge endpoint a triple is kept only when the judge agrees. Training is
BCE-with-logits on the RM score of `format_rm_input(q, a, c)` (right-padded), AdamW, batch sharded
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

import numpy as np

from coop_jax.rm_input import TRIPLE_KEYS, read_triples, write_triples  # noqa: F401  (public)

DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), "eval", "default_config.py")
MODES = ("build_triples", "train")

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
    endpoint = url.rstrip("/")
    if not endpoint.endswith("/chat/completions"):
        endpoint = (endpoint if endpoint.endswith("/v1") else endpoint + "/v1")
        endpoint += "/chat/completions"

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
    from coop_jax.eval.evaluate import verify_grouped

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
    results = verify_grouped(verifier, [r["reference"] for r in records], groups)
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
    from coop_jax.data import format_prompt
    from coop_jax.eval.evaluate import generate_completions

    if samples_per_question < 1:
        raise ValueError(f"samples_per_question must be >= 1, got {samples_per_question}")
    prompts = [format_prompt(template, r["question"], tokenizer=tokenizer, chat=chat)
               for r in records]
    texts, _ = generate_completions(
        params, model_cfg, tokenizer, prompts, max_prompt_len=max_prompt_len,
        max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
        num_samples=samples_per_question, batch_size=batch_size, seed=seed,
        kernel_impl=kernel_impl)
    return label_triples(records, texts, verifier, judge=judge)


# ----------------------------------------------------------------------------- training
@dataclasses.dataclass(frozen=True)
class RMTrainOptions:
    """Optimisation settings; the defaults are the paper's VerifyRM values (ALGORITHMS.md §1)."""
    epochs: int = 3
    learning_rate: float = 2e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.0
    schedule: str = "constant"
    grad_clip: float = 1.0
    batch_size: int = 16
    max_len: int = 256
    eval_batch_size: int = 64
    log_every: int = 10
    seed: int = 0

    def __post_init__(self):
        for name in ("epochs", "batch_size", "max_len", "eval_batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError("weight_decay and grad_clip must be >= 0")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"schedule must be 'constant' or 'cosine', got {self.schedule!r}")


def load_rm(section, mesh, seed: int, init_hf: str | None = None):
    """(ModelConfig, sharded params, tokenizer, tokenizer path, HF config or None): an HF
    sequence-classification folder (`init_hf`, else `section.hf_path`) or a random model of the
    section's architecture with `num_labels=1`."""
    import jax

    from coop_jax import config as config_lib, hf, parallel
    from coop_jax.eval.evaluate import prepare_tokenizer
    from coop_jax.models.tokenizer import load_tokenizer

    path = init_hf or section.hf_path
    if path:
        lm = hf.load(path, dtype=section.param_dtype, compute_dtype=section.dtype, mesh=mesh,
                     num_labels=1, keep_layers=section.keep_layers or None)
        if lm.config.num_labels != 1:
            raise ValueError(f"{path} must be a sequence-classification model with num_labels=1, "
                             f"got num_labels={lm.config.num_labels}")
        tok_path = section.tokenizer or lm.source
        if not tok_path:
            raise ValueError(f"{path} has no tokenizer files; set config.reward_model.tokenizer")
        return lm.config, lm.params, prepare_tokenizer(load_tokenizer(tok_path)), tok_path, \
            lm.hf_config
    tok_path = section.tokenizer or ""
    tokenizer = prepare_tokenizer(load_tokenizer(tok_path or None))
    if len(tokenizer) > section.vocab_size:
        raise ValueError(f"config.reward_model.vocab_size ({section.vocab_size}) is smaller than "
                         f"the tokenizer ({len(tokenizer)} tokens)")
    cfg = config_lib.model_config(section, num_labels=1)
    return cfg, parallel.sharded_init(cfg, jax.random.key(seed), mesh), tokenizer, tok_path, None


def _make_step(cfg, tx, mesh, shardings):
    import jax
    import jax.numpy as jnp
    import optax

    from coop_jax import models, parallel
    from coop_jax.train_step import ModelState

    def loss_fn(params, batch):
        scores = models.reward_scores(params, cfg, batch["tokens"], batch["mask"])
        w = batch["weight"]
        n = jnp.maximum(w.sum(), 1.0)
        loss = (optax.sigmoid_binary_cross_entropy(scores, batch["labels"]) * w).sum() / n
        acc = (((scores > 0) == (batch["labels"] > 0.5)) * w).sum() / n
        return loss, {"loss": loss, "accuracy": acc}

    def step(state, batch):
        (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, batch)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        metrics["grad_norm"] = optax.tree.norm(grads)
        return ModelState(optax.apply_updates(state.params, updates), opt_state), metrics

    batch_sh = {k: parallel.batch_sharding(mesh, ndim) for k, ndim in
                (("tokens", 2), ("mask", 2), ("labels", 1), ("weight", 1))}
    step_fn = jax.jit(step, in_shardings=(shardings, batch_sh),
                      out_shardings=(shardings, parallel.replicated(mesh)), donate_argnums=(0,))
    return step_fn, batch_sh


def _batches(n: int, batch_size: int, rng: np.random.Generator):
    """Shuffled index arrays of `batch_size` rows and their 0/1 weights (the last batch is padded
    with weight-0 repeats, so every step has one shape)."""
    perm = rng.permutation(n)
    for start in range(0, n, batch_size):
        idx = perm[start:start + batch_size]
        weight = np.zeros(batch_size, np.float32)
        weight[:len(idx)] = 1.0
        yield np.concatenate([idx, np.full(batch_size - len(idx), idx[0])]), weight


def _encode(tokenizer, triples: Sequence[dict], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    from coop_jax.rm_input import format_rm_input, tokenize_rm_inputs
    texts = [format_rm_input(t["question"], t["reference"], t["completion"]) for t in triples]
    return tokenize_rm_inputs(tokenizer, texts, max_len)


def _truncated_fraction(tokenizer, triples: Sequence[dict], max_len: int) -> float:
    from coop_jax.rm_input import format_rm_input
    texts = [format_rm_input(t["question"], t["reference"], t["completion"]) for t in triples]
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return sum(len(x) > max_len for x in ids) / len(triples)


def _heldout_row(params, cfg, tokenizer, heldout, opts: RMTrainOptions) -> dict:
    from coop_jax.eval.evaluate import evaluate_reward_model
    report, _ = evaluate_reward_model(params, cfg, tokenizer, heldout, max_len=opts.max_len,
                                      batch_size=opts.eval_batch_size)
    return {"heldout/accuracy": report["accuracy"]["mean"],
            "heldout/accuracy_ci": [report["accuracy"]["ci_low"], report["accuracy"]["ci_high"]],
            "heldout/auc": report["roc_auc"]["mean"]}


def train_reward_model(config, train_triples: Sequence[dict], workdir: str, *,
                       heldout_triples: Sequence[dict] | None = None,
                       options: RMTrainOptions = RMTrainOptions(), init_hf: str | None = None,
                       export_hf: str | None = None) -> dict:
    """Train `config.reward_model` (or `init_hf`) with BCE on labelled triples; writes
    checkpoints/, rm_metrics.jsonl, rm_summary.json (and an HF folder with `export_hf`)."""
    import jax

    from coop_jax import checkpoint, config as config_lib, hf, parallel
    from coop_jax.eval.evaluate import check_triples
    from coop_jax.models.tokenizer import CHAR_TOKENIZER_DIR
    from coop_jax.train_step import ModelState, TrainState, make_optimizer, place_state

    t0 = time.time()
    labels = np.asarray(check_triples(train_triples), np.float32)
    if heldout_triples:
        check_triples(heldout_triples)
    opts = options
    ckpt_dir = os.path.join(workdir, "checkpoints")
    if os.path.isdir(ckpt_dir) and os.listdir(ckpt_dir):
        raise ValueError(f"workdir {workdir!r} already holds a checkpoints/ folder; pass a fresh "
                         "workdir")
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape,
                                                            jax.device_count()))
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    if opts.batch_size % shards:
        raise ValueError(f"batch_size ({opts.batch_size}) must be a multiple of the data x fsdp "
                         f"mesh size ({shards})")
    cfg, params, tokenizer, tok_path, base_hf = load_rm(config.reward_model, mesh, opts.seed,
                                                        init_hf)
    steps_per_epoch = math.ceil(len(train_triples) / opts.batch_size)
    total = opts.epochs * steps_per_epoch
    tx = make_optimizer(opts.learning_rate, warmup_steps=int(opts.warmup_ratio * total),
                        total_steps=total, schedule=opts.schedule,
                        weight_decay=opts.weight_decay, grad_clip=opts.grad_clip)
    state = place_state(ModelState(params, tx.init(params)), mesh)
    shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
    step_fn, batch_sh = _make_step(cfg, tx, mesh, shardings)
    truncated = _truncated_fraction(tokenizer, train_triples, opts.max_len)
    if truncated:
        log.warning("%.1f%% of the training inputs exceed max_len=%d and lose their start",
                    100 * truncated, opts.max_len)

    os.makedirs(workdir, exist_ok=True)
    rng = np.random.default_rng(opts.seed)
    step, epoch_loss, held = 0, float("nan"), {}
    with open(os.path.join(workdir, "rm_metrics.jsonl"), "w") as metrics_file:
        def write(row):
            metrics_file.write(json.dumps(row) + "\n")
            metrics_file.flush()

        if heldout_triples:
            held = _heldout_row(state.params, cfg, tokenizer, heldout_triples, opts)
            write({"step": 0, "epoch": 0} | held)
        for epoch in range(1, opts.epochs + 1):
            losses = []
            for idx, weight in _batches(len(train_triples), opts.batch_size, rng):
                ids, mask = _encode(tokenizer, [train_triples[i] for i in idx], opts.max_len)
                host = {"tokens": ids, "mask": mask, "labels": labels[idx], "weight": weight}
                batch = {k: jax.device_put(v, batch_sh[k]) for k, v in host.items()}
                state, metrics = step_fn(state, batch)
                step += 1
                metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
                if not math.isfinite(metrics["loss"]):
                    raise FloatingPointError(f"non-finite RM loss at step {step}")
                losses.append(metrics["loss"])
                if step % opts.log_every == 0:
                    write({"step": step, "epoch": epoch} | metrics)
            epoch_loss = float(np.mean(losses))
            row = {"step": step, "epoch": epoch, "train/epoch_loss": epoch_loss}
            if heldout_triples:
                held = _heldout_row(state.params, cfg, tokenizer, heldout_triples, opts)
                row |= held
            write(row)
            log.info("epoch %d: %s", epoch, row)

    saved_config = config.copy_and_resolve_references()
    saved_config.cooper.max_len = opts.max_len  # coop-eval / coop-train read the RM length here
    if init_hf:
        saved_config.reward_model.hf_path = init_hf
    meta = {"step": step, "config": json.loads(json.dumps(saved_config.to_dict())),
            "tokenizer": tok_path, "rm_tokenizer": tok_path,
            "rm_model_config": checkpoint.model_config_to_dict(cfg),
            "rm_training": dataclasses.asdict(opts) | {"num_train": len(train_triples)}}
    # Parameters only (the RM is for scoring; the optimizer state would triple the size),
    # gathered to this host first: single-process training, and orbax writes host arrays fast.
    host_params = jax.device_get(state.params)
    ckpt = checkpoint.Checkpointer(ckpt_dir, keep=1)
    ckpt.save(step, TrainState(np.asarray(step, np.int32), None, None,
                               ModelState(host_params, None)), meta)
    ckpt.close()
    if export_hf:
        pad = int(tokenizer.pad_token_id)
        hf_config = dict(base_hf or {}, pad_token_id=pad)
        hf.save(hf.HFModel(cfg, host_params, hf_config, source=tok_path or CHAR_TOKENIZER_DIR),
                export_hf)
    summary = {"num_train": len(train_triples),
               "num_heldout": len(heldout_triples) if heldout_triples else 0,
               "train_balance": label_balance(train_triples), "epochs": opts.epochs,
               "steps": step, "final_train_loss": epoch_loss,
               "heldout_accuracy": held.get("heldout/accuracy"),
               "heldout_accuracy_ci": held.get("heldout/accuracy_ci"),
               "heldout_auc": held.get("heldout/auc"), "truncated_fraction": truncated,
               "max_len": opts.max_len, "wall_seconds": time.time() - t0,
               "checkpoint": os.path.join(os.path.abspath(workdir), "checkpoints"),
               "export_hf": os.path.abspath(export_hf) if export_hf else None}
    with open(os.path.join(workdir, "rm_summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    return summary


# ----------------------------------------------------------------------------- command line
def define_flags(fv, argv: list[str]) -> None:
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file("config", DEFAULT_CONFIG, "config file (default: the schema "
                                    "defaults)", flag_values=fv, sys_argv=argv)
    d = dict(flag_values=fv)
    flags.DEFINE_enum("mode", None, list(MODES), "build_triples | train", **d)
    # build_triples
    flags.DEFINE_string("policy_checkpoint", None, "coop-train workdir of the sampling policy", **d)
    flags.DEFINE_string("policy_hf", None, "local HF causal-LM folder of the sampling policy", **d)
    flags.DEFINE_string("dataset", None, "synthetic | gsm8k | math500 | math", **d)
    flags.DEFINE_string("data_dir", None, "folder with the dataset's jsonl files", **d)
    flags.DEFINE_string("split", "train", "dataset split", **d)
    flags.DEFINE_integer("num_examples", None, "first N problems (default: all)", **d)
    flags.DEFINE_integer("samples_per_question", 4, "completions sampled per problem", **d)
    flags.DEFINE_float("temperature", 1.0, "sampling temperature", **d)
    flags.DEFINE_float("top_p", 1.0, "nucleus sampling threshold", **d)
    flags.DEFINE_string("template", None, "prompt template (default: the dataset's)", **d)
    flags.DEFINE_boolean("chat", False, "wrap prompts in the tokenizer's chat template", **d)
    flags.DEFINE_integer("max_prompt_len", None, "prompt tokens (default: config)", **d)
    flags.DEFINE_integer("max_new_tokens", None, "completion tokens (default: config)", **d)
    flags.DEFINE_string("out", None, "output JSONL of triples", **d)
    flags.DEFINE_float("heldout_fraction", 0.0, "fraction of questions written to --heldout_out",
                       **d)
    flags.DEFINE_string("heldout_out", None, "output JSONL of held-out triples", **d)
    flags.DEFINE_string("judge_url", None, "OpenAI-compatible server of the judge model", **d)
    flags.DEFINE_string("judge_model", None, "judge model name sent to --judge_url", **d)
    flags.DEFINE_integer("judge_max_tokens", 1024, "max tokens of a judge reply", **d)
    flags.DEFINE_integer("judge_concurrency", 8, "parallel judge requests", **d)
    # train
    flags.DEFINE_string("triples", None, "training triples (JSONL)", **d)
    flags.DEFINE_string("heldout", None, "held-out triples (JSONL), evaluated every epoch", **d)
    flags.DEFINE_string("workdir", None, "output folder of the trained RM", **d)
    flags.DEFINE_string("init_hf", None, "HF sequence-classification folder to start from", **d)
    flags.DEFINE_string("export_hf", None, "also write the trained RM as an HF folder", **d)
    flags.DEFINE_integer("epochs", 3, "passes over the training triples", **d)
    flags.DEFINE_float("learning_rate", 2e-5, "AdamW peak learning rate", **d)
    flags.DEFINE_float("weight_decay", 0.01, "AdamW weight decay", **d)
    flags.DEFINE_float("warmup_ratio", 0.0, "linear warm-up fraction of all steps", **d)
    flags.DEFINE_enum("schedule", "constant", ["constant", "cosine"], "after warm-up", **d)
    flags.DEFINE_float("grad_clip", 1.0, "global-norm gradient clip (0: none)", **d)
    flags.DEFINE_integer("max_len", None, "RM input tokens (default: config.cooper.max_len)", **d)
    flags.DEFINE_integer("log_every", 10, "steps between metric rows", **d)
    # both
    flags.DEFINE_integer("batch_size", None, "train: triples per step (default 16); "
                         "build_triples: prompts per generation batch (default config)", **d)
    flags.DEFINE_integer("seed", 0, "sampling / shuffling / init seed", **d)


def _load_policy(f, config, mesh):
    """(ModelConfig, params, tokenizer, config, template default) of the sampling policy."""
    import ml_collections
    from absl.app import UsageError
    from ml_collections import config_flags

    from coop_jax import checkpoint, hf, parallel
    from coop_jax.eval.evaluate import prepare_tokenizer
    from coop_jax.models.tokenizer import load_tokenizer

    saved_template = None
    if f.policy_hf:
        lm = hf.load(f.policy_hf, mesh=mesh)
        if lm.source is None:
            raise UsageError(f"--policy_hf {f.policy_hf!r} has no tokenizer files")
        cfg, params, tok = lm.config, lm.params, lm.source
    else:
        try:
            cfg, params, meta = checkpoint.load_model(f.policy_checkpoint, "policy")
        except (ValueError, FileNotFoundError) as e:
            raise UsageError(f"--policy_checkpoint {f.policy_checkpoint}: {e}") from e
        params = parallel.shard_params(params, cfg, mesh)
        tok = meta.get("tokenizer") or ""
        if not f["config"].present and isinstance(meta.get("config"), dict):
            from coop_jax.config import base_config
            config = base_config()
            config.update(ml_collections.ConfigDict(meta["config"]))
            config.update_from_flattened_dict(config_flags.get_override_values(f["config"]))
            saved_template = config.data.prompt_template
    if cfg.is_reward_model:
        raise UsageError("the sampling policy must be a causal LM, got a reward model")
    return cfg, params, prepare_tokenizer(load_tokenizer(tok or None)), config, saved_template


def _build_mode(f) -> dict:
    import jax
    from absl.app import UsageError

    from coop_jax import config as config_lib, data, parallel
    from coop_jax.eval.cli import DEFAULT_TEMPLATES
    from coop_jax.verify import RuleVerifier

    if bool(f.policy_checkpoint) == bool(f.policy_hf):
        raise UsageError("pass exactly one of --policy_checkpoint and --policy_hf")
    if not f.out:
        raise UsageError("--out is required (the triples JSONL)")
    if bool(f.judge_url) != bool(f.judge_model):
        raise UsageError("--judge_url and --judge_model go together")
    if f.heldout_fraction and not f.heldout_out:
        raise UsageError("--heldout_fraction needs --heldout_out")
    config = f.config
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape,
                                                            jax.device_count()))
    cfg, params, tokenizer, config, saved_template = _load_policy(f, config, mesh)
    dataset = f.dataset or config.data.dataset
    if dataset not in data.DATASETS:
        raise UsageError(f"--dataset must be one of {list(data.DATASETS)}, got {dataset!r}")
    data_dir = f.data_dir or config.data.data_dir or None
    synthetic = (data.SyntheticConfig(**config.data.synthetic.to_dict())
                 if dataset == "synthetic" else None)
    try:
        records = data.load_split(dataset, f.split, data_dir=data_dir,
                                  num_examples=f.num_examples, seed=int(config.seed),
                                  synthetic=synthetic)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(f"--dataset={dataset} --split={f.split}: {e}") from e
    judge = None
    if f.judge_url:
        judge = http_judge(f.judge_url, f.judge_model, max_tokens=f.judge_max_tokens,
                           concurrency=f.judge_concurrency)
    template = f.template or saved_template or DEFAULT_TEMPLATES[dataset]
    with RuleVerifier(int(config.verifier.num_workers), float(config.verifier.timeout_s)) as v:
        triples, stats = build_triples(
            params, cfg, tokenizer, records, verifier=v, template=template, chat=f.chat,
            samples_per_question=f.samples_per_question, temperature=f.temperature,
            top_p=f.top_p, max_prompt_len=f.max_prompt_len or config.data.max_prompt_len,
            max_new_tokens=f.max_new_tokens or config.rollout.max_new_tokens,
            batch_size=f.batch_size or config.eval.batch_size, seed=f.seed,
            kernel_impl=config.kernels.impl, judge=judge)
    if not triples:
        raise UsageError(f"no triples kept ({stats})")
    train, held = split_triples(triples, f.heldout_fraction, f.seed)
    write_triples(f.out, train)
    if f.heldout_out:
        write_triples(f.heldout_out, held)
        stats["heldout"] = label_balance(held)
    stats["train"] = label_balance(train)
    b = stats["train"]
    print(f"triples: {b['num_triples']} ({b['num_positive']} positive, {b['num_negative']} "
          f"negative, {100 * b['positive_fraction']:.1f}% positive) -> {f.out}")
    if judge is not None:
        print(f"judge: {stats['judge/agree']} agree, {stats['judge/disagree']} disagree, "
              f"{stats['judge/no_verdict']} without a verdict (dropped)")
    return stats


def _train_mode(f) -> dict:
    from absl.app import UsageError

    for name in ("triples", "workdir"):
        if not f[name].value:
            raise UsageError(f"--{name} is required for --mode=train")
    for name in ("triples", "heldout"):
        if f[name].value and not os.path.isfile(f[name].value):
            raise UsageError(f"--{name}: no such file {f[name].value!r}")
    config = f.config
    try:
        train = read_triples(f.triples)
        held = read_triples(f.heldout) if f.heldout else None
        opts = RMTrainOptions(
            epochs=f.epochs, learning_rate=f.learning_rate, weight_decay=f.weight_decay,
            warmup_ratio=f.warmup_ratio, schedule=f.schedule, grad_clip=f.grad_clip,
            batch_size=f.batch_size or 16, max_len=f.max_len or config.cooper.max_len,
            eval_batch_size=config.eval.batch_size, log_every=f.log_every, seed=f.seed)
        summary = train_reward_model(config, train, f.workdir, heldout_triples=held,
                                     options=opts, init_hf=f.init_hf, export_hf=f.export_hf)
    except ValueError as e:
        raise UsageError(str(e)) from e
    print(json.dumps(summary, indent=2))
    return summary


def main(argv: list[str]) -> dict[str, Any]:
    """Parse `argv` (argv[0] is the program name) and run the chosen mode."""
    from absl.app import UsageError

    from coop_jax.console import parse_flags
    fv = parse_flags(define_flags, argv)
    if fv.mode is None:
        raise UsageError(f"--mode is required: one of {list(MODES)}")
    for name in ("num_examples", "batch_size", "max_len", "max_prompt_len", "max_new_tokens"):
        if fv[name].value is not None and fv[name].value < 1:
            raise UsageError(f"--{name} must be >= 1, got {fv[name].value}")
    return _build_mode(fv) if fv.mode == "build_triples" else _train_mode(fv)


def run() -> None:
    """Console-script entry point."""
    from coop_jax.console import run_console
    run_console(main, "coop-train-rm")


if __name__ == "__main__":
    run()
