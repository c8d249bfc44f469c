"""coop-train-rm's training: BCE with logits on the RM score of labelled triples, AdamW, the batch
sharded over the (data, fsdp) mesh axes, its gradient accumulated over micro-batches.

`train_reward_model` runs the stages: `prepare_data` (validated, over-long triples dropped) ->
`build_state` (the RM, the optimiser, the compiled step) -> the resume point of the workdir ->
`train_epochs` (compiled steps; held-out evaluation per epoch and every `heldout_every` steps;
resumable checkpoints every `checkpoint_every` steps) -> the final checkpoint, the HF export and
the summary. The RM's state is its own `RMState`, checkpointed as the items `rm_params` /
`rm_opt_state` with the meta `rm_model_config`, `config`, `rm_tokenizer`: what
`checkpoint.load_model(DIR, "rm")`, coop-eval and coop-train's `rm.checkpoint` read.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import time
from typing import Any, Callable, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from coop_jax import checkpoint, data, hf, models, parallel
from coop_jax import config as config_lib
from coop_jax.metrics_writer import MetricWriter
from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer, prepare_tokenizer
from coop_jax.optim import accumulate_gradients, apply_gradients, split_micro_batches
from coop_jax.rm.input import RMInputFormat, check_triples
from coop_jax.rm.load import RewardModel, RMSource, load_reward_model
from coop_jax.rm.optim import RMOptimizerSettings, rm_optimizer
from coop_jax.rm.scoring import evaluate_reward_model
from coop_jax.rm.train.triples import drop_overlong, label_balance
from coop_jax.sampling import fixed_batches

log = logging.getLogger("coop_jax.rm.train")

# rm_training entries a rerun must share with the run in its workdir to resume it
RESUME_KEYS = ("num_train", "epochs", "batch_size", "micro_batches", "seed", "learning_rate",
               "weight_decay", "weight_decay_mask", "warmup_ratio", "schedule", "grad_clip",
               "overlong", "max_chars", "char_cut", "init_hf", "max_len", "template",
               "question_format", "truncation_side")
# what a checkpoint written before these settings existed trained with
_RESUME_DEFAULTS = {"weight_decay_mask": "all", "char_cut": True}


def input_format(config: config_lib.Config) -> RMInputFormat:
    """The RM input coop-train-rm's checkpoint records (coop-train, coop-eval and the held-out
    evaluation build it): `rm_train.max_len` (else `rm.max_len`) tokens, `<question>` by
    `rm.question_format` with the prompt template `rm_train.template` (else
    `rm_train.dataset`'s default template, else `data.prompt_template`), long references and
    completions cut by characters. Training uses it with `rm_train.char_cut`."""
    r = config.rm_train
    template = r.template or data.DEFAULT_TEMPLATES.get(r.dataset, config.data.prompt_template)
    return RMInputFormat.from_config(config, max_len=r.max_len, template=template)


class RMState(flax.struct.PyTreeNode):
    """The RM trainer's state. `opt_state` is None in the final checkpoint (an RM is for scoring;
    AdamW's moments would triple its size)."""
    step: Any
    params: Any
    opt_state: Any = None

    def items(self) -> dict[str, Any]:
        """The checkpoint items (the step is the checkpoint's)."""
        return {name: tree for name, tree in (("rm_params", self.params),
                                              ("rm_opt_state", self.opt_state))
                if tree is not None}


def starting_rm(section, mesh, opts) -> RewardModel:
    """The RM coop-train-rm trains, loaded by `rm.load.load_reward_model`: `opts.init_hf`
    (`rm_train`), else `section` (`reward_model`: an RM, a causal LM that gets a new head, or a
    random model of its architecture, drawn with `rm_train.seed`, reading
    `reward_model.tokenizer`); its tokenizer pads with EOS when it has no pad token."""
    tokenizer = None
    if not (opts.init_hf or section.hf_path):
        tokenizer = prepare_tokenizer(load_tokenizer(section.tokenizer or None))
    source = RMSource("", section, tokenizer_path=section.tokenizer, hf_path=opts.init_hf,
                      warn_untrained=False)
    rm = load_reward_model(source, tokenizer, mesh, jax.random.key(opts.seed))
    return rm._replace(tokenizer=prepare_tokenizer(rm.tokenizer))


# ----------------------------------------------------------------------------- the step
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
    def step(state: RMState, batch):
        (loss, correct), grads = accumulate_gradients(
            _bce_sums(cfg), state.params, split_micro_batches(batch, micro_batches))
        n = jnp.maximum(batch["weight"].sum(), 1.0)
        grads = jax.tree_util.tree_map(lambda g: g / n, grads)
        new = apply_gradients(state, tx, grads)
        return (state.replace(step=state.step + 1, params=new.params, opt_state=new.opt_state),
                {"loss": loss / n, "accuracy": correct / n, "grad_norm": optax.tree.norm(grads)})

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


# ----------------------------------------------------------------------------- stages
@dataclasses.dataclass(frozen=True)
class TrainingData:
    train: list[dict]  # over-long triples dropped
    labels: np.ndarray  # [len(train)] float32 0/1
    heldout: list[dict]
    dropped: int  # over-long training triples left out


def prepare_data(opts, train_triples: Sequence[dict],
                 heldout_triples: Sequence[dict] | None) -> TrainingData:
    check_triples(train_triples)
    if heldout_triples:
        check_triples(heldout_triples)
    train, dropped = drop_overlong(train_triples, opts)
    return TrainingData(train, np.asarray(check_triples(train), np.float32),
                        list(heldout_triples or []), dropped)


@dataclasses.dataclass(frozen=True)
class RMSetup:
    """The RM, its optimiser and compiled step on the mesh; `state` is the initial state."""
    mesh: Any
    cfg: models.ModelConfig
    tokenizer: Any
    tok_path: str
    base_hf: dict | None  # the HF config the RM was loaded from (for the export)
    state: RMState
    step_fn: Callable
    batch_shardings: dict
    total_steps: int


def _check_batch_size(opts, mesh) -> None:
    shards, hosts = mesh.shape["data"] * mesh.shape["fsdp"], jax.process_count()
    if opts.batch_size % hosts:
        raise ValueError(f"config.rm_train.batch_size ({opts.batch_size}) must be a multiple of "
                         f"the number of processes ({hosts})")
    if opts.batch_size % (shards * opts.micro_batches):
        raise ValueError(f"config.rm_train.batch_size ({opts.batch_size}) must be a multiple of "
                         f"the data x fsdp mesh size ({shards}) x rm_train.micro_batches "
                         f"({opts.micro_batches})")


def config_mesh(config: config_lib.Config):
    """The mesh of `config.mesh.shape` over every device."""
    return parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape,
                                                            jax.device_count()))


