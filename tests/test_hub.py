"""Publishing drafters, end to end against the loopback Hub of tests/hub_server.py (no network, no real Hub).

`huggingface_hub` reads HF_ENDPOINT and HF_HUB_OFFLINE at import time, so `hub_env` patches its constants and the
module-level `HfApi` singleton as well as the environment (children read the environment). scripts/test.sh sets
HF_HUB_OFFLINE=1; these tests lift it for their own process only.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import huggingface_hub.constants as hub_constants
import huggingface_hub.hf_api as hub_api
import pytest
import torch
from conftest import make_drafter, saved_run_inputs, tiny_target
from huggingface_hub import CommitOperationAdd, HfApi, ModelCard, hf_hub_download
from huggingface_hub.errors import HfHubHTTPError
from safetensors.torch import load_file

import hf_specdec
from hf_specdec.hub import publish_drafter, render_card
from hf_specdec.hub.card_kinds import template_path, templates_dir

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

SERVER = Path(__file__).with_name("hub_server.py")
TOKEN = "hf_TEST-d0-not-leak-7f3a9c"  # distinctive: searched for in every message, log and card
TARGET = "org/tiny-target"
REPO_ROOT = Path(__file__).resolve().parents[1]

BENCHMARK = {  # the structure scripts/benchmark.py writes (see results/*/benchmark.json)
    "meta": {
        "date": "2026-11-29T18:51:02+00:00",
        "machine": {"cpu": "test CPU", "cpu_count": 2, "gpu": None},
        "versions": {"torch": "2.13.0+cpu"},
        "command": "/x/.venv/bin/python scripts/benchmark.py --tiny",
    },
    "settings": {"dtype": "float32", "max_new_tokens": 16, "temperature": 0.0},
    "methods": [{"label": "plain", "kind": "plain"}, {"label": "tiny-b4", "kind": "hf_specdec"}],
    "tasks": ["humaneval"],
    "prompts": [{"id": "p0"}],
    "results": {
        "all": {
            "plain": {"tau": 1.0, "e2e_tok_s": 10.0, "speedup_e2e": 1.0, "decode_tok_s": 11.0, "identical_rate": 1.0},
            "tiny-b4": {"tau": 2.5, "e2e_tok_s": 21.0, "speedup_e2e": 2.1, "decode_tok_s": 25.0, "identical_rate": 1.0},
        }
    },
}
TRAINING_LOG = {
    "steps": 40,
    "train_seconds": 90.0,
    "supervised_tokens": 3456,
    "sequences": 7,
    "sequence_tokens": 700,
    "losses": [[i, 5.0 - 0.05 * i] for i in range(1, 41)],
    "device": "cpu",
    "dtype": "torch.float32",
}

# Loads the drafter from the Hub in a fresh interpreter and scores the same inputs with the tiny target's LM head.
CHILD = """
import sys, torch, hf_specdec
from transformers import AutoModel
torch.set_num_threads(int(sys.argv[4]))  # the parent's: a matmul split over other threads sums in another order
inputs, repo, out = torch.load(sys.argv[1]), sys.argv[2], sys.argv[3]
head = inputs.pop("lm_head")
models = {"load_drafter": hf_specdec.load_drafter(repo), "AutoModel": AutoModel.from_pretrained(repo)}
with torch.no_grad():
    logits = {k: m.eval()(**inputs).last_hidden_state @ head.T for k, m in models.items()}
