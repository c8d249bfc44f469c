"""Per-device memory and FLOPs of a Cooper config's train step, compiled ahead of time for TPU slices.

MaxText `train_compile.py` style: the policy, its AdamW state, the frozen reference and the
co-trained RM (+ its AdamW state) of a config (`--config`, default
`configs/qwen2_5_1_5b_gsm8k.py`; `configs/qwen2_5_0_5b_colab.py` for Colab's v5e-1) are abstract
sharded `jax.ShapeDtypeStruct`s on a mesh of TPU device *descriptions* from
`jax.experimental.topologies.get_topology_desc`; `jit(step).lower(...).compile()` runs libtpu's
real TPU compiler on this CPU-only host and `memory_analysis()` / `cost_analysis()` are the TPU
compiler's numbers. Nothing is allocated. (The CPU backend's memory_analysis does not predict TPU
memory: it reports the same temporaries with and without remat.)

Needs a venv with jax[tpu] (libtpu), e.g. /work/tpuvenv:

    /work/tpuvenv/bin/python benchmarks/memory_plan.py --slices v5e-8 --layers 0 --scan on \
        --micro-batches 1 4
    /work/tpuvenv/bin/python benchmarks/memory_plan.py --config configs/qwen2_5_0_5b_colab.py \
        --slices v5e-1 --layers 0 --scan on
    /work/tpuvenv/bin/python benchmarks/memory_plan.py --slices v5e-8 --layers 0 --scan on \
        --assistant on
    /work/tpuvenv/bin/python benchmarks/memory_plan.py --report docs/results/memory_plan/runs.jsonl

`--assistant on` keeps the config's local rewrite assistant (`cooper.assistant_hf_path`, the
architecture its path names in ARCHS, in `cooper.AssistantSettings`' dtype) resident
beside the train state: the step is compiled with the assistant's parameters as a kept argument,
and one rewrite call (the assistant's sampler at the rewriter's shapes) with the train state as
one; the plan's peak is the larger program's.

Each compile appends one JSON line with the code's git commit (re-runs skip what the file already
holds for that commit), so a long sweep can be stopped and resumed, and a change to the model or
the step is compiled again; the plan reads the newest compile of each setting. `--layers 0` compiles the config's real depth; with `--scan on`
(`model.scan_layers`) the layers are one scanned block and that compile costs about what one
layer does. Unrolled, `--layers 1 2` compiles shallow copies and the report extrapolates
temporaries and compile time linearly in the layer count, saying so in every such row.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import itertools
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host backend; the targets are TPU topologies
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # other processes may hold libtpu

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from coop_jax import config as config_lib, kernels, models, parallel  # noqa: E402
from coop_jax.rm import cooper  # noqa: E402
from coop_jax.hf import build as build_lib  # noqa: E402
from coop_jax.models import lora  # noqa: E402
from coop_jax.rm.optim import RMOptimizerSettings, rm_optimizer  # noqa: E402
from coop_jax.trainer.batch import TrainBatch  # noqa: E402
from coop_jax.trainer.step import StepConfig, init_state, jit_step  # noqa: E402

GIB = 2 ** 30
ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "qwen2_5_1_5b_gsm8k.py"

# Architectures of the Hub checkpoints the configs name (matched in their hf_path);
# VerifyRM-1.5B is Qwen2.5-1.5B's trunk with a scalar head.
_QWEN = dict(rope_theta=1_000_000.0, rms_norm_eps=1e-6, qkv_bias=True, tie_embeddings=True,
             max_position_embeddings=32_768, head_dim=0, hf_path="", vocab_size=151_936)
ARCHS = {
    "Qwen2.5-1.5B": dict(_QWEN, hidden_size=1536, intermediate_size=8960, num_layers=28,
                         num_heads=12, num_kv_heads=2),
    "VerifyRM-1.5B": dict(_QWEN, hidden_size=1536, intermediate_size=8960, num_layers=28,
                          num_heads=12, num_kv_heads=2),
    "Qwen2.5-0.5B": dict(_QWEN, hidden_size=896, intermediate_size=4864, num_layers=24,
                         num_heads=14, num_kv_heads=2),
    # the paper's rewrite assistant (cooper.assistant_hf_path): untied, 152,064-row embeddings
    "Qwen2.5-7B": dict(_QWEN, hidden_size=3584, intermediate_size=18944, num_layers=28,
                       num_heads=28, num_kv_heads=4, tie_embeddings=False, vocab_size=152_064),
}
QWEN2_5_1_5B = ARCHS["Qwen2.5-1.5B"]
VALID_VOCAB = 151_665  # the Qwen2.5 tokenizer's size

# slice -> (topology name, get_topology_desc kwargs, HBM GiB per JAX device)
SLICES = {
    "v5e-1": ("v5e:1x1", {"chips_per_host_bounds": (1, 1, 1)}, 16),  # Colab's TPU runtime
    "v5e-4": ("v5e:2x2", {}, 16),
    "v4-8": ("v4:2x2x1", {"chip_config_name": "megacore"}, 32),  # 4 chips, megacore devices
    "v5e-8": ("v5e:2x4", {}, 16),
    "v5e-16": ("v5e:4x4", {}, 16),
    "v5p-8": ("v5p:2x2x1", {}, 95),  # 4 chips (8 TensorCores, megacore)
    "v6e-8": ("v6e:2x4", {}, 32),
}
GPUS = {"H100": 80, "H200": 141}


def _arch_name(path: str, field: str) -> str:
    name = next((k for k in ARCHS if k.lower() in path.lower()), None)
    if name is None:
        raise ValueError(f"config.{field} {path!r} names none of {sorted(ARCHS)}; add its "
                         "architecture to memory_plan.ARCHS")
    return name


def _arch(section, field: str) -> dict:
    """The architecture of a section's hf_path (a key of ARCHS in the path), at its depth."""
    arch = dict(ARCHS[_arch_name(section.hf_path, f"{field}.hf_path")])
    if section.get("keep_layers"):
        arch["num_layers"] = section.keep_layers
    return arch


