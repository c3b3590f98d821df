# Sourced by quickstart.sh and test.sh: make (once) and activate .venv with the local CPU torch wheel.
[ -x .venv/bin/python ] || "${PYTHON:-python3}" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
pip install -q torch==2.13.0  # the local CPU wheel; an unpinned torch would pull a multi-GB CUDA build
