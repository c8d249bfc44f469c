"""coop_jax.projects.reward_hacking.diagnostic_reruns: the rollout diagnostic (`hacked_rollouts`)
for kept runs whose checkpoints are gone: each run
again, same config and seed, from the plan's kept inputs, then its final policy's diagnostic.
Written after the runs; not part of the pre-registered analysis, and never pooled with it.

Only a run's small files are kept (summary, metrics), so the final policies that the
diagnostic samples are lost with the machine that trained them. XLA:CPU rounds differently on
another CPU, so a rerun elsewhere is not bit-identical to the kept run (rerun_seed0/ shows
how far they part): the page sets each rerun's final accuracy beside the kept run's, and says
on which CPU each ran. Every rerun is kept and committed as it ends (like the driver's runs),
so a later session goes on where this one stopped.

    python -m coop_jax.projects.reward_hacking.diagnostic_reruns \\
        --config=configs/toy_hacking_attempt3.py --workdir=runs/diag_draw1 \\
        --out=docs/results/reward_hacking/diagnostics/reruns_draw_1 --commit

`--page_only` rewrites the page from the reruns kept in --out; it runs and commits nothing.
"""
from __future__ import annotations

import glob
import json
import os
import shlex

from coop_jax import console
from coop_jax.projects import run_store
from coop_jax.projects.reward_hacking import driver, hacked_rollouts, plan_inputs
from coop_jax.projects.reward_hacking.arms import expected_runs

START_RUN = hacked_rollouts.START  # the start policy's diagnostic, kept as runs/start_s<seed>


def check_kept_inputs(config) -> None:
    """ValueError naming the field unless `experiment.results_dir` keeps the plan's inputs (a
    rerun starts from the kept start policy and static RM, and must not train new ones)."""
    results_dir = config.experiment.get("results_dir", "")
    if not results_dir or not os.path.isdir(plan_inputs.inputs_dir(results_dir)):
        raise ValueError(f"config.experiment.results_dir {results_dir!r} keeps no plan inputs "
                         "(plan/inputs): the reruns start from the kept start policy and RM")


def plan_inputs_of(config, workdir: str) -> tuple[str, str, str, str]:
    """(policy_dir, rm_dir, heldout, probes) restored from the kept inputs of
    `experiment.results_dir` (`check_kept_inputs`)."""
    check_kept_inputs(config)
    results_dir = config.experiment.results_dir
    policy_dir = driver.start_policy(config, workdir, results_dir, commit=False)
    rm_dir = os.path.join(workdir, "static_rm_portable")
    driver.static_rm_of_plan(config, workdir, policy_dir, rm_dir, results_dir, commit=False)
    probes = driver.probe_set(config, os.path.join(workdir, "probes.jsonl"))
    return policy_dir, rm_dir, os.path.join(rm_dir, plan_inputs.HELDOUT), probes


def start_diagnostics(config, workdir: str, out: str, seeds, questions: int, commit: bool
                      ) -> None:
    """The start policy's diagnostic for each seed not kept yet in `out`/runs/start_s<seed>."""
    for seed in seeds:
        dest = run_store.kept_dir(out, START_RUN, seed)
        if os.path.exists(os.path.join(dest, "rollouts.json")):
            continue
        found = hacked_rollouts.diagnose(config, workdir, [START_RUN], [seed], questions)
        os.makedirs(dest, exist_ok=True)
        with open(os.path.join(dest, "rollouts.json"), "w") as fh:
            json.dump(found[START_RUN][0] | {"arm": START_RUN, "questions": questions}, fh,
                      indent=1)
        if commit:
            run_store.git_commit(dest, f"rollout diagnostic: start policy seed {seed}")


def _final(summary: dict | None):
    """The final strict held-out accuracy, the analysis's endpoint (runs from before the strict
    key was logged have it as final_accuracy)."""
    if summary is None:
        return None
    return summary.get("final_accuracy_strict", summary.get("final_accuracy"))


def comparison_rows(out: str, kept_results: str) -> list[dict]:
    """Each rerun of `out` beside its kept run: final accuracy and CPU of both."""
    rows = []
    for folder in sorted(glob.glob(os.path.join(out, "runs", "*_s*"))):
        rerun = run_store.read_summary(folder)
        if rerun is None:
            continue
        kept = run_store.read_summary(os.path.join(kept_results, "runs",
                                                   os.path.basename(folder)))
        rows.append({"run": os.path.basename(folder), "kept": _final(kept),
                     "rerun": _final(rerun), "kept_cpu": (kept or {}).get("cpu"),
                     "rerun_cpu": rerun.get("cpu")})
    return rows


