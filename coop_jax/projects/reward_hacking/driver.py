"""coop_jax.projects.reward_hacking: the reward-hacking experiment, rule vs static RM vs Cooper
(three negative strategies) vs a random reward, all from one SFT policy and one static RM, several
seeds.

    python -m coop_jax.projects.reward_hacking --config=configs/toy_hacking.py --workdir=DIR \
        [--config.experiment.methods=cooper_consistent_wrong --config.experiment.seeds=0]

1. SFT warm start once -> DIR/sft_policy (an HF folder every run starts from).
2. Triples sampled from that initial policy on training questions, rule-labelled, split by
   question into train / held-out. The held-out set also gets one `consistent_wrong_solution`
   rewrite of a correct sample per question, so it holds consistent-but-wrong solutions next to
   the policy's own (mostly off-by-one) errors. It is the fixed set every run scores its RM on
   -> DIR/static_rm/{train,heldout}_triples.jsonl, triples_stats.json.
3. The static RM (`reward_model` section, `rm_train` settings), trained on the training triples
   only (initial-policy samples) -> DIR/static_rm (rm_summary.json with heldout_accuracy,
   heldout_auc and per-kind accuracy; rm_learning_curve.{json,png}). With
   `experiment.rm_corpus="offline"` the triples of step 2 are the offline corpus instead
   (`rm_corpus`: its own train / held-out split, DIR/static_rm/corpus_manifest.json).
   `experiment.rm_min_accuracy` / `rm_min_auc` gate the static RM: below either, the driver
   stops before any RL run (`competence_gate`); the RM's summary (with the digests of its
   triples and parameters), manifest and learning curve are kept in
   `experiment.results_dir`/plan/static_rm first, so a failed gate is on record too. The
   corpus's character SFT generators (`experiment.corpus_sft_policies`) are saved under
   DIR/static_rm/sft_generator_<i>.
4. Every arm x seed (`expected_runs`; the `random` arm on the first `experiment.random_seeds`):
   `coop-train` from the SFT policy; RM arms start from the static RM ->
   DIR/runs/<arm>_s<seed>. Arms differ only in reward source and Cooper's negative strategy.
   Each finished run's summary.json and metrics.jsonl are kept in
   `experiment.results_dir`/runs/<arm>_s<seed> (committed as the run ends with --commit); a
   rerun skips the runs kept there (`run_store`), so the experiment can span sessions.
   With `experiment.probe_questions`, every run also scores the hack probes of that many
   held-out questions (DIR/probes.jsonl, `hack_probes`) every `evals.probes.every` steps.
5. DIR/report.md, report.json and the figures (hacking_report.py, with the pre-registered
   analysis of hacking_analysis.py), merged into `experiment.results_dir`/report.md below the
   plan, the figures in its plan/ folder (results_page.py).
"""
from __future__ import annotations

import glob
import json
import logging
import os
import shlex
import time

import jax
import numpy as np

from coop_jax import checkpoint, console, hf, parallel
from coop_jax.trainer import loop, rewards, setup, sft
from coop_jax.rm.train import (build_triples, input_format, label_balance, split_triples,
                               train_reward_model)
from coop_jax import config as config_lib
from coop_jax.data.synthetic import consistent_wrong_solution, solution_error_kind
from coop_jax.projects.reward_hacking import hack_probes, plan_inputs, results_page
from coop_jax.projects import rm_corpus, run_store
from coop_jax.projects.run_store import cpu_model
from coop_jax.projects.reward_hacking.arms import (  # noqa: F401
    ARM_OVERRIDES, ARMS, _methods, _seeds, expected_runs, run_config)
from coop_jax.hf.tokenizer import CHAR_TOKENIZER_DIR, load_tokenizer
from coop_jax.rm.input import RMInputFormat, read_triples, write_triples
from coop_jax.rm.scoring import evaluate_reward_model
from coop_jax.verify import RuleVerifier

log = logging.getLogger("coop_jax")



def sft_policy(config, out_dir: str) -> str:
    """Train the shared SFT start once and export it as an HF folder."""
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    tokenizer = load_tokenizer()
    records, _, _ = setup.load_records(config)
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(config.mesh.shape, jax.device_count()))
    cfg, params = setup.build_model(config.model, tokenizer, mesh, jax.random.key(config.seed),
                                    kernels=config.kernels.impl)
    params, losses = sft.warm_start_with(sft.SFTSettings.from_config(config), params, cfg,
                                         tokenizer, records)
    log.info("SFT: loss %.3f -> %.3f", losses[0], losses[-1])
    hf.save(hf.from_params(cfg, jax.device_get(params), tokenizer_dir=CHAR_TOKENIZER_DIR,
                           pad_token_id=tokenizer.pad_token_id), out_dir)
    return out_dir


