"""The real-model lane: SmolLM2-135M-Instruct learning the one-step story problems on CPU.

    python -m coop_jax.projects.real_model.lane --workdir=runs/real_model \
        [--study=lane|comparison] [--runs=rule_s0,rule_s1,cooper_s0] [--commit]

1. The start policy once: held-out greedy and avg@k accuracy of the unmodified model ->
   RESULTS/base_eval/report.json, and from its samples a balanced set of rule-labelled held-out
   triples for the Cooper RM's held-out accuracy -> RESULTS/base_eval/heldout_triples.jsonl.
2. Every run not yet in RESULTS (a run is done when RESULTS/<run>/run.json exists):
   `coop-train --config=CONFIG` with the run's arm overrides and seed, under `/usr/bin/time -v`
   (peak RSS), then `coop-eval` of its final checkpoint on the same held-out questions. Its
   summary, metrics, curves and evaluation are copied to RESULTS/<run>/ and, with --commit,
   committed at once, so an interrupted experiment resumes from the next run; a run interrupted
   mid-training resumes from its last checkpoint in WORKDIR.
3. RESULTS/report.md and report.json (`real_model_report`).

Runs are named <arm>_s<seed>; an arm is a set of config overrides. A study names its arms, its
results folder and its runs in order (STUDIES): `lane`, the first rule runs and the untrained-RM
Cooper run; `comparison`, the pre-registered rule / static_rm / cooper comparison
(docs/results/real_model/comparison_plan.md), 3 seeds, seed-major.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from absl import flags
from absl.app import UsageError

from coop_jax.config import load_config_file
from coop_jax.console import parse_flags, run_console
from coop_jax.data import SyntheticConfig, load_split
from coop_jax.projects.real_model import blind_spot, comparison
from coop_jax.projects.real_model.report import write_report
from coop_jax.projects.run_store import cpu_model, git_commit
from coop_jax.hf.sources import smollm2_gguf
from coop_jax.jsonl import keep_file, read_jsonl

CONFIG = "configs/smollm2_arithmetic.py"
# The lane's cooper_s0 (an untrained RM start, kept as what that does): SmolLM2's first 4 layers
# and a new scalar head (reward_model.hf_path, set in `arm_overrides`), LoRA like the policy,
# lr 1e-4, not the config's trained VerifyRM (rm.checkpoint emptied).
UNTRAINED_RM_COOPER = ["--config.reward.type=cooper", "--config.reward_model.keep_layers=4",
                       "--config.reward_model.lora.rank=16", "--config.cooper.negative=rollout",
                       "--config.rm.checkpoint=", "--config.cooper.learning_rate=1e-4",
                       "--config.cooper.warmup_ratio=0.0"]
# The pre-registered comparison (docs/results/real_model/comparison_plan.md): 60 steps; the RM
# arms start from the config's gated VerifyRM (rm.checkpoint), frozen or co-trained at
# the config's Cooper recipe.
COMPARISON_STEPS = ["--config.train.steps=60"]
# The blind-spot comparison (docs/results/real_model/blind_spot_plan.md): 100 steps, strict gold
# for the RM diagnostics, format probes every 10 steps; Cooper's pairs labelled by the strict
# rule, hardest negatives (3 per group), the reference positive, the RM at half the rate it was
# trained at (1e-4 -> 5e-5, the recipe's ratio); the sham swaps half its pairs' labels.
BLIND_SPOT = ["--config.train.steps=100", "--config.verifier.gold=strict_numeric",
              "--config.probes.format_questions=16", "--config.evals.probes.every=10"]
COOPER_STRICT = ["--config.reward.type=cooper", "--config.cooper.negative=rollout_hardest",
                 "--config.cooper.pairs_per_group=3", "--config.cooper.reference_positive=True",
                 "--config.cooper.pair_labels=strict_numeric",
                 "--config.cooper.learning_rate=5e-5"]
STUDIES: dict[str, dict] = {
    "lane": dict(results="docs/results/real_model", runs=["rule_s0", "rule_s1", "cooper_s0"],
                 arms={"rule": [], "cooper": UNTRAINED_RM_COOPER}, analysis=None),
    "comparison": dict(
        results="docs/results/real_model/comparison",
        runs=[f"{arm}_s{seed}" for seed in (0, 1, 2) for arm in ("rule", "static_rm", "cooper")],
        arms={"rule": COMPARISON_STEPS,
              "static_rm": COMPARISON_STEPS + ["--config.reward.type=static_rm"],
              "cooper": COMPARISON_STEPS + ["--config.reward.type=cooper"]},
        analysis=comparison.write),
    "blind_spot": dict(
        results="docs/results/real_model/blind_spot",
        runs=[f"{arm}_s{seed}" for seed in (0, 1, 2, 3)
              for arm in ("rule_strict", "static_rm", "cooper_strict", "sham_cooper")],
        arms={"rule_strict": BLIND_SPOT + ["--config.verifier.extraction=strict_numeric"],
              "static_rm": BLIND_SPOT + ["--config.reward.type=static_rm"],
              "cooper_strict": BLIND_SPOT + COOPER_STRICT,
              "sham_cooper": BLIND_SPOT + COOPER_STRICT + ["--config.cooper.pair_label_noise=0.5"]},
        analysis=blind_spot.write, heldout_label="strict_correct"),
}
RUN_RE = re.compile(r"^([a-z_]+)_s(\d+)$")
COPIED = ("summary.json", "metrics.jsonl", "curves.png")


def _define(fv: flags.FlagValues, argv: list[str]) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("workdir", "runs/real_model", "working folder (checkpoints)", **d)
    flags.DEFINE_enum("study", "lane", list(STUDIES), "lane: the first rule / untrained-RM "
                      "Cooper runs; comparison: the pre-registered rule / static_rm / cooper "
                      "comparison from the gated VerifyRM; blind_spot: rule_strict / static_rm "
                      "/ cooper_strict / sham_cooper against the RM's marker blind spot", **d)
    flags.DEFINE_string("results", "", "results folder (default: the study's)", **d)
    flags.DEFINE_string("config", CONFIG, "coop-train config file", **d)
    flags.DEFINE_list("runs", [], "runs, <arm>_s<seed> (default: the study's, in its order)",
                      **d)
    flags.DEFINE_integer("num_eval", 500, "held-out questions of the before / after evaluation",
                         **d)
    flags.DEFINE_integer("k", 4, "samples per question for avg@k", **d)
    flags.DEFINE_multi_string("override", [], "extra --config.x=y for every run (shortened "
                              "settings for tests)", **d)
    flags.DEFINE_boolean("commit", False, "git-commit each finished run's results", **d)


def _sh(cmd: list[str], log_path: str) -> float:
    """Run `cmd` with its output appended to `log_path`; its wall seconds (a failure raises)."""
    t0 = time.time()
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)  # a fresh machine has no workdir
    with open(log_path, "a") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
    if rc:
        tail = open(log_path).read()[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {rc}); log {log_path}:\n{tail}")
    return time.time() - t0


def _peak_rss_mib(log_path: str) -> float | None:
    """The largest peak RSS of the attempts logged in `log_path` (one per resume)."""
    peaks = re.findall(r"Maximum resident set size \(kbytes\): (\d+)", open(log_path).read())
    return max(int(p) for p in peaks) / 1024 if peaks else None


def _eval_cmd(source: list[str], f: flags.FlagValues, out: str) -> list[str]:
    return [sys.executable, "-m", "coop_jax.eval.cli", *source, f"--config={f.config}",
            *f.override, f"--num_examples={f.num_eval}", f"--k={f.k}", f"--out={out}",
            "--temperature=0.7", "--top_p=1.0"]  # the config's rollout / eval sampling


def _timed(cmd: list[str]) -> list[str]:
    return ["/usr/bin/time", "-v", *cmd] if os.path.exists("/usr/bin/time") else cmd


def _questions(config_path: str, n: int) -> dict[str, str]:
    """id -> question of the config's first `n` held-out records (for samples written before
    coop-eval's rows carried the question)."""
    c = load_config_file(config_path)
    records = load_split(c.data.dataset, c.data.eval_split, num_examples=n, seed=int(c.seed),
                         data_dir=c.data.data_dir or None,
                         synthetic=SyntheticConfig(**c.data.synthetic.to_dict()))
    return {r["id"]: r["question"] for r in records}