def load_config(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location("plan_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config.model.update(_arch(config.model, "model"))
    config.reward_model.update(_arch(config.reward_model, "reward_model"))
    config.reward_model.keep_layers = 0
    return config


def step_setup(config, layers: int | None, remat: bool, kernel_impl: str,
               valid_vocab: int = VALID_VOCAB, scan: bool = False, micro_batches: int = 1):
    """(StepConfig, tx, rm_tx) exactly as the trainer builds them; `layers` (None or 0: the
    config's depths, each model its own) replaces the depth of both the policy and the RM."""
    from coop_jax.trainer import setup  # the trainer's own builders (heavy imports: only here)

    def model(section, **kw):
        cfg = build_lib.model_config(section, **kw).replace(
            remat=remat, scan_layers=scan, lora=build_lib.lora_config(section))
        return cfg.replace(num_layers=layers) if layers else cfg

    cfg = setup.step_config(config, model(config.model).with_kernels(kernel_impl),
                            model(config.reward_model, num_labels=1), valid_vocab)
    cfg = dataclasses.replace(cfg, micro_batches=micro_batches)
    rm_tx = rm_optimizer(RMOptimizerSettings.for_cooper(config.cooper, config.train.steps))
    return cfg, setup.policy_optimizer(config.optim, config.train.steps), rm_tx


def _sds(x, sharding):
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)


def apply_lora(config, rank: int) -> None:
    """`--lora RANK`: LoRA of that rank (alpha 32, every projection) on the policy and the RM
    (`model.lora`, `reward_model.lora`); 0 leaves the config as it is."""
    for section in (config.model, config.reward_model):
        section.lora.rank = rank or section.lora.rank


def abstract_state(cfg: StepConfig, tx, rm_tx, mesh):
    """Sharded ShapeDtypeStructs of the whole TrainState: policy + AdamW, reference, RM + AdamW
    (under LoRA: the frozen bases, AdamW for the adapters only, no reference copy)."""
    rep = parallel.replicated(mesh)

    def model(mcfg, opt):
        shardings = parallel.param_shardings(mcfg, mesh)
        params = jax.tree_util.tree_map(_sds, nn.meta.unbox(models.abstract_params(mcfg)),
                                        shardings)
        base, params = lora.split(params, mcfg)
        shardings = lora.split(shardings, mcfg)[1]
        opt_state = optax.tree_map_params(opt, _sds, jax.eval_shape(opt.init, params), shardings,
                                          transform_non_params=lambda x: _sds(x, rep))
        return params, opt_state, base

    policy, rm = model(cfg.policy, tx), model(cfg.rm, rm_tx)
    ref_needed = cfg.loss.kl_coef > 0 and not cfg.kl_to_base
    state = jax.eval_shape(lambda: init_state(policy[0], tx, ref_params=policy[0] if ref_needed
                                              else None, rm_params=rm[0], rm_tx=rm_tx))
    state = state.replace(step=_sds(state.step, rep), policy_base=policy[2], rm_base=rm[2])
    state = state.replace(policy=state.policy.replace(params=policy[0], opt_state=policy[1]),
                          rm=state.rm.replace(params=rm[0], opt_state=rm[1]))
    if ref_needed:
        state = state.replace(ref_params=policy[0])
    return state


def abstract_batch(config, mesh=None) -> TrainBatch:
    """The batch of one Cooper step: B*G rollouts of prompt/response lengths, RM inputs, pairs
    (ShapeDtypeStructs, sharded over `mesh` when given)."""
    rows = config.rollout.prompts_per_step * config.rollout.group_size
    p, n, rm_len = config.data.max_prompt_len, config.rollout.max_new_tokens, config.cooper.max_len
    b = config.rollout.prompts_per_step
    shapes = {"prompt_tokens": ((rows, p), np.int32), "prompt_mask": ((rows, p), np.bool_),
              "tokens": ((rows, n), np.int32), "mask": ((rows, n), np.bool_),
              "rewards": ((rows,), np.float32), "reward_bonus": ((rows,), np.float32),
              "loss_weight": ((rows,), np.float32), "rm_tokens": ((rows, rm_len), np.int32),
              "rm_mask": ((rows, rm_len), np.int32),
              "pair_pos_tokens": ((b, rm_len), np.int32), "pair_pos_mask": ((b, rm_len), np.int32),
              "pair_neg_tokens": ((b, rm_len), np.int32), "pair_neg_mask": ((b, rm_len), np.int32),
              "pair_valid": ((b,), np.float32)}
    host = {k: np.zeros(s, d) for k, (s, d) in shapes.items()}  # small: only for the shardings
    shardings = parallel.batch_shardings(host, mesh) if mesh is not None else {}
    return TrainBatch.from_flat({k: jax.ShapeDtypeStruct(v.shape, v.dtype,
                                                        sharding=shardings.get(k))
                                 for k, v in host.items()})


def assistant_model(config, scan: bool) -> tuple[str, models.ModelConfig]:
    """(architecture name, ModelConfig) of the config's local rewrite assistant
    (`cooper.assistant_hf_path`) as `cooper.make_rewriter` loads it: the architecture its path
    names, parameters and activations in `cooper.AssistantSettings`' dtype, layers
    scanned with the policy's (`scan`)."""
    path = config.cooper.assistant_hf_path
    if not path or config.cooper.assistant_url:
        raise ValueError("the config has no local rewrite assistant (cooper.assistant_hf_path "
                         "unset, or cooper.assistant_url set)")
    name = _arch_name(path, "cooper.assistant_hf_path")
    dtype = cooper.AssistantSettings.from_config(config).local["dtype"]
    section = config_lib.model_section(**ARCHS[name])
    section.update(param_dtype=dtype, dtype=dtype)
    return name, build_lib.model_config(section).replace(scan_layers=scan)


def abstract_params(mcfg: models.ModelConfig, mesh):
    """A model's parameters as sharded ShapeDtypeStructs (`parallel.param_shardings`)."""
    return jax.tree_util.tree_map(_sds, nn.meta.unbox(models.abstract_params(mcfg)),
                                  parallel.param_shardings(mcfg, mesh))


def per_device_bytes(tree) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (exact, no compile)."""
    return sum(int(np.prod(x.sharding.shard_shape(x.shape))) * np.dtype(x.dtype).itemsize
               for x in jax.tree_util.tree_leaves(tree))


def _compile(fn, *args) -> dict:
    """Lower and compile `fn` for `args`; its times and the TPU compiler's memory / cost."""
    t0, c0 = time.perf_counter(), time.process_time()
    lowered = fn.lower(*args)
    t1, c1 = time.perf_counter(), time.process_time()
    compiled = lowered.compile()
    seconds, cpu_seconds = time.perf_counter() - t1, time.process_time() - c1
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return dict(lower_s=round(t1 - t0, 1), lower_cpu_s=round(c1 - c0, 1),
                compile_s=round(seconds, 1), compile_cpu_s=round(cpu_seconds, 1),
                argument_bytes=int(mem.argument_size_in_bytes),
                output_bytes=int(mem.output_size_in_bytes),
                alias_bytes=int(mem.alias_size_in_bytes),
                temp_bytes=int(mem.temp_size_in_bytes),
                flops=float(cost.get("flops", float("nan"))) if cost else float("nan"))


def rewrite_program(config, acfg: models.ModelConfig, mesh, kernel_impl: str, num_processes: int):
    """(sampler, prompt ShapeDtypeStructs, settings) of one rewrite call of the local assistant
    as `cooper.make_rewriter` runs it on `mesh`: `AssistantSettings.local`' prompt and response
    lengths, `sampling.chat.rows_per_process` rows from each process, the sampler's kernels
    `kernel_impl` ("auto", as `local_chat` samples, is resolved for TPU on the mesh: what a TPU
    host resolves it to; settings["kernel_impl"] names the result once traced)."""
    from coop_jax.sampling.chat import rows_per_process
    from coop_jax.sampling.sampler import SamplingConfig, generate
    settings = cooper.AssistantSettings.from_config(config).local
    rows = num_processes * rows_per_process(mesh, num_processes, settings["batch_size"])
    p = settings["max_prompt_len"]
    rows_sharding = parallel.host.row_sharding(mesh, (rows, p))
    prompt = (jax.ShapeDtypeStruct((rows, p), np.int32, sharding=rows_sharding),
              jax.ShapeDtypeStruct((rows, p), np.bool_, sharding=rows_sharding))
    # Qwen2.5's <|im_end|> / <|endoftext|> (stop ids and padding change no buffer size)
    scfg = SamplingConfig(max_new_tokens=settings["max_new_tokens"], eos_ids=(151645, 151643),
                          pad_id=151643, temperature=config.cooper.rewrite_temperature,
                          valid_vocab=VALID_VOCAB)
    settings = dict(settings, rows=rows)
    acfg = acfg.with_kernels(kernel_impl)

    def sample(params, tokens, mask, key):
        unembed = models.unembed_matrix(params, acfg)
        hidden = jnp.zeros((rows, acfg.hidden_size), acfg.jnp_dtype)
        if kernels.partition.layout(hidden, unembed) is None:  # a TPU host would take xla then
            raise RuntimeError("the rewrite sampler's unembedding is not on the mesh")
        settings["kernel_impl"] = kernels.resolve_impl(acfg.kernel_impl, hidden, unembed,
                                                       backend="tpu")
        return generate(params, acfg, scfg, tokens, mask, key, backend="tpu")

    return sample, prompt, settings


def compile_one(config, devices, mesh_shape, layers, remat, kernel_impl, scan=False,
                micro_batches=1, assistant=False, rewrite_kernel_impl="auto") -> dict:
    """One step compile. With `assistant`, the config's local rewrite assistant is resident
    beside the train state: the step is compiled with the assistant's sharded parameters as a
    kept (unused, not donated) argument, and one rewrite call (the sampler, its kernels
    `rewrite_kernel_impl`) with the train state as one, each program seeing everything the
    devices hold while it runs (fields `rewrite_*`)."""
    mesh = parallel.make_mesh(mesh_shape, devices)
    cfg, tx, rm_tx = step_setup(config, layers, remat, kernel_impl, scan=scan,
                                micro_batches=micro_batches)
    state, batch = abstract_state(cfg, tx, rm_tx, mesh), abstract_batch(config, mesh)
    shardings = lambda tree: jax.tree_util.tree_map(lambda x: x.sharding, tree)
    rep = parallel.replicated(mesh)
    step = jit_step(cfg, tx, rm_tx, state_shardings=shardings(state),
                    batch_sharding=shardings(batch), replicated=rep)
    out = dict(state_bytes=per_device_bytes(state), batch_bytes=per_device_bytes(batch))
    if not assistant:
        return dict(out, **_compile(step, state, batch))
    name, acfg = assistant_model(config, scan)
    resident = abstract_params(acfg, mesh)
    out.update(assistant_arch=name, assistant_dtype=acfg.param_dtype,
               assistant_bytes=per_device_bytes(resident))
    processes = len({d.process_index for d in devices})
    sample, prompt, settings = rewrite_program(config, acfg, mesh, rewrite_kernel_impl,
                                               processes)
    key = jax.ShapeDtypeStruct((), jax.eval_shape(lambda: jax.random.key(0)).dtype,
                               sharding=rep)
    rewrite = jax.jit(lambda params, state, tokens, mask, key: sample(params, tokens, mask, key),
                      in_shardings=(shardings(resident), shardings(state), prompt[0].sharding,
                                    prompt[1].sharding, rep), keep_unused=True)
    measured = _compile(rewrite, resident, state, *prompt, key)
    out.update({f"rewrite_{k}": v for k, v in measured.items()},
               rewrite_rows=settings["rows"], rewrite_prompt_len=settings["max_prompt_len"],
               rewrite_new_tokens=settings["max_new_tokens"],
               rewrite_kernel_impl=f"{rewrite_kernel_impl} -> {settings['kernel_impl']}")
    with_assistant = jax.jit(lambda state, batch, _assistant: step(state, batch),
                             in_shardings=(shardings(state), shardings(batch),
                                           shardings(resident)),
                             out_shardings=(shardings(state), rep), donate_argnums=(0,),
                             keep_unused=True)
    return dict(out, **_compile(with_assistant, state, batch, resident))


def full_state_bytes(config, mesh_shape, devices) -> tuple[int, int]:
    """Exact per-device (state, batch) bytes at the config's real depths (no compile)."""
    mesh = parallel.make_mesh(mesh_shape, devices)
    cfg, tx, rm_tx = step_setup(config, None, True, "xla", scan=True)  # same bytes, faster trace
    return (per_device_bytes(abstract_state(cfg, tx, rm_tx, mesh)),
            per_device_bytes(abstract_batch(config, mesh)))


def topology_devices(name: str):
    from jax.experimental import topologies
    topo, kw, _ = SLICES[name]
    return topologies.get_topology_desc(topo, "tpu", **kw).devices


def state_table(config, slices=tuple(SLICES)) -> str:
    """Exact per-device bytes of the whole TrainState and the batch at the config's depth, for
    every slice under pure FSDP: the floor that temporaries come on top of (no compile)."""
    lines = ["| slice | devices | mesh | params+optimizer(+ref)+RM GiB/dev | batch MiB/dev | HBM |",
             "|---|---|---|---|---|---|"]
    for name in slices:
        devices = topology_devices(name)
        shape = mesh_choices(len(devices))[0]
        state, batch = full_state_bytes(config, shape, devices)
        lines.append(f"| {name} | {len(devices)} | {shape} | {state / GIB:.2f} | "
                     f"{batch / 2 ** 20:.2f} | {SLICES[name][2]} |")
    return "\n".join(lines)


def mesh_choices(n: int) -> list[tuple[int, int, int]]:
    """Pure FSDP over every device, and data=2 x FSDP (the config's (2, 4, 1) on 8 devices)."""
    return [(1, n, 1)] + ([(2, n // 2, 1)] if n > 1 else [])


def code_version() -> str:
    """The git commit the compile's code is at, "+dirty" when coop_jax/ has uncommitted edits."""
    import subprocess
    git = lambda *args: subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                                       text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--", "coop_jax") else "")


def _key(r: dict) -> tuple:
    """What identifies a compile (rows written before configs/scan/micro-batches/the assistant
    had defaults)."""
    return (r.get("config", DEFAULT_CONFIG.stem), r["slice"], tuple(r["mesh"]), r["layers"],
            r["remat"], r["kernel_impl"], r.get("scan", False), r.get("micro_batches", 1),
            r.get("assistant", False), r.get("lora", 0))


def sweep(a) -> None:
    config = load_config(a.config)
    apply_lora(config, a.lora)
    full = config.model.num_layers
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    done, version = set(), code_version()
    if out.exists():
        done = {_key(r) for r in map(json.loads, out.read_text().splitlines())
                if "layers" in r and r.get("commit") == version}
    for name in a.slices:
        devices = topology_devices(name)
        _, _, hbm = SLICES[name]
        for mesh_shape in mesh_choices(len(devices))[:a.meshes]:
            for remat, scan, micro, layers in itertools.product(a.remat, a.scan, a.micro_batches,
                                                                 a.layers):
                layers = layers or full
                row = dict(config=a.config.stem, slice=name, topology=SLICES[name][0],
                           devices=len(devices), hbm_gib=hbm, mesh=list(mesh_shape),
                           layers=layers, full_layers=full, remat=remat,
                           rm_layers=config.reward_model.num_layers if layers == full else layers,
                           kernel_impl=a.kernel_impl, scan=scan, micro_batches=micro,
                           commit=version)
                if a.assistant:
                    row["assistant"] = True
                if config.model.lora.rank:  # the policy's rank (the RM's is the same here)
                    row["lora"] = config.model.lora.rank
                if _key(row) in done:
                    continue
                try:  # the full depth compiles each model at its own (the RM's keep_layers)
                    row.update(compile_one(config, devices, mesh_shape,
                                           None if layers == full else layers, remat,
                                           a.kernel_impl, scan, micro,
                                           **(dict(assistant=True, rewrite_kernel_impl=(
                                               a.rewrite_kernel_impl)) if a.assistant else {})))
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


def _settings(remat, scan, micro) -> str:
    return (f"remat {'on' if remat else 'off'}, scan {'on' if scan else 'off'}, "
            f"micro_batches {micro}")


def plan_rows(rows: list[dict]) -> list[dict]:
    """One planned row per (config, slice, mesh, settings): temporaries at the full depth,
    compiled or linearly extrapolated over the compiled depths."""
    groups: dict = {}
    for r in rows:
        if "error" not in r:
            groups.setdefault(_key(r)[:3] + _key(r)[4:], []).append(r)
    out = []
    for (config, name, mesh, remat, impl, scan, micro, assistant, lora_rank), rs in sorted(
            groups.items()):
        rs = sorted(rs, key=lambda r: r["layers"])
        full = rs[0].get("full_layers", 28)
        depths = [r["layers"] for r in rs]
        measured = full in depths
        # the newest compile of a depth (rows stay in file order within one depth)
        pick = lambda k: ([r[k] for r in rs if r["layers"] == full][-1] if measured
                          else _fit(depths, [r[k] for r in rs], full))
        # with the rewrite assistant resident: its parameters stay on the devices, and the
        # temporaries are those of the larger program (the step or a rewrite call)
        assistant_bytes = rs[0].get("assistant_bytes", 0)
        state = rs[0]["full_state_bytes"] + rs[0]["full_batch_bytes"] + assistant_bytes
        step_temp = pick("temp_bytes")
        rewrite_temp = pick("rewrite_temp_bytes") if assistant else 0
        temp = max(step_temp, rewrite_temp)
        cpu = [r.get("compile_cpu_s") for r in rs]
        basis = (f"compiled at {full} layers" if measured else
                 f"LOWER BOUND: only {depths[0]} layer(s) compiled" if len(set(depths)) == 1
                 else f"linear extrapolation from {depths} layers")
        out.append(dict(config=config, slice=name, mesh=mesh, remat=remat, kernel_impl=impl,
                        scan=scan, micro_batches=micro, assistant=assistant, lora=lora_rank,
                        assistant_arch=rs[0].get("assistant_arch"),
                        assistant_dtype=rs[0].get("assistant_dtype"),
                        assistant_bytes=assistant_bytes, step_temp=step_temp,
                        rewrite_temp=rewrite_temp, rewrite_shape=(
                            rs[0].get("rewrite_rows"), rs[0].get("rewrite_prompt_len"),
                            rs[0].get("rewrite_new_tokens")),
                        rewrite_compile_cpu_s=pick("rewrite_compile_cpu_s") if assistant
                        else None, state=state, temp=temp,
                        total=state + temp, hbm_gib=rs[0]["hbm_gib"], basis=basis,
                        lower_bound=basis.startswith("LOWER"), devices=rs[0]["devices"],
                        compile_s=pick("compile_s"),
                        compile_cpu_s=pick("compile_cpu_s") if None not in cpu else None,
                        # rows written before commits were recorded have none
                        commit=[r.get("commit", "-") for r in rs if r["layers"] == full][-1]
                        if measured else None))
    return out


def report(path: str) -> str:
    rows = [json.loads(line) for line in pathlib.Path(path).read_text().splitlines()]
    ok = [r for r in rows if "error" not in r]
    lines = ["Cooper step per device, GiB (libtpu AOT compile; fp32 params + AdamW, bf16 compute; "
             "fits = total < 90% of HBM).",
             "| config | slice | mesh (data,fsdp,tensor) | remat | scan | micro-batches | kernels "
             "| state+batch | temporaries | total | HBM | fits | compile s (CPU s) | basis | commit |",
             "|" + "---|" * 15]
    plans = plan_rows(rows)
    for p in plans:
        fits = ("NO" if p["total"] >= 0.9 * p["hbm_gib"] * GIB else "?" if p["lower_bound"]
                else "yes")
        ge = ">= " if p["lower_bound"] else ""
        cpu = f" ({p['compile_cpu_s']:.0f})" if p["compile_cpu_s"] is not None else ""
        label = p["config"] + (f" + {p['assistant_arch']} assistant ({p['assistant_dtype']})"
                               if p["assistant"] else "") + (
            f" + LoRA r={p['lora']} (policy and RM)" if p["lora"] else "")
        lines.append(f"| {label} | {p['slice']} | {p['mesh']} | "
                     f"{'on' if p['remat'] else 'off'} | {'on' if p['scan'] else 'off'} | "
                     f"{p['micro_batches']} | {p['kernel_impl']} | {p['state'] / GIB:.2f} | "
                     f"{ge}{p['temp'] / GIB:.2f} | {ge}{p['total'] / GIB:.2f} | {p['hbm_gib']} | "
                     f"{fits} | {ge}{p['compile_s']:.0f}{cpu} | {p['basis']} | "
                     f"{p['commit'] or '-'} |")
    lines += assistant_rows(plans)
    lines += ["", "Measured compiles (per device; with scan, XLA's cost analysis counts the "
              "layer loop's body once, so TFLOP/step is not the step's total):",
              "| config | slice | mesh | remat | scan | micro | layers | args GiB | temps GiB | "
              "TFLOP/step | compile s | compile CPU s | commit |", "|" + "---|" * 13]
    for r in sorted(ok, key=_key):
        k = _key(r)
        lines.append(f"| {k[0]}{' + assistant' if k[8] else ''}"
                     f"{f' + LoRA r={k[9]}' if k[9] else ''} | {k[1]} | {k[2]} | "
                     f"{'on' if k[4] else 'off'} | "
                     f"{'on' if k[6] else 'off'} | {k[7]} | {k[3]} | "
                     f"{r['argument_bytes'] / GIB:.2f} | {r['temp_bytes'] / GIB:.2f} | "
                     f"{r['flops'] / 1e12:.1f} | {r['compile_s']} | {r.get('compile_cpu_s', '')} | "
                     f"{r.get('commit', '-')} |")
    for r in rows:
        if "error" in r:
            lines.append(f"FAILED {_key(r)}: {r['error'][:200]}")
    for config in sorted({p["config"] for p in plans}):
        lines += ["", gpu_rows(config, plans)]
    return "\n".join(lines)


def assistant_rows(plans: list[dict]) -> list[str]:
    """The plans with the local rewrite assistant resident: what each program adds."""
    plans = [p for p in plans if p["assistant"]]
    if not plans:
        return []
    lines = ["", "With the local rewrite assistant (`cooper.assistant_hf_path`, random weights of "
             "its architecture) resident beside the train state, per device, GiB: the step runs "
             "with the assistant's parameters kept, a rewrite call (one sampler program, rows x "
             "(prompt + new) tokens) with the train state kept; the peak is the larger.",
             "| config | slice | mesh | assistant | train state+batch | assistant params | step "
             "temporaries | rewrite call | rewrite temporaries | peak | HBM | fits | rewrite "
             "compile CPU s |", "|" + "---|" * 13]
    for p in plans:
        train = p["state"] - p["assistant_bytes"]
        rows, prompt, new = p["rewrite_shape"]
        fits = "NO" if p["total"] >= 0.9 * p["hbm_gib"] * GIB else "yes"
        cpu = p["rewrite_compile_cpu_s"]
        lines.append(f"| {p['config']} | {p['slice']} | {p['mesh']} | {p['assistant_arch']} "
                     f"({p['assistant_dtype']}) | {train / GIB:.2f} | "
                     f"{p['assistant_bytes'] / GIB:.2f} | {p['step_temp'] / GIB:.2f} | "
                     f"{rows} x ({prompt} + {new}) | {p['rewrite_temp'] / GIB:.2f} | "
                     f"{p['total'] / GIB:.2f} | {p['hbm_gib']} | {fits} | "
                     f"{'-' if cpu is None else f'{cpu:.0f}'} |")
    return lines


def gpu_rows(config_name: str, plans: list[dict]) -> str:
    """H100 / H200 ESTIMATES: exact state bytes on 1 or 8 GPUs (pure FSDP) + temporaries scaled
    by rows per device from this config's smallest pure-FSDP TPU plan at full depth."""
    config = load_config(ROOT / "configs" / f"{config_name}.py")
    rows = config.rollout.prompts_per_step * config.rollout.group_size
    out = [f"GPU rows for {config_name} are ESTIMATES (no GPU compile without a GPU): state "
           "bytes exact, temporaries scaled by rows per device from the TPU plan named.",
           "| GPU x n | state+batch GiB/dev | est. temporaries GiB/dev | total | HBM | fits |",
           "|---|---|---|---|---|---|"]
    ref = [p for p in plans if p["config"] == config_name and p["mesh"][0] == 1
           and not p["lower_bound"] and not p["assistant"] and not p["lora"]]
    if not ref:
        return "\n".join(out + ["(no full-depth or extrapolated TPU plan to scale from)"])
    ref = min(ref, key=lambda p: p["temp"])
    out[0] += (f" ({ref['slice']}, {_settings(ref['remat'], ref['scan'], ref['micro_batches'])}"
               f"; scaling every temporary by rows is pessimistic: upper bounds)")
    whole = state_one_device(config)
    for gpu, hbm in GPUS.items():
        for n in (1, 8):
            state = whole / n  # pure FSDP (norms and biases, replicated, are < 1 MiB)
            est_temp = ref["temp"] * (rows / n) / (rows / ref["devices"])
            total = state + est_temp
            out.append(f"| {gpu} x {n} | {state / GIB:.2f} | {est_temp / GIB:.2f} | "
                       f"{total / GIB:.2f} | {hbm} | {'yes' if total < 0.9 * hbm * GIB else 'NO'} "
                       f"(estimate) |")
    return "\n".join(out)


def state_one_device(config) -> int:
    """Whole-state bytes (= per-device bytes on n GPUs under pure FSDP, divided by n)."""
    cfg, tx, rm_tx = step_setup(config, None, True, "xla", scan=True)  # same bytes, faster trace
    mesh = parallel.make_mesh((1, 1, 1), jax.devices("cpu")[:1])
    return (per_device_bytes(abstract_state(cfg, tx, rm_tx, mesh))
            + per_device_bytes(abstract_batch(config, mesh)))


def main(argv=None) -> None:
    on_off = lambda s: s.lower() in ("1", "true", "on")
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=pathlib.Path, default=DEFAULT_CONFIG)
    p.add_argument("--out", default="docs/results/memory_plan/runs.jsonl")
    p.add_argument("--slices", nargs="+", default=list(SLICES), choices=list(SLICES))
    p.add_argument("--layers", nargs="+", type=int, default=[0],
                   help="depths to compile; 0 = the config's own")
    p.add_argument("--remat", nargs="+", type=on_off, default=[True])
    p.add_argument("--scan", nargs="+", type=on_off, default=[True],
                   help="model.scan_layers (on: one compiled block for all layers)")
    p.add_argument("--micro-batches", nargs="+", type=int, default=[1],
                   help="rl.micro_batches (gradient accumulation in each PPO mini-batch)")
    p.add_argument("--meshes", type=int, default=1, help="1: pure FSDP; 2: also data=2 x FSDP")
    p.add_argument("--kernel-impl", default="xla", choices=["pallas_tpu", "xla"])
    p.add_argument("--assistant", type=on_off, default=False,
                   help="on: the config's local rewrite assistant (cooper.assistant_hf_path) "
                        "resident beside the train state; also compiles one rewrite call")
    p.add_argument("--rewrite-kernel-impl", default="auto", choices=["auto", "pallas_tpu", "xla"],
                   help="the rewrite sampler's kernels (auto: as the rewriter runs, resolved "
                        "for TPU on the mesh)")
    p.add_argument("--lora", type=int, default=0,
                   help="LoRA rank on the policy and the RM (model.lora, reward_model.lora; "
                        "alpha 32, every projection); 0: the config's own")
    p.add_argument("--report", default=None, help="print the table of a runs.jsonl and exit")
    a = p.parse_args(argv)
    if a.report:
        print(report(a.report))
        config = load_config(a.config)
        apply_lora(config, a.lora)
        print(f"\nExact state per device of {a.config.stem}"
              f"{f' with LoRA r={a.lora}' if a.lora else ''} at its full depth (no compile):")
        print(state_table(config))
        return
    sweep(a)
    print(report(a.out))


if __name__ == "__main__":
    sys.exit(main())
