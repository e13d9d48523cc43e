#!/usr/bin/env bash
# The GPU check (issue "Beyond one machine"): a few learner steps of the embedded model's shape with
# LoRA on one GPU; prints step time and MFU as JSON. Needs torch, transformers and peft (a GPU
# machine's image has them); gymfleet's other needs (pydantic) come from wheels in .whl/ when the
# machine cannot reach a registry: fetch them here first with `scripts/gpu_check.sh --fetch-wheels`.
# Sized for well under 5 minutes on one GPU (8 timed steps of 32 x 1024 tokens).
# `scripts/gpu_check.sh --data-parallel [ARGS]` runs the data-parallel learner instead
# (benchmarks/learner_scaling.py: world size 1, then every GPU present, one rank per GPU, nccl):
# tokens/s, peak memory per rank, MFU and the ratio to one GPU, as JSON. Nothing depends on it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [[ "${1:-}" == "--fetch-wheels" ]]; then
  mkdir -p .whl
  grep -qxF '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
  for pkg in pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5; do
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d .whl "$pkg"
  done
  ls .whl
  exit 0
fi
if ! $PY -c 'import pydantic' 2>/dev/null; then
  [[ -d .whl ]] || { echo "gpu_check: pydantic is missing and there is no .whl/: run scripts/gpu_check.sh --fetch-wheels where pip works" >&2; exit 2; }
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu-check-site .whl/*.whl
  export PYTHONPATH=/tmp/gpu-check-site${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ "${1:-}" == "--data-parallel" ]]; then
  shift
  n=$($PY -c 'import torch; print(torch.cuda.device_count())')
  [[ "$n" -ge 1 ]] || { echo "gpu_check: --data-parallel needs a CUDA GPU (torch sees none)" >&2; exit 2; }
  worlds=1; [[ "$n" -gt 1 ]] && worlds="1,$n"
  exec timeout 280 $PY benchmarks/learner_scaling.py --device cuda --dtype bfloat16 --model random \
    --world-sizes "$worlds" --steps 4 --groups 8 --group-size 8 --seq-len 1024 --micro-batch 8 --lora-rank 16 \
    --threads-per-rank 4 --timeout-s 250 "$@"
fi
exec timeout 280 $PY scripts/gpu_check.py "$@"