def _kinds(triples) -> dict:
    kinds = [solution_error_kind(t["question"], t["reference"], t["completion"]) for t in triples]
    return {k: kinds.count(k) for k in dict.fromkeys(sorted(kinds))}


def consistent_wrong_triples(triples: list[dict], verifier, seed: int) -> list[dict]:
    """One consistent-but-wrong rewrite of the first correct completion of each question,
    labelled by the rule verifier (a rewrite that still verifies is dropped)."""
    rng = np.random.default_rng([seed, 7])
    firsts = {}
    for t in triples:
        if t["label"] and t["question"] not in firsts:
            firsts[t["question"]] = t
    made = []
    for t in firsts.values():
        wrong = consistent_wrong_solution(t["question"], t["completion"], rng)
        if wrong is not None:
            made.append({"question": t["question"], "reference": t["reference"],
                         "completion": wrong, "label": False})
    results = verifier.verify_batch_detailed([t["reference"] for t in made],
                                             [t["completion"] for t in made])
    return [t for t, r in zip(made, results) if not r.correct and not r.timed_out]


def rm_triples(config, policy_dir: str, out_dir: str) -> tuple[str, str]:
    """(train, held-out) triple files, sampled from the initial policy (see the module doc)."""
    paths = (os.path.join(out_dir, "train_triples.jsonl"),
             os.path.join(out_dir, "heldout_triples.jsonl"))
    if all(os.path.exists(p) for p in paths):
        return paths
    e = config.experiment
    lm = hf.load(policy_dir)
    tokenizer = lm.tokenizer()
    records, _, _ = setup.load_records(config)
    with RuleVerifier(config.verifier.num_workers, config.verifier.timeout_s) as verifier:
        triples, stats = build_triples(
            lm.params, lm.config, tokenizer, records[:e.rm_questions], verifier=verifier,
            template=config.data.prompt_template, samples_per_question=e.samples_per_question,
            temperature=config.rollout.temperature, max_prompt_len=config.data.max_prompt_len,
            max_new_tokens=config.rollout.max_new_tokens, seed=config.seed)
        train_set, heldout = split_triples(triples, e.heldout_fraction, config.seed)
        rewrites = consistent_wrong_triples(heldout, verifier, config.seed)
    heldout = heldout + rewrites
    stats |= {"train": label_balance(train_set) | {"kinds": _kinds(train_set)},
              "heldout": label_balance(heldout) | {"kinds": _kinds(heldout)},
              "heldout_consistent_wrong_rewrites": len(rewrites)}
    log.info("RM triples: %s", json.dumps(stats))
    os.makedirs(out_dir, exist_ok=True)
    write_triples(paths[0], train_set)
    write_triples(paths[1], heldout)
    with open(os.path.join(out_dir, "triples_stats.json"), "w") as fh:
        json.dump(stats, fh, indent=2)
    return paths


RM_CORPORA = ("policy_samples", "offline")  # experiment.rm_corpus


def static_rm_data(config, policy_dir: str, out_dir: str) -> tuple[str, str]:
    """(train, held-out) triples of the static RM: samples of the start policy
    (`rm_triples`, experiment.rm_corpus="policy_samples", the default) or the offline corpus
    (`rm_corpus.build_corpus`, "offline": programmatic generators, none the start policy)."""
    e = config.experiment
    kind = e.get("rm_corpus", "policy_samples")
    if kind not in RM_CORPORA:
        raise ValueError(f"config.experiment.rm_corpus must be one of {list(RM_CORPORA)}, "
                         f"got {kind!r}")
    if kind == "policy_samples":
        return rm_triples(config, policy_dir, out_dir)
    paths = (os.path.join(out_dir, "train_triples.jsonl"),
             os.path.join(out_dir, "heldout_triples.jsonl"))
    if all(os.path.exists(p) for p in paths):
        return paths
    records = setup.load_records(config).train[:e.rm_questions]
    specs = rm_corpus.parse_sft_policies(e.get("corpus_sft_policies", ""))
    policies, policy_records, start = [], [], None
    if specs:
        start = {"settings": rm_corpus.digest(rm_corpus.sft_settings(config, config.seed)),
                 "params": rm_corpus.policy_digest(policy_dir)}
        policy_records = records[:e.get("corpus_sft_questions", 0) or len(records)]
        policies = rm_corpus.sft_generators(
            config, policy_records, specs, start=start, out_dir=out_dir,
            samples_per_question=e.get("corpus_sft_samples", 0) or e.samples_per_question)
    return rm_corpus.build_corpus(records, out_dir, start_policy=f"policy:{policy_dir}",
                                  heldout_fraction=e.heldout_fraction, seed=config.seed,
                                  policies=policies, policy_records=policy_records, start=start)