torch.save({"logits": logits, "classes": {k: type(m).__name__ for k, m in models.items()}}, out)
"""


def start_server(data: Path, token: str | None = None) -> tuple[subprocess.Popen, str]:
    """Start tests/hub_server.py on a free port, wait for /health; return the process and its URL."""
    cmd = [sys.executable, str(SERVER), "--host", "127.0.0.1", "--port", "0", "--data", str(data)]
    proc = subprocess.Popen(cmd + (["--token", token] if token else []), stdout=subprocess.PIPE, text=True)
    url = "http://127.0.0.1:" + proc.stdout.readline().strip().removeprefix("PORT=")
    try:
        urllib.request.urlopen(url + "/health", timeout=10).close()
    except OSError:
        proc.terminate()
        raise
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


def point_hub_at(monkeypatch: pytest.MonkeyPatch, url: str, home: Path) -> None:
    """Send every huggingface_hub call of this process (and of children started now) to `url`, online."""
    env = {"HF_ENDPOINT": url, "HF_HOME": str(home), "HF_TOKEN": TOKEN, "HF_HUB_DISABLE_TELEMETRY": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub_constants, "ENDPOINT", url)
    monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(hub_api.api, "endpoint", url)  # the singleton behind upload_folder(), create_repo(), ...


@pytest.fixture(scope="session")
def local_hub(tmp_path_factory):
    proc, url = start_server(tmp_path_factory.mktemp("hub"))
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture
def hub_env(local_hub, monkeypatch, tmp_path):
    point_hub_at(monkeypatch, local_hub, tmp_path / "hf_home")
    return local_hub


@pytest.fixture(scope="module")
def tiny():
    """A tiny target whose Hub id is TARGET, and a random drafter for it (non-zero weights, distinct outputs)."""
    target = tiny_target("llama")
    target.config._name_or_path = TARGET
    return target, make_drafter(target, 4)


def save_drafter(drafter, folder: Path) -> Path:
    drafter.save_pretrained(folder)
    (folder / "TRAINING.md").write_text("# tiny drafter\n")
    return folder


def snapshot(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_push_then_load_from_a_fresh_process_gives_identical_logits(hub_env, tiny, tmp_path):
    target, drafter = tiny
    folder = save_drafter(drafter, tmp_path / "drafter")
    before = snapshot(folder)
    sha = publish_drafter(folder, "org/tiny-drafter", benchmark_json=BENCHMARK, training_log=TRAINING_LOG)
    assert HfApi().model_info("org/tiny-drafter").sha == sha
    assert snapshot(folder) == before  # nothing written into the local folder (the card went from memory)

    g = torch.Generator().manual_seed(0)
    C, S, L, H = 5, drafter.config.block_size, len(drafter.config.target_layer_ids), drafter.config.hidden_size
    inputs = {
        "noise_embeds": torch.randn(1, S, H, generator=g),  # (B, S, H)
        "target_features": torch.randn(1, C, L * H, generator=g),  # (B, C, L*H)
        "position_ids": torch.arange(C + S)[None],  # (B, C + S)
    }
    with torch.no_grad():
        expected = drafter(**inputs).last_hidden_state @ target.lm_head.weight.T  # (B, S, V)
    torch.save({**inputs, "lm_head": target.lm_head.weight.detach()}, tmp_path / "inputs.pt")
    (tmp_path / "child.py").write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN")}
    env.update(HF_HOME=str(tmp_path / "fresh_home"), TQDM_DISABLE="1", PYTHONPATH=str(REPO_ROOT))
    child = [sys.executable, "child.py", "inputs.pt", "org/tiny-drafter", "out.pt", str(torch.get_num_threads())]
    run = subprocess.run(child, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt")
    assert out["classes"] == {"load_drafter": "BlockDrafter", "AutoModel": "BlockDrafter"}
    for name, logits in out["logits"].items():
        assert torch.equal(logits, expected), name
    assert (tmp_path / "fresh_home" / "hub" / "models--org--tiny-drafter").is_dir()  # it really came from the Hub


def test_second_push_makes_a_new_revision_and_the_old_one_stays_downloadable(hub_env, tiny, tmp_path):
    target, drafter = tiny
    first = save_drafter(drafter, tmp_path / "first")
    second = save_drafter(make_drafter(target, 4, seed=2), tmp_path / "second")
    repo, api = "org/two-pushes", HfApi()
    sha1 = publish_drafter(first, repo)
    sha2 = publish_drafter(second, repo, commit_message="retrained")
    assert sha1 != sha2
    assert api.list_repo_refs(repo).branches[0].target_commit == sha2
    assert [c.commit_id for c in api.list_repo_commits(repo)][:2] == [sha2, sha1]
    for sha, folder in ((sha1, first), (sha2, second)):
        path = hf_hub_download(repo, "model.safetensors", revision=sha, cache_dir=tmp_path / "cache")
        assert Path(path).read_bytes() == (folder / "model.safetensors").read_bytes()
    with pytest.raises(HfHubHTTPError) as stale:  # the server refuses a commit on top of an old parent
        late = [CommitOperationAdd("late.txt", b"late")]
        api.create_commit(repo, late, commit_message="late", parent_commit=sha1)
    assert stale.value.response.status_code == 412


def test_card_has_metadata_results_and_no_token(hub_env, tiny, tmp_path):
    folder = save_drafter(tiny[1], tmp_path / "drafter")
    recipe = f"python scripts/train_drafter.py --target {TARGET} --hub_token {TOKEN}"  # a careless recipe
    publish_drafter(
        folder,
        "org/carded",
        target_revision="abc123",
        benchmark_json=BENCHMARK,
        recipe=recipe,
        training_log=TRAINING_LOG,
    )
    card = ModelCard.load("org/carded")
    data = card.data.to_dict()
    assert data["base_model"] == TARGET and data["base_model_revision"] == "abc123"
    assert data["library_name"] == "hf_specdec" and data["license"] == "apache-2.0"
    assert {"speculative-decoding", "dflash", "hf_specdec_block_drafter"} <= set(data["tags"])
    assert HfApi().model_info("org/carded").card_data.base_model == TARGET  # the server indexed the metadata
    text = card.text
    assert "| all | tiny-b4 | hf_specdec | 2.50 | 21.00 | 2.10x | 25.00 | 1.00 |" in text
    assert 'hf_specdec.load_drafter("org/carded"' in text and 'AutoModel.from_pretrained("org/carded")' in text
    assert "40 optimizer steps (1.5 min" in text and "3,456 supervised block tokens" in text
    assert "first 20 logged steps 4.475, of the last 20 steps 3.475" in text
    assert "python scripts/benchmark.py --tiny" in text and "/x/.venv" not in text
    assert "[TRAINING.md](TRAINING.md)" in text
    assert TOKEN not in card.content and "--hub_token ***" in text


def test_card_of_the_shipped_drafter_renders_from_real_benchmark_results():
    folder = REPO_ROOT / "drafters/qwen2.5-coder-1.5b-pard"
    bench = REPO_ROOT / "results/single-stream/2026-12-01-adaptive/benchmark.json"
    card = render_card(folder, "me/qwen-drafter", target_id="Qwen/Qwen2.5-Coder-1.5B", benchmark_json=bench)
    rows = [line for line in card.text.splitlines() if line.startswith("| all |")]
    assert len(rows) == len(json.loads(bench.read_text())["methods"])
    with pytest.raises(ValueError, match="not a Hub model id"):
        render_card(folder, "me/x", target_id=json.loads((folder / "config.json").read_text())["target_name_or_path"])


@pytest.mark.parametrize(
    "model_type, head, sampled",
    [
        ("hf_specdec_block_drafter", None, False),
        ("hf_specdec_dcoco", "DCOCO", False),  # saved when a base with a head was a kind of its own
        ("hf_specdec_dblast", "DBLAST", True),
        ("hf_specdec_block_drafter", "DBLAST", True),  # a head in the config, as attach_head saves it
    ],
)
def test_card_usage_fits_the_drafter_kind(tiny, tmp_path, model_type, head, sampled):
    config = {**tiny[1].config.to_dict(), "model_type": model_type}
    if head is not None and model_type == "hf_specdec_block_drafter":
        config["head"] = {"type": head.lower()}
    (tmp_path / "config.json").write_text(json.dumps(config))
    card = render_card(tmp_path, "org/kind", target_id=TARGET)
    assert model_type in card.data.tags and "`hf_specdec.BlockDrafter`" in card.text
    assert (head is None) == (f"with a {head} head" not in card.text)
    assert 'hf_specdec.load_drafter("org/kind"' in card.text and ("do_sample=True" in card.text) == sampled
    assert "No benchmark recorded" in card.text and "No training record" in card.text  # none given, none invented
    assert "| task |" not in card.text and "optimizer steps" not in card.text
    assert template_path(config) == REPO_ROOT / "hub_cards" / "block_drafter.md.j2"


def test_card_templates_are_in_hub_cards_and_ship_beside_the_package():
    """The templates live in hub_cards/ at the repository's root, none in the package; pyproject's package data
    names them by a path one level up from hf_specdec, so a wheel installs hub_cards/ beside the package, where the
    loader looks (it finds the repository's in a checkout or an editable install the same way)."""
    templates = sorted(p.name for p in (REPO_ROOT / "hub_cards").glob("*.j2"))
    assert templates == ["block_drafter.md.j2", "drafter.md.j2", "head.md.j2", "pard.md.j2"]
    assert not [p for p in (REPO_ROOT / "hf_specdec").rglob("*.j2")]
    assert templates_dir() == Path(hf_specdec.__file__).resolve().parents[1] / "hub_cards" == REPO_ROOT / "hub_cards"
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert data == {"hf_specdec": ["../hub_cards/*.j2"]}
    assert all((REPO_ROOT / "hf_specdec").glob(f"../hub_cards/{name}") for name in templates)
    assert not any(p.is_symlink() for p in (REPO_ROOT / "hub_cards").iterdir())


def test_publishing_is_refused_without_a_hub_target_id(hub_env, tiny, tmp_path):
    target, drafter = tiny
    local = make_drafter(target, 4)
    local.config.target_name_or_path = str(tmp_path / "models" / "tiny-target")  # trained from a local folder
    folder = save_drafter(local, tmp_path / "drafter")
    with pytest.raises(ValueError, match=r"not a Hub model id.*Pass target_id='org/target-model'"):
        publish_drafter(folder, "org/refused")
    with pytest.raises(ValueError, match="target_id is './models/tiny'"):
        publish_drafter(folder, "org/refused", target_id="./models/tiny")
    assert not HfApi().repo_exists("org/refused")  # refused before anything was sent
    assert publish_drafter(folder, "org/refused", target_id=TARGET)  # the fix the message names works

    (folder / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ValueError, match="pickle"):
        publish_drafter(folder, "org/refused", target_id=TARGET)
    (folder / "pytorch_model.bin").unlink()
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"model\.safetensors"):
        publish_drafter(folder, "org/refused", target_id=TARGET)


