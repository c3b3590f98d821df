#!/usr/bin/env bash
# The one prepared check for a lent GPU machine: the device-parametrised tests on CUDA (`-k cuda`), then the
# synthetic step benchmark (hf_specdec/bench/device_step.py: random-weight Qwen2.5-1.5B and Qwen3-8B shapes, forced
# acceptance, block drafters and PARD / PARD-2 drafters over random Qwen2.5-0.5B / Qwen3-0.6B LMs, bf16; first a
# bf16 greedy agreement check against plain decoding; JSON out, two tables printed). Nothing is downloaded or
# installed: it runs from the carried working tree, with the carried .venv when there is one (or a transformers
# wheel installed with --target, see docs/internals.md). About 8 minutes at most (--total-s): 60% for the tests,
# the rest for the benchmark, which starts new cases until its share runs out.
#
#   bash scripts/device_check.sh --out "$OUT/device_step.json" 2>&1 | tee "$OUT/device_check.log"   # on the GPU
#   bash scripts/device_check.sh --device cpu --small --out runs/device_step.json                   # CPU, < 1 min
#
# Options: --device cuda|cpu (default cuda), --small (one test, the tiny shapes and a few cases), --skip-tests,
# --out PATH (default results/device_step.json), --total-s SECONDS (wall budget of tests + benchmark, default 450).
set -uo pipefail
cd "$(dirname "$0")/.."

device=cuda small="" skip_tests="" out=results/device_step.json total=450
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="$2"; shift 2 ;;
        --small) small=1; shift ;;
        --skip-tests) skip_tests=1; shift ;;
        --out) out="$2"; shift 2 ;;
        --total-s) total="$2"; shift 2 ;;
        *) echo "device_check.sh: unknown argument $1 (see the top of this script)" >&2; exit 2 ;;
    esac
done
start=$SECONDS

if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
    # shellcheck disable=SC1091
    . .venv/bin/activate
fi
if ! python -c "import torch, transformers" 2>/dev/null; then
    echo "device_check.sh: '$(command -v python)' cannot import torch and transformers. This script installs" \
        "nothing: carry a virtual environment (.venv) or run it where both are installed." >&2
    exit 3
fi
if [ "$device" = cuda ] && ! python -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then
    echo "device_check.sh: torch $(python -c 'import torch; print(torch.__version__)') sees no CUDA device;" \
        "run with --device cpu for the CPU version." >&2
    exit 4
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this working tree's hf_specdec, whatever the venv points at
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if ! python -c "import hf_specdec" 2>/dev/null; then
    python -c "import hf_specdec" 2>&1 | tail -1 >&2
    echo "device_check.sh: hf_specdec does not import here: one of its dependencies (pyproject.toml: accelerate," \
        "peft, safetensors, huggingface-hub, jinja2, tqdm) is missing, and this script installs nothing." >&2
    exit 3
fi
python -c "import torch, transformers; print('torch', torch.__version__, '| transformers', transformers.__version__,
      '| cuda', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"

tests_rc=0
if [ -z "$skip_tests" ] && ! python -c "import pytest" 2>/dev/null; then
    echo "device_check.sh: pytest is not installed here: the tests are skipped (rc 3), the benchmark still runs" >&2
    tests_rc=3
elif [ -z "$skip_tests" ]; then
    if [ -n "$small" ]; then
        files=(tests/test_tree.py)
        pick="$device and branch_run_alone"
        limit=120
    else  # every device-parametrised file (conftest.DEVICES): ids end in -cuda / -cpu
        files=(tests/test_greedy_identity.py tests/test_tree.py tests/test_tree_decoding.py tests/test_batch.py
            tests/test_server_faults.py tests/test_quantized.py tests/test_training.py tests/test_pard.py)
        # The distribution tests draw thousands of sequences from tiny models, which a GPU runs no faster than a
        # CPU (8-143 s a case on 2 CPU cores; on an H100 all of them did not fit 210 s beside the rest): three of the
        # cheap cases (block drafter chain, PARD chain, PARD with siblings and a lookup branch; 8-10 s each on the
        # CPU, where this selection takes 86 s in all). CI runs every case on the CPU.
        sampled=tests/test_sampling_distribution.py::test_new_tokens_are_distributed_exactly_as_plain_sampling
        for case in chain "pard chain" "pard siblings+lookup"; do files+=("$sampled[$device-$case]"); done
        pick="$device"
        limit=$((total * 6 / 10))
    fi
    echo "== tests on $device: ${files[*]} -k '$pick' (at most ${limit}s)"
    timeout -s INT -k 20 "$limit" python -m pytest -q -rfEs -p no:cacheprovider --durations=12 "${files[@]}" -k "$pick"
    tests_rc=$?
    [ "$tests_rc" -eq 124 ] && echo "device_check.sh: the tests ran past ${limit}s and were stopped"
fi

budget=$((total - (SECONDS - start) - 60))  # 60 s for the case in flight when the budget runs out
[ "$budget" -lt 60 ] && budget=60
echo "== step benchmark on $device (new cases for ${budget}s)"
python scripts/device_step.py --device "$device" ${small:+--small} --budget-s "$budget" --out "$out"
bench_rc=$?

echo "== device check: tests rc $tests_rc, benchmark rc $bench_rc, $((SECONDS - start))s"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
