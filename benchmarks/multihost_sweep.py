"""Every coop-train reward type and Cooper negative strategy on 2 local processes x 4 CPU
devices against 1 process x 8 devices, same config and mesh: the largest relative difference of
any logged metric (time and throughput excluded), and whether both runs finished.

    python benchmarks/multihost_sweep.py --out docs/results/multihost/sweep.md [--steps 3] \
        [--only=ARM,ARM]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from coop_jax.jsonl import read_jsonl  # noqa: E402
from coop_jax.launch.local import launch  # noqa: E402

VOLATILE = ("time/", "tokens_per_second")


def warm_policy(tmp: pathlib.Path, env: dict) -> str:
    """configs/default.py's policy after its SFT warm start (exported from the step-0
    checkpoint of a one-step run): right on about a quarter of the problems, so Cooper's pairs
    and negative strategies have positives to work on."""
    out = tmp / "warm_policy"
    if not (out / "config.json").exists():
        subprocess.run([sys.executable, "-m", "coop_jax.trainer.cli",
                        f"--config={REPO / 'configs' / 'default.py'}", f"--workdir={tmp / 'sft'}",
                        "--config.train.steps=1", "--config.eval.k=1",
                        "--config.data.num_eval=8"], env=env, check=True,
                       capture_output=True)
        subprocess.run([sys.executable, "-m", "coop_jax.checkpoint.export", f"--checkpoint={tmp / 'sft'}",
                        "--step=0", f"--out={out}"], env=env, check=True, capture_output=True)
    return str(out)


def probe_file(tmp: pathlib.Path) -> str:
    """The hack probes (experiments/hack_probes.py) of 4 synthetic questions."""
    from coop_jax.data import make_dataset
    from coop_jax.projects.reward_hacking.hack_probes import build_probes, write_probes
    return write_probes(str(tmp / "probes.jsonl"), build_probes(make_dataset(4, seed=0)))


def arms(assistant: str, policy: str, probes: str) -> dict[str, list[str]]:
    c = "--config."
    base = [c + "rl.entropy_coef=0.05"]  # a gradient for the never-right tiny policy
    # Cooper arms start from the warm policy: the random one has no positive, hence no pair
    warm = [c + f"model.hf_path={policy}", c + "data.max_prompt_len=16",
            c + "rollout.max_new_tokens=40", c + "data.synthetic.num_operands_max=3",
            c + "rollout.prompts_per_step=4", c + "rollout.group_size=4", c + "cooper.max_len=96"]
    out = {name: base + [c + f"reward.type={name}"] for name in (
        "rule", "static_rm", "majority_vote", "corewarding_1", "corewarding_2", "hybrid")}
    out["rule + SFT warm start"] = base + [c + "sft.steps=4", c + "sft.batch_size=4",
                                           c + "sft.max_len=24"]
    for negative in ("perturb", "rollout", "consistent_wrong"):
        out[f"cooper/{negative}"] = base + warm + [c + "reward.type=cooper",
                                                   c + f"cooper.negative={negative}"]
    out["cooper/rewrite (local assistant)"] = base + warm + [
        c + "reward.type=cooper", c + "cooper.negative=rewrite",
        c + f"cooper.assistant_hf_path={assistant}"]
    out["random (calibration)"] = base + [c + "reward.type=random"]
    out["rule + LoRA + KL to start"] = base + [c + "model.lora.rank=4",
                                               c + "rl.log_kl_to_start=True"]
    # the reward-hacking plan's diagnostics: strict numeric gold, probes, KL to the start policy
    out["static_rm + probes + strict gold"] = base + [
        c + "reward.type=static_rm", c + "verifier.extraction=strict_numeric",
        c + f"probes.triples={probes}", c + "evals.probes.every=1", c + "rl.log_kl_to_start=True"]
    out["cooper/rollout + LoRA (policy and RM)"] = base + warm + [
        c + "reward.type=cooper", c + "cooper.negative=rollout", c + "model.lora.rank=4",
        c + "reward_model.lora.rank=4"]
    out["rule + rollout.overlap"] = base + [c + "rollout.overlap=True"]
    out["cooper + rollout.overlap"] = base + warm + [c + "reward.type=cooper",
                                                     c + "rollout.overlap=True"]
    return out


def compare(a: list[dict], b: list[dict]) -> tuple[int, int, float, str]:
    """(metric values compared, values outside rel 1e-3 / abs 1e-6 (the tests' tolerance), the
    largest relative difference among values above 1e-4 in size, where it is)."""
    if [r["step"] for r in a] != [r["step"] for r in b]:
        return 0, 1, math.inf, "steps differ"
    compared, outside, worst, where = 0, 0, 0.0, ""
    for ra, rb in zip(a, b):
        for k in set(ra) | set(rb):
            if k.startswith(VOLATILE):
                continue
            va, vb = ra.get(k), rb.get(k)
            compared += 1
            if not isinstance(va, (int, float)) or not isinstance(vb, (int, float)):
                outside += va != vb
                continue
            outside += not math.isclose(va, vb, rel_tol=1e-3, abs_tol=1e-6)
            if max(abs(va), abs(vb)) > 1e-4 and abs(va - vb) / max(abs(va), abs(vb)) > worst:
                worst, where = abs(va - vb) / max(abs(va), abs(vb)), f"{k} at step {ra['step']}"
    return compared, outside, worst, where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--workdir", default=None,
                        help="runs folder (default: a new temporary one); a run that finished "
                             "there (summary.json) is not run again")
    parser.add_argument("--only", default="",
                        help="comma-separated arm names to run (default: every arm)")
    args = parser.parse_args()
    from conftest import save_tiny_hf_causal_lm
    tmp = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="multihost_sweep_"))
    assistant = str(tmp / "assistant")
    if not (tmp / "assistant" / "config.json").exists():
        save_tiny_hf_causal_lm(tmp / "assistant")
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp / "jax_cache"),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")
    one_env = dict(env, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    policy = warm_policy(tmp, one_env)
    rows = []
    chosen = arms(assistant, policy, probe_file(tmp))
    if args.only:
        unknown = set(args.only.split(",")) - set(chosen)
        if unknown:
            parser.error(f"--only: no arm {sorted(unknown)}; the arms: {list(chosen)}")
        chosen = {n: o for n, o in chosen.items() if n in args.only.split(",")}
    for name, overrides in chosen.items():
        runs = {}
        for layout in ("1x8", "2x4"):
            workdir = tmp / name.replace("/", "_").replace(" ", "_") / layout
            command = [sys.executable, "-m", "coop_jax.trainer.cli",
                       f"--config={REPO / 'configs' / 'tiny_test.py'}", f"--workdir={workdir}",
                       f"--config.train.steps={args.steps}", *overrides]
            t0 = time.time()
            if (workdir / "summary.json").exists():
                seconds = workdir / "wall_seconds.txt"
                runs[layout] = (0, float(seconds.read_text()) if seconds.exists() else math.nan,
                                workdir)
                continue
            if layout == "1x8":
                rc = subprocess.run(command, env=one_env, capture_output=True).returncode
            else:
                rc = launch(command, num_processes=2, devices_per_process=4, env=env,
                            timeout_s=900)
            runs[layout] = (rc, time.time() - t0, workdir)
            if rc == 0:
                (workdir / "wall_seconds.txt").write_text(f"{runs[layout][1]:.1f}")
        ok = all(rc == 0 for rc, _, _ in runs.values())
        result = (compare(read_jsonl(runs["1x8"][2] / "metrics.jsonl"),
                          read_jsonl(runs["2x4"][2] / "metrics.jsonl"))
                  if ok else (0, 0, math.nan, "a run failed"))
        rows.append((name, runs["1x8"][0], runs["2x4"][0], *result, runs["1x8"][1],
                     runs["2x4"][1]))
        print(rows[-1], flush=True)
    lines = ["| arm | exit 1x8 | exit 2x4 | values compared | outside rel 1e-3 | largest relative "
             "difference (values > 1e-4) | where | s 1x8 | s 2x4 |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {n} | {a} | {b} | {c} | {o} | {d:.1e} | {w} | {s1:.0f} | {s2:.0f} |"
              for n, a, b, c, o, d, w, s1, s2 in rows]
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(
        f"# Multi-host sweep: {args.steps} steps of configs/tiny_test.py, mesh (2, 1, 4)\n\n"
        f"`python benchmarks/multihost_sweep.py --out {args.out} --steps {args.steps}"
        + (f" --only='{args.only}'" if args.only else "") + "`\n\n"
        + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