def heldout_by_kind(rm: tuple, heldout: list[dict], fmt: RMInputFormat) -> dict:
    """The RM's accuracy on each kind of held-out triple (correct, final_mismatch, ...); `rm` is
    `checkpoint.load_model(rm_dir, "rm")`."""
    cfg, params, meta = rm
    tokenizer = load_tokenizer(meta.get("rm_tokenizer") or None)
    _, rows = evaluate_reward_model(params, cfg, tokenizer, heldout, fmt=fmt)
    return rm_corpus.accuracy_by_kind(heldout, rows)


def file_digest(path: str) -> str:
    """A short sha256 of a file's bytes."""
    import hashlib
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()[:16]


def static_rm(config, train_path: str, heldout_path: str, out_dir: str) -> dict:
    """Train the static RM on the initial-policy triples; its summary (also rm_summary.json)."""
    summary_path = os.path.join(out_dir, "rm_summary.json")
    if os.path.exists(summary_path):
        with open(summary_path) as fh:
            return json.load(fh)
    heldout = read_triples(heldout_path)
    cpu = time.process_time()
    summary = train_reward_model(config, read_triples(train_path), out_dir,
                                          heldout_triples=heldout)
    summary.update(cpu_seconds=time.process_time() - cpu, cpu=cpu_model())
    rm = checkpoint.load_model(out_dir, "rm")
    summary["heldout_by_kind"] = heldout_by_kind(rm, heldout, input_format(config))
    # a rebuild (a later session, a clean clone) is the same static RM when these agree
    summary["digests"] = {"train_triples": file_digest(train_path),
                          "heldout_triples": file_digest(heldout_path),
                          "rm_params": rm_corpus.params_digest(rm[1])}
    with open(summary_path, "w") as fh:
        json.dump(summary, fh, indent=2)
    from coop_jax.projects.reward_hacking.report import plot_rm_learning_curve
    plot_rm_learning_curve(out_dir, config.rm_train.batch_size)
    log.info("static RM: %s", json.dumps(summary))
    return summary


def probe_set(config, out_path: str) -> str:
    """The hack probes (`hack_probes`) of the first `experiment.probe_questions` held-out
    questions -> out_path ("" when probe_questions is 0 or unset)."""
    n = config.experiment.get("probe_questions", 0)
    if not n:
        return ""
    if not os.path.exists(out_path):
        records = setup.load_records(config).heldout[:n]
        hack_probes.write_probes(out_path, hack_probes.build_probes(
            records, answer_format=config.data.synthetic.answer_format,
            extraction=setup.run_extraction_mode(config), seed=config.seed))
    return out_path


class IncompetentRM(RuntimeError):
    """The static RM failed the experiment's competence gate: no RL run may start."""


def competence_gate(rm_summary: dict, min_accuracy: float, min_auc: float) -> None:
    """Raise `IncompetentRM` unless the static RM's held-out accuracy >= `min_accuracy` and its
    ROC AUC >= `min_auc` (`experiment.rm_min_accuracy` / `rm_min_auc`; 0 = no gate); the
    held-out split is the corpus's own (or the policy samples')."""
    acc, auc = rm_summary.get("heldout_accuracy"), rm_summary.get("heldout_auc")
    failed = [f"{name} {value if value is not None else 'n/a'} < {floor}"
              for name, value, floor in (("held-out accuracy", acc, min_accuracy),
                                         ("held-out ROC AUC", auc, min_auc))
              if floor and (value is None or value < floor)]
    if failed:
        raise IncompetentRM(
            "the static RM failed the competence gate (" + "; ".join(failed) + f", on "
            f"{rm_summary.get('num_heldout')} held-out triples): stopping before any run of an RM "
            "arm, as the pre-registered plan says; report this instead of the contrasts")


