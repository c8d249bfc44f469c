#!/usr/bin/env bash
# Pure-Python wheels that benchmarks/gpu_check.py needs and the lent GPU machine lacks (it has
# JAX with CUDA, flax, optax, orbax, transformers and torch, and no network).
#
#   here (with network):  bash benchmarks/gpu_wheels.sh download   # -> build/gpu_wheels (< 2 MiB)
#   on the GPU machine:   bash benchmarks/gpu_wheels.sh install    # offline, from build/gpu_wheels
#
# `build/` is git-ignored, so the device tool carries the folder when asked:
#   run(command="bash benchmarks/gpu_wheels.sh install && PYTHONPATH=. timeout 480 \
#        python benchmarks/gpu_check.py --out $OUT/gpu_check.json", carry=["build/gpu_wheels"])
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=build/gpu_wheels
# pinned to the versions this repository is tested with; --no-deps: their own dependencies
# (sympy, absl-py, PyYAML, tqdm) come with torch / optax / flax / transformers
WHEELS=(ml_collections==1.1.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
        math-verify==0.9.0 tensorboardX==2.6.5)
case "${1:-}" in
  download)
    mkdir -p "$DIR"
    python -m pip download --no-deps --only-binary=:all: --dest "$DIR" "${WHEELS[@]}"
    du -sh "$DIR" ;;
  install)
    python -m pip install --no-index --no-deps --find-links "$DIR" "${WHEELS[@]}"
    # fail now, not in the middle of the check, if something is still missing
    python -c "import ml_collections, latex2sympy2_extended, antlr4, absl, sympy, tqdm, orbax.checkpoint, transformers, torch, flax, optax; print('imports ok')" ;;
  *)
    echo "usage: $0 download|install" >&2; exit 2 ;;
esac
