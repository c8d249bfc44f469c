"""The reward-hacking plan's shared inputs, committed beside its results: the SFT start policy,
the static RM and its held-out triples.

Every arm and seed must start from one SFT policy and score against one static RM, and the plan
takes more than one session, often on another machine. XLA:CPU is bit-reproducible on one CPU
but not across CPUs (vector widths and cache-sized blocking change summation orders), so a
rebuild elsewhere trains another start policy and another RM. The start policy (2.4 MB) is kept
as it is. The RM (42M float32 parameters, 168 MB) is kept as its fine-tuning from the public base
it was loaded from (`reward_model.hf_path`), which every machine loads the same way:

- small leaves (norms, the new score head) and any that is not float32: exact;
- the token embedding: the rows that training touched, float32, exact; every other row only
  shrank by AdamW's weight decay, and is kept as the base row times one stored factor;
- the other matrices: base + the float16 rounding of (trained - base).

The decoded RM, not the trained one, is the plan's static RM: it is decoded on the machine that
trained it too, before the competence gate and before any RM arm runs, so every run, on every
machine, scores with the same parameters (`rm_params` digest, checked at each restore).
"""
from __future__ import annotations

import json
import os
import shutil

import jax
import numpy as np

from coop_jax import checkpoint
from coop_jax.experiments import rm_corpus
from coop_jax.experiments.results_page import PLAN_FOLDER, STATIC_RM_FILES
from coop_jax.experiments.run_store import copy_files, git_commit

FOLDER = os.path.join("plan", "inputs")  # under the results folder
START_POLICY = "start_policy"
RM_ARRAYS = "static_rm_encoded.safetensors"
RM_LAYOUT = "static_rm_layout.json"
RM_META = "static_rm_meta.json"  # the checkpoint's meta (model config, input format, settings)
HELDOUT = "heldout_triples.jsonl"
TRAIN = "train_triples.jsonl"  # kept so the RM can be retrained and audited; no run reads it
SMALL_LEAF = 1 << 16  # leaves up to this many elements are kept exactly
EMBEDDING = "embed"  # a 2-D leaf whose path holds this is encoded row by row


class InputMismatch(RuntimeError):
    """A restored or rebuilt input is not the one the kept runs used."""


def inputs_dir(results_dir: str) -> str:
    return os.path.join(results_dir, FOLDER)


def _named_leaves(params) -> dict[str, np.ndarray]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    return {jax.tree_util.keystr(path): np.asarray(jax.device_get(x)) for path, x in leaves}


def _with_leaves(params, named: dict[str, np.ndarray]):
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    return jax.tree_util.tree_unflatten(
        treedef, [named[jax.tree_util.keystr(path)] for path, _ in leaves])


# ----------------------------------------------------------------------------- the RM's encoding
def _encode_embedding(name: str, t: np.ndarray, b: np.ndarray, arrays: dict, steps: int
                      ) -> dict:
    """Touched rows exactly; the others as base x one decay factor (the median ratio).

    An untouched row only took `steps` float32 weight-decay steps, each rounded by at most
    2^-24 of the value, so it lies within steps * 2^-24 of factor x base (relative to the
    row's largest entry); twice that separates it from a row that any AdamW update moved (one
    update moves every entry by about the learning rate). On the plan's RM (1335 steps): the
    untouched rows deviate by at most 7.3e-5 of their scale, the touched by 5.8e-4 or more."""
    nonzero = np.abs(b) > 1e-3
    factor = np.float32(np.median(t[nonzero] / b[nonzero])) if nonzero.any() else np.float32(1)
    scale = np.maximum(np.abs(b).max(axis=1), 1e-12)
    tolerance = 2 * max(steps, 1) * 2.0 ** -24
    touched = np.nonzero(np.abs(t - factor * b).max(axis=1) > tolerance * scale)[0]
    arrays[f"{name}:rows"] = touched.astype(np.int64)
    arrays[f"{name}:values"] = t[touched]
    return {"kind": "rows", "factor": float(factor), "touched_rows": int(len(touched)),
            "tolerance": tolerance}


