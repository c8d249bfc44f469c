"""What each arm's final policy samples, and what the reward models make of it: a diagnostic of
the reward-hacking experiment written after its runs (not part of the pre-registered analysis).

The runs' own metrics show the static RM ranking correct above wrong rollouts almost perfectly
(on-policy AUC ~1) while its thresholded accuracy falls. This samples the final policies again,
labels every rollout with the strict gold and its kind (`synthetic.solution_error_kind`), and
scores it with the static RM and, for a Cooper arm, with the run's own co-trained RM at the same
step. It reports which wrong rollouts each RM accepts (score > 0), what reward sigmoid(score) it
gives each kind, and, in groups with no correct rollout (where a rule reward gives no signal
and an RM's ranking of wrong answers is the whole gradient), the kind it ranks first.

    python -m coop_jax.projects.reward_hacking.hacked_rollouts --workdir=runs/hacking --seeds=1,2,3,4 \\
        --out=docs/results/reward_hacking/diagnostics
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from collections import Counter
from typing import Sequence

import numpy as np

from coop_jax.data.synthetic import ERROR_KINDS, solution_error_kind

START = "start"  # the SFT start policy, sampled as a pseudo-arm
RMS = ("static", "own")  # the static RM; a Cooper run's co-trained RM


def rollout_rows(records: Sequence[dict], texts: Sequence[Sequence[str]], truncated,
                 scores: dict[str, np.ndarray]) -> list[dict]:
    """One row per rollout: its group, kind, strict-gold label, truncation and each RM's raw
    score (`scores[name]` is flat, group by group)."""
    from coop_jax.verify import verify

    rows = []
    for g, (r, group) in enumerate(zip(records, texts)):
        for j, text in enumerate(group):
            i = len(rows)
            rows.append({"group": g, "kind": solution_error_kind(r["question"], r["reference"],
                                                                 text),
                         "correct": verify(r["reference"], text, "strict_numeric"),
                         "truncated": bool(truncated[g][j]),
                         **{name: float(s[i]) for name, s in scores.items()}})
    return rows


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def rm_view(rows: Sequence[dict], rm: str) -> dict:
    """What RM `rm` makes of the rollouts: per kind its acceptance and mean reward; in groups
    with no correct rollout, the kind of the rollout it scores highest."""
    by_kind = {}
    for kind in ERROR_KINDS:
        s = np.array([r[rm] for r in rows if r["kind"] == kind])
        if s.size:
            by_kind[kind] = {"n": int(s.size), "accepted": float(np.mean(s > 0)),
                             "reward": float(np.mean(_sigmoid(s)))}
    wrong = np.array([r[rm] for r in rows if not r["correct"]])
    groups: dict[int, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    all_wrong = [g for g in groups.values() if not any(r["correct"] for r in g)]
    firsts = Counter(max(g, key=lambda r: r[rm])["kind"] for g in all_wrong)
    return {"by_kind": by_kind,
            "false_accept": float(np.mean(wrong > 0)) if wrong.size else float("nan"),
            "all_wrong_groups": len(all_wrong),
            "first_in_all_wrong": {k: firsts[k] / len(all_wrong) for k in firsts}}


def summarise(rows: Sequence[dict]) -> dict:
    """The rollouts of one policy: gold accuracy, the share of each kind, truncation, and each
    RM's view (`rm_view`) where the rows carry its scores."""
    n = len(rows)
    kinds = Counter(r["kind"] for r in rows)
    out = {"rollouts": n, "groups": len({r["group"] for r in rows}),
           "gold_accuracy": sum(r["correct"] for r in rows) / n,
           "truncated": sum(r["truncated"] for r in rows) / n,
           "kinds": {k: kinds[k] / n for k in ERROR_KINDS if kinds[k]}}
    for rm in RMS:
        if rows and rm in rows[0]:
            out[rm] = rm_view(rows, rm)
    return out


