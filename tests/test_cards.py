"""Published cards are true and portable: no local path in any published file, the run's record goes up with the
weights, a benchmark can be attached (and its absence is said), the license is an option, adjusted settings are
stated. Publishing goes to the loopback Hub of tests/hub_server.py (fixtures of test_hub.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_drafter, tiny_target
from huggingface_hub import HfApi, ModelCard, hf_hub_download
from test_hub import BENCHMARK, REPO_ROOT, TARGET, TRAINING_LOG, hub_env, local_hub  # noqa: F401 (fixtures)

from hf_specdec.hub import publish_drafter, render_card
from hf_specdec.hub.portable import Portable

ABSOLUTE = re.compile(r"(?<![\w.:/~-])/[\w.+@-]+/[\w.+@-]+")
ADJUSTED = "--draft_vocab_size 8192 was clamped to 200: the training data holds 200 distinct labels."


def local_drafter(tmp_path: Path):
    """A drafter whose config names its target by an absolute local folder, as training from a folder saves it."""
    target = tiny_target("llama")
    drafter = make_drafter(target, 4)
    drafter.config.target_name_or_path = str(tmp_path / "models" / "tiny-target")
    return drafter


def run_folder(tmp_path: Path, drafter) -> Path:
    """A training run as scripts/train_drafter.py leaves it: drafter/, checkpoint settings, log, record and plot."""
    run = tmp_path / "runs" / "tiny"
    drafter.save_pretrained(run / "drafter")
    arguments = {"config_class": "DistillationConfig", "target": drafter.config.target_name_or_path}
    arguments |= {"output_dir": str(run), "block_size": 4, "draft_vocab_size": 8192, "learning_rate": 1e-3}
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "trainer_state.json").write_text(json.dumps({"step": 40, "arguments": arguments}))
    (run / "training_log.json").write_text(json.dumps({**TRAINING_LOG, "adjustments": [ADJUSTED]}))
    (run / "TRAINING.md").write_text(f"# tiny\n\ntrained from `{drafter.config.target_name_or_path}`\n")
    (run / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return run


def repo_texts(repo: str, tmp_path: Path) -> dict[str, str]:
    """Every published file but the weights and images, as text."""
    out = {}
    for name in HfApi().list_repo_files(repo):
        if not name.endswith((".safetensors", ".png")):
            out[name] = Path(hf_hub_download(repo, name, cache_dir=tmp_path / "dl")).read_text(encoding="utf-8")
    return out


def test_portable_rewrites_each_kind_of_local_path(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_SPECDEC_MODELS", str(tmp_path / "models"))
    monkeypatch.chdir(tmp_path / "..")
    portable = Portable(known={str(tmp_path / "models" / "tiny-target"): TARGET})
    recipe = (
        f"python scripts/train_drafter.py --target {tmp_path}/models/tiny-target --base_lm {tmp_path}/models/lm "
        f"--data_file {tmp_path}/data/x.jsonl --output_dir=/elsewhere/runs/b8 --corpus ~/corpora/web.jsonl "
        "--hub https://huggingface.co/org/name"
    )
    text = portable.text(recipe)
    assert f"--target {TARGET} --base_lm lm" in text  # the target's Hub id; an offline model by its name
    assert f"--data_file {tmp_path.name}/data/x.jsonl" in text  # relative to the working directory
    assert "--output_dir=path/to/b8 --corpus path/to/web.jsonl" in text  # elsewhere: a placeholder
    assert "https://huggingface.co/org/name" in text and not portable.leaks(text)
    config = {"target_name_or_path": str(tmp_path / "models" / "tiny-target"), "base_config": {"_name_or_path": "~/m"}}
    assert portable.json(config) == {"target_name_or_path": TARGET, "base_config": {"_name_or_path": "path/to/m"}}
    assert portable.leaks(f"see {Path.home()}/notes") and portable.leaks("at /opt/models/x")


@pytest.mark.usefixtures("hub_env")
def test_run_drafter_publishes_with_its_record_no_local_path_and_the_chosen_license(tmp_path):
    run = run_folder(tmp_path, local_drafter(tmp_path))
    recipe = f"python scripts/train_drafter.py --target {tmp_path}/models/tiny-target --output_dir {run}"
    publish_drafter(run / "drafter", "org/portable", target_id=TARGET, recipe=recipe, license="mit")
    files = set(HfApi().list_repo_files("org/portable"))
    assert {"README.md", "config.json", "model.safetensors", "TRAINING.md", "loss.png"} <= files
    texts = repo_texts("org/portable", tmp_path)
    for name, text in texts.items():
        assert str(tmp_path) not in text and str(Path.home()) + "/" not in text, name
        assert not ABSOLUTE.findall(text), (name, ABSOLUTE.findall(text))
    assert json.loads(texts["config.json"])["target_name_or_path"] == TARGET
    assert f"trained from `{TARGET}`" in texts["TRAINING.md"]
    card = ModelCard.load("org/portable")
    assert card.data.license == "mit" and card.data.base_model == TARGET
    assert "## Training" in card.text and "40 optimizer steps" in card.text and "--output_dir path/to/tiny" in card.text
    assert ADJUSTED in card.text and "Settings the run adjusted" in card.text
    assert "No measured results" in card.text and "## Measured" not in card.text
    assert "only after\n`import hf_specdec`" in card.text and "upgrading does not help" in card.text


def test_readme_call_gets_a_training_section_from_the_run(tmp_path):
    """`publish_drafter(folder, repo, target_id=...)` without recipe or log: the run's settings and log fill it."""
    run = run_folder(tmp_path, local_drafter(tmp_path))
    text = render_card(run / "drafter", "org/x", target_id=TARGET).text
    assert "## Training" in text and "40 optimizer steps" in text and "[TRAINING.md](TRAINING.md)" in text
    assert '"learning_rate": 0.001' in text and '"draft_vocab_size": 8192' in text and ADJUSTED in text
    assert f'"target": "{TARGET}"' in text and str(tmp_path) not in text