def page(out: str, kept_results: str, command: str, expected: dict[str, list[int]]) -> dict:
    """`out`/rollouts.json and README.md: the pooled diagnostic of every kept rerun (and start
    seed) in `out`, and the reruns beside the kept runs; the pooled arms."""
    runs: dict[str, list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(out, "runs", "*", "rollouts.json"))):
        with open(path) as fh:
            found = json.load(fh)
        runs.setdefault(found["arm"], []).append(found)
    arms = {arm: hacked_rollouts.pooled(v) for arm, v in runs.items()}
    done = {arm: sorted(r["seed"] for r in v) for arm, v in runs.items()}
    missing = {arm: [s for s in seeds if s not in done.get(arm, [])]
               for arm, seeds in expected.items()}
    missing = {arm: seeds for arm, seeds in missing.items() if seeds}
    compared = comparison_rows(out, kept_results)
    with open(os.path.join(out, "rollouts.json"), "w") as fh:
        json.dump({"command": command, "runs": runs, "pooled": arms, "missing": missing,
                   "reruns_beside_kept": compared}, fh, indent=1)
    lines = ["# Rollout diagnostic of reruns (written after the runs)", "",
             (__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
             "PARTIAL: still to rerun " + "; ".join(f"{a} seeds {s}" for a, s in
                                                    missing.items()) if missing
             else "Every planned run has its rerun.", "",
             "| run | kept: final strict accuracy | rerun: final strict accuracy | kept on "
             "| rerun on |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['kept']} | {r['rerun']} | {r['kept_cpu']} | {r['rerun_cpu']} |"
              for r in compared]
    lines += ["", *hacked_rollouts.markdown(arms, command),
              *hacked_rollouts.per_seed_markdown(runs)]
    with open(os.path.join(out, "README.md"), "w") as fh:
        fh.write("\n".join(lines))
    return arms


def planned_runs(config) -> dict[str, list[int]]:
    """arm -> seeds the page expects: the experiment's runs and the start policy on every seed."""
    expected = expected_runs(config)
    return {START_RUN: sorted({s for v in expected.values() for s in v}), **expected}


def main(config, workdir: str, out: str, questions: int, commit: bool, command: str) -> dict:
    expected, planned = expected_runs(config), planned_runs(config)
    policy_dir, rm_dir, heldout, probes = plan_inputs_of(config, workdir)
    start_diagnostics(config, workdir, out, planned[START_RUN], questions, commit)
    runner = driver.arm_runner(config, policy_dir, rm_dir, heldout, probes, questions)
    arms = page(out, config.experiment.results_dir, command, planned)
    for run in driver.run_order(expected):  # the page follows each run, so a cut leaves it current
        run_store.run_all([run], runner, workdir=workdir, settings=run_store.settings(config),
                          results_dir=out, commit=commit,
                          what="reward hacking, diagnostic rerun of")
        arms = page(out, config.experiment.results_dir, command, planned)
        if commit:
            run_store.git_commit(out, "rollout diagnostic of reruns: the page")
    return arms


def define_flags(fv, argv: list[str]) -> None:
    from absl import flags

    driver.define_flags(fv, argv)
    flags.DEFINE_string("out", None, "folder of the kept reruns and the page (in the repository "
                        "for --commit)", flag_values=fv)
    flags.DEFINE_integer("questions", 128, "training questions each final policy is sampled on",
                         flag_values=fv)
    flags.DEFINE_bool("page_only", False, "rewrite the page from the reruns kept in --out; run "
                      "and commit nothing", flag_values=fv)


def cli(argv: list[str]) -> dict:
    fv = console.parse_flags(define_flags, argv, __doc__)
    if not fv.out:
        raise console.UsageError("--out: required (the folder of the reruns and the page)")
    if fv.questions < 1:
        raise console.UsageError(f"--questions must be >= 1, got {fv.questions}")
    with console.usage_errors():
        driver.check_config(fv.config)
        check_kept_inputs(fv.config)
        if fv.commit:
            run_store.ensure_committable(fv.out)
    command = ("python -m coop_jax.projects.reward_hacking.diagnostic_reruns "
               + shlex.join(a for a in argv[1:]
                            if a.lstrip("-").split("=")[0] not in ("page_only", "nopage_only")))
    if fv.page_only:
        return page(fv.out, fv.config.experiment.results_dir, command, planned_runs(fv.config))
    try:
        return main(fv.config, fv.workdir, fv.out, fv.questions, fv.commit, command)
    except (run_store.RunStopped, plan_inputs.InputMismatch) as stopped:
        raise SystemExit(f"diagnostic_reruns: {stopped}") from None


if __name__ == "__main__":
    console.run_console(cli, "coop_jax.projects.reward_hacking.diagnostic_reruns")
