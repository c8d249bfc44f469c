"""`benchmarks/gpu_check.py --smoke`: the prepared GPU check runs end to end on CPU with tiny
shapes, so the first minute on a lent GPU is not spent on a typo."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from conftest import REPO

ROOT = REPO


def test_gpu_check_smoke(tmp_path):
    out = tmp_path / "gpu_check.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("XLA_FLAGS", None)  # one CPU device, as on the one-GPU machine
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--smoke",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=3000)  # loaded shared CI hosts; ~2 CPU-minutes
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-4000:]
    result = json.loads(out.read_text())
    sections = result["sections"]
    assert set(sections) == {"kernels", "sampler", "cooper"}
    errors = {name: s.get("traceback", s.get("error")) for name, s in sections.items()
              if s.get("status") != "ok"}
    assert not errors, errors
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert result["smoke"] and result["environment"]["backend"] == "cpu"
    assert list(sections) == ["cooper", "kernels", "sampler"]  # the Cooper step first
    assert {f"{n} layers: {p}" for n in (1, 2) for p in ("compile", "step 1", "step 2")} <= set(
        sections["cooper"]["phase_s"])
    assert "transformers generate" in sections["sampler"]["phase_s"]

    kernels = sections["kernels"]["bfloat16"]
    for impl in ("xla", "pallas_gpu"):
        errs = kernels[impl]["rel_err_vs_reference"]
        assert set(errs) == {"logp", "entropy", "d_hidden", "d_unembed"}
        assert max(errs.values()) < 0.05, (impl, errs)  # bf16 inputs, f32 accumulation
        assert kernels[impl]["sample_token_match_vs_reference"] > 0.9
        assert kernels[impl]["fwd_bwd_s"] > 0 and kernels[impl]["temp_bytes"] >= 0
    assert max(kernels["pallas_gpu"]["rel_err_vs_xla"].values()) < 0.05

    sampler = sections["sampler"]
    assert sampler["coop_jax_all_rows_full_length"]
    assert sampler["transformers_new_tokens"] == sampler["new_tokens"]
    assert sampler["logit_rel_err_vs_transformers"] < 0.05  # same weights, bf16
    assert sampler["coop_jax_tokens_per_s"] > 0 and sampler["transformers_tokens_per_s"] > 0
    assert 0 < sampler["hbm_bound_tokens_per_s"] < float("inf")

    cooper = sections["cooper"]
    assert cooper["metrics_finite"]
    assert cooper["compile_s"] > 0 and cooper["step_s"] > 0
    assert cooper["model_flops"] > 0 and cooper["xla_flops"] > 0
    assert set(cooper["depths"]) == {"1", "2"} and cooper["layers"] == 2  # reduced depth first
    assert all(d["step_s"] > 0 and d["mfu"] > 0 for d in cooper["depths"].values())
    assert "per_layer_step_s" in cooper and "extrapolated_step_s_at_full_depth" in cooper
    assert "xla_flags" in result["environment"]