@pytest.mark.parametrize("given", ["folder", "benchmark.json", "benchmark.md"])
def test_a_benchmark_report_gives_a_measured_section_naming_the_machine(tmp_path, given):
    report = tmp_path / "results" / "tiny"
    report.mkdir(parents=True)
    (report / "benchmark.json").write_text(json.dumps(BENCHMARK))
    (report / "benchmark.md").write_text("# report\n")
    local_drafter(tmp_path).save_pretrained(tmp_path / "drafter")
    benchmark = report if given == "folder" else report / given
    text = render_card(tmp_path / "drafter", "org/x", target_id=TARGET, benchmark=benchmark).text
    assert "## Measured" in text and "on test CPU (2 cores)" in text and "No measured results" not in text
    assert "| all | tiny-b4 | hf_specdec | 2.50 |" in text
    with pytest.raises(ValueError, match="scripts/benchmark.py wrote"):
        render_card(tmp_path / "drafter", "org/x", target_id=TARGET, benchmark=tmp_path / "nothing")


@pytest.mark.usefixtures("hub_env")
def test_a_file_that_still_names_a_local_path_is_refused_before_sending(tmp_path):
    folder = tmp_path / "drafter"
    local_drafter(tmp_path).save_pretrained(folder)
    (folder / "notes.md").write_text(f"weights kept in {Path.home()}/drafters/tiny\n")
    with pytest.raises(ValueError, match=r"refusing to publish local paths \(notes\.md: .*nothing was sent"):
        publish_drafter(folder, "org/leaky", target_id=TARGET, extra_files=["notes.md"])
    assert not HfApi().repo_exists("org/leaky")
    (folder / "notes.md").write_text("weights kept in drafters/tiny\n")
    assert "notes.md" in publish_drafter(folder, "org/leaky", target_id=TARGET, extra_files=["notes.md"], dry_run=True)


@pytest.mark.usefixtures("hub_env")
def test_ship_drafter_attaches_a_benchmark_and_a_license_and_states_adjustments(tmp_path):
    drafter = local_drafter(tmp_path)
    run = run_folder(tmp_path, drafter)
    (run / "data").mkdir()
    (run / "data" / "index.json").write_text(json.dumps({"sequences": 7}))
    state = {"step": 40, "elapsed_s": 90.0, "supervised_tokens": 3456, "losses": TRAINING_LOG["losses"]}
    (run / "checkpoint" / "trainer_state.json").write_text(json.dumps(state))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "benchmark.json").write_text(json.dumps(BENCHMARK))
    command = [sys.executable, str(REPO_ROOT / "scripts" / "ship_drafter.py"), "--run", str(run), "--name", "tiny"]
    command += ["--command", f"python scripts/train_drafter.py --target {drafter.config.target_name_or_path}"]
    command += ["--push_to_hub", "org/shipped-bench", "--target_id", TARGET, "--benchmark", str(tmp_path / "bench")]
    command += ["--license", "cc-by-4.0"]
    shipped = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert shipped.returncode == 0, shipped.stderr[-3000:]
    sha = HfApi().model_info("org/shipped-bench").sha
    assert f"at revision {sha}: " in shipped.stdout and f"/org/shipped-bench/tree/{sha}" in shipped.stdout
    card = ModelCard.load("org/shipped-bench")
    assert card.data.license == "cc-by-4.0" and "## Measured" in card.text and "test CPU" in card.text
    assert f"--target {TARGET}" in card.text and ADJUSTED in card.text
    record = (tmp_path / "drafters" / "tiny" / "TRAINING.md").read_text()
    assert f"--target {TARGET}" in record and f"adjusted: {ADJUSTED}" in record and str(tmp_path) not in record