def heldout_triples(samples: list[dict], label: str = "correct") -> list[dict]:
    """Every right sampled completion and as many wrong ones (the first of each question's);
    right and wrong by the samples' `label` field ("correct": lenient, "strict_correct")."""
    sampled = [s for s in samples if s["mode"] == "sampled"]
    right = [s for s in sampled if s[label]]
    wrong, seen = [], set()
    for s in sampled:
        if not s[label] and s["question"] not in seen and len(wrong) < len(right):
            seen.add(s["question"])
            wrong.append(s)
    return [{"question": s["question"], "reference": s["reference"],
             "completion": s["completion"], "label": bool(s[label])} for s in right + wrong]


def base_eval(f: flags.FlagValues, label: str = "correct") -> str:
    out = os.path.join(f.results, "base_eval")
    if not os.path.exists(os.path.join(out, "report.json")):
        work = os.path.join(f.workdir, "base_eval")
        _sh(_eval_cmd([f"--hf={smollm2_gguf()}"], f, work), work + ".log")
        os.makedirs(out, exist_ok=True)
        for name in ("report.json", "samples.jsonl"):  # samples kept as samples.jsonl.xz
            keep_file(os.path.join(work, name), os.path.join(out, name))
    triples = os.path.join(out, "heldout_triples.jsonl")
    if not os.path.exists(triples):
        samples = read_jsonl(os.path.join(out, "samples.jsonl"))
        if "question" not in samples[0]:
            questions = _questions(f.config, f.num_eval)
            samples = [dict(s, question=questions[s["id"]]) for s in samples]
        with open(triples, "w") as fh:
            for t in heldout_triples(samples, label):
                fh.write(json.dumps(t) + "\n")
    return triples


