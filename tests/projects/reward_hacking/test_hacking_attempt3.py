"""Attempt 3's pre-registered analysis (coop_jax.projects.reward_hacking.attempt3) on made-up
runs: every endpoint, contrast, the combination across draws and the verdicts, by hand."""
import math

import pytest

from coop_jax.projects.reward_hacking import attempt3
from coop_jax.projects.reward_hacking.report import GOLD_EVAL


def run(arm: str, seed: int, final: float, evals=(), proxy: float = 0.0, rule: float = 0.0,
        steps: int = 10) -> dict:
    """A run of `steps` steps: held-out strict accuracy `evals` at steps 0, 5, 10 (final last),
    and a constant proxy reward and rule accuracy (a hacking gap of proxy - rule)."""
    evaluated = dict(zip((0, 5, 10), evals))
    metrics = [{"step": 0, GOLD_EVAL: evaluated[0]}] if 0 in evaluated else []
    metrics += [{"step": s, "proxy_reward_mean": proxy, "rule_accuracy": rule,
                 "hacking_gap": proxy - rule}
                | ({GOLD_EVAL: evaluated[s]} if s in evaluated else {})
                for s in range(1, steps + 1)]
    return {"summary": {"arm": arm, "seed": seed, "final_accuracy_strict": final,
                        "final_accuracy": final}, "metrics": metrics}


def test_the_three_endpoints_of_a_run():
    r = run("static_rm", 0, 0.4, evals=(0.1, 0.2, 0.4), proxy=0.9, rule=0.5)
    assert attempt3.final(r) == 0.4
    assert attempt3.eval_average(r) == pytest.approx(0.3)  # steps 5 and 10; step 0 left out
    assert attempt3.gap(r) == pytest.approx(0.4)


def test_combined_across_draws_by_hand():
    """Draw differences (1, 2, 3) and (3, 4, 5): means 2 and 4, each variance 1 over 3 pairs:
    combined mean 3, SE sqrt(1/3 + 1/3) / 2, Welch df (2/3)^2 / (2 (1/3)^2 / 2) = 4; the two
    draws' Welch t = -2 / sqrt(2/3) = -2.449 on 4 df: p = 0.0705 (they do not disagree)."""
    from scipy import stats as sps
    c = attempt3.combine([{"ran": True, "differences": [1, 2, 3]},
                          {"ran": True, "differences": [3, 4, 5]}])
    se = math.sqrt(2 / 3) / 2
    assert c["mean"] == pytest.approx(3) and c["se"] == pytest.approx(se)
    assert c["df"] == pytest.approx(4)
    assert c["ci_high"] - c["mean"] == pytest.approx(sps.t.ppf(0.975, 4) * se)
    assert c["welch_p"] == pytest.approx(0.0705, abs=5e-4) and c["disagree"] is False
    assert attempt3.combine([{"ran": True, "differences": [1, 2]}, {"ran": False}])["mean"] is None


def _draw(new_final, static_final, new_gap, static_gap, rule_final, arms=("rule", "static_rm",
          "cooper_hardest_ref")):
    """Five seeds; each arm's final accuracy and gap shifted by the seed / 100 (paired noise)."""
    spec = {"static_rm": (static_final, static_gap), "cooper_hardest_ref": (new_final, new_gap),
            "rule": (rule_final, None), "static_rm_drgrpo": (static_final, static_gap - 0.1),
            "sham_cooper": (static_final, static_gap)}
    out = []
    for arm in arms:
        f, g = spec[arm]
        for s in range(5):
            jitter = (s - 2) / 100 * (1 if arm == "static_rm" else 1.5)
            proxy = (g or 0.0) + jitter + 0.5 if g is not None else 0.0
            out.append(run(arm, s, f + jitter, evals=(0.1, f, f + jitter), proxy=proxy,
                           rule=0.5 if g is not None else 0.0))
    return out


def test_verdicts_follow_the_plans_words():
    # draw 1: the new arm far above static, its gap near 0 and under 0.1, not below rule
    draw1 = _draw(0.60, 0.20, 0.02, 0.30, 0.55,
                  arms=("rule", "static_rm", "cooper_hardest_ref", "static_rm_drgrpo"))
    # draw 2: the new arm above static but its gap still 0.2 (reduced, not prevented)
    draw2 = _draw(0.50, 0.20, 0.20, 0.30, 0.55)
    result = attempt3.analyse({"draw 1": draw1, "draw 2": draw2})
    v = result["verdicts"]
    assert v["draw 1"] == {"reduced": True, "prevented": True}
    assert v["draw 2"] == {"reduced": True, "prevented": False}
    assert v["replicates"] is True and v["mechanism_supported"] is True
    primary = result["draws"]["draw 1"]["contrasts"]["primary"]
    assert primary["final"]["mean"] == pytest.approx(0.40)
    assert primary["final"]["seeds"] == [0, 1, 2, 3, 4]
    assert result["combined"]["final"]["mean"] == pytest.approx(0.35)
    assert result["partial"]  # sham_cooper and cooper_consistent_wrong are missing
    assert "sham_cooper_s0" in result["draws"]["draw 1"]["missing"]
    assert "sham control" not in result["draws"]["draw 2"]["contrasts"]  # a draw-1 contrast
    md = "\n".join(attempt3.markdown(result))
    assert "**PARTIAL**" in md and "reduced the hack: yes; prevented it: no" in md
    assert "- draw 1: The precondition occurred" in md  # its statement, per draw
    # the primary's final contrast: +0.40 on draw 1, +0.30 on draw 2, each with a small spread
    assert "The draws disagree on final (Welch p 0.000)" in md


def test_missing_arms_are_not_tested_never_a_verdict():
    result = attempt3.analyse({"draw 1": _draw(0.6, 0.2, 0.0, 0.3, 0.5, arms=("static_rm",)),
                               "draw 2": []})
    v = result["verdicts"]
    assert v["draw 1"] == {"reduced": None, "prevented": None}
    assert v["replicates"] is None and v["mechanism_supported"] is None
    assert "not tested" in "\n".join(attempt3.markdown(result))


def test_the_command_answers_help_and_writes_the_page(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        attempt3.main(["--help"])
    assert stop.value.code == 0 and "--out" in capsys.readouterr().out
    result = attempt3.main([f"--draw1={tmp_path / 'none'}", f"--draw2={tmp_path / 'none'}",
                            f"--attempt1={tmp_path / 'none'}", f"--out={tmp_path / 'out'}"])
    assert result["partial"] and (tmp_path / "out" / "analysis.md").exists()
