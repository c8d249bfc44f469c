"""Launch scripts (syntax, shellcheck, --dry-run output, flag validation) and the Colab notebook."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest

LAUNCH = pathlib.Path(__file__).resolve().parents[1] / "launch"
SCRIPTS = ["tpu_pod.sh", "gpu_slurm.sh"]
TPU_FLAGS = ["--project=my-proj", "--zone=us-central2-b", "--name=coop-pod",
             "--config=configs/default.py", "--workdir=gs://bucket/run1"]


def run(script, *args):
    # No SLURM variables from the outer environment: the output must not depend on them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.pop("XLA_FLAGS", None)
    return subprocess.run(["bash", str(LAUNCH / script), *args], capture_output=True, text=True,
                          env=env, timeout=30)


@pytest.mark.parametrize("script", SCRIPTS)
def test_bash_syntax_and_help(script):
    subprocess.run(["bash", "-n", str(LAUNCH / script)], check=True)
    text = (LAUNCH / script).read_text()
    assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    out = run(script, "--help")
    assert out.returncode == 0 and "Usage:" in out.stdout
    bad = run(script, "--bogus")
    assert bad.returncode == 2 and "unknown argument '--bogus'" in bad.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck binary not installed")
@pytest.mark.parametrize("script", SCRIPTS)
def test_shellcheck(script):
    out = subprocess.run(["shellcheck", str(LAUNCH / script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


def test_tpu_pod_dry_run():
    out = run("tpu_pod.sh", *TPU_FLAGS, "--accelerator-type=v5litepod-16", "--spot", "--dry-run",
              "--", "--config.rl.num_steps=10")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == ("gcloud compute tpus tpu-vm create coop-pod --project=my-proj "
                        "--zone=us-central2-b --accelerator-type=v5litepod-16 "
                        "--version=tpu-ubuntu2204-base --spot")
    ssh = [line for line in lines if " ssh coop-pod " in line]
    assert ssh and all("--worker=all" in line for line in ssh)
    assert any("git -C" in line and "archive" in line for line in lines)
    assert any(" scp " in line and "--worker=all" in line for line in lines)
    assert any("pip install -e" in line and ".[tpu]" in line for line in ssh)
    train = ssh[-1]
    assert ("coop-train --config=configs/default.py --workdir=gs://bucket/run1 "
            "--config.rl.num_steps=10 --config.mesh.distributed=True") in train
    assert "delete" not in out.stdout


def test_tpu_pod_variants():
    out = run("tpu_pod.sh", *TPU_FLAGS, "--skip-create", "--repo-url=https://example.com/c.git",
              "--delete-after", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert " create " not in out.stdout and "archive" not in out.stdout
    assert "git clone --depth=1 --branch=main https://example.com/c.git coop_jax" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == (
        "gcloud compute tpus tpu-vm delete coop-pod --project=my-proj --zone=us-central2-b --quiet")
    bg = run("tpu_pod.sh", *TPU_FLAGS, "--skip-create", "--background", "--dry-run")
    assert "nohup coop-train" in bg.stdout and "> train.log 2>&1 &" in bg.stdout


@pytest.mark.parametrize("drop, match", [
    ("--project=my-proj", "--project is required"),
    ("--zone=us-central2-b", "--zone is required"),
    ("--name=coop-pod", "--name is required"),
    ("--config=configs/default.py", "--config is required"),
    ("--workdir=gs://bucket/run1", "--workdir is required"),
])
def test_tpu_pod_required_flags(drop, match):
    out = run("tpu_pod.sh", *[f for f in TPU_FLAGS if f != drop], "--dry-run")
    assert out.returncode == 2 and match in out.stderr and out.stdout == ""


def test_tpu_pod_rejects_bad_values():
    local = run("tpu_pod.sh", *TPU_FLAGS[:-1], "--workdir=/tmp/run", "--dry-run")
    assert local.returncode == 2 and "gs://" in local.stderr
    name = run("tpu_pod.sh", *TPU_FLAGS[:2], "--name=Bad_Name", *TPU_FLAGS[3:], "--dry-run")
    assert name.returncode == 2 and "not a valid TPU name" in name.stderr


def test_gpu_slurm_dry_run_per_host():
    out = run("gpu_slurm.sh", "--config=configs/default.py", "--workdir=/shared/run",
              "--nodes=4", "--dry-run", "--", "--config.rl.num_steps=5")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "export JAX_COORDINATOR_ADDRESS=" in text and ":20000" in text
    assert "export JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7" in text
    assert "export XLA_PYTHON_CLIENT_MEM_FRACTION=0.90" in text
    assert text.strip().splitlines()[-1] == (
        "srun --nodes=4 --ntasks-per-node=1 --kill-on-bad-exit=1 --label coop-train "
        "--config=configs/default.py --workdir=/shared/run --config.mesh.distributed=True "
        "--config.rl.num_steps=5")


def test_gpu_slurm_dry_run_per_gpu():
    out = run("gpu_slurm.sh", "--config=configs/default.py", "--workdir=/shared/run",
              "--per-gpu", "--gpus-per-node=4", "--port=29500", "--venv=/opt/venv", "--dry-run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("source /opt/venv/bin/activate\n")
    assert "JAX_LOCAL_DEVICE_IDS" not in out.stdout  # each process takes GPU $SLURM_LOCALID
    assert ":29500" in out.stdout
    assert "srun --nodes=1 --ntasks-per-node=4 " in out.stdout


def test_gpu_slurm_validation():
    outside = run("gpu_slurm.sh", "--config=configs/default.py", "--workdir=/shared/run")
    assert outside.returncode == 2 and "sbatch" in outside.stderr
    missing = run("gpu_slurm.sh", "--workdir=/shared/run", "--dry-run")
    assert missing.returncode == 2 and "--config is required" in missing.stderr
    bad = run("gpu_slurm.sh", "--config=c.py", "--workdir=/w", "--gpus-per-node=x", "--dry-run")
    assert bad.returncode == 2 and "--gpus-per-node" in bad.stderr


def test_colab_notebook():
    nb = json.loads((LAUNCH / "colab_tpu.ipynb").read_text())
    assert nb["nbformat"] == 4 and isinstance(nb["metadata"], dict)
    kinds = [c["cell_type"] for c in nb["cells"]]
    assert set(kinds) == {"markdown", "code"}
    sources = {}
    for i, cell in enumerate(nb["cells"]):
        assert isinstance(cell["source"], list) and isinstance(cell["metadata"], dict)
        src = "".join(cell["source"])
        sources[i] = src
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
            python = "\n".join(line for line in src.splitlines()
                               if not line.lstrip().startswith(("!", "%")))
            compile(python, f"cell {i}", "exec")
    code = "\n".join(s for i, s in sources.items() if kinds[i] == "code")
    assert 'pip install -q -e ".[tpu]"' in code
    assert "!coop-train --config=configs/default.py --workdir=/content/run" in code
    assert "metrics.jsonl" in code and "matplotlib" in code
    assert "configs/qwen2_5_1_5b_gsm8k.py" in code
    assert any(kinds[i] == "markdown" and "Qwen2.5" in s for i, s in sources.items())


def test_colab_notebook_schema():
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed")
    nbformat.validate(nbformat.read(str(LAUNCH / "colab_tpu.ipynb"), as_version=4))
