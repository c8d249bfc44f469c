"""`python -m coop_jax.projects.restore`: files kept in the repository's history, not its tree,
brought back by one command that checks their sha256; one line on a clone without them."""
import json
import os
import subprocess
import sys

import pytest
from absl.app import UsageError
from conftest import REPO

from coop_jax.projects import restore


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def repo(tmp_path):
    """A repository whose big input was recorded, then removed from the tree (two commits)."""
    repo = tmp_path / "repo"
    inputs = repo / "docs" / "results" / "exp" / "inputs"
    inputs.mkdir(parents=True)
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@t")
    _git(repo, "config", "user.name", "t")
    (inputs / "big.bin").write_bytes(os.urandom(5000))
    (inputs / "triples.jsonl").write_text('{"a": 1}\n')
    (inputs / "README.md").write_text("stays\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "experiment")
    restore.main(["restore", f"--repo={repo}", "--record", "docs/results/exp/inputs/big.bin",
                  "docs/results/exp/inputs/triples.jsonl"])
    _git(repo, "rm", "-q", "docs/results/exp/inputs/big.bin",
         "docs/results/exp/inputs/triples.jsonl")
    _git(repo, "add", restore.MANIFEST)
    _git(repo, "commit", "-q", "-m", "kept in history")
    return repo


def test_a_folder_restores_its_files_checked_and_only_once(repo):
    kept = {e["path"]: e for e in json.loads((repo / restore.MANIFEST).read_text())["files"]}
    assert set(kept) == {"docs/results/exp/inputs/big.bin",
                         "docs/results/exp/inputs/triples.jsonl"}
    done = restore.main(["restore", f"--repo={repo}", "docs/results/exp/inputs/"])
    assert sorted(done) == sorted((p, "restored") for p in kept)
    for path, e in kept.items():
        assert restore.sha256((repo / path).read_bytes()) == e["sha256"]
    assert restore.main(["restore", f"--repo={repo}"]) == [(p, "present") for p in sorted(kept)]
    (repo / "docs/results/exp/inputs/big.bin").write_bytes(b"another")
    with pytest.raises(UsageError, match="big.bin exists and is not the kept file"):
        restore.main(["restore", f"--repo={repo}", "docs/results/exp/inputs/big.bin"])
    with pytest.raises(UsageError, match="nothing/here: no file kept in the history is there"):
        restore.main(["restore", f"--repo={repo}", "nothing/here"])


def test_a_shallow_clone_gets_one_line_naming_the_fetch(repo, tmp_path):
    """`git clone --depth 1` lacks the removed files' objects: the command prints one line (no
    traceback) naming the first missing file and `git fetch --unshallow`, and exits 2."""
    shallow = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow)],
                   check=True)
    done = subprocess.run([sys.executable, "-m", "coop_jax.projects.restore",
                           f"--repo={shallow}"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "docs/results/exp/inputs/big.bin (and 1 more)" in lines[0]
    assert "shallow" in lines[0] and "git fetch --unshallow" in lines[0]
    assert not (shallow / "docs/results/exp/inputs/big.bin").exists()


def test_the_repository_manifest_names_files_that_its_history_holds():
    """Every file this repository keeps in its history is absent from the tree (or restored, and
    git-ignored), and its blob is the one its commit held at that path."""
    entries = restore.read_manifest()
    assert entries, "docs/results/kept_in_history.json lists no file"
    if _git(REPO, "rev-parse", "--is-shallow-repository").strip() == "true":
        pytest.skip("a shallow clone holds no history")
    tracked = set(_git(REPO, "ls-files", "docs/results").splitlines())
    for e in entries:
        assert e["path"] not in tracked, f"{e['path']} is still in the tree"
        assert _git(REPO, "rev-parse", f"{e['commit']}:{e['path']}").strip() == e["blob"]
        assert _git(REPO, "check-ignore", "--no-index", e["path"]).strip() == e["path"]
