"""`accelerate launch` with 2 CPU processes (DDP over gloo) trains like 1 process with the doubled batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import saved_run_inputs
from safetensors.torch import load_file

from hf_specdec import DCOCODrafter

ROOT = Path(__file__).resolve().parents[1]


def test_two_processes_match_one_process_with_twice_the_batch(tmp_path):
    saved_run_inputs(tmp_path, sequences=6, drafter_cls=DCOCODrafter)
    args = [
        str(ROOT / "scripts" / "train_drafter.py"),
        *("--target", str(tmp_path / "target"), "--drafter", str(tmp_path / "drafter")),
        *("--data_file", str(tmp_path / "data.jsonl"), "--data_dir", str(tmp_path / "data")),
        *("--objective", "specopd", "--block_size", "4", "--num_steps", "4", "--save_every", "2"),
        *("--anchors_per_sequence", "4", "--tree_anchors", "2", "--branches", "3", "--dtype", "float32"),
        *("--learning_rate", "1e-3", "--lora_rank", "4"),
    ]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    one = [sys.executable, *args, "--output_dir", str(tmp_path / "one"), "--batch_size", "4"]
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
    launch += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", "0"]
    two = [*launch, *args, "--output_dir", str(tmp_path / "two"), "--batch_size", "2"]
    for command in (one, two):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    logs = [json.loads((tmp_path / run / "training_log.json").read_text()) for run in ("one", "two")]
    assert [log["processes"] for log in logs] == [1, 2]
    assert logs[0]["supervised_tokens"] == logs[1]["supervised_tokens"] > 0
    for (_, a), (_, b) in zip(logs[0]["losses"], logs[1]["losses"], strict=True):
        assert abs(a - b) < 1e-5
    start = load_file(str(tmp_path / "drafter" / "model.safetensors"))
    a = load_file(str(tmp_path / "one" / "drafter" / "model.safetensors"))
    b = load_file(str(tmp_path / "two" / "drafter" / "model.safetensors"))
    moved = max(float((a[k] - start[k]).abs().max()) for k in start)
    gap = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert moved > 1e-4 and gap < 1e-2 * moved, (moved, gap)
