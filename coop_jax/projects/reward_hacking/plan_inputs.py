"""The reward-hacking plan's shared inputs, committed beside its results: the SFT start policy,
the static RM and its held-out triples.

Every arm and seed must start from one SFT policy and score against one static RM, and the plan
takes more than one session, often on another machine. XLA:CPU is bit-reproducible on one CPU
but not across CPUs (vector widths and cache-sized blocking change summation orders), so a
rebuild elsewhere trains another start policy and another RM. The start policy (2.4 MB) is kept
as it is. The RM (42M float32 parameters, 168 MB) is kept as its fine-tuning from the public base
it was loaded from (`reward_model.hf_path`; `coop_jax.checkpoint.portable`).

The decoded RM, not the trained one, is the plan's static RM: it is decoded on the machine that
trained it too, before the competence gate and before any RM arm runs, so every run, on every
machine, scores with the same parameters (`rm_params` digest, checked at each restore).

Once an experiment is finished, its bulkiest inputs (the RM's arrays, the training triples, a
second draw's start policy) are kept in the repository's history rather than its tree
(`coop_jax.projects.restore`, docs/results/kept_in_history.json): resuming or rerunning from
them restores them first (`NotRestored` says how).
"""
from __future__ import annotations

import json
import os
import shutil

import jax

from coop_jax import checkpoint
from coop_jax.checkpoint import portable
from coop_jax.checkpoint.portable import decode, encode
from coop_jax.projects import rm_corpus
from coop_jax.projects.restore import COMMAND as RESTORE_COMMAND
from coop_jax.projects.reward_hacking.results_page import PLAN_FOLDER, STATIC_RM_FILES
from coop_jax.projects.run_store import copy_files, git_commit

FOLDER = os.path.join("plan", "inputs")  # under the results folder
START_POLICY = "start_policy"
RM_ARRAYS, RM_LAYOUT, RM_META = portable.ENCODED, portable.LAYOUT, portable.META
HELDOUT = "heldout_triples.jsonl"
TRAIN = "train_triples.jsonl"  # kept so the RM can be retrained and audited; no run reads it


class InputMismatch(RuntimeError):
    """A restored or rebuilt input is not the one the kept runs used."""


class NotRestored(InputMismatch):
    """A kept input is in the repository's history, not in the tree."""


def check_restored(folder: str, names: tuple[str, ...]) -> None:
    """`NotRestored` naming the restore command unless every file `names` is in `folder`."""
    missing = [n for n in names if not os.path.exists(os.path.join(folder, n))]
    if missing:
        raise NotRestored(f"{folder} keeps {', '.join(missing)} in the repository's history, "
                          f"not in the tree: run `{RESTORE_COMMAND} {folder}` first")


def inputs_dir(results_dir: str) -> str:
    return os.path.join(results_dir, FOLDER)


# ----------------------------------------------------------------------------- the static RM
def _base_rm(config):
    """(the RM's parameters before training, its tokenizer path), loaded as coop-train-rm does."""
    from coop_jax.rm.train.loop import config_mesh, starting_rm
    rm = starting_rm(config.reward_model, config_mesh(config), config.rm_train)
    return jax.device_get(rm.params), rm.tokenizer_path


def _save_rm(params, meta: dict, tok_path: str, config, out_dir: str) -> None:
    """`params` as an RM checkpoint in `out_dir` (what `checkpoint.load_model(out_dir, "rm")` and
    `rm.checkpoint` read), its paths set to this machine's."""
    meta = dict(meta, tokenizer=tok_path, rm_tokenizer=tok_path)
    meta["config"] = dict(meta["config"])
    meta["config"]["reward_model"] = dict(meta["config"]["reward_model"],
                                          hf_path=config.reward_model.hf_path)
    ckpt = checkpoint.Checkpointer(os.path.join(out_dir, "checkpoints"), keep=1)
    try:
        ckpt.save_items(int(meta.get("step", 0)), {"rm_params": params}, meta)
    finally:
        ckpt.close()


def portable_rm(config, trained_dir: str, train_path: str, heldout_path: str, out_dir: str
                ) -> dict:
    """Encode the RM trained in `trained_dir`, decode it, and save the decoded one (the plan's
    static RM) in `out_dir` with its encoded files, its held-out triples and an rm_summary.json
    whose held-out accuracy and AUC are measured on the decoded parameters; that summary."""
    from coop_jax.rm.input import read_triples
    from coop_jax.rm.scoring import evaluate_reward_model
    from coop_jax.hf.tokenizer import load_tokenizer
    from coop_jax.rm.train.loop import input_format
    summary_path = os.path.join(out_dir, "rm_summary.json")
    if os.path.exists(summary_path):
        with open(summary_path) as fh:
            return json.load(fh)
    os.makedirs(out_dir, exist_ok=True)
    cfg, trained, meta = checkpoint.load_model(trained_dir, "rm")
    base, tok_path = _base_rm(config)
    arrays, layout = encode(jax.device_get(trained), base, int(meta.get("step", 0)))
    portable.write_encoded(arrays, layout, out_dir)
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
    check_restored(kept, ("model.safetensors",))
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
    check_restored(kept, KEPT_RM_FILES)
    arrays, layout = portable.read_encoded(kept)
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
    _save_rm(params, portable.read_meta(kept), tok_path, config, out_dir)
    return summary
