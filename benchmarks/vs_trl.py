"""coop_jax's RL step against TRL's `GRPOTrainer`: the same model, prompts and settings.

Both sides train the policy of one config (default: the real-model lane, SmolLM2-135M-Instruct,
fp32, LoRA r16/alpha32 on every projection, 4 prompts x 8 rollouts, 64 new tokens, T = 0.7,
lr 1e-4 constant, no KL, one optimiser step per batch, the rule reward). TRL reads the same
prompts in the same order (coop_jax's prompt pipeline with the config's seed; TRL's shuffling
off), each one the config's prompt template in the model's chat template, and its reward is
coop_jax's rule verifier. Its loss is `dapo` (the batch's token mean, as `rl.aggregation =
token_mean`) with per-group std scaling (GRPO), and it recomputes activations in the backward
pass only where the config does (`model.remat`; TRL's own default is on).

The coop_jax side runs as arms that differ only in config overrides, as in
`benchmarks/learner_step.py` (default: issue 39's items turned on in turn). Every run is a fresh
process; one pair runs every arm and TRL, the order rotated from pair to pair. Per run, the
medians over the steps after `--skip`:

    s/step       coop_jax `time/step`; TRL the trainer step (generation, rewards, update)
    sampling     coop_jax `time/sample`; TRL `GRPOTrainer._generate` (tokenise, generate, decode)
    update       coop_jax `time/update`; TRL the step less `_generate_and_score_completions`
    tokens/step  generated response tokens of the step's rollouts
    peak RSS     the process's maximum resident set (`wait4`)

each run's s/step over TRL's in the same pair, and whether each coop_jax arm's non-timing
metrics are the first arm's (`learner_step.compare`). TRL is an optional extra:

    pip install -e ".[bench]"
    python benchmarks/vs_trl.py --steps 8 --pairs 2 --out docs/results/vs_trl/smollm2.json

Step times are wall times: run it on otherwise idle cores.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from learner_step import DEFAULT_ARMS, compare, parse_arm  # noqa: E402
from results import run_facts, write_result  # noqa: E402

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# the runs leave out held-out evaluation: only the training step is compared
COOP_SETTINGS = ("evals.policy.every=100000", "data.num_eval=1", "train.checkpoint_every=100000")


def _run(cmd: list[str], log_path: str) -> float:
    """Runs `cmd` to completion (raising on failure); its peak RSS in GB."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}; see {log_path}")
    return usage.ru_maxrss / 1e6  # KB on Linux


def _median_after(values: list[tuple[int, float]], skip: int) -> float:
    return statistics.median(v for step, v in values if step > skip)


def run_coop(arm: str, overrides: list[str], pair: int, a, base: str) -> dict:
    from coop_jax.jsonl import read_jsonl
    workdir = os.path.join(base, f"{arm}_{pair}")
    cmd = [sys.executable, "-m", "coop_jax.trainer.cli", f"--config={a.config}",
           f"--workdir={workdir}", f"--config.train.steps={a.steps}"]
    cmd += [f"--config.{o}" for o in (*COOP_SETTINGS, *overrides)]
    print(f"[{arm} {pair}] {' '.join(cmd[1:])}", flush=True)
    rss = _run(cmd, workdir + ".log")
    rows = [r for r in read_jsonl(os.path.join(workdir, "metrics.jsonl")) if "loss" in r]
    pick = lambda key: [(r["step"], r[key]) for r in rows]
    return {"run": arm, "pair": pair, "overrides": overrides, "peak_rss_gb": rss, "rows": rows,
            "step_s": _median_after(pick("time/step"), a.skip),
            "sampling_s": _median_after(pick("time/sample"), a.skip),
            "update_s": _median_after(pick("time/update"), a.skip),
            "tokens_per_step": _median_after(pick("generated_tokens"), a.skip)}


def run_trl(pair: int, a, base: str) -> dict:
    out = os.path.join(base, f"trl_{pair}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--trl-worker", f"--config={a.config}",
           f"--steps={a.steps}", f"--threads={a.threads}", f"--out={out}"]
    print(f"[trl {pair}] {' '.join(cmd[1:])}", flush=True)
    rss = _run(cmd, out + ".log")
    with open(out) as f:
        steps = json.load(f)
    pick = lambda key: [(s["step"], s[key]) for s in steps]
    return {"run": "trl", "pair": pair, "peak_rss_gb": rss,
            "step_s": _median_after(pick("step_s"), a.skip),
            "sampling_s": _median_after(pick("sampling_s"), a.skip),
            "update_s": _median_after(pick("update_s"), a.skip),
            "tokens_per_step": _median_after(pick("tokens"), a.skip)}


def trl_prompts(config, steps: int) -> list[dict]:
    """The prompts coop_jax's pipeline gives its first `steps` steps, in order, as TRL rows."""
    from coop_jax import data
    from coop_jax.trainer.setup import load_records
    pipeline = data.PromptPipeline(load_records(config).train,
                                   batch_size=config.rollout.prompts_per_step, seed=config.seed)
    records = [r for _ in range(steps) for r in pipeline.next_batch()]
    text = lambda q: data.format_prompt(config.data.prompt_template, q)
    return [{"prompt": [{"role": "user", "content": text(r["question"])}],
             "reference": r["reference"]} for r in records]