def test_failed_upload_names_the_cause_keeps_the_folder_and_hides_the_token(
    tiny, tmp_path, monkeypatch, caplog, capsys
):
    folder = save_drafter(tiny[1], tmp_path / "drafter")
    before = snapshot(folder)
    caplog.set_level(logging.DEBUG)
    proc, url = start_server(tmp_path / "guarded", token="the-server-wants-another-token")
    try:
        point_hub_at(monkeypatch, url, tmp_path / "home")
        with pytest.raises(RuntimeError) as denied:
            publish_drafter(folder, "org/guarded", token=TOKEN, commit_message=f"with {TOKEN}")
    finally:
        stop(proc)
    with pytest.raises(RuntimeError) as down:  # the same server, now stopped
        publish_drafter(folder, "org/guarded", token=TOKEN)
    assert "HTTP 401" in str(denied.value) and "Invalid credentials" in str(denied.value)
    assert "ConnectError" in str(down.value) or "onnect" in str(down.value)
    for err in (denied.value, down.value):
        assert f"the local checkpoint at {folder} is intact" in str(err)
        assert TOKEN not in str(err) and err.__cause__ is None
    assert snapshot(folder) == before
    captured = capsys.readouterr()
    assert TOKEN not in caplog.text + captured.out + captured.err


