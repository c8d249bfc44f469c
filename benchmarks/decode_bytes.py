"""Bytes one decode step accesses, from the compiled TPU program, against the ideal.

The sampler's decode step at Qwen2.5-1.5B shapes (28 layers, hidden 1536, 12 / 2 KV heads of
128, MLP 8960, tied 151,936-token vocabulary), bf16, 512 prompt + 512 new tokens, batch 64 and
256, the rollout config's sampling (T = 1, no top-k / top-p), compiled through libtpu for one
chip of v5e and v6e (`jax.experimental.topologies.get_topology_desc`: no TPU needed). Programs:

  static      one iteration of `sampling.generate`'s decode loop (`sampler.decode_step`), its
              carry donated as the while loop's is;
  continuous  one iteration of `generate_continuous`'s loop (`engine._decode_step`: the refill
              `cond`, the sampling head over per-request keys, the forward) with as many slots
              as rows, its state donated.

`bytes_accessed` is XLA's `cost_analysis()` of the compiled program; `ideal_bytes` is the
weights read once plus the KV cache live at the mean decode step (prompt + 256 tokens: the
mean over the 512 steps, as `gpu_check.hbm_bound_tokens_per_s` sums). `ops` lists the largest
top-level instructions of the compiled HLO by operand + result bytes (an upper bound per op: an
in-place update counts its whole buffer there, not in cost_analysis).

    python -m venv --system-site-packages /tmp/tpuvenv
    /tmp/tpuvenv/bin/pip install "jax[tpu]==$(python -c 'import jax; print(jax.__version__)')"
    /tmp/tpuvenv/bin/python benchmarks/decode_bytes.py --out decode_bytes.json [--hlo DIR]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the host backend; the targets are topologies
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # other processes may hold libtpu

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from coop_jax import kernels, models, parallel, sampling  # noqa: E402
from coop_jax.kernels import _common  # noqa: E402
from coop_jax.sampling import engine, sampler  # noqa: E402

TOPOLOGIES = {"v5e": "v5e:2x2", "v6e": "v6e:2x2"}  # one chip of each is compiled for
BATCHES = (64, 256)
PROMPT, NEW = 512, 512
GROUP = 16  # rollouts per prompt (the GSM8K config's)
VALID_VOCAB = 151_665  # the Qwen2.5 tokenizer's size
QWEN_EOS, QWEN_PAD = (151_645, 151_643), 151_643
QWEN2_5_1_5B = models.ModelConfig(
    vocab_size=151_936, hidden_size=1536, intermediate_size=8960, num_layers=28, num_heads=12,
    num_kv_heads=2, rope_theta=1_000_000.0, rms_norm_eps=1e-6, qkv_bias=True,
    tie_embeddings=True, max_position_embeddings=32_768, param_dtype="bfloat16",
    dtype="bfloat16")
PROGRAMS = ("static", "continuous")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2,
                "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8}
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\](\{[^}]*\})?")


def scfg_for(batch: int) -> sampling.SamplingConfig:
    return sampling.SamplingConfig(max_new_tokens=NEW, eos_ids=QWEN_EOS, pad_id=QWEN_PAD,
                                   temperature=1.0, num_samples=GROUP, valid_vocab=VALID_VOCAB)


def ideal_bytes(cfg: models.ModelConfig, batch: int) -> dict:
    """Weights read once + the KV cache live at the mean decode step, in bytes."""
    item = jnp.dtype(cfg.jnp_param_dtype).itemsize
    weights = models.param_count(nn.meta.unbox(models.abstract_params(cfg))) * item
    kv_token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.dim_per_head * jnp.dtype(
        cfg.jnp_dtype).itemsize
    live = PROMPT + (NEW - 1) / 2
    return {"weight_bytes": weights, "kv_bytes_live": int(batch * live * kv_token),
            "kv_bytes_full": batch * (PROMPT + NEW) * kv_token,
            "ideal_bytes": int(weights + batch * live * kv_token)}


def _sds(tree, sharding):
    return jax.tree_util.tree_map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)


def static_program(cfg, batch: int, rep):
    """(jitted step, abstract args, the sampling head's impl) of one static-sampler decode
    step."""
    scfg = scfg_for(batch)
    params = _sds(nn.meta.unbox(models.abstract_params(cfg)), rep)
    unembed = _sds(jax.eval_shape(lambda p: models.unembed_matrix(p, cfg), params), rep)
    hidden = jax.ShapeDtypeStruct((batch, cfg.hidden_size), cfg.jnp_dtype, sharding=rep)
    impl = kernels.resolve_impl(cfg.kernel_impl, hidden, unembed, backend="tpu")
    head = sampler.DecodeHead(impl, sampler.decode_vocab_tile(impl, batch, cfg.vocab_size),
                              PROMPT)
    n = NEW
    carry = jax.eval_shape(lambda: sampler.DecodeCarry(
        jnp.int32(1), jnp.zeros((batch,), jnp.int32), models.init_cache(cfg, batch, PROMPT + n),
        jnp.zeros((batch, PROMPT + n), bool), jnp.zeros((batch,), jnp.int32),
        jnp.zeros((batch,), bool), jnp.zeros((batch, n), jnp.int32),
        jnp.zeros((batch, n), jnp.float32), jnp.zeros((batch, n), jnp.float32),
        jax.random.key(0)))
    step = jax.jit(lambda params, unembed, carry: sampler.decode_step(
        params, unembed, cfg, scfg, head, carry), donate_argnums=2)
    return step, (params, unembed, _sds(carry, rep)), impl


def continuous_program(cfg, batch: int, rep):
    """(jitted step, abstract args, the sampling head's impl) of one continuous-engine decode
    step, `batch` slots."""
    scfg = scfg_for(batch)
    prompts_n = batch // GROUP
    params = _sds(nn.meta.unbox(models.abstract_params(cfg)), rep)
    unembed = _sds(jax.eval_shape(lambda p: models.unembed_matrix(p, cfg), params), rep)
    hidden = jax.ShapeDtypeStruct((batch, cfg.hidden_size), cfg.jnp_dtype, sharding=rep)
    impl = kernels.resolve_impl(cfg.kernel_impl, hidden, unembed, backend="tpu")
    prompts = jax.eval_shape(lambda: engine._Prompts(
        models.init_cache(cfg, prompts_n, PROMPT), jnp.zeros((prompts_n, cfg.hidden_size),
                                                             cfg.jnp_dtype),
        jnp.zeros((prompts_n, PROMPT + NEW), bool), jnp.zeros((prompts_n,), jnp.int32)))
    r = batch
    state = jax.eval_shape(lambda: engine._Slots(
        jnp.zeros((batch,), jnp.int32), jnp.zeros((batch,), jnp.int32),
        jnp.zeros((batch, cfg.hidden_size), cfg.jnp_dtype),
        models.init_cache(cfg, batch, PROMPT + NEW), jnp.zeros((batch, PROMPT + NEW), bool),
        jnp.zeros((batch,), jnp.int32), jnp.int32(0), jnp.zeros((r, NEW), jnp.int32),
        jnp.zeros((r, NEW), jnp.float32), jnp.zeros((r, NEW), jnp.float32)))
    key = jax.eval_shape(lambda: jax.random.key(0))

    # the head the engine runs: per-request keys take the xla path at T > 0 (`_row_sampler`)
    greedy = scfg.temperature <= _common.GREEDY_TEMPERATURE
    head_impl = "xla" if not greedy and impl.startswith("pallas") else impl

    def step(params, unembed, prompts, state, key):
        rows = engine._row_sampler(scfg, unembed, impl, batch, key)
        return engine._decode_step(params, cfg, scfg, rows, prompts, state)
    return (jax.jit(step, donate_argnums=3),
            (params, unembed, _sds(prompts, rep), _sds(state, rep), _sds(key, rep)), head_impl)


_INSTR = re.compile(r"^\s*(ROOT )?%([\w.\-]+) = (.+?) ([a-z][\w\-]*)\((.*)$")
_SKIP = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "copy-done",
         "slice-done", "after-all", "partition-id", "replica-id"}
# (part of a decode step, pattern of the op_name metadata), first match wins
PARTS = (("sampling head", r"fused_sample|sample_partials|_emit|threefry|argmax|categorical"
          r"|_row_sampler|closed_call/|sample\.<locals>"),
         ("KV cache writes", r"dynamic_update_slice|scatter"),
         ("attention over the cache", r"bkgts|btkgd|softmax"),
         ("weight matmuls", r"_proj"),
         ("embedding lookup", r"embed_tokens"),
         ("norms, RoPE, residuals", r"Transformer/"))


def _shapes(text: str) -> list[tuple[int, bool]]:
    """(bytes, in VMEM) of every array shape in an HLO result or operand text; S(1) in the
    layout is TPU VMEM, no memory space is HBM."""
    out = []
    for dtype, dims, layout in _SHAPE.findall(text):
        size = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
        out.append((size * _DTYPE_BYTES.get(dtype, 4), "S(1)" in (layout or "")))
    return out


def _computations(hlo: str) -> tuple[dict, str]:
    comps, cur, entry = {}, None, None
    for line in hlo.splitlines():
        head = re.match(r"^(ENTRY )?%([\w.\-]+) \(.*\{$", line)
        if head:
            cur = head.group(2)
            comps[cur] = []
            entry = cur if head.group(1) else entry
            continue
        m = _INSTR.match(line) if cur else None
        if not m:
            continue
        root, name, result, opcode, rest = m.groups()
        depth, i = 1, 0
        while i < len(rest) and depth:
            depth += {"(": 1, ")": -1}.get(rest[i], 0)
            i += 1
        meta = re.search(r'op_name="([^"]*)"', rest)
        calls = re.findall(r"(?:calls|body|branch_computations|true_computation|"
                           r"false_computation)=\{?%?([\w.\-, %]+)\}?", rest)
        comps[cur].append(dict(root=bool(root), name=name, result=result, opcode=opcode,
                               args=rest[:i - 1],
                               operands=re.findall(r"%([\w.\-]+)", rest[:i]),
                               op_name=meta.group(1) if meta else "",
                               calls=[c.strip(" %") for cs in calls for c in cs.split(",")]))
    return comps, entry


def _sliced_params(comp: list[dict]) -> dict[int, int]:
    """Parameter number -> bytes read, for the parameters of a fused computation that it only
    slices (dynamic-slice, slice, gather): the slices' bytes, not the whole operand."""
    out = {}
    for ins in comp:
        if ins["opcode"] != "parameter":
            continue
        users = [u for u in comp if ins["name"] in u["operands"]]
        if users and all(u["opcode"] in ("dynamic-slice", "slice", "gather") for u in users):
            out[int(ins["args"].split(")")[0] or 0)] = sum(
                b for u in users for b, _ in _shapes(u["result"]))
    return out


def _in_place(comp: list[dict], reads: list, writes: list) -> tuple[list, list]:
    """A fusion's (reads, writes) with its in-place outputs (a dynamic-update-slice or scatter
    of one of its parameters, the root or an element of a root tuple) counted as their update:
    the buffer they alias is neither read nor written whole."""
    by_name = {ins["name"]: ins for ins in comp}
    root = next((ins for ins in comp if ins["root"]), None)
    if root is None:
        return reads, writes
    outputs = ([by_name.get(o) for o in root["operands"]] if root["opcode"] == "tuple"
               else [root])
    params = {ins["name"]: int(ins["args"].split(")")[0] or 0) for ins in comp
              if ins["opcode"] == "parameter"}
    reads, writes, aliased = list(reads), list(writes), set()
    for n, out in enumerate(outputs):
        if out is None or out["opcode"] not in ("dynamic-update-slice", "scatter"):
            continue
        target = out["operands"][0] if out["operands"] else None
        if target not in params or n >= len(writes):
            continue
        update = by_name.get(out["operands"][2 if out["opcode"] == "scatter" else 1])
        size = sum(b for b, _ in _shapes(update["result"])) if update else 0
        writes[n] = (min(size, writes[n][0]), writes[n][1])
        aliased.add(params[target])
    return [r for k, r in enumerate(reads) if k not in aliased], writes


def hlo_account(hlo: str) -> list[dict]:
    """Every instruction of the compiled program that moves data, with the bytes it reads and
    writes in HBM and in VMEM: operands + results as the HLO spells them (while bodies and
    conditional branches walked once each, fusions as one op); an in-place update
    (dynamic-update-slice, scatter) counts its update, not the buffer it aliases; a gather
    counts the rows it takes, and a fusion the slices it takes of an operand it only slices;
    an async copy or slice into VMEM counts what it moves, once read and once written."""
    comps, entry = _computations(hlo)
    roots = {c: next((i for i in ins if i["root"]), None) for c, ins in comps.items()}
    ops = []

    def walk(comp):
        table = {i["name"]: _shapes(i["result"]) for i in comps[comp]}
        for i in comps[comp]:
            op = i["opcode"]
            if op in _SKIP:
                continue
            if op in ("while", "conditional", "call"):
                for c in i["calls"]:
                    if c in comps:
                        walk(c)
                continue
            res = _shapes(i["result"])
            reads = [s for o in i["operands"] for s in table.get(o, [])]
            if op == "fusion" and i["calls"] and i["calls"][0] in comps:
                for k, size in _sliced_params(comps[i["calls"][0]]).items():
                    if k < len(reads):
                        reads[k] = (min(size, reads[k][0]), reads[k][1])
            writes = res
            staged = None
            if op in ("copy-start", "slice-start"):
                dest = res[-2] if op == "slice-start" else res[0]
                src = table.get(i["operands"][0], [dest])[0] if i["operands"] else dest
                reads, writes = [(dest[0], src[1])], [dest]
                dims = re.findall(r"\[([\d,]*)\]", i["result"])
                # the staged array: (dest, src, context) / ((src), dest, context); no weight has
                # a dimension of the cache's length
                kv = len(dims) > 1 and str(PROMPT + NEW) in dims[
                    0 if op == "copy-start" else 1].split(",")
                staged = ("KV cache" if kv else "weights") + (
                    ", VMEM -> HBM" if src[1] and not dest[1] else "")
            else:
                fused = comps.get(i["calls"][0]) if op == "fusion" and i["calls"] else None
                if op in ("dynamic-update-slice", "scatter") and len(reads) > 1:
                    update = reads[2 if op == "scatter" else 1]
                    reads, writes = reads[1:], [(update[0], writes[0][1])]
                elif fused:
                    reads, writes = _in_place(fused, reads, writes)
                if "gather" in i["op_name"] and reads and writes:
                    big = max(range(len(reads)), key=lambda k: reads[k][0])
                    reads[big] = (min(reads[big][0], sum(w[0] for w in writes)), reads[big][1])
            ops.append(dict(name=i["name"], opcode=op, op_name=i["op_name"], staged=staged,
                            hbm=sum(b for b, vmem in reads + writes if not vmem),
                            vmem=sum(b for b, vmem in reads + writes if vmem)))
    walk(entry)
    return ops


def part_of(op: dict) -> str:
    for name, pattern in PARTS:
        if re.search(pattern, op["op_name"]):
            return name
    if op.get("staged"):
        return f"staging copies: {op['staged']}"
    if op["opcode"] == "custom-call":
        return "custom calls (ConcatBitcast of staged slices, ...)"
    return "other"


def account_parts(ops: list[dict]) -> dict:
    """part -> {hbm_bytes, vmem_bytes, ops}, largest first."""
    parts = {}
    for op in ops:
        p = parts.setdefault(part_of(op), {"hbm_bytes": 0, "vmem_bytes": 0, "ops": 0})
        p["hbm_bytes"] += op["hbm"]
        p["vmem_bytes"] += op["vmem"]
        p["ops"] += 1
    return dict(sorted(parts.items(), key=lambda kv: -kv[1]["hbm_bytes"] - kv[1]["vmem_bytes"]))


def measure(topology: str, program: str, batch: int, hlo_dir: str | None) -> dict:
    from jax.experimental import topologies
    device = topologies.get_topology_desc(TOPOLOGIES[topology], "tpu").devices[0]
    mesh = parallel.make_mesh((1, 1, 1), [device])
    rep = NamedSharding(mesh, P())
    cfg = QWEN2_5_1_5B
    build = static_program if program == "static" else continuous_program
    fn, args, impl = build(cfg, batch, rep)
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    seconds = time.perf_counter() - t0
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    hlo = compiled.as_text()
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        with open(os.path.join(hlo_dir, f"{topology}_{program}_{batch}.hlo"), "w") as f:
            f.write(hlo)
    memory = compiled.memory_analysis()
    row = {"topology": topology, "chip": device.device_kind, "program": program, "batch": batch,
           "prompt": PROMPT, "new_tokens": NEW, "dtype": cfg.dtype, "impl": impl,
           "bytes_accessed": int(cost["bytes accessed"]), "flops": float(cost.get("flops", 0)),
           **ideal_bytes(cfg, batch), "compile_s": round(seconds, 1),
           "temp_bytes": None if memory is None else int(memory.temp_size_in_bytes),
           }
    ops = hlo_account(hlo)
    row["hbm_bytes"] = sum(o["hbm"] for o in ops)
    row["vmem_bytes"] = sum(o["vmem"] for o in ops)
    row["ratio"] = round(row["bytes_accessed"] / row["ideal_bytes"], 3)
    row["hbm_ratio"] = round(row["hbm_bytes"] / row["ideal_bytes"], 3)
    row["parts"] = account_parts(ops)
    row["largest_hbm_ops"] = [
        {k: o[k] for k in ("name", "opcode", "op_name", "hbm", "vmem")}
        for o in sorted(ops, key=lambda o: -o["hbm"])[:8]]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file for the rows")
    parser.add_argument("--topologies", default=",".join(TOPOLOGIES))
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--hlo", help="also write each compiled program's HLO text here")
    a = parser.parse_args(argv)
    topos = [t for t in a.topologies.split(",") if t]
    programs = [p for p in a.programs.split(",") if p]
    bad = [t for t in topos if t not in TOPOLOGIES] + [p for p in programs if p not in PROGRAMS]
    if bad:
        parser.error(f"unknown topology or program: {', '.join(bad)}")
    batches = [int(b) for b in a.batches.split(",") if b]
    rows = []
    print(f"jax {jax.__version__}; Qwen2.5-1.5B bf16, {PROMPT}+{NEW} tokens")
    print("| topology | program | batch | bytes accessed | ideal | ratio | HBM (HLO) | ratio |")
    for topo in topos:
        for program in programs:
            for batch in batches:
                row = measure(topo, program, batch, a.hlo)
                rows.append(row)
                print(f"| {topo} | {program} | {batch} | {row['bytes_accessed'] / 1e9:.3f} GB "
                      f"| {row['ideal_bytes'] / 1e9:.3f} GB | {row['ratio']:.2f} "
                      f"| {row['hbm_bytes'] / 1e9:.3f} GB | {row['hbm_ratio']:.2f} |", flush=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
