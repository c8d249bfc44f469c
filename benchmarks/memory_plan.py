"""Per-device memory and FLOPs of the paper's Cooper step, compiled ahead of time for TPU slices.

MaxText `train_compile.py` style: the policy, its AdamW state, the frozen reference and the
co-trained RM (+ its AdamW state) of `configs/qwen2_5_1_5b_gsm8k.py` are abstract sharded
`jax.ShapeDtypeStruct`s on a mesh of TPU device *descriptions* from
`jax.experimental.topologies.get_topology_desc`; `jit(step).lower(...).compile()` runs libtpu's
real TPU compiler on this CPU-only host and `memory_analysis()` / `cost_analysis()` are the TPU
compiler's numbers. Nothing is allocated. (The CPU backend's memory_analysis does not predict TPU
memory: it reports the same temporaries with and without remat.)

Needs a venv with jax[tpu] (libtpu), e.g. /work/tpuvenv:

    /work/tpuvenv/bin/python benchmarks/memory_plan.py --out docs/results/memory_plan/runs.jsonl
    /work/tpuvenv/bin/python benchmarks/memory_plan.py --report docs/results/memory_plan/runs.jsonl

Each compile appends one JSON line (re-runs skip what the file already holds), so a long sweep
can be stopped and resumed. Compiling 28 layers takes long on a small host: `--layers 1 2` compiles
shallow copies of the model and the report extrapolates arguments, temporaries and compile time
linearly in the layer count (fit over the compiled depths), saying so in every such row.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host backend; the targets are TPU topologies

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from coop_jax import config as config_lib, models, parallel  # noqa: E402
from coop_jax.train_step import StepConfig, init_state, jit_step  # noqa: E402

GIB = 2 ** 30
ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "qwen2_5_1_5b_gsm8k.py"

# Qwen2.5-1.5B(-Instruct) architecture; VerifyRM-1.5B is the same trunk with a scalar head.
QWEN2_5_1_5B = dict(vocab_size=151_936, hidden_size=1536, intermediate_size=8960, num_layers=28,
                    num_heads=12, num_kv_heads=2, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                    qkv_bias=True, tie_embeddings=True, max_position_embeddings=32_768,
                    head_dim=0, hf_path="")

# slice -> (topology name, get_topology_desc kwargs, HBM GiB per JAX device)
SLICES = {
    "v4-8": ("v4:2x2x1", {"chip_config_name": "megacore"}, 32),  # 4 chips, megacore devices
    "v5e-8": ("v5e:2x4", {}, 16),
    "v5e-16": ("v5e:4x4", {}, 16),
    "v5p-8": ("v5p:2x2x1", {}, 95),  # 4 chips (8 TensorCores, megacore)
    "v6e-8": ("v6e:2x4", {}, 32),
}
GPUS = {"H100": 80, "H200": 141}


def load_config(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location("plan_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config.model.update(QWEN2_5_1_5B)
    config.reward_model.update(QWEN2_5_1_5B)
    return config


def step_setup(config, layers: int, remat: bool, kernel_impl: str, valid_vocab: int = 151_665):
    """(StepConfig, tx, rm_tx) exactly as the trainer builds them, at `layers` layers.
    The default `valid_vocab` is the Qwen2.5 tokenizer's size."""
    from coop_jax import train  # the trainer's own builders (heavy imports: only here)
    policy = config_lib.model_config(config.model).replace(num_layers=layers, remat=remat)
    rm = config_lib.model_config(config.reward_model, num_labels=1).replace(num_layers=layers,
                                                                            remat=remat)
    cfg = train.step_config(config, policy, rm, valid_vocab)
    cfg = dataclasses.replace(cfg, kernel_impl=kernel_impl)
    return cfg, train.policy_optimizer(config), train.rm_optimizer(config)


def _sds(x, sharding):
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


def abstract_state(cfg: StepConfig, tx, rm_tx, mesh):
    """Sharded ShapeDtypeStructs of the whole TrainState: policy + AdamW, reference, RM + AdamW."""
    rep = parallel.replicated(mesh)

    def model(mcfg, opt):
        shardings = parallel.param_shardings(mcfg, mesh)
        params = jax.tree_util.tree_map(_sds, nn.meta.unbox(models.abstract_params(mcfg)),
                                        shardings)
        opt_state = optax.tree_map_params(opt, _sds, jax.eval_shape(opt.init, params), shardings,
                                          transform_non_params=lambda x: _sds(x, rep))
        return params, opt_state

    policy, ref_needed = model(cfg.policy, tx), cfg.loss.kl_coef > 0
    rm = model(cfg.rm, rm_tx)
    state = jax.eval_shape(lambda: init_state(policy[0], tx, ref_params=policy[0] if ref_needed
                                              else None, rm_params=rm[0], rm_tx=rm_tx))
    state = state.replace(step=_sds(state.step, rep))
    state = state.replace(policy=state.policy.replace(params=policy[0], opt_state=policy[1]),
                          rm=state.rm.replace(params=rm[0], opt_state=rm[1]))
    if ref_needed:
        state = state.replace(ref_params=policy[0])
    return state


