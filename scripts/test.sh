#!/usr/bin/env bash
# Fresh machine -> virtualenv, install with the dev extras, run the test suite (CPU, offline, tiny models).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
pip install -q torch==2.13.0  # the local CPU wheel; an unpinned torch would pull a multi-GB CUDA build
pip install -q -e ".[dev]"
export HF_HUB_OFFLINE=1
python -m pytest -q "$@"