def trl_worker(a) -> None:
    """One TRL run (in its own process): per-step times and generated tokens to `a.out`."""
    import datasets
    import peft
    import torch
    import transformers
    import trl

    from coop_jax.config import load_config_file
    from coop_jax.hf.sources import local_folder
    from coop_jax.trainer.setup import run_extraction_mode
    from coop_jax.verify import verify
    torch.set_num_threads(a.threads)
    c = load_config_file(a.config)
    if not c.data.chat_template or c.model.lora.rank <= 0:
        raise SystemExit("vs_trl compares chat-template prompts and a LoRA policy")
    g, b = c.rollout.group_size, c.rollout.prompts_per_step
    extraction = run_extraction_mode(c)
    folder = local_folder(c.model.hf_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)

    def rule_reward(completions, reference, **_):
        return [float(verify(ref, done[0]["content"], extraction=extraction))
                for ref, done in zip(reference, completions)]

    args = trl.GRPOConfig(
        output_dir=os.path.join(os.path.dirname(a.out), "trl_out"), max_steps=a.steps,
        per_device_train_batch_size=b * g, num_generations=g,
        max_completion_length=c.rollout.max_new_tokens, temperature=c.rollout.temperature,
        top_p=c.rollout.top_p, top_k=0, learning_rate=c.optim.learning_rate,
        lr_scheduler_type="constant", warmup_steps=c.optim.warmup_steps,
        weight_decay=c.optim.weight_decay, adam_beta1=c.optim.b1, adam_beta2=c.optim.b2,
        adam_epsilon=c.optim.eps, max_grad_norm=c.optim.grad_clip, beta=c.rl.kl_coef,
        num_iterations=c.rl.ppo_epochs, epsilon=c.rl.clip_eps_low,
        epsilon_high=c.rl.clip_eps_high, loss_type="dapo", scale_rewards="group",
        shuffle_dataset=False, use_cpu=True, bf16=False, fp16=False, seed=c.seed,
        gradient_checkpointing=c.model.remat, logging_steps=1, report_to="none",
        save_strategy="no", disable_dropout=True)
    lora = peft.LoraConfig(r=c.model.lora.rank, lora_alpha=c.model.lora.alpha, lora_dropout=0.0,
                           target_modules=list(LORA_MODULES), task_type="CAUSAL_LM")
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=rule_reward,
                              args=args, train_dataset=datasets.Dataset.from_list(
                                  trl_prompts(c, a.steps)), peft_config=lora)
    steps = _timed(trainer)
    trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history
               if "completions/mean_length" in h]
    for s, mean_length in zip(steps, lengths):
        s["tokens"] = mean_length * b * g
    with open(a.out, "w") as f:
        json.dump(steps, f, indent=1)


def _timed(trainer) -> list[dict]:
    """Per-step wall times of `trainer`: the whole step, its generation, and its update (the
    step less generation and scoring), filled in as it trains."""
    import transformers
    steps, clock = [], {}

    def timed(name, fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clock[name] = clock.get(name, 0.0) + time.perf_counter() - t0
        return wrapper

    trainer._generate = timed("sampling", trainer._generate)
    trainer._generate_and_score_completions = timed(
        "scoring", trainer._generate_and_score_completions)

    class StepClock(transformers.TrainerCallback):
        def on_step_begin(self, *_, **__):
            clock.clear()
            clock["start"] = time.perf_counter()

        def on_step_end(self, _args, state, *_, **__):
            step_s = time.perf_counter() - clock["start"]
            steps.append({"step": state.global_step, "step_s": step_s,
                          "sampling_s": clock["sampling"],
                          "update_s": step_s - clock["scoring"]})

    trainer.add_callback(StepClock())
    return steps


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "smollm2_arithmetic.py"))
    p.add_argument("--steps", type=int, default=8, help="RL steps of each run")
    p.add_argument("--pairs", type=int, default=2, help="rounds of one run of every side")
    p.add_argument("--skip", type=int, default=1, help="steps left out of the medians (compile)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="TRL's torch threads")
    p.add_argument("--arm", action="append", type=parse_arm, default=None,
                   metavar="NAME:FIELD=VALUE,...", help="a coop_jax arm (repeat); default: "
                   + " ".join(DEFAULT_ARMS))
    p.add_argument("--out", default=None, help="JSON file for the results")
    p.add_argument("--trl-worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.trl_worker:
        return trl_worker(a)
    if a.steps <= a.skip:
        p.error(f"--steps ({a.steps}) must exceed --skip ({a.skip})")
    arms = dict(a.arm or [parse_arm(t) for t in DEFAULT_ARMS])
    sides = ["trl", *arms]
    runs = []
    with tempfile.TemporaryDirectory() as base:
        for pair in range(a.pairs):
            shift = pair % len(sides)
            for side in sides[shift:] + sides[:shift]:
                runs.append(run_trl(pair, a, base) if side == "trl"
                            else run_coop(side, arms[side], pair, a, base))
    first = next(iter(arms))
    for r in runs:
        same_pair = {t["run"]: t for t in runs if t["pair"] == r["pair"]}
        r["step_vs_trl"] = r["step_s"] / same_pair["trl"]["step_s"]
        r["update_vs_trl"] = r["update_s"] / same_pair["trl"]["update_s"]
        if r["run"] != "trl":  # every non-timing metric against the first arm's
            r["metrics_vs_" + first] = compare(same_pair[first]["rows"], r["rows"])
    for r in runs:
        r.pop("rows", None)
    result = {"config": os.path.relpath(a.config, ROOT), "steps": a.steps, "skip": a.skip,
              "arms": arms, "coop_settings": COOP_SETTINGS, "threads": a.threads, **run_facts(),
              "runs": runs}
    print(json.dumps(runs, indent=1))
    write_result(a.out, result)


if __name__ == "__main__":
    main()
