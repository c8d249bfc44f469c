"""The post-hoc rollout diagnostic of the reward-hacking experiment: its tables from made-up
rollouts, and its command line."""
import numpy as np
import pytest

from coop_jax.projects.reward_hacking import hacked_rollouts as hr

RECORDS = [{"question": "2+3", "reference": "5"}, {"question": "4+1", "reference": "5"}]
TEXTS = [["2+3=5 #### 5", "2+3=5 #### 6", "2+3=6 #### 6"],   # correct, final_mismatch, cons.
         ["4+1=5", "4+1=6 #### 6", "4+1=5 #### 7"]]          # no_answer, consistent, mismatch
TRUNCATED = [[False, False, False], [True, False, False]]
STATIC = np.array([3.0, -2.0, 1.0, 0.5, -1.0, -3.0])


def _rows():
    return hr.rollout_rows(RECORDS, TEXTS, TRUNCATED, {"static": STATIC})


def test_rows_carry_kind_gold_truncation_and_scores():
    rows = _rows()
    assert [r["kind"] for r in rows] == ["correct", "final_mismatch", "consistent_wrong",
                                         "no_answer", "consistent_wrong", "final_mismatch"]
    assert [r["correct"] for r in rows] == [True, False, False, False, False, False]
    assert [r["truncated"] for r in rows] == [False] * 3 + [True, False, False]
    assert [r["static"] for r in rows] == STATIC.tolist()


def test_summary_acceptance_rewards_and_the_first_wrong_answer_of_all_wrong_groups():
    s = hr.summarise(_rows())
    assert s["rollouts"] == 6 and s["groups"] == 2
    assert s["gold_accuracy"] == pytest.approx(1 / 6) and s["truncated"] == pytest.approx(1 / 6)
    assert s["kinds"] == pytest.approx({"correct": 1 / 6, "final_mismatch": 2 / 6,
                                        "consistent_wrong": 2 / 6, "no_answer": 1 / 6})
    v = s["static"]
    assert v["false_accept"] == pytest.approx(2 / 5)  # scores 1.0 and 0.5 of the 5 wrong ones
    assert v["by_kind"]["consistent_wrong"]["accepted"] == 0.5
    assert v["by_kind"]["correct"]["reward"] == pytest.approx(1 / (1 + np.exp(-3.0)))
    # only the second group has no correct rollout; its top score (0.5) is the no_answer one
    assert v["all_wrong_groups"] == 1 and v["first_in_all_wrong"] == {"no_answer": 1.0}
    assert "own" not in s


def test_pooled_means_over_seeds_and_the_markdown_tables():
    one = hr.summarise(_rows())
    rows = hr.rollout_rows(RECORDS, TEXTS, TRUNCATED, {"static": -STATIC, "own": STATIC})
    two = hr.summarise(rows)
    p = hr.pooled([one, two])
    assert p["seeds"] == 2 and p["gold_accuracy"] == pytest.approx(1 / 6)
    assert p["static"]["false_accept"] == pytest.approx((2 / 5 + 3 / 5) / 2)
    assert p["own"]["false_accept"] == pytest.approx(2 / 5)  # only the second seed has it
    assert np.isnan(p["static"]["accepted"]["other"])  # no rollout of that kind
    md = "\n".join(hr.markdown({"start": p}, "python -m x"))
    assert "not part of the pre-registered analysis" in md and "python -m x" in md
    assert "| start | 2 | 0.17 | 0.17 |" in md
    assert md.count("in groups with no correct rollout") == 2  # the static RM and the own RM


def test_the_per_seed_table_has_a_row_per_arm_and_seed():
    two = hr.summarise(hr.rollout_rows(RECORDS, TEXTS, TRUNCATED,
                                       {"static": -STATIC, "own": STATIC}))
    runs = {"static_rm": [hr.summarise(_rows()) | {"seed": 3}],
            "cooper": [two | {"seed": 1}, hr.summarise(_rows()) | {"seed": 0}]}
    md = hr.per_seed_markdown(runs)
    rows = [line for line in md if line.startswith("| ") and "seed" not in line]
    # static_rm: 1 of 6 correct, 1 of 6 no answer, 1 all-wrong group, static accepts 2 of 5 wrong
    assert rows[0] == "| static_rm | 3 | 0.17 | 0.17 | 1 | 0.40 | — |"
    # the Cooper arm's seeds come in seed order; seed 1's static RM (-STATIC) accepts 3 of 5 wrong
    # and its own RM (STATIC) 2 of 5; seed 0 has no own RM
    assert rows[1:] == ["| cooper | 0 | 0.17 | 0.17 | 1 | 0.40 | — |",
                        "| cooper | 1 | 0.17 | 0.17 | 1 | 0.60 | 0.40 |"]


def test_page_only_rewrites_the_rerun_page_from_the_kept_diagnostics(tmp_path):
    import json

    from coop_jax.projects.reward_hacking import diagnostic_reruns

    for arm in ("start", "static_rm"):
        (tmp_path / "runs" / f"{arm}_s0").mkdir(parents=True)
        found = hr.summarise(_rows()) | {"seed": 0, "arm": arm}
        (tmp_path / "runs" / f"{arm}_s0" / "rollouts.json").write_text(json.dumps(found))
    arms = diagnostic_reruns.cli(["prog", "--config=configs/toy_hacking_draw2.py",
                                  "--config.experiment.methods=static_rm,rule",
                                  "--config.experiment.seeds=0", f"--out={tmp_path}",
                                  "--page_only"])
    assert sorted(arms) == ["start", "static_rm"] and arms["static_rm"]["seeds"] == 1
    text = (tmp_path / "README.md").read_text()
    assert "PARTIAL: still to rerun rule seeds [0]" in text
    assert "| static_rm | 0 | 0.17 | 0.17 | 1 | 0.40 | — |" in text  # the per-seed table
    command = json.loads((tmp_path / "rollouts.json").read_text())["command"]
    assert command.endswith(f"--config.experiment.seeds=0 --out={tmp_path}")  # no --page_only


@pytest.mark.parametrize("args, message", [
    (["--seeds=a"], "--seeds must be non-negative integers"),
    (["--arms=rule,nope"], "--arms: unknown arm(s) ['nope']"),
    (["--questions=0"], "--questions must be >= 1"),
    (["--config=missing.py"], "--config: no such file"),
])
def test_bad_arguments_are_one_line_naming_the_flag(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as stop:
        hr.main(["--out", str(tmp_path / "o"), "--workdir", str(tmp_path), *args])
    assert stop.value.code == 2 and message in capsys.readouterr().err


def test_a_workdir_without_the_driver_outputs_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        hr.main(["--out", str(tmp_path / "o"), "--workdir", str(tmp_path)])
    assert "--workdir: no sft_policy/" in capsys.readouterr().err


def test_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit) as stop:
        hr.main(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    assert all(f in out for f in ("--workdir", "--arms", "--seeds", "--questions", "--out"))