def abstract_batch(config, mesh=None) -> dict:
    """The batch of one Cooper step: B*G rollouts of prompt/response lengths, RM inputs, pairs
    (ShapeDtypeStructs, sharded over `mesh` when given)."""
    rows = config.rollout.prompts_per_step * config.rollout.group_size
    p, n, rm_len = config.data.max_prompt_len, config.rollout.max_new_tokens, config.cooper.max_len
    b = config.rollout.prompts_per_step
    shapes = {"prompt_tokens": ((rows, p), np.int32), "prompt_mask": ((rows, p), np.bool_),
              "tokens": ((rows, n), np.int32), "mask": ((rows, n), np.bool_),
              "rewards": ((rows,), np.float32), "reward_bonus": ((rows,), np.float32),
              "loss_weight": ((rows,), np.float32), "rm_tokens": ((rows, rm_len), np.int32),
              "rm_mask": ((rows, rm_len), np.int32), "rule_labels": ((rows,), np.float32),
              "pair_pos_tokens": ((b, rm_len), np.int32), "pair_pos_mask": ((b, rm_len), np.int32),
              "pair_neg_tokens": ((b, rm_len), np.int32), "pair_neg_mask": ((b, rm_len), np.int32),
              "pair_valid": ((b,), np.float32)}
    host = {k: np.zeros(s, d) for k, (s, d) in shapes.items()}  # small: only for the shardings
    shardings = parallel.batch_shardings(host, mesh) if mesh is not None else {}
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=shardings.get(k))
            for k, v in host.items()}


def per_device_bytes(tree) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (exact, no compile)."""
    return sum(int(np.prod(x.sharding.shard_shape(x.shape))) * np.dtype(x.dtype).itemsize
               for x in jax.tree_util.tree_leaves(tree))


def compile_one(config, devices, mesh_shape, layers, remat, kernel_impl) -> dict:
    mesh = parallel.make_mesh(mesh_shape, devices)
    cfg, tx, rm_tx = step_setup(config, layers, remat, kernel_impl)
    state, batch = abstract_state(cfg, tx, rm_tx, mesh), abstract_batch(config, mesh)
    step = jit_step(cfg, tx, rm_tx, state_shardings=jax.tree_util.tree_map(
        lambda x: x.sharding, state), batch_sharding={k: v.sharding for k, v in batch.items()},
        replicated=parallel.replicated(mesh))
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = step.lower(state, batch).compile()
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return dict(compile_s=round(seconds, 1), compile_cpu_s=round(cpu_seconds, 1),
                state_bytes=per_device_bytes(state),
                batch_bytes=per_device_bytes(batch),
                argument_bytes=int(mem.argument_size_in_bytes),
                output_bytes=int(mem.output_size_in_bytes),
                alias_bytes=int(mem.alias_size_in_bytes),
                temp_bytes=int(mem.temp_size_in_bytes),
                flops=float(cost.get("flops", float("nan"))) if cost else float("nan"))


def full_state_bytes(config, mesh_shape, devices) -> tuple[int, int]:
    """Exact per-device (state, batch) bytes at the config's real depth (no compile)."""
    mesh = parallel.make_mesh(mesh_shape, devices)
    cfg, tx, rm_tx = step_setup(config, config.model.num_layers, True, "xla")
    return (per_device_bytes(abstract_state(cfg, tx, rm_tx, mesh)),
            per_device_bytes(abstract_batch(config, mesh)))