def arm_runner(config, policy_dir: str, rm_dir: str, heldout: str, probes: str = "",
               diagnostic_questions: int = 0) -> run_store.RunFn:
    """run(arm, seed, run_dir) -> the summary of one `coop-train` run of the experiment. With
    `diagnostic_questions`, the run's final policy is then sampled again on that many training
    questions (`hacked_rollouts.diagnose_run`) into run_dir/rollouts.json, kept with the run:
    its checkpoints are not. It needs the static RM (`rm_dir`)."""
    def run(arm: str, seed: int, run_dir: str) -> dict:
        cpu = time.process_time()
        c = run_config(config, arm, seed, policy_dir, rm_dir, heldout, probes)
        summary = loop.train(c, run_dir)
        # CPU seconds of this process (all its threads): wall time on a shared machine says
        # little about the cost on dedicated cores
        summary = summary | {"arm": arm, "negative": ARMS[arm][1],
                             "cpu_seconds": time.process_time() - cpu, "cpu": cpu_model()}
        if diagnostic_questions and rm_dir and "stopped_at" not in summary:
            from coop_jax.projects.reward_hacking.hacked_rollouts import diagnose_run
            found = diagnose_run(c, rm_dir, run_dir, arm, seed, diagnostic_questions)
            with open(os.path.join(run_dir, "rollouts.json"), "w") as fh:
                json.dump(found, fh, indent=1)
        return summary
    return run


class NoHeadroom(RuntimeError):
    """The rule arm's first seed already reached the headroom ceiling: the plan moves every arm
    to its harder setting, so no other run of this setting may start."""


def headroom_gate(rule_summary: dict, ceiling: float, results_dir: str, commit: bool) -> dict:
    """The plan's headroom check on the rule arm alone, before any RM arm runs: raise
    `NoHeadroom` when its final held-out gold accuracy >= `ceiling`
    (`experiment.headroom_max_accuracy`). The decision is written (and committed) to
    `<results_dir>/plan/headroom.json` either way."""
    from coop_jax.projects.reward_hacking.analysis import final_gold
    accuracy, strict = final_gold(rule_summary)
    decision = {"rule_seed": rule_summary.get("seed"), "final_accuracy": accuracy,
                "strict_gold": strict, "ceiling": ceiling,
                "choice": "no headroom: move to the harder setting" if accuracy >= ceiling
                else "headroom: this setting stays"}
    if results_dir:
        results_page.keep_json(decision, results_dir, "headroom.json", commit,
                               f"reward-hacking plan: headroom check ({decision['choice']}, "
                               f"rule final accuracy {accuracy:.3f})")
    log.info("headroom check: %s", json.dumps(decision))
    if accuracy >= ceiling:
        raise NoHeadroom(
            f"rule seed {decision['rule_seed']} reached final accuracy {accuracy:.3f} >= "
            f"experiment.headroom_max_accuracy {ceiling}: the plan moves every arm to its harder "
            "setting (its own workdir and results_dir, with headroom_max_accuracy=0); "
            "no RM arm of this setting runs")
    return decision


def run_order(expected: dict[str, list[int]]) -> list[tuple[str, int]]:
    """Seed by seed (every arm of the first seed, then the next), so an experiment cut short
    still has paired seeds; within a seed in the order of `experiment.methods`."""
    seeds = sorted({s for ss in expected.values() for s in ss})
    return [(arm, s) for s in seeds for arm, ss in expected.items() if s in ss]


def earlier_attempts(results_dir: str) -> dict[str, list[str]]:
    """"attempt N" -> the kept run folders of `<results_dir>/attempt_N/runs`: an attempt of the
    plan that could not be finished, reported beside this one and never pooled with it."""
    from coop_jax.projects.reward_hacking.report import kept_run_dirs
    found = {}
    for folder in sorted(glob.glob(os.path.join(results_dir, "attempt_*", "runs"))):
        found[os.path.basename(os.path.dirname(folder)).replace("_", " ")] = kept_run_dirs(folder)
    return found


def start_policy(config, workdir: str, results_dir: str, commit: bool) -> str:
    """The plan's SFT start in `<workdir>/sft_policy`: the one kept with the results
    (`plan_inputs`), else trained here and kept."""
    policy_dir = os.path.join(workdir, "sft_policy")
    rebuild = config.experiment.get("rebuild_inputs", False)
    if results_dir and not rebuild and plan_inputs.restore_start_policy(results_dir, policy_dir):
        return policy_dir
    sft_policy(config, policy_dir)
    if results_dir and rebuild and plan_inputs.restore_start_policy(results_dir, policy_dir):
        return policy_dir  # the rebuild is the kept start policy (else InputMismatch)
    if results_dir:  # results kept before the inputs were: they must be this start's
        results_page.check_start_policy(rm_corpus.policy_digest(policy_dir), results_dir)
        plan_inputs.keep(policy_dir, None, results_dir, commit)
    return policy_dir