def build_state(section, mesh, opts, num_train: int) -> RMSetup:
    """The RM of `section` (`config.reward_model`, or `opts.init_hf`) on `mesh`, its optimiser
    and compiled step for `num_train` triples under the `rm_train` settings `opts`."""
    _check_batch_size(opts, mesh)
    rm = starting_rm(section, mesh, opts)
    total = opts.epochs * math.ceil(num_train / opts.batch_size)
    tx = rm_optimizer(RMOptimizerSettings.for_rm_training(opts, total))
    state = parallel.place_on_mesh(RMState(np.asarray(0, np.int32), rm.params,
                                           tx.init(rm.params)), mesh)
    shardings = jax.tree_util.tree_map(lambda x: x.sharding, state)
    step_fn, batch_sh = _make_step(rm.config, tx, mesh, shardings, opts.micro_batches)
    return RMSetup(mesh, rm.config, rm.tokenizer, rm.tokenizer_path, rm.hf_config, state,
                   step_fn, batch_sh, total)


@dataclasses.dataclass
class Progress:
    """Where a run is, saved in each checkpoint's meta as `rm_progress`: the next epoch and batch,
    the shuffling RNG's state at that epoch's start, that epoch's losses so far, the last epoch's
    mean loss, the last held-out row, whether training finished."""
    epoch: int
    batch: int
    rng: dict
    losses: list[float]
    epoch_loss: float = float("nan")
    held: dict = dataclasses.field(default_factory=dict)
    done: bool = False


