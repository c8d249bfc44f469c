#!/usr/bin/env bash
# Create (or reuse) a Cloud TPU VM pod slice, install coop_jax on every worker and run the same
# coop-train command on all of them. Every worker runs one JAX process; with
# --config.mesh.distributed=True (added unless the extra flags set it) jax.distributed
# initialises itself from the TPU metadata.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: launch/tpu_pod.sh --project=<id> --zone=<zone> --name=<tpu-name> --config=<path>
                         --workdir=gs://<bucket>/<dir> [options] [-- extra coop-train flags]

Required:
  --project=ID            GCP project.
  --zone=ZONE             TPU zone, e.g. us-central2-b.
  --name=NAME             TPU VM name (created unless --skip-create).
  --config=PATH           Config file relative to the repo root, e.g. configs/qwen2_5_1_5b_gsm8k.py.
  --workdir=gs://B/DIR    Run directory; must be a gs:// path shared by all workers.

Options:
  --accelerator-type=T    TPU type for creation (default: v4-32).
  --version=V             TPU VM runtime version (default: tpu-ubuntu2204-base).
  --spot                  Create a Spot (preemptible) TPU.
  --skip-create           Reuse an existing TPU VM named --name.
  --repo-url=URL          git URL to clone on the workers (default: scp the committed HEAD of
                          this checkout, made with git archive).
  --branch=B              Branch for --repo-url (default: main).
  --remote-dir=DIR        Checkout directory on the workers, relative to the login home
                          (default: coop_jax).
  --background            Start training under nohup (log: <remote-dir>/train.log) and return.
  --delete-after          Delete the TPU VM when training ends.
  --dry-run               Print every command instead of running it.
  -h, --help              Show this message.
Anything after "--" is appended to the coop-train command (e.g. --config.train.steps=100).

Example (--dry-run prints the commands instead of running them):
  launch/tpu_pod.sh --project=my-project --zone=us-central2-b --name=coop-v4 \
      --accelerator-type=v4-32 --config=configs/qwen2_5_1_5b_gsm8k.py \
      --workdir=gs://my-bucket/cooper --dry-run -- --config.train.steps=100
EOF
}

die() { echo "tpu_pod.sh: error: $*" >&2; echo "Run with --help for usage." >&2; exit 2; }

PROJECT="" ZONE="" NAME="" CONFIG="" WORKDIR=""
ACCEL="v4-32" VERSION="tpu-ubuntu2204-base" SPOT=0 SKIP_CREATE=0 REPO_URL="" BRANCH="main"
REMOTE_DIR="coop_jax" DELETE_AFTER=0 DRY_RUN=0 BACKGROUND=0
EXTRA=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --project=*) PROJECT="${1#*=}" ;;
    --zone=*) ZONE="${1#*=}" ;;
    --name=*) NAME="${1#*=}" ;;
    --config=*) CONFIG="${1#*=}" ;;
    --workdir=*) WORKDIR="${1#*=}" ;;
    --accelerator-type=*) ACCEL="${1#*=}" ;;
    --version=*) VERSION="${1#*=}" ;;
    --spot) SPOT=1 ;;
    --skip-create) SKIP_CREATE=1 ;;
    --repo-url=*) REPO_URL="${1#*=}" ;;
    --branch=*) BRANCH="${1#*=}" ;;
    --remote-dir=*) REMOTE_DIR="${1#*=}" ;;
    --delete-after) DELETE_AFTER=1 ;;
    --background) BACKGROUND=1 ;;
    --dry-run) DRY_RUN=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) die "unknown argument '$1'" ;;
  esac
  shift
done

