"""Without torch (`make install`: the runtime dependencies only), loading a tokenizer does not
print transformers' "PyTorch was not found" notice. torch is hidden from a child process."""
import os
import subprocess
import sys

NOTICE = "PyTorch was not found"
HIDE_TORCH = "import sys; sys.modules['torch'] = None; "


def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRANSFORMERS_NO_ADVISORY_WARNINGS"}
    out = subprocess.run([sys.executable, "-c", HIDE_TORCH + code], capture_output=True,
                         text=True, env=env, timeout=120, check=True)
    return out.stdout + out.stderr


def test_tokenizer_loads_without_the_torch_notice():
    quiet = _run("from coop_jax.hf.tokenizer import load_tokenizer; n = len(load_tokenizer()); "
                 "import transformers; assert not transformers.is_torch_available(); print(n)")
    assert NOTICE not in quiet and quiet.split()[-1] == "100"
    # the same child without the filter does print it: the check above is not vacuous
    assert NOTICE in _run("import transformers")
