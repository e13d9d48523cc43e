#!/usr/bin/env bash
# The GPU check (issue "Beyond one machine"): a few learner steps of the embedded model's shape with
# LoRA on one GPU; prints step time and MFU as JSON. Needs torch, transformers and peft (a GPU
# machine's image has them); gymfleet's other needs (pydantic) come from wheels in .whl/ when the
# machine cannot reach a registry: fetch them here first with `scripts/gpu_check.sh --fetch-wheels`.
# Sized for well under 5 minutes on one GPU (8 timed steps of 32 x 1024 tokens).
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
exec timeout 280 $PY scripts/gpu_check.py "$@"