def encode(trained, base, steps: int, small_leaf: int = SMALL_LEAF
           ) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays, layout) of `trained` relative to `base` (same tree, e.g. the RM before training),
    after `steps` optimizer steps; leaves of up to `small_leaf` elements are kept exactly."""
    t_leaves, b_leaves = _named_leaves(trained), _named_leaves(base)
    arrays: dict[str, np.ndarray] = {}
    layout: dict[str, dict] = {}
    for name, t in t_leaves.items():
        b = b_leaves.get(name)
        if (b is None or b.shape != t.shape or t.size <= small_leaf or t.dtype != np.float32
                or b.dtype != np.float32):
            arrays[name], layout[name] = t, {"kind": "exact"}
        elif EMBEDDING in name and t.ndim == 2:
            layout[name] = _encode_embedding(name, t, b, arrays, steps)
        else:
            arrays[name], layout[name] = (t - b).astype(np.float16), {"kind": "delta16"}
    return arrays, layout


def decode(arrays: dict[str, np.ndarray], layout: dict, base):
    """The parameter tree `encode` describes, built on `base` (numpy float32, elementwise: the
    same bits on every machine that loads the same base)."""
    b_leaves = _named_leaves(base)
    out = {}
    for name, spec in layout.items():
        if spec["kind"] == "exact":
            out[name] = np.asarray(arrays[name])
        elif spec["kind"] == "rows":
            leaf = b_leaves[name] * np.float32(spec["factor"])
            leaf[arrays[f"{name}:rows"]] = arrays[f"{name}:values"]
            out[name] = leaf
        else:
            out[name] = b_leaves[name] + arrays[name].astype(np.float32)
    return _with_leaves(base, out)


# ----------------------------------------------------------------------------- the static RM
def _base_rm(config):
    """(the RM's parameters before training, its tokenizer path), loaded as coop-train-rm does."""
    from coop_jax.rm_train.loop import config_mesh, load_rm
    _, params, _, tok_path, _ = load_rm(config.reward_model, config_mesh(config),
                                        config.rm_train.seed)
    return jax.device_get(params), tok_path


def _save_rm(params, meta: dict, tok_path: str, config, out_dir: str) -> None:
    """`params` as an RM checkpoint in `out_dir` (what `checkpoint.load_model(out_dir, "rm")` and
    `cooper.rm_checkpoint` read), its paths set to this machine's."""
    meta = dict(meta, tokenizer=tok_path, rm_tokenizer=tok_path)
    meta["config"] = dict(meta["config"])
    meta["config"]["reward_model"] = dict(meta["config"]["reward_model"],
                                          hf_path=config.reward_model.hf_path)
    ckpt = checkpoint.Checkpointer(os.path.join(out_dir, "checkpoints"), keep=1)
    try:
        ckpt.save_items(int(meta.get("step", 0)), {"rm_params": params}, meta)
    finally:
        ckpt.close()


def _write_encoded(arrays: dict, layout: dict, out_dir: str) -> None:
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()},
              os.path.join(out_dir, RM_ARRAYS))
    with open(os.path.join(out_dir, RM_LAYOUT), "w") as fh:
        json.dump(layout, fh, indent=2)


def _read_encoded(in_dir: str) -> tuple[dict, dict]:
    from safetensors.numpy import load_file
    with open(os.path.join(in_dir, RM_LAYOUT)) as fh:
        layout = json.load(fh)
    return load_file(os.path.join(in_dir, RM_ARRAYS)), layout


def portable_rm(config, trained_dir: str, train_path: str, heldout_path: str, out_dir: str
                ) -> dict:
    """Encode the RM trained in `trained_dir`, decode it, and save the decoded one (the plan's
    static RM) in `out_dir` with its encoded files, its held-out triples and an rm_summary.json
    whose held-out accuracy and AUC are measured on the decoded parameters; that summary."""
    from coop_jax.rm_input import read_triples
    from coop_jax.rm_scoring import evaluate_reward_model
    from coop_jax.models.tokenizer import load_tokenizer
    from coop_jax.rm_train.loop import input_format
    summary_path = os.path.join(out_dir, "rm_summary.json")
    if os.path.exists(summary_path):
        with open(summary_path) as fh:
            return json.load(fh)
    os.makedirs(out_dir, exist_ok=True)
    cfg, trained, meta = checkpoint.load_model(trained_dir, "rm")
    base, tok_path = _base_rm(config)
    arrays, layout = encode(jax.device_get(trained), base, int(meta.get("step", 0)))
    _write_encoded(arrays, layout, out_dir)
    params = decode(arrays, layout, base)
    _save_rm(params, meta, tok_path, config, out_dir)
    with open(os.path.join(out_dir, RM_META), "w") as fh:
        json.dump(meta, fh, indent=2)
    shutil.copyfile(heldout_path, os.path.join(out_dir, HELDOUT))
    shutil.copyfile(train_path, os.path.join(out_dir, TRAIN))
    heldout, fmt = read_triples(heldout_path), input_format(config)
    report, rows = evaluate_reward_model(params, cfg, load_tokenizer(tok_path), heldout, fmt=fmt)
    with open(os.path.join(trained_dir, "rm_summary.json")) as fh:
        trained_summary = json.load(fh)
    summary = dict(trained_summary,
                   trained={k: trained_summary.get(k) for k in ("heldout_accuracy", "heldout_auc")}
                   | {"rm_params": trained_summary.get("digests", {}).get("rm_params")},
                   heldout_accuracy=report["accuracy"]["mean"],
                   heldout_auc=report["roc_auc"]["mean"],
                   heldout_by_kind=rm_corpus.accuracy_by_kind(heldout, rows),
                   encoding={name: spec for name, spec in layout.items() if spec["kind"] != "exact"},
                   encoded_bytes=os.path.getsize(os.path.join(out_dir, RM_ARRAYS)))
    summary["digests"] = dict(trained_summary.get("digests", {}),
                              rm_params=rm_corpus.params_digest(params),
                              base_params=rm_corpus.params_digest(base))
    copy_files(trained_dir, STATIC_RM_FILES[1:], out_dir, optional=True)
    with open(summary_path, "w") as fh:
        json.dump(summary, fh, indent=2)
    return summary


