"""The long-tailed rollout workload of `sampler_throughput.py --long-tail`: useful tokens/s of the
static sampler, the continuous-batching engine and transformers, on real rollouts.

Real SmolLM2-135M-Instruct weights; the real-model lane's story problems as chat prompts
(configs/smollm2_arithmetic.py); --prompts x --samples requests at the lane's temperature 0.7,
each row ending at its own stop token or at --new-tokens. The response lengths are those the base
policy samples, printed with the results. Each implementation decodes the same requests as a pod
run with bounded memory would:
- static: coop_jax's static sampler in chunks of --slots rows (each chunk runs until its longest
  row ends);
- continuous: coop_jax's engine, --slots decode slots over all the requests, halving at most
  --slot-halvings times as the queue drains;
- transformers generate: chunks of --slots rows, as the static sampler;
- transformers generate_batch: its continuous batching over all the requests (absent when it
  fails here, with the reason).
A useful token is a response token up to and including the stop token. coop_jax's programs are
compiled ahead of the timed calls (compile time printed apart) and timed alternately --repeats
times (the median); transformers gets one warm-up chunk and one timed pass. Each implementation
draws its own samples (different keys), so each rate is its own useful tokens over its own wall
time.
"""
from __future__ import annotations

import json
import time

import jax
import numpy as np

CONFIG = "configs/smollm2_arithmetic.py"


def story_prompts(n: int, tokenizer) -> list[str]:
    """The first `n` training story problems of the lane's config, as its chat prompts."""
    from coop_jax import data
    from coop_jax.config import load_config_file
    from coop_jax.trainer.setup import load_records
    config = load_config_file(CONFIG)
    records = load_records(config).train[:n]
    return [data.format_prompt(config.data.prompt_template, r["question"], tokenizer=tokenizer,
                               chat=True) for r in records]


def _useful(mask: np.ndarray) -> np.ndarray:
    return mask.sum(-1).astype(np.int64)


def coop_jax_runs(lm, tokenizer, ids, mask, a) -> dict[str, dict]:
    """{static, continuous: {seconds, seconds_each, compile_s, lengths}} of coop_jax's two
    engines, timed alternately --repeats times (the same keys, so the same samples, each time);
    seconds is the median."""
    from coop_jax import sampling
    from coop_jax.hf.tokenizer import stop_token_ids
    scfg = sampling.SamplingConfig(
        max_new_tokens=a.new_tokens, eos_ids=stop_token_ids(tokenizer),
        pad_id=tokenizer.pad_token_id, temperature=0.7, num_samples=a.samples,
        valid_vocab=len(tokenizer))
    key = jax.random.key(a.seed)
    per_chunk = a.slots // a.samples
    chunks = [(ids[i:i + per_chunk], mask[i:i + per_chunk]) for i in range(0, len(ids), per_chunk)]
    static = _aot(sampling.make(lm.config, scfg), lm.params, *chunks[0], key)
    continuous = _aot(sampling.make_continuous(lm.config, scfg, a.slots, a.slot_halvings),
                      lm.params, ids, mask, key)

    def run_static():
        return np.concatenate([_useful(np.asarray(jax.block_until_ready(
            static["fn"](lm.params, c_ids, c_mask, jax.random.fold_in(key, i))).mask))
            for i, (c_ids, c_mask) in enumerate(chunks)])

    def run_continuous():
        return _useful(np.asarray(jax.block_until_ready(
            continuous["fn"](lm.params, ids, mask, key)).mask))

    out = {name: dict(seconds_each=[], compile_s=prog["compile_s"])
           for name, prog in (("coop_jax static", static), ("coop_jax continuous", continuous))}
    for _ in range(a.repeats):
        for name, run in (("coop_jax static", run_static), ("coop_jax continuous", run_continuous)):
            t0 = time.perf_counter()
            out[name]["lengths"] = run()
            out[name]["seconds_each"].append(round(time.perf_counter() - t0, 1))
    for r in out.values():
        r["seconds"] = float(np.median(r["seconds_each"]))
    return out


def _aot(jitted, *args) -> dict:
    t0 = time.perf_counter()
    fn = jitted.lower(*args).compile()
    return {"fn": fn, "compile_s": time.perf_counter() - t0}