def static_rm_of_plan(config, workdir: str, policy_dir: str, rm_dir: str, results_dir: str,
                      commit: bool) -> dict:
    """The plan's static RM in `rm_dir` (a checkpoint, its held-out triples, rm_summary.json):
    the one kept with the results (`plan_inputs`), else built here (the corpus, the training,
    the portable encoding) and kept before the competence gate; its summary."""
    rebuild = config.experiment.get("rebuild_inputs", False)
    if results_dir and not rebuild:
        kept = plan_inputs.restore_static_rm(config, results_dir, rm_dir)
        if kept is not None:
            return kept
    trained_dir = os.path.join(workdir, "static_rm")
    train_path, heldout_path = static_rm_data(config, policy_dir, trained_dir)
    static_rm(config, train_path, heldout_path, trained_dir)
    summary = plan_inputs.portable_rm(config, trained_dir, train_path, heldout_path, rm_dir)
    kept_summary = os.path.join(plan_inputs.inputs_dir(results_dir), "rm_summary.json")
    if results_dir and rebuild and os.path.exists(kept_summary):
        # the rebuild must be the kept RM (corpus, trained and decoded parameters, base)
        results_page.check_rebuild(os.path.join(rm_dir, "rm_summary.json"), kept_summary)
        log.info("rebuild check: the rebuilt static RM has the kept digests")
    elif results_dir:  # kept before the gate, so a failed gate is on record too
        results_page.keep_static_rm(rm_dir, results_dir, commit)
        plan_inputs.keep(policy_dir, rm_dir, results_dir, commit)
    return summary


def main(config, workdir: str, command: str | None = None, commit: bool = False,
         plan: dict[str, list[int]] | None = None) -> dict:
    """The whole experiment (module doc); `commit`: commit each finished run's kept summary
    (`experiment.results_dir`, `run_store`) as it ends. `plan` (arm -> seeds, default: this
    driver's selection) is the whole experiment's runs: the results page, which reports every
    kept run, is PARTIAL while any of them is missing, whatever this driver ran."""
    e = config.experiment
    expected = expected_runs(config)
    results_dir = e.get("results_dir", "")
    if commit and results_dir:
        run_store.ensure_committable(results_dir)
    runs = run_order(expected)
    policy_dir = start_policy(config, workdir, results_dir, commit)
    probes = probe_set(config, os.path.join(workdir, "probes.jsonl"))
    store = dict(workdir=workdir, settings=run_store.settings(config),
                 results_dir=results_dir, commit=commit)
    run_dirs = []
    ceiling = e.get("headroom_max_accuracy", 0.0)
    if ceiling and expected.get("rule"):
        # the rule arm needs no RM: the headroom check comes before the corpus and the RM (and
        # so this run gets no rollout diagnostic, which scores with the static RM)
        first = ("rule", expected["rule"][0])
        run_dirs += run_store.run_all([first], arm_runner(config, policy_dir, "", "", probes),
                                      **store)
        headroom_gate(run_store.read_summary(run_dirs[0]), ceiling, results_dir, commit)
        runs.remove(first)
    rm_dir, heldout_path = "", ""
    if any(ARMS[m][0] in rewards.rm_reward_types() for m in expected):
        rm_dir = os.path.join(workdir, "static_rm_portable")
        rm_summary = static_rm_of_plan(config, workdir, policy_dir, rm_dir, results_dir, commit)
        heldout_path = os.path.join(rm_dir, plan_inputs.HELDOUT)
        competence_gate(rm_summary, e.get("rm_min_accuracy", 0.0), e.get("rm_min_auc", 0.0))
    run_dirs += run_store.run_all(runs, arm_runner(config, policy_dir, rm_dir, heldout_path,
                                                   probes, e.get("rollout_diagnostic", 0)),
                                  **store)
    from coop_jax.projects.reward_hacking.report import kept_run_dirs, write_hacking_report
    beside = {}
    if results_dir:  # the page reports every kept run, not only this driver's selection
        run_dirs = kept_run_dirs(os.path.join(results_dir, "runs"))
        expected = plan or expected
        beside = earlier_attempts(results_dir)
    report = write_hacking_report(run_dirs, workdir, rm_dir=rm_dir, expected=expected,
                                  command=command, beside=beside)
    if results_dir:
        results_page.publish(workdir, results_dir, commit)
    return report


