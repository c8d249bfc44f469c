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
"""
from __future__ import annotations

import hashlib
import json
import os

import jax
import numpy as np

ENCODED = "static_rm_encoded.safetensors"
LAYOUT = "static_rm_layout.json"
META = "static_rm_meta.json"
SUMMARY = "rm_summary.json"
SMALL_LEAF = 1 << 16  # leaves up to this many elements are kept exactly
EMBEDDING = "embed"  # a 2-D leaf whose path holds this is encoded row by row


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


def decode(arrays: dict[str, np.ndarray], layout: dict, base):
    """The parameter tree `encode` describes, built on `base` (numpy float32, elementwise: the
    same bits on every machine that loads the same base)."""
    b_leaves = _named_leaves(base)
    out = {}
    for name, spec in layout.items():
        if spec["kind"] == "exact":
            out[name] = np.asarray(arrays[name])
        elif spec["kind"] == "rows":
            leaf = b_leaves[name] * np.float32(spec["factor"])
            leaf[arrays[f"{name}:rows"]] = arrays[f"{name}:values"]
            out[name] = leaf
        else:
            out[name] = b_leaves[name] + arrays[name].astype(np.float32)
    return _with_leaves(base, out)


def write_encoded(arrays: dict, layout: dict, out_dir: str) -> None:
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v) for k, v in arrays.items()},
              os.path.join(out_dir, ENCODED))
    with open(os.path.join(out_dir, LAYOUT), "w") as fh:
        json.dump(layout, fh, indent=2)


def read_encoded(in_dir: str) -> tuple[dict, dict]:
    from safetensors.numpy import load_file
    with open(os.path.join(in_dir, LAYOUT)) as fh:
        layout = json.load(fh)
    return load_file(os.path.join(in_dir, ENCODED)), layout


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