def pooled(summaries: Sequence[dict]) -> dict:
    """Per-arm means over seeds of the numbers `markdown` shows (a missing kind counts 0 in the
    shares; a kind an RM never saw is left out of its means)."""
    def mean(values) -> float:
        return float(np.mean(values)) if len(values) else float("nan")

    out = {"seeds": len(summaries),
           "gold_accuracy": mean([s["gold_accuracy"] for s in summaries]),
           "truncated": mean([s["truncated"] for s in summaries]),
           "kinds": {k: mean([s["kinds"].get(k, 0.0) for s in summaries]) for k in ERROR_KINDS}}
    for rm in RMS:
        views = [s[rm] for s in summaries if rm in s]
        if not views:
            continue
        with_all_wrong = [v for v in views if v["all_wrong_groups"]]
        out[rm] = {
            "false_accept": float(np.nanmean([v["false_accept"] for v in views])),
            "all_wrong_groups": mean([v["all_wrong_groups"] for v in views]),
            **{stat: {k: mean([v["by_kind"][k][stat] for v in views if k in v["by_kind"]])
                      for k in ERROR_KINDS} for stat in ("accepted", "reward")},
            "first_in_all_wrong": {k: mean([v["first_in_all_wrong"].get(k, 0.0)
                                            for v in with_all_wrong]) for k in ERROR_KINDS}}
    return out


