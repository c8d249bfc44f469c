"""The tree travels: the files git tracks fit the 48 MiB budget, so a fresh clone's checkout (and
the copy of the working tree that goes to an accelerator host, limited to 64 MiB) stays small.

Where a change goes over: keep JSON-lines results compressed (`coop_jax.jsonl.keep_file`), an RM
a config starts from compact (`python -m coop_jax.checkpoint.portable compact`), and a finished
experiment's bulky inputs in the history (`python -m coop_jax.projects.restore --record PATH`,
then `git rm`); docs/experiments.md, "Files kept in the history, not the tree"."""
import subprocess

import pytest
from conftest import REPO

BUDGET = 48 * 2 ** 20  # bytes


def tracked_sizes() -> list[tuple[int, str]]:
    """(bytes, path) of every file in git's index (what a commit ships), largest first."""
    staged = subprocess.run(["git", "-C", str(REPO), "ls-files", "--stage", "-z"],
                            capture_output=True, text=True)
    if staged.returncode != 0:
        pytest.skip(f"not a git checkout: {staged.stderr.strip()}")
    entries = [line.split("\t", 1) for line in staged.stdout.split("\0") if line]
    blobs = [(meta.split()[1], path) for meta, path in entries if meta.split()[0] != "160000"]
    sizes = subprocess.run(["git", "-C", str(REPO), "cat-file", "--batch-check=%(objectsize)"],
                           input="\n".join(blob for blob, _ in blobs) + "\n",
                           capture_output=True, text=True, check=True).stdout.split()
    return sorted(((int(size), path) for size, (_, path) in zip(sizes, blobs)), reverse=True)


def test_the_tracked_files_fit_the_budget():
    sizes = tracked_sizes()
    total = sum(size for size, _ in sizes)
    largest = "\n".join(f"  {size / 2 ** 20:7.2f} MiB  {path}" for size, path in sizes[:15])
    assert total <= BUDGET, (
        f"the tracked files take {total / 2 ** 20:.1f} MiB, over the budget of "
        f"{BUDGET / 2 ** 20:.0f} MiB (see this module's doc). The largest:\n{largest}")
