"""Bring back the bulky files of finished experiments that are kept in the repository's history,
not in its tree (the exact static RMs, training triples, a second start policy): the tree stays
small enough to travel (tests/test_tree_size.py), and every such file stays one command away.

    python -m coop_jax.projects.restore [PATH ...]
    python -m coop_jax.projects.restore --list

MANIFEST lists each file with its git blob, the commit that last held it and its sha256; a PATH
(a file or a folder, e.g. docs/results/reward_hacking/plan/inputs) restores the files under it,
none restores them all. Each file is read from the local git objects (no network), checked
against its sha256 and written to its path; a file already there with the kept bytes is left
alone. A clone without those objects (`git clone --depth 1`) gets one line saying what is
missing and how to fetch it (`git fetch --unshallow`). Restored files are git-ignored, so they
neither show as new files nor travel with a copy of the tree.

    python -m coop_jax.projects.restore --record PATH ...

(for maintainers) adds tracked files to MANIFEST before they are removed from the tree with
`git rm`.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from typing import Sequence

from absl import flags
from absl.app import UsageError

from coop_jax.console import parse_args, run_console

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join("docs", "results", "kept_in_history.json")
COMMAND = "python -m coop_jax.projects.restore"


class Missing(UsageError):
    """A kept file's git object is not in this clone."""


def _git(repo: str, *args: str, binary: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=not binary)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(repo: str = REPO) -> list[dict]:
    path = os.path.join(repo, MANIFEST)
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return json.load(fh)["files"]


def write_manifest(entries: list[dict], repo: str = REPO) -> None:
    with open(os.path.join(repo, MANIFEST), "w") as fh:
        json.dump({"about": f"files kept in the repository's history, not its tree: "
                            f"`{COMMAND} [PATH ...]` restores them (coop_jax/projects/restore.py)",
                   "files": sorted(entries, key=lambda e: e["path"])}, fh, indent=1)
        fh.write("\n")


def _relative(repo: str, path: str) -> str:
    """`path` as a repository path: relative to the working folder when that is in `repo`,
    else relative to `repo` itself ("" for the whole repository)."""
    full = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    rel = os.path.relpath(full, repo)
    if rel.startswith(os.pardir):  # not under the repository from here: a repository path
        rel = os.path.normpath(path)
    return "" if rel == os.curdir else rel.replace(os.sep, "/")


def select(entries: list[dict], paths: Sequence[str], repo: str = REPO) -> list[dict]:
    """The entries at or under each of `paths` (all when none); a path that names none of them
    is a UsageError."""
    if not paths:
        return list(entries)
    chosen = {}
    for path in paths:
        rel = _relative(repo, path)
        found = [e for e in entries if not rel or e["path"] == rel
                 or e["path"].startswith(rel.rstrip("/") + "/")]
        if not found:
            raise UsageError(f"{path}: no file kept in the history is there ({COMMAND} --list "
                             "lists them)")
        chosen.update((e["path"], e) for e in found)
    return list(chosen.values())


def _check_repo(repo: str) -> bool:
    """Whether `repo` is a shallow clone; a UsageError when it is no git checkout."""
    done = _git(repo, "rev-parse", "--is-shallow-repository")
    if done.returncode != 0:
        raise UsageError(f"{repo} is not a git checkout ({done.stderr.strip()}): the kept files "
                         "are in the repository's history; clone it with git")
    return done.stdout.strip() == "true"


def restore(entries: list[dict], repo: str = REPO) -> list[tuple[str, str]]:
    """Write each entry's file from the git objects, its sha256 checked; (path, "restored" or
    "present") for each. A missing object is a `Missing` naming the fetch that brings it; a
    different file already at the path, or an object with other bytes, a UsageError."""
    shallow = _check_repo(repo)
    missing = [e for e in entries if _git(repo, "cat-file", "-e", e["blob"]).returncode != 0]
    if missing:
        first = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        why = "this clone is shallow" if shallow else "this clone lacks that history"
        raise Missing(f"{first['path']}{more} is kept in the repository's history (blob "
                      f"{first['blob'][:12]}, commit {first['commit'][:12]}) and {why}: run "
                      f"`git fetch --unshallow` (or clone without --depth), then `{COMMAND}` "
                      "again")
    done = []
    for e in entries:
        path = os.path.join(repo, e["path"])
        if os.path.exists(path):
            with open(path, "rb") as fh:
                if sha256(fh.read()) != e["sha256"]:
                    raise UsageError(f"{e['path']} exists and is not the kept file (sha256 "
                                     f"{e['sha256'][:12]}): move it away first")
            done.append((e["path"], "present"))
            continue
        data = _git(repo, "cat-file", "blob", e["blob"], binary=True).stdout
        if sha256(data) != e["sha256"]:
            raise UsageError(f"{e['path']}: blob {e['blob'][:12]} does not have the kept sha256 "
                             f"{e['sha256'][:12]}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".part", "wb") as fh:
            fh.write(data)
        os.replace(path + ".part", path)
        done.append((e["path"], "restored"))
    return done


def record(paths: Sequence[str], repo: str = REPO) -> list[dict]:
    """Add the tracked files at or under `paths` (as HEAD has them) to MANIFEST; their
    entries."""
    entries = {e["path"]: e for e in read_manifest(repo)}
    added = []
    for path in paths:
        rel = _relative(repo, path)
        listed = _git(repo, "ls-tree", "-r", "HEAD", "--", rel).stdout.splitlines()
        if not listed:
            raise UsageError(f"{path}: no file of HEAD is there")
        for line in listed:
            meta, name = line.split("\t", 1)
            blob = meta.split()[2]
            data = _git(repo, "cat-file", "blob", blob, binary=True).stdout
            commit = _git(repo, "log", "-1", "--format=%H", "HEAD", "--", name).stdout.strip()
            entries[name] = {"path": name, "blob": blob, "commit": commit, "bytes": len(data),
                             "sha256": sha256(data)}
            added.append(entries[name])
    write_manifest(list(entries.values()), repo)
    return added


def _define(fv: flags.FlagValues, argv: list[str]) -> None:
    del argv
    d = dict(flag_values=fv)
    flags.DEFINE_boolean("list", False, "list the kept files (present or not) and exit", **d)
    flags.DEFINE_boolean("record", False, "add the tracked files under PATH to the manifest "
                         "(before removing them from the tree)", **d)
    flags.DEFINE_string("repo", REPO, "the repository checkout", **d)


def main(argv: list[str]) -> list:
    fv, rest = parse_args(_define, argv, __doc__)
    paths, repo = rest[1:], fv.repo
    if fv.record:
        if not paths:
            raise UsageError("--record needs the PATHs to record")
        added = record(paths, repo)
        print(f"recorded {len(added)} files in {MANIFEST}")
        return added
    entries = select(read_manifest(repo), paths, repo)
    if fv.list:
        for e in entries:
            there = os.path.exists(os.path.join(repo, e["path"]))
            print(f"{'present' if there else 'absent '}  {e['bytes']:>10}  {e['path']}")
        return entries
    done = restore(entries, repo)
    restored = sum(what == "restored" for _, what in done)
    print(f"{restored} files restored, {len(done) - restored} already present (sha256 checked)")
    return done


def run() -> None:
    run_console(main, COMMAND)


if __name__ == "__main__":
    run()
