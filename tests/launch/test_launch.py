"""Launch scripts (syntax, shellcheck, --dry-run output, flag validation) and the Colab notebook."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import REPO

ROOT = REPO
LAUNCH = ROOT / "launch"
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
              "--", "--config.train.steps=10")
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
            "--config.train.steps=10 --config.mesh.distributed=True") in train
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
              "--nodes=4", "--dry-run", "--", "--config.train.steps=5")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "export JAX_COORDINATOR_ADDRESS=" in text and ":20000" in text
    assert "export JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7" in text
    assert "export XLA_PYTHON_CLIENT_MEM_FRACTION=0.90" in text
    assert text.strip().splitlines()[-1] == (
        "srun --nodes=4 --ntasks-per-node=1 --kill-on-bad-exit=1 --label coop-train "
        "--config=configs/default.py --workdir=/shared/run --config.mesh.distributed=True "
        "--config.train.steps=5")


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
    assert "!coop-train --config=configs/default.py --workdir=$WORKDIR $TRAIN_FLAGS" in code
    assert "metrics.jsonl" in code and "matplotlib" in code
    assert "configs/qwen2_5_1_5b_gsm8k.py" in code
    assert any(kinds[i] == "markdown" and "Qwen2.5" in s for i, s in sources.items())


def test_colab_notebook_schema():
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed")
    nbformat.validate(nbformat.read(str(LAUNCH / "colab_tpu.ipynb"), as_version=4))


# The notebook's tiny run, cut to seconds: 2 SFT steps, 2 RL steps of 2 prompts x 2 rollouts.
TINY_TRAIN_FLAGS = " ".join([
    "--config.sft.steps=2", "--config.sft.batch_size=8", "--config.train.steps=2",
    "--config.evals.policy.every=0", "--config.train.checkpoint_every=0",
    "--config.data.num_eval=4", "--config.data.synthetic_train_size=64",
    "--config.rollout.prompts_per_step=2", "--config.rollout.group_size=2",
    "--config.rollout.max_new_tokens=8", "--config.eval.batch_size=4",
    "--config.verifier.num_workers=1"])
# Colab setup (clone, pip install) and the real-model section (downloads, a TPU chip)
SKIPPED_TAGS = {"colab-only", "tpu-only"}
# run after the notebook's cells: the tiny run trained and logged finite metrics
CHECK_CELL = """\
import json, math, pathlib
lines = pathlib.Path(WORKDIR, "metrics.jsonl").read_text().splitlines()
rows = [json.loads(line) for line in lines]
summary = json.loads(pathlib.Path(WORKDIR, "summary.json").read_text())
assert [r["step"] for r in rows] == [0, 1, 2], rows
assert summary["steps"] == 2 and 0.0 <= summary["final_accuracy"] <= 1.0, summary
assert all(math.isfinite(r["loss"]) and math.isfinite(r["reward_mean"]) for r in rows[1:]), rows
assert pathlib.Path(WORKDIR, "curves.png").stat().st_size > 0
"""


def _tags(cell) -> set:
    return set(cell.metadata.get("tags", []))


def test_colab_notebook_setup_cells_are_tagged():
    """The CPU run below skips every install, clone and download."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed")
    nb = nbformat.read(str(LAUNCH / "colab_tpu.ipynb"), as_version=4)
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        online = any(w in cell.source for w in ("pip install", "git clone", "wget", "Qwen/"))
        if online:
            assert _tags(cell) & SKIPPED_TAGS, cell.source
    assert sum("parameters" in _tags(c) for c in nb.cells) == 1


def test_colab_notebook_runs_on_cpu(tmp_path, monkeypatch):
    """The notebook's tiny run and plot, executed by a Jupyter kernel with a 2-step setting."""
    nbformat = pytest.importorskip("nbformat", reason="nbformat not installed")
    nbclient = pytest.importorskip("nbclient", reason="nbclient not installed")
    pytest.importorskip("ipykernel", reason="ipykernel not installed")
    if shutil.which("coop-train") is None:
        pytest.skip("coop-train is not on PATH (pip install -e .)")
    nb = nbformat.read(str(LAUNCH / "colab_tpu.ipynb"), as_version=4)
    nb.cells = [c for c in nb.cells if not _tags(c) & SKIPPED_TAGS]
    params = next(c for c in nb.cells if "parameters" in _tags(c))
    params.source = f"WORKDIR = {str(tmp_path / 'run')!r}\nTRAIN_FLAGS = {TINY_TRAIN_FLAGS!r}"
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_CELL))
    monkeypatch.delenv("XLA_FLAGS", raising=False)  # one CPU device, as on a laptop
    client = nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT)}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        train = next(c for c in nb.cells if "!coop-train" in c.source)
        log = "".join(o.get("text", "") for o in train.get("outputs", []))
        pytest.fail(f"{e}\ncoop-train output:\n{log[-3000:]}")
    plot = next(c for c in nb.cells if "def plot_metrics" in c.source)
    assert any("image/png" in o.get("data", {}) for o in plot.outputs)