# the experiment section's fields, for --print_config (configs/toy_hacking.py sets them)
EXPERIMENT_FIELD_DOCS = {
    "experiment.methods": f"comma-separated arms to run, of {', '.join(ARMS)}",
    "experiment.seeds": "comma-separated seeds; every arm runs on each (random: the first "
                        "random_seeds)",
    "experiment.random_seeds": "the random arm runs on the first this many seeds (0: all)",
    "experiment.rm_questions": "training questions the static RM's triples are made from",
    "experiment.samples_per_question": "policy samples per question for the static RM's triples",
    "experiment.heldout_fraction": "fraction of those questions held out to score the static RM",
    "experiment.rm_corpus": f"the static RM's data, one of {list(RM_CORPORA)}",
    "experiment.corpus_sft_policies": "the offline corpus's character SFT generators, "
                                      "'seed=S[,corrupt=F][,steps=N]; ...' (none is the start)",
    "experiment.corpus_sft_questions": "corpus questions each SFT generator is sampled on",
    "experiment.corpus_sft_samples": "samples per question of each SFT generator",
    "experiment.headroom_max_accuracy": "rule seed 0 at or above this final accuracy stops the "
                                        "driver before any RM arm (0: no check)",
    "experiment.rm_min_accuracy": "the static RM's competence gate: held-out accuracy floor",
    "experiment.rm_min_auc": "the static RM's competence gate: held-out ROC AUC floor",
    "experiment.probe_questions": "held-out questions of the hack probes (0: no probes)",
    "experiment.results_dir": "where each finished run's summary is kept (and committed); a "
                              "rerun skips the runs kept there",
    "experiment.rollout_diagnostic": "after each run, sample its final policy on this many "
                                     "training questions and keep what the RMs make of it "
                                     "(rollouts.json; 0: no diagnostic)",
    "experiment.rebuild_inputs": "rebuild the start policy and static RM even when kept, and "
                                 "stop unless they have the kept digests",
}


def define_flags(fv, argv: list[str]) -> None:
    from absl import flags
    from ml_collections import config_flags

    config_flags.DEFINE_config_file("config", "configs/toy_hacking.py", "the experiment's config "
                                    "file (its own methods and seeds are the plan)",
                                    flag_values=fv, sys_argv=argv)
    flags.DEFINE_string("workdir", "runs/hacking", "working folder: the start policy, the static "
                        "RM, every run's checkpoints and the report", flag_values=fv)
    flags.DEFINE_bool("commit", False, "git-commit each finished run's summary folder "
                      "(config.experiment.results_dir/runs/<arm>_s<seed>) as it ends",
                      flag_values=fv)
    console.define_print_config(fv)


def check_config(config) -> None:
    """ValueError naming the field: an unknown arm or a bad seed list, or a setting that
    `coop-train` would refuse in any arm's run."""
    for arm in expected_runs(config):
        setup.validate_config(run_config(config, arm, 0, "", "", ""))


def cli(argv: list[str]) -> dict:
    """Parse `argv`, check the config before anything loads, run the experiment (`main`), print
    and return its report (`--print_config`: print the config, return {})."""
    from ml_collections import config_flags

    fv = console.parse_flags(define_flags, argv, __doc__)
    if fv.print_config:
        console.print_config(fv.config, config_lib.base_config(),
                             lambda path: EXPERIMENT_FIELD_DOCS.get(path)
                             or config_lib.field_doc(path))
        return {}
    with console.usage_errors():
        check_config(fv.config)
        # the plan is the config file's own selection, not a one-arm or one-seed override's
        plan = expected_runs(config_lib.load_config_file(
            config_flags.get_config_filename(fv["config"])))
    console.log_with_times()
    command = "python -m coop_jax.projects.reward_hacking " + shlex.join(argv[1:])
    try:
        report = main(fv.config, fv.workdir, command, commit=fv.commit, plan=plan)
    except (run_store.RunStopped, plan_inputs.InputMismatch,
            results_page.RebuildMismatch, IncompetentRM, NoHeadroom) as stopped:
        raise SystemExit(f"reward_hacking: {stopped}") from None
    print(json.dumps(report, indent=2, default=str))
    return report


def run() -> None:
    console.run_console(cli, "coop_jax.projects.reward_hacking")


if __name__ == "__main__":
    run()
