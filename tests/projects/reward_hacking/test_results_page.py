"""The reward-hacking results page: the report merged below the plan, the static RM kept."""
import json
import subprocess

import pytest

from coop_jax.projects.reward_hacking import results_page

PAGE = """# Experiment

## Pre-registered plan

The plan.

---

## The earlier experiment

Old results.
"""

REPORT = """# Reward-hacking experiment (PARTIAL)

## Runs

![training curves](curves.png)
![on-policy RM accuracy](onpolicy_rm.png)
"""


def test_the_report_goes_below_the_plan_and_a_later_merge_replaces_only_it():
    section = results_page.as_section(REPORT, "plan")
    assert section.splitlines()[0] == "## Results of the plan (PARTIAL)"
    assert "### Runs" in section and "](plan/curves.png)" in section
    assert "](plan/onpolicy_rm.png)" in section
    once = results_page.merge_below_plan(PAGE, section)
    plan, rest = once.split(results_page.BEGIN)
    assert plan == PAGE.split("---")[0]
    assert rest.index("### Runs") < rest.index(results_page.END) < rest.index("---")
    assert once.endswith("## The earlier experiment\n\nOld results.\n")
    twice = results_page.merge_below_plan(once, "## Results of the plan\n\nComplete.")
    assert twice.count(results_page.BEGIN) == 1 and "Complete." in twice
    assert "### Runs" not in twice and twice.startswith(plan)
    assert twice.endswith("## The earlier experiment\n\nOld results.\n")
    again = results_page.merge_below_plan(twice, "## Results of the plan\n\nComplete.")
    assert again == twice  # republishing the same section changes nothing
    broken = once.replace(results_page.END, "")
    with pytest.raises(ValueError, match="end marker"):
        results_page.merge_below_plan(broken, "x")


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def test_publish_and_keep_static_rm_commit_only_the_results(tmp_path):
    repo = tmp_path / "repo"
    results = repo / "docs" / "results"
    results.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (results / "report.md").write_text(PAGE)
    (repo / "unrelated.txt").write_text("not a result")
    rm_dir, workdir = tmp_path / "static_rm", tmp_path / "work"
    rm_dir.mkdir()
    workdir.mkdir()
    (rm_dir / "rm_summary.json").write_text(json.dumps({"heldout_accuracy": 0.5}))
    (rm_dir / "corpus_manifest.json").write_text("{}")
    (rm_dir / "weights.safetensors").write_text("big")  # never kept
    kept = results_page.keep_static_rm(str(rm_dir), str(results), commit=True)
    assert sorted(p.name for p in (results / "plan" / "static_rm").iterdir()) == [
        "corpus_manifest.json", "rm_summary.json"]
    assert kept.endswith("plan/static_rm")
    commits = _git(repo, "rev-list", "--count", "HEAD")
    results_page.keep_static_rm(str(rm_dir), str(results), commit=True)  # a resumed driver
    assert _git(repo, "rev-list", "--count", "HEAD") == commits  # nothing new: no commit
    (workdir / "report.md").write_text(REPORT)
    (workdir / "curves.png").write_bytes(b"png")
    (workdir / "report.json").write_text("{}")
    results_page.publish(str(workdir), str(results), commit=True)
    page = (results / "report.md").read_text()
    assert page.startswith("# Experiment") and "## Results of the plan (PARTIAL)" in page
    assert (results / "plan" / "curves.png").read_bytes() == b"png"
    committed = _git(repo, "log", "--name-only", "--format=%s").split()
    assert "docs/results/plan/static_rm/rm_summary.json" in committed
    assert "docs/results/report.md" in committed and "docs/results/plan/curves.png" in committed
    assert "unrelated.txt" not in committed and "weights.safetensors" not in " ".join(committed)
    assert _git(repo, "status", "--porcelain").strip() == "?? unrelated.txt"


def test_a_rebuilt_static_rm_must_match_the_kept_digests(tmp_path):
    """Each new machine rebuilds the RM (its weights are not committed): a rebuild with other
    digests than the kept summary's stops before it overwrites them."""
    rm_dir, results = tmp_path / "static_rm", tmp_path / "results"
    rm_dir.mkdir()
    digests = {"train_triples": "aa", "heldout_triples": "bb", "rm_params": "cc"}
    (rm_dir / "rm_summary.json").write_text(json.dumps({"digests": digests}))
    kept = results_page.keep_static_rm(str(rm_dir), str(results), commit=False)
    assert results_page.check_rebuild(str(rm_dir / "rm_summary.json"),
                                      f"{kept}/rm_summary.json") == digests
    results_page.keep_static_rm(str(rm_dir), str(results), commit=False)  # the same: kept again
    (rm_dir / "rm_summary.json").write_text(json.dumps({"digests": digests | {"rm_params": "dd"}}))
    with pytest.raises(results_page.RebuildMismatch, match="rm_params dd != kept cc"):
        results_page.keep_static_rm(str(rm_dir), str(results), commit=False)
    assert json.loads((results / "plan" / "static_rm" / "rm_summary.json").read_text())[
        "digests"]["rm_params"] == "cc"


def test_a_rebuilt_start_policy_must_match_the_kept_manifest(tmp_path):
    static = tmp_path / "plan" / "static_rm"
    results_page.check_start_policy("aa", str(tmp_path))  # nothing kept: nothing to check
    static.mkdir(parents=True)
    (static / "corpus_manifest.json").write_text(json.dumps(
        {"rl_start_policy_digests": {"settings": "s", "params": "aa"}}))
    results_page.check_start_policy("aa", str(tmp_path))
    with pytest.raises(results_page.RebuildMismatch, match="digest bb.*started from \\(aa"):
        results_page.check_start_policy("bb", str(tmp_path))