[[ -n "$PROJECT" ]] || die "--project is required"
[[ -n "$ZONE" ]] || die "--zone is required"
[[ -n "$NAME" ]] || die "--name is required"
[[ -n "$CONFIG" ]] || die "--config is required"
[[ -n "$WORKDIR" ]] || die "--workdir is required"
[[ "$WORKDIR" == gs://* ]] || die "--workdir must be a gs:// path shared by all workers, got '$WORKDIR'"
[[ "$REMOTE_DIR" =~ ^[A-Za-z0-9_.][A-Za-z0-9_./-]*$ ]] || die "--remote-dir '$REMOTE_DIR' must be a plain relative path"
[[ "$DELETE_AFTER" == 0 || "$BACKGROUND" == 0 ]] || die "--delete-after and --background exclude each other"
[[ "$NAME" =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]] || die "--name '$NAME' is not a valid TPU name (lowercase letters, digits, '-')"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "$REPO_URL" && ! -f "$REPO_ROOT/$CONFIG" ]]; then
  [[ "$DRY_RUN" == 1 ]] || die "--config '$CONFIG' not found under $REPO_ROOT"
  echo "tpu_pod.sh: warning: --config '$CONFIG' not found under $REPO_ROOT" >&2
fi

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

# Print the command in dry-run mode, else echo it to stderr and run it.
run() {
  if [[ "$DRY_RUN" == 1 ]]; then
    quote_cmd "$@"
  else
    quote_cmd "+" "$@" >&2
    "$@"
  fi
}

GCLOUD=(gcloud compute tpus tpu-vm)
SCOPE=(--project="$PROJECT" --zone="$ZONE")
on_all() { run "${GCLOUD[@]}" ssh "$NAME" "${SCOPE[@]}" --worker=all --command="$1"; }

if [[ "$SKIP_CREATE" == 0 ]]; then
  create=("${GCLOUD[@]}" create "$NAME" "${SCOPE[@]}" --accelerator-type="$ACCEL" --version="$VERSION")
  if [[ "$SPOT" == 1 ]]; then
    create+=(--spot)
  fi
  run "${create[@]}"
fi

# Put the same code on every worker.
if [[ -n "$REPO_URL" ]]; then
  on_all "rm -rf $REMOTE_DIR && git clone --depth=1 --branch=$(printf '%q' "$BRANCH") $(printf '%q' "$REPO_URL") $REMOTE_DIR"
else
  on_all "rm -rf $REMOTE_DIR && mkdir -p $REMOTE_DIR"
  # scp of the git-tracked files only (no runs/, caches or data).
  ARCHIVE="/tmp/coop_jax_src_$$.tar.gz"
  run git -C "$REPO_ROOT" archive --format=tar.gz -o "$ARCHIVE" HEAD
  run "${GCLOUD[@]}" scp "$ARCHIVE" "$NAME:/tmp/coop_jax_src.tar.gz" "${SCOPE[@]}" --worker=all
  on_all "tar -xzf /tmp/coop_jax_src.tar.gz -C $REMOTE_DIR"
  run rm -f "$ARCHIVE"
fi

on_all "cd $REMOTE_DIR && python3 -m pip install -U pip && python3 -m pip install -e '.[tpu]'"

train_cmd="cd $REMOTE_DIR && coop-train --config=$(printf '%q' "$CONFIG") --workdir=$(printf '%q' "$WORKDIR")"
DISTRIBUTED_SET=0
for arg in "${EXTRA[@]+"${EXTRA[@]}"}"; do
  train_cmd+=" $(printf '%q' "$arg")"
  [[ "$arg" != --config.mesh.distributed* ]] || DISTRIBUTED_SET=1
done
[[ "$DISTRIBUTED_SET" == 1 ]] || train_cmd+=" --config.mesh.distributed=True"
if [[ "$BACKGROUND" == 1 ]]; then
  train_cmd="${train_cmd/coop-train/nohup coop-train} > train.log 2>&1 &"
fi
on_all "$train_cmd"

if [[ "$DELETE_AFTER" == 1 ]]; then
  run "${GCLOUD[@]}" delete "$NAME" "${SCOPE[@]}" --quiet
fi
