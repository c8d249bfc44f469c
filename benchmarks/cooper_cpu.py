"""The 1.5B Cooper step on this CPU, to prepare the next accelerator run (docs/results/gpu/README.md).

Two parts, both at Qwen2.5-1.5B width (hidden 1536, MLP 8960, 12 / 2 heads, 151,936 tokens; policy +
reference + RM, remat on, random weights), through the code `benchmarks/gpu_check.py --sections
cooper` runs on the GPU (`gpu_check.cooper_setup` / `cooper_depth`):

  compile  the GPU-shaped program (4 prompts x 16 rollouts, 512 + 512 tokens, RM 1,024 tokens)
           at --compile-layers (default 2, 4, 28), lowered and compiled for this CPU from
           abstract arrays (`memory_plan.compile_one`): compile seconds, and XLA's memory
           analysis (arguments, temporaries, outputs; their sum bounds the peak) - the CPU
           compiler's, a stand-in for the GPU's;
  steps    the same step with real weights at reduced tokens (2 prompts x 2 rollouts, 32 + 32
           tokens, RM 64) and a 16,384-token vocabulary at --step-layers (default 1, 2, 4):
           compile seconds, the median of 3 step times, the process's peak resident memory, and
           the least-squares fit step = a + b * layers, whose slope b is the per-layer step time
           this CPU gives. The layers are the 1.5B ones; the vocabulary is cut because the full
           one's three copies of the train state (policy + AdamW, reference, RM + AdamW: 7.8 GB
           at one layer, 16 GB resident in the step) do not fit this 24 GB machine beside its
           other work (the first try was killed by the kernel's OOM killer).

The machine is shared with long experiments: timings are noisy; the JSON records the load
average (1, 5, 15 min) before and after each part and the core count.

    python benchmarks/cooper_cpu.py --out docs/results/gpu/cooper_cpu.json [--parts steps|compile]

A part run alone updates the parts already in --out.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import jax  # noqa: E402

import gpu_check  # noqa: E402
import memory_plan  # noqa: E402

SMALL = dict(gpu_check.FULL, vocab=16_384, prompts=2, group=2, response=32, rm_len=64)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def compile_part(layers: list[int]) -> list[dict]:
    rows = []
    for n in layers:
        config = gpu_check.cooper_setup(gpu_check.FULL, n)[3]
        load = _load()
        print(f"[cooper_cpu] compile, GPU shapes, {n} layers ...", flush=True)
        row = memory_plan.compile_one(config, jax.devices()[:1], (1, 1, 1), n, True, "auto")
        row.update(layers=n, load_before=load, load_after=_load(),
                   bound_bytes=row["argument_bytes"] + row["temp_bytes"] + row["output_bytes"]
                   - row["alias_bytes"])
        print(f"[cooper_cpu]   compile {row['compile_s']} s, temporaries "
              f"{row['temp_bytes'] / 2 ** 30:.2f} GiB, arguments "
              f"{row['argument_bytes'] / 2 ** 30:.2f} GiB", flush=True)
        rows.append(row)
    return rows


def steps_part(layers: list[int]) -> dict:
    depths = {}
    for n in layers:
        load = _load()
        res = gpu_check.cooper_depth(SMALL, n, smoke=False, steps=3)
        for k in ("mfu", "hfu", "peak_flops", "device_peak_bytes"):  # the GPU's, not this CPU's
            res.pop(k, None)
        res.update(load_before=load, load_after=_load(),
                   peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        print(f"[cooper_cpu]   {n} layers: step {res['step_s']:.2f} s (each "
              f"{[round(t, 2) for t in res['step_s_each']]}), compile {res['compile_s']:.1f} s",
              flush=True)
        depths[str(n)] = res
    return {"shapes": SMALL, "depths": depths, **gpu_check.per_layer_fit(depths)}


def _layers(value: str) -> list[int]:
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated layer counts, got {value!r}")
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"expected positive layer counts, got {value!r}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file")
    p.add_argument("--compile-layers", type=_layers, default=[2, 4, 28])
    p.add_argument("--step-layers", type=_layers, default=[1, 2, 4])
    p.add_argument("--parts", default="steps,compile", help="steps, compile or both")
    a = p.parse_args(argv)
    parts = {x for x in a.parts.split(",") if x}
    if not parts or parts - {"steps", "compile"}:
        p.error(f"--parts takes steps and/or compile, got {a.parts!r}")
    path = pathlib.Path(a.out)
    out = json.loads(path.read_text()) if path.exists() else {}  # a part run alone keeps the other
    out.update({"jax": jax.__version__, "backend": jax.default_backend(),
                "cpus": os.cpu_count(), "gpu_shapes": gpu_check.FULL})
    out[f"load_at_start_{'_'.join(sorted(parts))}"] = _load()
    start = time.perf_counter()

    def write():
        out[f"elapsed_s_{'_'.join(sorted(parts))}"] = round(time.perf_counter() - start, 1)
        path.write_text(json.dumps(out, indent=1, default=str) + "\n")
    if "steps" in parts:
        out["steps"] = steps_part(a.step_layers)
        write()
    if "compile" in parts:
        out["compile"] = compile_part(a.compile_layers)
    write()
    print(f"[cooper_cpu] wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
