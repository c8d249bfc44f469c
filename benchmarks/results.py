"""What every benchmark result records about its run, and how it is written."""
from __future__ import annotations

import json
import os
import sys


def run_facts() -> dict:
    """The machine (CPU model, cores) and the exact command of this run."""
    from coop_jax.projects.reward_hacking.driver import cpu_model
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "command": " ".join(["python"] + sys.argv)}


def write_result(path: str | None, result: dict) -> None:
    """`result` as indented JSON at `path` (its folder made); nothing when `path` is None."""
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