def raw_request(url: str, method: str, path: str, body: bytes | None = None) -> int:
    """Status of a request sent exactly as written (no client-side path normalisation)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {TOKEN}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def commit_body(path: str) -> bytes:
    lines = [
        {"key": "header", "value": {"summary": "probe"}},
        {"key": "file", "value": {"path": path, "content": "ZXZpbA==", "encoding": "base64"}},
    ]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def test_server_rejects_path_traversal_and_non_loopback_binding(hub_env, tmp_path):
    HfApi().create_repo("org/probed")
    sha = HfApi().model_info("org/probed").sha
    probes = [
        "/org/probed/resolve/main/../../etc/passwd",
        "/org/probed/resolve/main/%2e%2e/%2e%2e/etc/passwd",
        "/org/probed/resolve/main/..%2F..%2Fetc%2Fpasswd",
        "/org/probed/resolve/main/a%5C..%5C..%5Cpasswd",
        "/org/probed/resolve/main/.git/config",
        "/org/probed/resolve/..%2F..%2Fmain/.gitattributes",
        "/%2e%2e/probed/resolve/main/.gitattributes",
        "/api/models/org/..%2F..%2Fetc/tree/main",
        "/api/models/org/probed/tree/main/..%2F..",
    ]
    for path in probes:
        assert raw_request(hub_env, "GET", path) == 400, path
    for bad in ("../evil.txt", "a/../../evil.txt", ".git/hooks/post-commit", "a\\..\\evil.txt", "/etc/evil"):
        assert raw_request(hub_env, "POST", "/api/models/org/probed/commit/main", commit_body(bad)) == 400, bad
    assert HfApi().model_info("org/probed").sha == sha  # no probe made a commit
    assert raw_request(hub_env, "POST", "/api/repos/create", b'{"name": "..", "organization": "org"}') == 400
    refused = subprocess.run(
        [sys.executable, str(SERVER), "--host", "0.0.0.0", "--port", "0", "--data", str(tmp_path / "open")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0 and "loopback" in refused.stderr


def test_ship_drafter_push_to_hub_packages_then_publishes(hub_env, tiny, tmp_path):
    run = tmp_path / "run"
    tiny[1].save_pretrained(run / "drafter")
    state = {"step": 40, "elapsed_s": 90.0, "supervised_tokens": 3456, "losses": TRAINING_LOG["losses"]}
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "trainer_state.json").write_text(json.dumps(state))
    (run / "data").mkdir()
    (run / "data" / "index.json").write_text(json.dumps({"sequences": 7}))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    command = [sys.executable, str(REPO_ROOT / "scripts" / "ship_drafter.py"), "--run", str(run), "--name", "tiny"]
    command += ["--command", "python scripts/train_drafter.py --tiny", "--push_to_hub", "org/shipped"]
    shipped = subprocess.run(command, cwd=tmp_path, env=env | {"TQDM_DISABLE": "1"}, capture_output=True, text=True)
    assert shipped.returncode == 0, shipped.stderr[-3000:]
    sha = HfApi().model_info("org/shipped").sha
    assert f"published drafters/tiny to org/shipped at revision {sha}" in shipped.stdout
    files = set(HfApi().list_repo_files("org/shipped"))
    assert {"README.md", "config.json", "model.safetensors", "TRAINING.md"} <= files
    card = ModelCard.load("org/shipped")
    assert card.data.base_model == TARGET and "python scripts/train_drafter.py --tiny" in card.text
    assert "40 optimizer steps" in card.text and TOKEN not in card.content


def test_training_with_push_to_hub_publishes_the_drafter_and_its_recipe(hub_env, tmp_path):
    """train_drafter's run (SpecOPD + LoRA here) ends with the merged drafter and a card on the Hub."""
    from hf_specdec.training.config import DistillationConfig
    from hf_specdec.training.run import run

    saved_run_inputs(tmp_path)
    settings = dict(
        target=str(tmp_path / "target"),
        drafter=str(tmp_path / "drafter"),
        data_file=str(tmp_path / "data.jsonl"),
        output_dir=str(tmp_path / "run"),
        objective="specopd",
        lora_rank=4,
        block_size=4,
        num_steps=2,
        batch_size=2,
        anchors_per_sequence=4,
        tree_anchors=2,
        dtype="float32",
        push_to_hub="org/opd-drafter",
    )
    with pytest.raises(ValueError, match="--hub_target_id"):  # a local target folder is no Hub id: refused up front
        run(DistillationConfig(**settings))
    assert not (tmp_path / "run").exists()  # before anything was trained or written
    out = run(DistillationConfig(**settings, hub_target_id=TARGET))
    card = ModelCard.load("org/opd-drafter")
    assert card.data.base_model == TARGET
    assert "--objective specopd" in card.text and "--lora_rank 4" in card.text and TOKEN not in card.text
    path = hf_hub_download("org/opd-drafter", "model.safetensors")
    local = load_file(str(out / "model.safetensors"))
    remote = load_file(path)
    assert local.keys() == remote.keys() and all(torch.equal(local[k], remote[k]) for k in local)