@dataclasses.dataclass(frozen=True)
class _Run:
    """What every stage of one run reads."""
    opts: Any
    setup: RMSetup
    data: TrainingData
    fmt: RMInputFormat  # training inputs
    heldout_fmt: RMInputFormat  # held-out inputs: the checkpoint's (RL-time) input
    eval_batch: int
    ckpt: checkpoint.Checkpointer
    meta: dict
    writer: MetricWriter


def _checkpoint_meta(config: config_lib.Config, opts, fmt: RMInputFormat, setup: RMSetup,
                     num_train: int) -> dict:
    """The meta every checkpoint carries: what `checkpoint.load_model(DIR, "rm")`, coop-eval and
    coop-train's `rm.checkpoint` read, and the settings a resume must match."""
    saved_config = config.to_dict()
    # coop-eval and coop-train read the RM's input settings here
    saved_config["rm"]["max_len"] = fmt.max_len
    saved_config["data"]["prompt_template"] = fmt.template
    if opts.init_hf:
        saved_config["reward_model"]["hf_path"] = opts.init_hf
    return {"config": json.loads(json.dumps(saved_config)),
            "tokenizer": setup.tok_path, "rm_tokenizer": setup.tok_path,
            "rm_model_config": checkpoint.model_config_to_dict(setup.cfg),
            "rm_training": opts.to_dict() | dataclasses.asdict(fmt) | {"num_train": num_train}}


def _saved_progress(ckpt: checkpoint.Checkpointer, meta: dict, workdir: str) -> Progress | None:
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
        was = saved["rm_training"].get(key, _RESUME_DEFAULTS.get(key))
        now = meta["rm_training"].get(key)
        if was != now:
            raise ValueError(f"workdir {workdir!r} holds an RM training with {key}={was!r}, this "
                             f"run has {now!r}; rerun with the same settings to resume it, or "
                             "pass a fresh workdir")
    return Progress(**saved["rm_progress"])


def _save(run: _Run, step: int, state: RMState, progress: Progress) -> None:
    run.ckpt.save_items(step, state.items(),
                        run.meta | {"step": step, "rm_progress": dataclasses.asdict(progress)})


def _restore(ckpt: checkpoint.Checkpointer, state: RMState, mesh) -> RMState:
    """`state` with the latest checkpoint's parameters and AdamW state (on their shardings)."""
    items, _ = ckpt.restore_items(state.items())
    return parallel.place_on_mesh(state.replace(step=np.asarray(ckpt.latest_step(), np.int32),
                                     params=items["rm_params"],
                                     opt_state=items["rm_opt_state"]), mesh)


def _heldout_row(run: _Run, params) -> dict:
    report, _ = evaluate_reward_model(params, run.setup.cfg, run.setup.tokenizer, run.data.heldout,
                                      fmt=run.heldout_fmt, batch_size=run.eval_batch)
    return {"heldout/accuracy": report["accuracy"]["mean"],
            "heldout/accuracy_ci": [report["accuracy"]["ci_low"], report["accuracy"]["ci_high"]],
            "heldout/auc": report["roc_auc"]["mean"]}