def arm_overrides(study: str, arm: str) -> list[str]:
    overrides = STUDIES[study]["arms"][arm]
    rm = ([f"--config.reward_model.hf_path={smollm2_gguf()}"]
          if overrides is UNTRAINED_RM_COOPER else [])
    return overrides + rm


def train_run(f: flags.FlagValues, name: str, triples: str) -> dict:
    arm, seed = RUN_RE.match(name).groups()
    # an interrupted run's workdir is kept: coop-train resumes from its last checkpoint
    work, out = os.path.join(f.workdir, name), os.path.join(f.results, name)
    os.makedirs(out, exist_ok=True)
    train_cmd = [sys.executable, "-m", "coop_jax.trainer.cli", f"--config={f.config}",
                 f"--workdir={work}", f"--config.seed={seed}",
                 f"--config.rm.heldout_triples={triples}",
                 *arm_overrides(f.study, arm), *f.override]
    train_s = _sh(_timed(train_cmd), work + ".train.log")
    eval_s = _sh(_eval_cmd([f"--checkpoint={work}"], f, work + "_eval"), work + ".eval.log")
    for name_ in COPIED:  # metrics.jsonl kept as metrics.jsonl.xz, eval_samples.jsonl likewise
        if os.path.exists(os.path.join(work, name_)):
            keep_file(os.path.join(work, name_), os.path.join(out, name_))
    for name_ in ("report.json", "samples.jsonl"):
        keep_file(os.path.join(work + "_eval", name_), os.path.join(out, "eval_" + name_))
    run = {"arm": arm, "seed": int(seed), "cpu": cpu_model(),
           "train_command": " ".join(train_cmd[2:]),
           "train_wall_s": train_s, "eval_wall_s": eval_s,
           "peak_rss_mib": _peak_rss_mib(work + ".train.log")}
    with open(os.path.join(out, "run.json"), "w") as fh:
        json.dump(run, fh, indent=2)
    return run


def main(argv: list[str]) -> None:
    f = parse_flags(_define, argv, __doc__)
    study = STUDIES[f.study]
    f.results, f.runs = f.results or study["results"], f.runs or study["runs"]
    for name in f.runs:
        if not RUN_RE.match(name) or RUN_RE.match(name).group(1) not in study["arms"]:
            raise UsageError(f"--runs: {name!r} is not <arm>_s<seed> with arm in "
                             f"{list(study['arms'])} (--study={f.study})")
    triples = base_eval(f, study.get("heldout_label", "correct"))
    if f.commit:
        git_commit([os.path.join(f.results, "base_eval")], "real-model lane: start-policy eval")
    for name in f.runs:
        if os.path.exists(os.path.join(f.results, name, "run.json")):
            continue
        run = train_run(f, name, triples)
        reports = _write_reports(f.results, study["analysis"])
        if f.commit:
            git_commit([os.path.join(f.results, name), *reports],
                       f"real-model lane: {name} ({run['train_wall_s'] / 60:.0f} min train)")
    _write_reports(f.results, study["analysis"])


def _write_reports(results: str, analysis) -> list[str]:
    """The lane's report and the study's analysis (if any); the files they wrote."""
    write_report(results)
    names = ["report.md", "report.json"]
    if analysis is not None:
        analysis(results)
        names += ["analysis.md", "analysis.json"]
    return [os.path.join(results, n) for n in names]


def run() -> None:
    run_console(main, "coop_jax.projects.real_model.lane")


if __name__ == "__main__":
    run()