KEPT_RM_FILES = (RM_ARRAYS, RM_LAYOUT, RM_META, HELDOUT, TRAIN, "rm_summary.json")


def keep(policy_dir: str, rm_dir: str | None, results_dir: str, commit: bool) -> str:
    """Copy the start policy (and the portable RM of `portable_rm`) to
    `<results_dir>/plan/inputs/` (committed when `commit`); that folder."""
    dest = inputs_dir(results_dir)
    shutil.copytree(policy_dir, os.path.join(dest, START_POLICY), dirs_exist_ok=True)
    if rm_dir:
        copy_files(rm_dir, KEPT_RM_FILES, dest)
    if commit:
        git_commit(dest, "reward-hacking plan: the shared inputs (start policy"
                   + (", static RM" if rm_dir else "") + ")")
    return dest


def restore_start_policy(results_dir: str, policy_dir: str) -> bool:
    """Copy the kept start policy to `policy_dir`; False when none is kept. A different one
    already in `policy_dir` (a rebuild on this machine) is an `InputMismatch`."""
    kept = os.path.join(inputs_dir(results_dir), START_POLICY)
    if not os.path.exists(os.path.join(kept, "config.json")):
        return False
    if os.path.exists(os.path.join(policy_dir, "config.json")):
        mine, theirs = rm_corpus.policy_digest(policy_dir), rm_corpus.policy_digest(kept)
        if mine != theirs:
            raise InputMismatch(
                f"{policy_dir} holds another start policy (parameter digest {mine}) than the kept "
                f"one in {kept} ({theirs}); a rebuild (experiment.rebuild_inputs) matches only on "
                "the CPU kind that built the kept one, since XLA:CPU results differ across CPUs; "
                "otherwise use a fresh workdir, or move the kept results away to start again")
        return True
    shutil.copytree(kept, policy_dir)
    return True


def restore_static_rm(config, results_dir: str, out_dir: str) -> dict | None:
    """Decode the kept static RM onto this machine's base into `out_dir` (checkpoint, held-out
    triples, summary); its summary, or None when none is kept. A decoded RM whose digest is not
    the kept one (another base) is an `InputMismatch`."""
    kept = inputs_dir(results_dir)
    if not os.path.exists(os.path.join(kept, RM_LAYOUT)):
        return None
    with open(os.path.join(kept, "rm_summary.json")) as fh:
        summary = json.load(fh)
    if os.path.exists(os.path.join(out_dir, "checkpoints")):
        return summary
    arrays, layout = _read_encoded(kept)
    base, tok_path = _base_rm(config)
    params = decode(arrays, layout, base)
    digest, want = rm_corpus.params_digest(params), summary["digests"]["rm_params"]
    if digest != want:
        raise InputMismatch(
            f"the static RM decoded from {kept} has parameter digest {digest}, not the kept "
            f"{want}: this machine loads another base from reward_model.hf_path "
            f"({config.reward_model.hf_path}; base digest {rm_corpus.params_digest(base)}, kept "
            f"{summary['digests'].get('base_params')})")
    copy_files(kept, KEPT_RM_FILES, out_dir)
    static = os.path.join(results_dir, PLAN_FOLDER, "static_rm")  # the report reads these
    copy_files(static, STATIC_RM_FILES[1:], out_dir, optional=True)
    with open(os.path.join(kept, RM_META)) as fh:
        _save_rm(params, json.load(fh), tok_path, config, out_dir)
    return summary