def _train_step(run: _Run, state: RMState, idx: np.ndarray, weight: np.ndarray, step: int
                ) -> tuple[RMState, dict]:
    """One compiled step on this host's rows of the batch `idx` (step `step`, counted from 1)."""
    block = parallel.host.row_block(len(idx) // jax.process_count())  # this host's rows
    idx, weight = idx[block], weight[block]
    ids, mask = run.fmt.tokenize_triples(run.setup.tokenizer, [run.data.train[i] for i in idx])
    rows = {"tokens": ids, "mask": mask, "labels": run.data.labels[idx], "weight": weight}
    batch = {k: parallel.host.global_rows(v, run.setup.batch_shardings[k])
             for k, v in rows.items()}
    state, metrics = run.setup.step_fn(state, batch)
    metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
    if not math.isfinite(metrics["loss"]):
        raise FloatingPointError(f"non-finite RM loss at step {step}")
    return state, metrics


def _end_epoch(run: _Run, state: RMState, progress: Progress, epoch: int, step: int,
               losses: list[float], rng: np.random.Generator) -> None:
    """The epoch's row (mean loss, held-out evaluation); `progress` moves to the next epoch."""
    row = {"epoch": epoch, "train/epoch_loss": float(np.mean(losses))}
    if run.data.heldout:
        progress.held = _heldout_row(run, state.params)
        row |= progress.held
    run.writer.write(step, row)
    log.info("epoch %d: %s", epoch, row)
    progress.epoch, progress.batch, progress.rng = epoch + 1, 0, rng.bit_generator.state
    progress.losses, progress.epoch_loss = [], row["train/epoch_loss"]


def _train_epoch(run: _Run, state: RMState, progress: Progress, rng: np.random.Generator,
                 epoch: int, step: int) -> tuple[RMState, int]:
    """Epoch `epoch` from batch `progress.batch`: (state, step) after it."""
    opts = run.opts
    epoch_rng = rng.bit_generator.state
    batches = list(_batches(len(run.data.train), opts.batch_size, rng))
    losses = list(progress.losses)
    for b in range(progress.batch, len(batches)):
        step += 1
        state, metrics = _train_step(run, state, *batches[b], step)
        losses.append(metrics["loss"])
        if step % opts.log_every == 0:
            run.writer.write(step, {"epoch": epoch} | metrics)
        if run.data.heldout and opts.heldout_every and step % opts.heldout_every == 0:
            run.writer.write(step, {"epoch": epoch} | _heldout_row(run, state.params))
        if b + 1 < len(batches):
            progress.epoch, progress.batch, progress.rng = epoch, b + 1, epoch_rng
            progress.losses = list(losses)
        else:
            _end_epoch(run, state, progress, epoch, step, losses, rng)
        if opts.checkpoint_every and step % opts.checkpoint_every == 0 and step < \
                run.setup.total_steps:
            _save(run, step, state, progress)
    return state, step


def train_epochs(run: _Run, state: RMState, progress: Progress, step: int
                 ) -> tuple[RMState, int]:
    """The epochs from `progress` on (none for a finished run): (state, step) at the end."""
    rng = np.random.default_rng(run.opts.seed)
    rng.bit_generator.state = progress.rng
    for epoch in range(progress.epoch, run.opts.epochs + 1):
        state, step = _train_epoch(run, state, progress, rng, epoch, step)
    return state, step


def _final_params(run: _Run, state: RMState, progress: Progress, step: int):
    """The trained parameters on the host, saved as the final (parameters-only) checkpoint
    unless the run had finished before."""
    if progress.done:
        return parallel.host.fetch(run.ckpt.load_item("rm_params"))
    # gathered to every host first (orbax writes host arrays fast)
    host_params = parallel.host.fetch(state.params)
    progress.done = True
    _save(run, step, RMState(np.asarray(step, np.int32), host_params), progress)
    return host_params


def _export_hf(setup: RMSetup, host_params, out_dir: str) -> None:
    hf_config = dict(setup.base_hf or {}, pad_token_id=int(setup.tokenizer.pad_token_id))
    hf.save(hf.HFModel(setup.cfg, host_params, hf_config,
                       source=setup.tok_path or CHAR_TOKENIZER_DIR), out_dir)


def _truncated_fraction(tokenizer, triples: Sequence[dict], fmt: RMInputFormat) -> float:
    ids = tokenizer(fmt.texts(triples), add_special_tokens=False)["input_ids"]
    fraction = sum(len(x) > fmt.max_len for x in ids) / len(triples)
    if fraction:
        log.warning("%.1f%% of the training inputs exceed max_len=%d and lose their %s",
                    100 * fraction, fmt.max_len,
                    "start" if fmt.truncation_side == "left" else "end")
    return fraction


def _summary(run: _Run, progress: Progress, step: int, workdir: str, *, truncated: float,
             resumed_from: int | None, t0: float) -> dict:
    opts, fmt, held = run.opts, run.fmt, progress.held
    return {"num_train": len(run.data.train), "num_heldout": len(run.data.heldout),
            "train_balance": label_balance(run.data.train), "epochs": opts.epochs,
            "steps": step, "final_train_loss": progress.epoch_loss,
            "heldout_accuracy": held.get("heldout/accuracy"),
            "heldout_accuracy_ci": held.get("heldout/accuracy_ci"),
            "heldout_auc": held.get("heldout/auc"), "truncated_fraction": truncated,
            "dropped_overlong": run.data.dropped,
            "effective_batch": opts.batch_size, "micro_batches": opts.micro_batches,
            "weight_decay_mask": opts.weight_decay_mask, "char_cut": fmt.char_cut,
            "max_len": fmt.max_len, "question_format": fmt.question_format,
            "truncation_side": fmt.truncation_side, "template": fmt.template,
            "resumed_from_step": resumed_from, "wall_seconds": time.time() - t0,
            "checkpoint": os.path.join(os.path.abspath(workdir), "checkpoints"),
            "export_hf": os.path.abspath(opts.export_hf) if opts.export_hf else None}


def train_reward_model(config, train_triples: Sequence[dict], workdir: str, *,
                       heldout_triples: Sequence[dict] | None = None) -> dict:
    """Train `config.reward_model` (or `rm_train.init_hf`; `config` typed, or a ConfigDict as the
    projects build it) with BCE on labelled triples, with
    the `rm_train` section's settings; writes checkpoints/, rm_metrics.jsonl, rm_summary.json (and
    an HF folder with `rm_train.export_hf`); returns the summary.

    Every `rm_train.checkpoint_every` steps a checkpoint holds the RM's parameters and AdamW
    state, and its meta the `Progress`: rerun on the same workdir, training resumes from the
    latest one and writes the same rm_metrics.jsonl rows and final parameters as an uninterrupted
    run. The final checkpoint holds the parameters only; a rerun of a finished run only
    re-exports and rewrites the summary.
    """
    config = config_lib.typed(config)
    config_lib.validate_rm_train(config.rm_train)
    t0, opts = time.time(), config.rm_train
    heldout_fmt = input_format(config)
    fmt = dataclasses.replace(heldout_fmt, char_cut=opts.char_cut)
    data_ = prepare_data(opts, train_triples, heldout_triples)
    setup = build_state(config.reward_model, config_mesh(config), opts, len(data_.train))
    truncated = _truncated_fraction(setup.tokenizer, data_.train, fmt)
    os.makedirs(workdir, exist_ok=True)
    meta = _checkpoint_meta(config, opts, fmt, setup, len(data_.train))
    ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), keep=1)
    try:
        progress = _saved_progress(ckpt, meta, workdir)
        resumed_from = None if progress is None else ckpt.latest_step()
        state = setup.state
        if progress is None:
            progress = Progress(1, 0, np.random.default_rng(opts.seed).bit_generator.state, [])
        elif not progress.done:
            state = _restore(ckpt, state, setup.mesh)
            log.info("resuming RM training from step %d", resumed_from)
        writer = MetricWriter(workdir, resumed_from, tensorboard=False,
                              filename="rm_metrics.jsonl", primary=jax.process_index() == 0)
        run = _Run(opts, setup, data_, fmt, heldout_fmt, config.eval.batch_size, ckpt, meta,
                   writer)
        try:
            if data_.heldout and resumed_from is None:
                progress.held = _heldout_row(run, state.params)
                writer.write(0, {"epoch": 0} | progress.held)
            state, step = train_epochs(run, state, progress, resumed_from or 0)
            host_params = _final_params(run, state, progress, step)
        finally:
            writer.close()
    finally:
        ckpt.close()
    if opts.export_hf and jax.process_index() == 0:
        _export_hf(setup, host_params, opts.export_hf)
    summary = _summary(run, progress, step, workdir, truncated=truncated,
                       resumed_from=resumed_from, t0=t0)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "rm_summary.json"), "w") as fh:
            json.dump(summary, fh, indent=2)
    return summary
