"""The reward-hacking experiment's committed results page: the static RM's files as soon as it
is trained (a failed competence gate included), and the report of the kept runs merged into
`<results_dir>/report.md` below the pre-registered plan, with its figures.

The plan above the merged section, and the earlier experiment below it, are left as they are; a
later merge replaces only the section between the markers, so the page can be rewritten after
every session of a multi-session experiment.
"""
from __future__ import annotations

import json
import os
import re

from coop_jax.projects.run_store import copy_files, git_commit

BEGIN = ("<!-- results of the plan: written by coop_jax.projects.reward_hacking.driver "
         "(results_page.py); edits here are overwritten -->")
END = "<!-- end of the results of the plan -->"
PLAN_FOLDER = "plan"  # <results_dir>/plan/: the section's figures, report.json, static_rm/
FIGURES = ("curves.png", "onpolicy_rm.png", "gold_proxy_vs_kl.png")
STATIC_RM_FILES = ("rm_summary.json", "corpus_manifest.json", "rm_learning_curve.json",
                   "rm_learning_curve.png")


class RebuildMismatch(RuntimeError):
    """A rebuilt static RM is not the one kept in the results: the kept runs used the other."""


def check_rebuild(rebuilt_path: str, kept_path: str) -> dict:
    """Compare the digests (triples, parameters) of a rebuilt static RM's summary with the kept
    one's; raise `RebuildMismatch` naming what differs: every kept run scored against the kept
    RM, so a deliberate rebuild (`experiment.rebuild_inputs`) must be that one. Returns the
    digests compared ({} when nothing was kept yet)."""
    if not os.path.exists(kept_path):
        return {}
    with open(kept_path) as fh:
        kept = json.load(fh).get("digests") or {}
    with open(rebuilt_path) as fh:
        rebuilt = json.load(fh).get("digests") or {}
    differ = [f"{k} {rebuilt.get(k)} != kept {v}" for k, v in kept.items() if rebuilt.get(k) != v]
    if differ:
        raise RebuildMismatch(
            f"the rebuilt static RM is not the one in {kept_path} (" + "; ".join(differ) +
            "): the kept runs scored against that one; find what changed, or move the kept "
            "results away to start the experiment again")
    return kept


def check_start_policy(params_digest: str, results_dir: str) -> None:
    """Raise `RebuildMismatch` when the kept corpus manifest names another RL start policy
    (its parameter digest) than the rebuilt one: every kept run started from that one. XLA:CPU
    is bit-reproducible on one machine, not across CPUs, so a new machine may rebuild another."""
    path = os.path.join(results_dir, PLAN_FOLDER, "static_rm", "corpus_manifest.json")
    if not os.path.exists(path):
        return
    with open(path) as fh:
        kept = (json.load(fh).get("rl_start_policy_digests") or {}).get("params")
    if kept and kept != params_digest:
        raise RebuildMismatch(
            f"the rebuilt RL start policy (parameter digest {params_digest}) is not the one the "
            f"kept runs started from ({kept}, in {path}): XLA:CPU results differ across CPUs; "
            "continue on the machine kind that made them, carry its workdir over, or move the "
            "kept results away to start the experiment again")


def keep_static_rm(rm_dir: str, results_dir: str, commit: bool) -> str:
    """Copy the static RM's summary, corpus manifest and learning curve to
    `<results_dir>/plan/static_rm/` (committed when `commit`), after checking that a kept one
    has the same digests (`check_rebuild`); that folder."""
    dest = os.path.join(results_dir, PLAN_FOLDER, "static_rm")
    check_rebuild(os.path.join(rm_dir, "rm_summary.json"), os.path.join(dest, "rm_summary.json"))
    copy_files(rm_dir, STATIC_RM_FILES, dest, optional=True)
    if commit:
        git_commit(dest, "reward-hacking plan: the static RM's corpus manifest and competence")
    return dest


def keep_json(record: dict, results_dir: str, name: str, commit: bool, message: str) -> str:
    """Write `record` to `<results_dir>/plan/<name>` (committed when `commit`); its path."""
    dest = os.path.join(results_dir, PLAN_FOLDER)
    os.makedirs(dest, exist_ok=True)
    path = os.path.join(dest, name)
    with open(path, "w") as fh:
        json.dump(record, fh, indent=2)
    if commit:
        git_commit(path, message)
    return path


def as_section(report_md: str, figure_prefix: str) -> str:
    """The generated report as a section of the page: headings one level down, and links to
    its figures pointing into `figure_prefix`."""
    lines = []
    for line in report_md.splitlines():
        if line.startswith("#"):
            line = "#" + line
            line = line.replace("## Reward-hacking experiment", "## Results of the plan", 1)
        lines.append(line)
    section = "\n".join(lines)
    for name in FIGURES:
        section = section.replace(f"]({name})", f"]({figure_prefix}/{name})")
    return section


def merge_below_plan(page: str, section: str) -> str:
    """`page` with `section` between the markers: in their place when present, otherwise
    before the first horizontal rule (the plan ends there; the earlier experiment follows)."""
    block = f"{BEGIN}\n\n{section.strip()}\n\n{END}\n"
    if BEGIN in page:
        head, rest = page.split(BEGIN, 1)
        if END not in rest:
            raise ValueError("the results page has the start marker of the plan's results but "
                             "not the end marker; restore it before merging")
        tail = rest.split(END, 1)[1].lstrip("\n")  # the blank line is block's, not kept
        return head + block + ("\n" + tail if tail else "")
    rule = re.search(r"^---\s*$", page, flags=re.MULTILINE)
    if rule is None:
        return page.rstrip("\n") + "\n\n" + block
    return page[:rule.start()] + block + "\n" + page[rule.start():]


def publish(workdir: str, results_dir: str, commit: bool) -> str:
    """Merge `<workdir>/report.md` into `<results_dir>/report.md` and copy its figures and
    report.json to `<results_dir>/plan/` (committed when `commit`); the page's path."""
    dest = os.path.join(results_dir, PLAN_FOLDER)
    copy_files(workdir, FIGURES + ("report.json",), dest, optional=True)
    with open(os.path.join(workdir, "report.md")) as fh:
        section = as_section(fh.read(), PLAN_FOLDER)
    page_path = os.path.join(results_dir, "report.md")
    page = open(page_path).read() if os.path.exists(page_path) else ""
    with open(page_path, "w") as fh:
        fh.write(merge_below_plan(page, section))
    if commit:
        git_commit(results_dir, "reward-hacking plan: the report of the kept runs")
    return page_path