def state_table(config) -> str:
    """Exact per-device bytes of the whole TrainState and the batch at the config's depth, for
    every slice under pure FSDP: the floor that temporaries come on top of (no compile)."""
    from jax.experimental import topologies
    lines = ["| slice | devices | mesh | params+optimizer+ref+RM GiB/dev | batch MiB/dev | HBM |",
             "|---|---|---|---|---|---|"]
    for name, (topo, kw, hbm) in SLICES.items():
        devices = topologies.get_topology_desc(topo, "tpu", **kw).devices
        shape = mesh_choices(len(devices))[0]
        state, batch = full_state_bytes(config, shape, devices)
        lines.append(f"| {name} | {len(devices)} | {shape} | {state / GIB:.2f} | "
                     f"{batch / 2 ** 20:.2f} | {hbm} |")
    return "\n".join(lines)


def mesh_choices(n: int) -> list[tuple[int, int, int]]:
    """Pure FSDP over every device, and data=2 x FSDP (the config's (2, 4, 1) on 8 devices)."""
    return [(1, n, 1), (2, n // 2, 1)]


def sweep(a) -> None:
    from jax.experimental import topologies
    config = load_config(a.config)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        done = {(r["slice"], tuple(r["mesh"]), r["layers"], r["remat"], r["kernel_impl"])
                for r in map(json.loads, out.read_text().splitlines()) if "layers" in r}
    for name in a.slices:
        topo, kw, hbm = SLICES[name]
        devices = topologies.get_topology_desc(topo, "tpu", **kw).devices
        for mesh_shape in mesh_choices(len(devices))[:a.meshes]:
            for remat in a.remat:
                for layers in a.layers:
                    key = (name, mesh_shape, layers, remat, a.kernel_impl)
                    if key in done:
                        continue
                    row = dict(slice=name, topology=topo, devices=len(devices), hbm_gib=hbm,
                               mesh=list(mesh_shape), layers=layers, remat=remat,
                               kernel_impl=a.kernel_impl)
                    try:
                        row.update(compile_one(config, devices, mesh_shape, layers, remat,
                                               a.kernel_impl))
                        row["full_state_bytes"], row["full_batch_bytes"] = full_state_bytes(
                            config, mesh_shape, devices)
                    except Exception as e:  # recorded, the sweep goes on
                        row["error"] = f"{type(e).__name__}: {str(e)[:400]}"
                    print(json.dumps(row), flush=True)
                    with out.open("a") as f:
                        f.write(json.dumps(row) + "\n")


def _fit(xs, ys, x):
    """Linear fit (exact through two points) evaluated at x."""
    if len(set(xs)) == 1:
        return ys[0]
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(slope * x + intercept)


def report(path: str, full_layers: int = 28) -> str:
    rows = [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]
    ok = [r for r in rows if "error" not in r]
    groups: dict = {}
    for r in ok:
        key = (r["slice"], tuple(r["mesh"]), r["remat"], r["kernel_impl"])
        groups.setdefault(key, []).append(r)
    lines = [f"Cooper step, Qwen2.5-1.5B policy + reference + 1.5B RM (fp32 params, bf16 compute), "
             f"64 x (512 + 512) tokens, RM pairs at 1024; per device, GiB; libtpu AOT compile.",
             "| slice | mesh (data,fsdp,tensor) | remat | kernels | state+batch | temporaries | "
             "total | HBM | fits (< 90% HBM) | compile s | basis |", "|" + "---|" * 11]
    for (name, mesh, remat, impl), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["layers"])
        depths = [r["layers"] for r in rs]
        measured = full_layers in depths
        pick = lambda k: (next(r[k] for r in rs if r["layers"] == full_layers) if measured
                          else _fit(depths, [r[k] for r in rs], full_layers))
        state = rs[0]["full_state_bytes"] + rs[0]["full_batch_bytes"]
        temp, secs = pick("temp_bytes"), pick("compile_s")
        total = state + temp
        hbm = rs[0]["hbm_gib"]
        one_depth = not measured and len(set(depths)) == 1
        if one_depth:  # no slope: the 28-layer temporaries are at least the shallow ones
            basis = f"LOWER BOUND: only {depths[0]} layer(s) compiled"
            fits = "NO" if total >= 0.9 * hbm * GIB else "?"
            cells = (f">= {temp / GIB:.2f}", f">= {total / GIB:.2f}", f">= {secs:.0f}")
        else:
            basis = (f"compiled at {full_layers} layers" if measured else
                     f"linear extrapolation from {depths} layers")
            fits = "yes" if total < 0.9 * hbm * GIB else "NO"
            cells = (f"{temp / GIB:.2f}", f"{total / GIB:.2f}", f"{secs:.0f}")
        lines.append(f"| {name} | {mesh} | {'on' if remat else 'off'} | {impl} | "
                     f"{state / GIB:.2f} | {cells[0]} | {cells[1]} | {hbm} | {fits} | "
                     f"{cells[2]} | {basis} |")
    lines += ["", "Measured compiles (per device):",
              "| slice | mesh | remat | layers | args GiB | temps GiB | TFLOP/step | compile s |",
              "|" + "---|" * 8]
    for r in sorted(ok, key=lambda r: (r["slice"], r["mesh"], r["remat"], r["layers"])):
        lines.append(f"| {r['slice']} | {tuple(r['mesh'])} | {'on' if r['remat'] else 'off'} | "
                     f"{r['layers']} | {r['argument_bytes'] / GIB:.2f} | "
                     f"{r['temp_bytes'] / GIB:.2f} | {r['flops'] / 1e12:.1f} | {r['compile_s']} |")
    for r in rows:
        if "error" in r:
            lines.append(f"FAILED {r['slice']} {r['mesh']} remat={r['remat']} L={r['layers']}: "
                         f"{r['error'][:200]}")
    lines += ["", gpu_rows(ok, full_layers)]
    return "\n".join(lines)


def gpu_rows(ok: list[dict], full_layers: int) -> str:
    """H100 / H200 ESTIMATES: exact state bytes on 1 or 8 GPUs (pure FSDP) + temporaries scaled
    from the TPU compile with the most rows per device (activations scale with rows/device)."""
    config = load_config(DEFAULT_CONFIG)
    rows = config.rollout.prompts_per_step * config.rollout.group_size
    ref = [r for r in ok if r["remat"] and tuple(r["mesh"])[0] == 1]
    out = ["GPU rows are ESTIMATES (no GPU compile without a GPU): state bytes exact, temporaries "
           "scaled from the remat TPU compile by rows per device.",
           "| GPU x n | state+batch GiB/dev | est. temporaries GiB/dev | total | HBM | fits |",
           "|---|---|---|---|---|---|"]
    if not ref:
        return "\n".join(out + ["(no remat TPU compile to scale from)"])
    name = ref[0]["slice"]
    same = [r for r in ref if r["slice"] == name and tuple(r["mesh"]) == tuple(ref[0]["mesh"])]
    rs = sorted(same, key=lambda r: r["layers"])
    temp = _fit([r["layers"] for r in rs], [r["temp_bytes"] for r in rs], full_layers)
    tpu_rows_per_dev = rows / ref[0]["devices"]
    whole = state_one_device(config)
    for gpu, hbm in GPUS.items():
        for n in (1, 8):
            state = whole / n  # pure FSDP (norms and biases, replicated, are < 1 MiB)
            est_temp = temp * (rows / n) / tpu_rows_per_dev
            total = state + est_temp
            out.append(f"| {gpu} x {n} | {state / GIB:.2f} | {est_temp / GIB:.2f} | "
                       f"{total / GIB:.2f} | {hbm} | {'yes' if total < 0.9 * hbm * GIB else 'NO'} "
                       f"(estimate) |")
    return "\n".join(out)


def state_one_device(config) -> int:
    """Whole-state bytes (= per-device bytes on n GPUs under pure FSDP, divided by n)."""
    cfg, tx, rm_tx = step_setup(config, config.model.num_layers, True, "xla")
    mesh = parallel.make_mesh((1, 1, 1), jax.devices("cpu")[:1])
    return (per_device_bytes(abstract_state(cfg, tx, rm_tx, mesh))
            + per_device_bytes(abstract_batch(config, mesh)))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=pathlib.Path, default=DEFAULT_CONFIG)
    p.add_argument("--out", default="docs/results/memory_plan/runs.jsonl")
    p.add_argument("--slices", nargs="+", default=list(SLICES), choices=list(SLICES))
    p.add_argument("--layers", nargs="+", type=int, default=[1, 2])
    p.add_argument("--remat", nargs="+", type=lambda s: s.lower() in ("1", "true", "on"),
                   default=[True, False])
    p.add_argument("--meshes", type=int, default=1, help="1: pure FSDP; 2: also data=2 x FSDP")
    p.add_argument("--kernel-impl", default="xla", choices=["pallas_tpu", "xla"])
    p.add_argument("--report", default=None, help="print the table of a runs.jsonl and exit")
    a = p.parse_args(argv)
    if a.report:
        print(report(a.report))
        print("\nExact state per device at 28 layers (no compile):")
        print(state_table(load_config(a.config)))
        return
    sweep(a)
    print(report(a.out))


if __name__ == "__main__":
    sys.exit(main())