def transformers_runs(hf_model, tokenizer, prompts: list[str], a) -> dict[str, dict]:
    """{generate[, generate_batch]: {seconds, lengths}}; generate_batch's failure is reported."""
    import torch
    import transformers

    from coop_jax.hf.tokenizer import stop_token_ids
    stops = list(stop_token_ids(tokenizer))
    gen = dict(do_sample=True, temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=a.new_tokens,
               eos_token_id=stops, pad_token_id=tokenizer.pad_token_id)
    tokenizer.padding_side = "left"
    per_chunk = a.slots // a.samples

    def generate(chunk: list[str]) -> np.ndarray:
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = hf_model.generate(**enc, num_return_sequences=a.samples, **gen)
        new = out[:, enc["input_ids"].shape[1]:].numpy()
        return _hf_lengths(new, stops, tokenizer.pad_token_id)

    generate(prompts[:per_chunk])  # warm-up
    torch.manual_seed(a.seed)
    t0 = time.perf_counter()
    lengths = np.concatenate([generate(prompts[i:i + per_chunk])
                              for i in range(0, len(prompts), per_chunk)])
    out = {"transformers generate": dict(seconds=time.perf_counter() - t0, lengths=lengths)}
    try:
        requests = [tokenizer(p, add_special_tokens=False)["input_ids"]
                    for p in prompts for _ in range(a.samples)]
        config = transformers.GenerationConfig(**gen)
        t0 = time.perf_counter()
        done = hf_model.generate_batch(requests, generation_config=config)
        seconds = time.perf_counter() - t0
        lengths = np.array([len(r.generated_tokens) for r in done.values()], np.int64)
        out["transformers generate_batch"] = dict(seconds=seconds, lengths=lengths)
    except Exception as e:  # noqa: BLE001 - reported as absent, the other columns stand
        out["transformers generate_batch"] = {"absent": f"{type(e).__name__}: {e}"[:300]}
    return out


def _hf_lengths(new: np.ndarray, stops: list[int], pad: int) -> np.ndarray:
    """Response lengths up to and including the first stop token (else the full width)."""
    lengths = []
    for row in new:
        hit = np.flatnonzero(np.isin(row, stops))
        lengths.append(int(hit[0]) + 1 if hit.size else len(row))
    return np.asarray(lengths, np.int64)


def summarise(runs: dict[str, dict], a) -> list[dict]:
    rows = []
    base = runs["coop_jax static"]
    base_rate = base["lengths"].sum() / base["seconds"]
    for name, r in runs.items():
        if "absent" in r:
            rows.append({"impl": name, "absent": r["absent"]})
            continue
        lengths = r["lengths"]
        rate = lengths.sum() / r["seconds"]
        rows.append({"impl": name, "requests": int(lengths.size),
                     "useful_tokens": int(lengths.sum()), "seconds": round(r["seconds"], 1),
                     "useful_tokens_per_s": round(float(rate), 1),
                     "vs_static": round(float(rate / base_rate), 2),
                     "compile_s": round(r["compile_s"], 1) if "compile_s" in r else None,
                     "seconds_each": r.get("seconds_each"),
                     "mean_length": round(float(lengths.mean()), 1),
                     "p50": int(np.percentile(lengths, 50)), "p90": int(np.percentile(lengths, 90)),
                     "at_cap": round(float((lengths >= a.new_tokens).mean()), 3)})
    return rows


def run(a, hf_model, lm, tokenizer) -> list[dict]:
    from coop_jax import sampling
    prompts = story_prompts(a.prompts, tokenizer)
    ids, mask = sampling.tokenize_prompts(tokenizer, prompts, a.prompt_len)
    if a.slots % a.samples or a.prompts % (a.slots // a.samples):
        raise SystemExit("--slots must be a multiple of --samples, and the chunks of "
                         "--slots / --samples prompts must divide --prompts")
    runs = coop_jax_runs(lm, tokenizer, np.asarray(ids), np.asarray(mask), a)
    if not getattr(a, "coop_jax_only", False):
        runs.update(transformers_runs(hf_model, tokenizer, prompts, a))
    rows = summarise(runs, a)
    print(f"\n{a.prompts} story problems x {a.samples} samples = {a.prompts * a.samples} "
          f"requests, T 0.7, <= {a.new_tokens} new tokens, {a.slots} rows at a time")
    print(f"{'impl':<30}{'useful tok/s':>13}{'vs static':>10}{'s':>8}{'mean len':>9}"
          f"{'p90':>6}{'at cap':>8}")
    for r in rows:
        if "absent" in r:
            print(f"{r['impl']:<30} absent: {r['absent']}")
            continue
        print(f"{r['impl']:<30}{r['useful_tokens_per_s']:>13.1f}{r['vs_static']:>9.2f}x"
              f"{r['seconds']:>8.1f}{r['mean_length']:>9.1f}{r['p90']:>6}{r['at_cap']:>8.3f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"settings": {k: v for k, v in vars(a).items() if k != "json"},
                       "rows": rows}, fh, indent=1)
    return rows


if __name__ == "__main__":
    raise SystemExit("usage: python benchmarks/sampler_throughput.py --long-tail [--prompts 64 "
                     "--samples 4 --slots 64 --new-tokens 256 --json out.json] (see its --help)")
