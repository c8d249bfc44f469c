"""run_store.git_commit: the named paths only, in the repository that holds them, from any
working directory (an experiment run from a stable clone commits into another checkout)."""
import subprocess

from coop_jax.projects import run_store


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout


def test_commit_takes_only_the_named_paths_from_another_directory(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "results" / "run_s0").mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    (repo / "results" / "run_s0" / "summary.json").write_text("{}")
    (repo / "results" / "report.md").write_text("report")
    (repo / "unrelated.txt").write_text("not mine")
    monkeypatch.chdir(tmp_path)  # outside the repository
    run_store.git_commit([str(repo / "results" / "run_s0"), str(repo / "results" / "report.md")],
                         "one run")
    assert _git(repo, "log", "--format=%s") == "one run\n"
    assert sorted(_git(repo, "show", "--name-only", "--format=").split()) == [
        "results/report.md", "results/run_s0/summary.json"]
    assert "?? unrelated.txt" in _git(repo, "status", "--porcelain")
    run_store.git_commit(str(repo / "results" / "run_s0"), "unchanged: no commit")
    assert _git(repo, "log", "--format=%s") == "one run\n"
