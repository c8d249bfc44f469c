#!/usr/bin/env bash
# Multi-host GPU training under SLURM. Submit from the repo root:
#   sbatch --nodes=4 launch/gpu_slurm.sh --config=configs/qwen2_5_1_5b_gsm8k.py --workdir=/shared/runs/x
# srun starts one coop-train process per host (default) or per GPU (--per-gpu); each calls
# jax.distributed.initialize() itself because of --config.mesh.distributed=True, which finds the
# coordinator, process count and id from the environment exported here and from SLURM.
#SBATCH --job-name=coop-jax
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --output=%x-%j.out
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: sbatch [sbatch options] launch/gpu_slurm.sh --config=<path> --workdir=<dir> [options]
                                                     [-- extra coop-train flags]
       launch/gpu_slurm.sh --config=<path> --workdir=<dir> --dry-run [<options>]

Required:
  --config=PATH        Config file, e.g. configs/qwen2_5_1_5b_gsm8k.py (relative to the submit dir).
  --workdir=DIR        Run directory on a filesystem shared by all nodes (or gs://...).

Options:
  --per-gpu            One process per GPU (default: one process per host driving all its GPUs).
                       With --per-gpu, submit with --ntasks-per-node equal to the GPUs per node.
  --gpus-per-node=N    GPUs per node (default: $SLURM_GPUS_ON_NODE, else 8).
  --nodes=N            Nodes to use (default: $SLURM_JOB_NUM_NODES; 1 in a dry run outside SLURM).
  --port=P             Coordinator port (default: 20000 + job id % 10000).
  --venv=DIR           Python virtual environment to activate first.
  --dry-run            Print the environment and the srun command instead of running them.
  -h, --help           Show this message.
Anything after "--" is appended to the coop-train command (e.g. --config.train.steps=100).

Example (--dry-run prints the environment and the srun line, also outside SLURM):
  launch/gpu_slurm.sh --config=configs/qwen2_5_1_5b_gsm8k.py --workdir=/shared/runs/cooper \
      --nodes=4 --dry-run -- --config.train.steps=100
EOF
}

# One shell word per argument, single-quoted only when needed (readable dry-run output).
quote_cmd() {
  local out="" arg
  for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_./=:,@+%-]+$ ]]; then
      out+="$arg "
    else
      out+="'${arg//\'/\'\\\'\'}' "
    fi
  done
  printf '%s\n' "${out% }"
}

die() { echo "gpu_slurm.sh: error: $*" >&2; echo "Run with --help for usage." >&2; exit 2; }

CONFIG="" WORKDIR="" PER_GPU=0 GPUS="${SLURM_GPUS_ON_NODE:-8}" NODES="${SLURM_JOB_NUM_NODES:-}"
PORT="" VENV="" DRY_RUN=0
EXTRA=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --config=*) CONFIG="${1#*=}" ;;
    --workdir=*) WORKDIR="${1#*=}" ;;
    --per-gpu) PER_GPU=1 ;;
    --gpus-per-node=*) GPUS="${1#*=}" ;;
    --nodes=*) NODES="${1#*=}" ;;
    --port=*) PORT="${1#*=}" ;;
    --venv=*) VENV="${1#*=}" ;;
    --dry-run) DRY_RUN=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument '$1'" ;;
  esac
  shift
done

[[ -n "$CONFIG" ]] || die "--config is required"
[[ -n "$WORKDIR" ]] || die "--workdir is required"
if [[ -z "${SLURM_JOB_ID:-}" && "$DRY_RUN" == 0 ]]; then
  die "not inside a SLURM allocation; submit with: sbatch launch/gpu_slurm.sh --config=... --workdir=..."
fi
NODES="${NODES:-1}"
[[ "$NODES" =~ ^[1-9][0-9]*$ ]] || die "--nodes must be a positive integer, got '$NODES'"
# SLURM_GPUS_ON_NODE may read like "8" or "a100:8"; keep the count.
GPUS="${GPUS##*:}"
[[ "$GPUS" =~ ^[1-9][0-9]*$ ]] || die "--gpus-per-node must be a positive integer, got '$GPUS'"
JOB_ID="${SLURM_JOB_ID:-0}"
PORT="${PORT:-$((20000 + JOB_ID % 10000))}"
[[ "$PORT" =~ ^[1-9][0-9]*$ && "$PORT" -lt 65536 ]] || die "--port must be in 1..65535, got '$PORT'"

cd "${SLURM_SUBMIT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
if [[ "$CONFIG" != /* && ! -f "$CONFIG" ]]; then
  [[ "$DRY_RUN" == 1 ]] || die "--config '$CONFIG' not found under $PWD"
  echo "gpu_slurm.sh: warning: --config '$CONFIG' not found under $PWD" >&2
fi

if [[ -n "${SLURM_JOB_NODELIST:-}" ]]; then
  HEAD_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
else
  HEAD_NODE="$(hostname)"
fi

if [[ "$PER_GPU" == 1 ]]; then
  TASKS_PER_NODE="$GPUS"
else
  TASKS_PER_NODE=1
fi

# name=value pairs exported to every task (srun passes the environment on).
ENV_VARS=(
  "JAX_COORDINATOR_ADDRESS=$HEAD_NODE:$PORT"
  "XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.90}"
  "XLA_FLAGS=${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_enable_latency_hiding_scheduler=true"
  "NCCL_DEBUG=${NCCL_DEBUG:-WARN}"
  "PYTHONUNBUFFERED=1"
)
if [[ "$PER_GPU" == 0 ]]; then
  # JAX's SLURM detection would give each process only GPU $SLURM_LOCALID; one process per host
  # must drive all of them.
  ENV_VARS+=("JAX_LOCAL_DEVICE_IDS=$(seq -s, 0 $((GPUS - 1)))")
fi

CMD=(srun --nodes="$NODES" --ntasks-per-node="$TASKS_PER_NODE" --kill-on-bad-exit=1 --label
     coop-train --config="$CONFIG" --workdir="$WORKDIR" --config.mesh.distributed=True)
CMD+=("${EXTRA[@]+"${EXTRA[@]}"}")

if [[ "$DRY_RUN" == 1 ]]; then
  [[ -z "$VENV" ]] || quote_cmd source "$VENV/bin/activate"
  for kv in "${ENV_VARS[@]}"; do
    quote_cmd export "$kv"
  done
  quote_cmd "${CMD[@]}"
  exit 0
fi

if [[ -n "$VENV" ]]; then
  # shellcheck disable=SC1091
  source "$VENV/bin/activate"
fi
for kv in "${ENV_VARS[@]}"; do
  export "${kv?}"
done
echo "gpu_slurm.sh: $NODES node(s) x $TASKS_PER_NODE process(es), coordinator $HEAD_NODE:$PORT" >&2
exec "${CMD[@]}"
