#!/usr/bin/env bash
# The browser stage: what a researcher sees in MLflow after a four-quadrant sweep, in real Chromium.
#
#   tests/browser/run.sh            # install Chromium (apt) and Playwright (pip, into .venv), run tests/browser
#   tests/browser/run.sh -k report  # extra arguments go to pytest
#   tests/browser/run.sh --prepare  # install Chromium only and stop
#
# Installs Debian's `chromium` package (apt-get; needs root, skipped when a `chromium` is on PATH or
# QUADRANTS_CHROMIUM names one) and Playwright for Python into the main environment (.venv, or
# $PYTHON's). Playwright's own browser download is not used (not reachable from the machines this
# project is tested on): the tests launch the system Chromium through `executable_path`. The tests
# start a real `mlflow server` on 127.0.0.1, run a 2-step four-quadrant sweep of the tiny base
# policy against it and follow the printed links (tests/browser/test_dashboard.py). Screenshots go
# to outputs/browser/ (QUADRANTS_BROWSER_ARTIFACTS=DIR to put them elsewhere).
# The stage prints its install and test times. Measured on the shared 2-core machine: tests 127 s
# (347 s at load average ~16; the sweep is most of it); with Chromium and Playwright already there the
# install step took 3 s; the install from cold was not timed here.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
started=$(date +%s)

if [ -z "${QUADRANTS_CHROMIUM:-}" ] && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    echo "[browser stage] installing Debian's chromium (apt-get)" >&2
    apt-get -o DPkg::Lock::Timeout=300 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq chromium >/dev/null
fi
if [ "${1:-}" = "--prepare" ]; then  # .ci/run: Chromium only, while other stages run
    echo "[browser stage] Chromium ready in $(($(date +%s) - started)) s" >&2
    exit 0
fi
"$PYTHON" -m pip install -q playwright
installed=$(date +%s)
echo "[browser stage] Chromium and Playwright ready in $((installed - started)) s; running the browser-marked tests" >&2

cd "$ROOT"
export QUADRANTS_BROWSER_ARTIFACTS=${QUADRANTS_BROWSER_ARTIFACTS:-$ROOT/outputs/browser}
status=0
"$PYTHON" -m pytest tests/browser --stage=browser -p no:cacheprovider "$@" || status=$?
finished=$(date +%s)
echo "[browser stage] tests $((finished - installed)) s, total $((finished - started)) s (exit $status); screenshots in $QUADRANTS_BROWSER_ARTIFACTS" >&2
exit $status