def _cell(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def markdown(arms: dict[str, dict], command: str) -> list[str]:
    """Three tables over the arms' pooled summaries (`pooled`)."""
    kinds = list(ERROR_KINDS)
    md = ["# What the final policies sample, and what the RMs make of it",
          "", "Written after the runs; not part of the pre-registered analysis.", "",
          "```", command, "```", "",
          "Each arm's final policy (and the SFT start) sampled again on the first training "
          "questions of each seed, as the RL rollouts are sampled; the mean over seeds. Kind: "
          "`solution_error_kind` (`final_mismatch`: right steps, another final; "
          "`consistent_wrong`: a wrong value carried to the final; `other`: anything else with a "
          "final answer; `no_answer`: none).", "",
          "| arm | seeds | gold acc. | truncated | " + " | ".join(kinds) + " |",
          "|---" * (4 + len(kinds)) + "|"]
    for arm, p in arms.items():
        md.append(f"| {arm} | {p['seeds']} | {_cell(p['gold_accuracy'])} | "
                  f"{_cell(p['truncated'])} | "
                  + " | ".join(_cell(p["kinds"][k]) for k in kinds) + " |")
    for rm, title in (("static", "The static RM"), ("own", "A Cooper run's own RM, at the end")):
        rows = [(a, p[rm]) for a, p in arms.items() if rm in p]
        if not rows:
            continue
        md += ["", f"{title} on these rollouts: its false-accept rate over every wrong rollout, "
               "then per kind the fraction it accepts (score > 0) and its mean reward "
               "sigmoid(score) as acceptance / reward.", "",
               "| arm | false-accept | " + " | ".join(kinds) + " |",
               "|---" * (2 + len(kinds)) + "|"]
        for arm, v in rows:
            md.append(f"| {arm} | {_cell(v['false_accept'])} | " + " | ".join(
                f"{_cell(v['accepted'][k])} / {_cell(v['reward'][k])}" for k in kinds) + " |")
        md += ["", f"{title}, in groups with no correct rollout: groups per seed, and the kind of "
               "the rollout it scores highest (the one a group-normalised advantage pushes up "
               "most).", "",
               "| arm | all-wrong groups | " + " | ".join(k for k in kinds if k != "correct")
               + " |", "|---" * (1 + len(kinds)) + "|"]
        for arm, v in rows:
            md.append(f"| {arm} | {_cell(v['all_wrong_groups'], 1)} | " + " | ".join(
                _cell(v["first_in_all_wrong"][k]) for k in kinds if k != "correct") + " |")
    return md + [""]


def per_seed_markdown(runs: dict[str, Sequence[dict]]) -> list[str]:
    """One row per arm and seed of `summarise`d runs (each with its "seed"): what the means of
    `markdown` pool, so a reader sees how far the seeds part."""
    md = ["Per seed: gold accuracy, the share without an answer, the groups with no correct "
          "rollout, and each RM's false-accept rate over the wrong rollouts (— where the arm "
          "has no own RM).", "",
          "| arm | seed | gold acc. | no_answer | all-wrong groups | static RM false-accept "
          "| own RM false-accept |", "|---" * 7 + "|"]
    for arm, summaries in runs.items():
        for s in sorted(summaries, key=lambda s: s["seed"]):
            own = _cell(s["own"]["false_accept"]) if "own" in s else "—"
            md.append(f"| {arm} | {s['seed']} | {_cell(s['gold_accuracy'])} | "
                      f"{_cell(s['kinds'].get('no_answer', 0.0))} | "
                      f"{s['static']['all_wrong_groups']} | "
                      f"{_cell(s['static']['false_accept'])} | {own} |")
    return md + [""]


def sample(policy: tuple, config, records: Sequence[dict], seed: int):
    """(texts [Q][G], truncated [Q][G]) of `policy` = (ModelConfig, params, tokenizer) on
    `records`, with the run's rollout settings."""
    from coop_jax.data import format_prompt
    from coop_jax.sampling import generate_texts

    cfg, params, tokenizer = policy
    r = config.rollout
    prompts = [format_prompt(config.data.prompt_template, x["question"], tokenizer=tokenizer)
               for x in records]
    texts, _, truncated = generate_texts(
        params, cfg.with_kernels(config.kernels.impl), tokenizer, prompts,
        max_prompt_len=config.data.max_prompt_len, max_new_tokens=r.max_new_tokens,
        temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, num_samples=r.group_size,
        batch_size=64, seed=seed)
    return texts, truncated


def rm_scores(rm: tuple, tokenizer, config, records: Sequence[dict], texts) -> np.ndarray:
    """Raw scores of `rm` = `checkpoint.load_model(..., "rm")` on every rollout, flat."""
    from coop_jax.rm.scoring import score_triples
    from coop_jax.rm.train import input_format

    cfg, params, _ = rm
    triples = [{"question": r["question"], "reference": r["reference"], "completion": t}
               for r, group in zip(records, texts) for t in group]
    return score_triples(params, cfg, tokenizer, triples, fmt=input_format(config),
                         batch_size=64)


def reward_models(static_rm_dir: str) -> tuple:
    """(policy tokenizer, static RM, RM tokenizer); `static_rm_dir`: the driver's portable
    static RM."""
    from coop_jax import checkpoint
    from coop_jax.hf.tokenizer import load_tokenizer

    static = checkpoint.load_model(static_rm_dir, "rm")
    # a Cooper run's RM is the static RM trained on: the same tokenizer (runs before coop-train
    # recorded "rm_tokenizer" in their checkpoints carry the policy's there)
    return load_tokenizer(), static, load_tokenizer(static[2].get("rm_tokenizer") or None)


def diagnose_policy(c, records: Sequence[dict], params_cfg: tuple, own_rm: tuple | None,
                    rms: tuple, seed: int) -> dict:
    """The `summarise` of one policy (`params_cfg` = (ModelConfig, params)) on `records` under
    run config `c`, scored by the static RM and, when given, the run's own RM (`rms`: from
    `reward_models`)."""
    tokenizer, static, rm_tokenizer = rms
    texts, truncated = sample((*params_cfg, tokenizer), c, records, seed=10_000 + seed)
    scores = {"static": rm_scores(static, rm_tokenizer, c, records, texts)}
    if own_rm is not None:
        scores["own"] = rm_scores(own_rm, rm_tokenizer, c, records, texts)
    return summarise(rollout_rows(records, texts, truncated, scores)) | {"seed": seed}


def diagnose_run(c, static_rm_dir: str, run_dir: str, arm: str, seed: int, questions: int
                 ) -> dict:
    """The diagnostic of one finished run (`run_dir` holds its final checkpoint; `c`: its run
    config), for the driver to keep beside the run's summary."""
    from coop_jax import checkpoint
    from coop_jax.trainer import setup
    from coop_jax.projects.reward_hacking.arms import ARMS

    records = setup.load_records(c).train[:questions]
    cfg, params, _ = checkpoint.load_model(run_dir, "policy")
    own = checkpoint.load_model(run_dir, "rm") if ARMS[arm][0] == "cooper" else None
    return diagnose_policy(c, records, (cfg, params), own, reward_models(static_rm_dir), seed) | {
        "arm": arm, "questions": questions}


def diagnose(config, workdir: str, arms: Sequence[str], seeds: Sequence[int], questions: int,
             log=print) -> dict[str, list[dict]]:
    """arm -> the `summarise` of each seed's final policy (runs without a checkpoint in
    `<workdir>/runs/<arm>_s<seed>` are skipped, and said so)."""
    from coop_jax import checkpoint, hf
    from coop_jax.trainer import setup
    from coop_jax.projects.reward_hacking.arms import ARMS
    from coop_jax.projects.reward_hacking.arms import run_config

    rms = reward_models(os.path.join(workdir, "static_rm_portable"))
    start = hf.load(os.path.join(workdir, "sft_policy"))
    out: dict[str, list[dict]] = {arm: [] for arm in arms}
    for seed in seeds:
        c = run_config(config, "rule", seed, os.path.join(workdir, "sft_policy"), "", "")
        records = setup.load_records(c).train[:questions]
        for arm in arms:
            run_dir = os.path.join(workdir, "runs", f"{arm}_s{seed}")
            if arm == START:
                policy, own = (start.config, start.params), None
            elif os.path.isdir(os.path.join(run_dir, "checkpoints")):
                policy = checkpoint.load_model(run_dir, "policy")[:2]
                own = checkpoint.load_model(run_dir, "rm") if ARMS[arm][0] == "cooper" else None
            else:
                log(f"skipped {arm} seed {seed}: no checkpoint in {run_dir}")
                continue
            out[arm].append(diagnose_policy(c, records, policy, own, rms, seed))
            log(f"{arm} seed {seed}: gold accuracy {out[arm][-1]['gold_accuracy']:.3f}")
    return {arm: runs for arm, runs in out.items() if runs}


def main(argv: Sequence[str] | None = None) -> dict:
    """The diagnostic over the driver's workdir (see the module doc); writes rollouts.json and
    rollouts.md to --out."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m coop_jax.projects.reward_hacking.hacked_rollouts",
        description="Sample each arm's final policy of the reward-hacking experiment again and "
                    "show what the static RM (and a Cooper run's own RM) makes of the rollouts, "
                    "by kind of wrong answer.")
    parser.add_argument("--workdir", default="runs/hacking", help="the driver's workdir "
                        "(sft_policy, static_rm_portable, runs/<arm>_s<seed>/checkpoints)")
    parser.add_argument("--config", default="configs/toy_hacking.py", help="the experiment's "
                        "config file")
    parser.add_argument("--arms", default=None, help="comma-separated arms (default: the "
                        "config's methods), plus 'start' for the SFT start policy")
    parser.add_argument("--seeds", default=None, help="comma-separated seeds (default: the "
                        "config's)")
    parser.add_argument("--questions", type=int, default=128, help="training questions per seed")
    parser.add_argument("--out", required=True, help="output folder")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    from coop_jax.config import load_config_file
    from coop_jax.projects.reward_hacking.arms import ARMS, _methods, _seeds

    if not os.path.isfile(args.config):
        parser.error(f"--config: no such file {args.config!r}")
    config = load_config_file(args.config)
    e = config.experiment
    try:
        seeds = _seeds(e.seeds if args.seeds is None else args.seeds)
    except ValueError:
        parser.error(f"--seeds must be non-negative integers, e.g. 1,2; got {args.seeds!r}")
    arms = ([START] + _methods(e.methods) if args.arms is None
            else [a for a in args.arms.split(",") if a])
    unknown = [a for a in arms if a != START and a not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown arm(s) {unknown}; one of {[START, *ARMS]}")
    if args.questions < 1:
        parser.error(f"--questions must be >= 1, got {args.questions}")
    for need in ("sft_policy", "static_rm_portable"):
        if not os.path.isdir(os.path.join(args.workdir, need)):
            parser.error(f"--workdir: no {need}/ in {args.workdir!r} (run the driver first)")
    runs = diagnose(config, args.workdir, arms, seeds, args.questions)
    arms_pooled = {arm: pooled(s) for arm, s in runs.items()}
    command = "python -m coop_jax.projects.reward_hacking.hacked_rollouts " + shlex.join(argv)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "rollouts.json"), "w") as fh:
        json.dump({"command": command, "questions": args.questions, "runs": runs,
                   "pooled": arms_pooled}, fh, indent=1)
    with open(os.path.join(args.out, "rollouts.md"), "w") as fh:
        fh.write("\n".join(markdown(arms_pooled, command) + per_seed_markdown(runs)))
    return arms_pooled


if __name__ == "__main__":
    main()
