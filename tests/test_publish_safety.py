"""Publishing uploads what it means to: an allow-list of the drafter folder's files (and extra files named), no
symlinks, no file holding the Hub token, a dry run that lists the files; a drafter's `push_to_hub` takes the same
path as `publish_drafter` (the same files, checks and card); a PARD adapter goes up with what it loads beside its
adapter; shipping checks the drafter's name and size before it touches the drafter already shipped. Against the
loopback Hub of tests/hub_server.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import test_hub
import torch
from conftest import MASK_ID
from huggingface_hub import HfApi, hf_hub_download
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from test_hub import REPO_ROOT, TARGET, TOKEN, save_drafter
from test_pard import tiny_lm

from hf_specdec import PardDrafter, load_drafter
from hf_specdec.hub import PublishMixin, publish_drafter
from upkeep import ship as ship_module
from upkeep.ship import ship_drafter

local_hub, hub_env, tiny = test_hub.local_hub, test_hub.hub_env, test_hub.tiny  # the loopback Hub's fixtures
OWN_FILES = ["README.md", "TRAINING.md", "config.json", "model.safetensors"]  # what save_drafter leaves, + the card


def cluttered(folder: Path) -> Path:
    """A drafter folder as a run leaves it: the drafter and TRAINING.md, plus optimizer state, logs and notes."""
    (folder / "optimizer.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    (folder / "trainer_state.json").write_text('{"step": 3}')
    (folder / "train.log").write_text("step 3 loss 4.2\n")
    (folder / "notes.md").write_text("private notes\n")
    (folder / "EVAL.md").write_text("# evaluation\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "extra.txt").write_text("nested\n")
    return folder


def tree(root: Path) -> dict[str, str]:
    """Every file and link under `root` with its content hash (links: their target)."""
    out = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            out[key] = "-> " + os.readlink(path)
        elif path.is_file():
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_only_the_allow_list_and_named_extras_go_up_and_a_dry_run_lists_them(hub_env, tiny, tmp_path):
    folder = cluttered(save_drafter(tiny[1], tmp_path / "drafter"))
    planned = publish_drafter(folder, "org/allow", extra_files=["EVAL.md"], dry_run=True)
    assert planned == sorted(OWN_FILES + ["EVAL.md"])
    assert not HfApi().repo_exists("org/allow")  # the dry run sent nothing
    publish_drafter(folder, "org/allow", extra_files=["EVAL.md"])
    assert set(HfApi().list_repo_files("org/allow")) - {".gitattributes"} == set(planned)
    publish_drafter(folder, "org/plain")
    assert set(HfApi().list_repo_files("org/plain")) - {".gitattributes"} == set(OWN_FILES)


@pytest.mark.parametrize("which", ["model.safetensors", "TRAINING.md", "EVAL.md"])
def test_symlinks_are_refused_before_anything_is_sent(hub_env, tiny, tmp_path, which):
    folder = save_drafter(tiny[1], tmp_path / "drafter")
    outside = tmp_path / "outside"
    outside.mkdir()
    real = outside / which
    real.write_bytes((folder / which).read_bytes() if (folder / which).exists() else b"elsewhere\n")
    (folder / which).unlink(missing_ok=True)
    (folder / which).symlink_to(real)
    for dry_run in (True, False):
        with pytest.raises(ValueError, match=rf"symlinks \['{which}'\].*refusing to follow"):
            publish_drafter(
                folder, "org/linked", extra_files=["EVAL.md"] if which == "EVAL.md" else (), dry_run=dry_run
            )
    assert not HfApi().repo_exists("org/linked")


@pytest.mark.parametrize(
    "file, token_from",
    [("TRAINING.md", "environment"), ("EVAL.md", "environment"), ("EVAL.md", "argument"), ("vocab.json", "argument")],
)
def test_a_file_holding_the_token_is_refused_before_anything_is_sent(
    hub_env, tiny, tmp_path, monkeypatch, file, token_from
):
    folder = save_drafter(tiny[1], tmp_path / "drafter")
    (folder / file).write_text(f"trained with --hub_token {TOKEN} by mistake\n")
    token = None
    if token_from == "argument":  # the token passed to publish_drafter, not the logged-in one
        monkeypatch.setenv("HF_TOKEN", "hf_another-token-entirely")
        token = TOKEN
    extras = ["EVAL.md"] if file == "EVAL.md" else []
    for dry_run in (True, False):
        with pytest.raises(ValueError) as refused:
            publish_drafter(folder, "org/leaky", token=token, extra_files=extras, dry_run=dry_run)
        assert f"['{file}']" in str(refused.value) and "contain your Hub token" in str(refused.value)
        assert TOKEN not in str(refused.value)
    assert not HfApi().repo_exists("org/leaky")
    (folder / file).write_text("no secrets here\n")
    assert file in publish_drafter(folder, "org/leaky", token=token, extra_files=extras, dry_run=True)


URL_TOKEN = "hf_TEST/d0+not leak=7f3a9c"  # characters that JSON escapes and quote / quote_plus change
B64_TOKEN = "hf_TEST?d0>not~leak-7f3a9c"  # its base64 holds + and /, which the URL-safe alphabet writes - and _


def in_base64(alphabet: str, offset: int):
    """The token inside a longer base64 blob, starting `offset` bytes (0-2) into it."""
    encode = base64.b64encode if alphabet == "standard" else base64.urlsafe_b64encode
    return lambda t: encode(b"\xfb" * offset + t.encode() + b"\x00 trailing bytes").decode()


ENCODED = {  # how the token is written: (file, token, encoding)
    "JSON \\u escapes": ("config.json", TOKEN, lambda t: "".join(f"\\u{ord(c):04x}" for c in t)),
    "JSON one \\u escape": ("tokenizer_config.json", TOKEN, lambda t: f"\\u{ord(t[0]):04X}" + t[1:]),
    "JSON escaped slashes": ("tokenizer_config.json", URL_TOKEN, lambda t: json.dumps(t)[1:-1].replace("/", "\\/")),
    "URL quote": ("TRAINING.md", URL_TOKEN, quote),
    "URL quote_plus": ("TRAINING.md", URL_TOKEN, quote_plus),
    "URL every byte": ("EVAL.md", TOKEN, lambda t: "".join(f"%{b:02X}" for b in t.encode())),
    "JSON-escaped URL": ("config.json", URL_TOKEN, lambda t: quote(t, safe="").replace("%", "\\u0025")),
    "base64 wrapped at 76 columns": (
        "EVAL.md",
        B64_TOKEN,
        lambda t: base64.encodebytes(b"\xfb" * 50 + t.encode()).decode(),
    ),
    **{
        f"base64 {alphabet} at offset {offset}": ("EVAL.md", B64_TOKEN, in_base64(alphabet, offset))
        for alphabet in ("standard", "urlsafe")
        for offset in range(3)
    },
}


def write_into(folder: Path, name: str, text: str) -> None:
    """`text` written as it is into `name`: a JSON file gets it as a string value beside its other keys."""
    path = folder / name
    if name.endswith(".json"):
        data = json.loads(path.read_text()) if path.exists() else {}
        data["note"] = "@@NOTE@@"
        path.write_text(json.dumps(data, indent=2).replace("@@NOTE@@", text))
    else:
        path.write_text(f"trained with --hub_token {text} by mistake\n")


@pytest.mark.parametrize("encoding", list(ENCODED))
def test_an_encoded_token_is_refused_before_anything_is_sent(hub_env, tiny, tmp_path, encoding):
    file, token, encode = ENCODED[encoding]
    folder = save_drafter(tiny[1], tmp_path / "drafter")
    written = encode(token)
    assert token not in written  # only the encoded copy is there
    write_into(folder, file, written)
    extras = ["EVAL.md"] if file == "EVAL.md" else []
    with pytest.raises(ValueError) as refused:
        publish_drafter(folder, "org/encoded", token=None if token == TOKEN else token, extra_files=extras)
    message = str(refused.value)
    assert f"['{file}']" in message and "contain your Hub token" in message
    assert token not in message and written not in message
    assert not HfApi().repo_exists("org/encoded")


def test_files_with_encoded_text_but_not_the_token_are_published(hub_env, tiny, tmp_path):
    """The negative control: escapes, percent-encoding and base64 of other text go up."""
    folder = save_drafter(tiny[1], tmp_path / "drafter")
    other = "hf_OTHER/not+the token"
    write_into(folder, "config.json", "".join(f"\\u{ord(c):04x}" for c in other))
    write_into(folder, "tokenizer_config.json", quote_plus(other))
    blobs = [in_base64(a, k)(other) for a in ("standard", "urlsafe") for k in range(3)]
    # a fixed blob: about one random base64 text in five holds "+/xx/yy", which the local-path check refuses (safely)
    noise = base64.b64encode(random.Random(0).randbytes(300)).decode()
    (folder / "EVAL.md").write_text("\n".join(blobs) + "\n" + noise + "\n")
    publish_drafter(folder, "org/clean", extra_files=["EVAL.md"])
    assert {"config.json", "tokenizer_config.json", "EVAL.md"} <= set(HfApi().list_repo_files("org/clean"))


@pytest.mark.parametrize("name", ["", ".", "..", "../outside.md", "sub/extra.txt", "missing.md", "README.md"])
def test_extra_files_must_be_files_of_the_folder(hub_env, tiny, tmp_path, name):
    folder = cluttered(save_drafter(tiny[1], tmp_path / "drafter"))
    (tmp_path / "outside.md").write_text("outside\n")
    with pytest.raises(ValueError, match="extra file|README.md"):
        publish_drafter(folder, "org/extras", extra_files=[name], dry_run=True)


def make_run(root: Path, drafter) -> Path:
    """What ship_drafter reads of a training run: run/drafter, the trainer state and the data index."""
    run = root / "run"
    drafter.save_pretrained(run / "drafter")
    (run / "checkpoint").mkdir(parents=True)
    state = {"step": 4, "elapsed_s": 9.0, "supervised_tokens": 100, "losses": [[i, 5.0 - i] for i in range(1, 5)]}
    (run / "checkpoint" / "trainer_state.json").write_text(json.dumps(state))
    (run / "data").mkdir()
    (run / "data" / "index.json").write_text(json.dumps({"sequences": 3}))
    return run


def shipped_repo(root: Path) -> Path:
    """A repository with one shipped drafter (drafters/kept) and a folder beside drafters/ (outside)."""
    repo = root / "repo"
    for folder in (repo / "drafters" / "kept", repo / "outside"):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"decoding": {"tree_budget": 8}}')
        (folder / "model.safetensors").write_bytes(b"old weights")
    return repo


@pytest.mark.parametrize("name", ["", ".", "..", "../outside", "kept/../../outside", "a/b", "ABSOLUTE", ".hidden"])
def test_ship_refuses_a_name_that_is_not_one_drafter_folder(tiny, tmp_path, name):
    run, repo = make_run(tmp_path, tiny[1]), shipped_repo(tmp_path)
    name = str(repo / "outside") if name == "ABSOLUTE" else name
    before = tree(repo)
    with pytest.raises(ValueError, match="is not a drafter folder name"):
        ship_drafter(run, name, "python scripts/train_drafter.py", drafters_dir=repo / "drafters")
    assert tree(repo) == before


def test_ship_script_with_name_dot_leaves_every_drafter_in_place(tiny, tmp_path):
    run, repo = make_run(tmp_path, tiny[1]), shipped_repo(tmp_path)
    before = tree(repo)
    script = [sys.executable, str(REPO_ROOT / "scripts" / "ship_drafter.py"), "--run", str(run), "--command", "x"]
    env = os.environ | {"TQDM_DISABLE": "1"}
    for name in (".", ""):
        done = subprocess.run([*script, "--name", name], cwd=repo, env=env, capture_output=True, text=True)
        assert done.returncode != 0 and "is not a drafter folder name" in done.stderr, done.stderr[-2000:]
    assert tree(repo) == before


def test_ship_refuses_an_oversized_drafter_before_touching_the_shipped_one(tiny, tmp_path, monkeypatch):
    run, repo = make_run(tmp_path, tiny[1]), shipped_repo(tmp_path)
    before = tree(repo)
    monkeypatch.setattr(ship_module, "LIMIT", 1024)  # the tiny drafter stands in for one over 64 MiB
    with pytest.raises(ValueError, match="over the .* limit.*already shipped under this name is unchanged"):
        ship_drafter(run, "kept", "python scripts/train_drafter.py", drafters_dir=repo / "drafters")
    assert tree(repo) == before  # the old drafter, and no staging folder left behind
    monkeypatch.undo()
    out = ship_drafter(run, "kept", "python scripts/train_drafter.py", drafters_dir=repo / "drafters")
    assert json.loads((out / "config.json").read_text())["decoding"]["tree_budget"] == 8  # the default survives
    assert (out / "model.safetensors").read_bytes() != b"old weights" and (out / "TRAINING.md").is_file()
    assert sorted(p.name for p in (repo / "drafters").iterdir()) == ["kept"]


def test_ship_dry_run_lists_what_would_be_published(hub_env, tiny, tmp_path, capsys):
    run = make_run(tmp_path, tiny[1])
    ship_drafter(run, "tiny", "cmd", push_to_hub="org/dry", drafters_dir=tmp_path / "drafters", dry_run=True)
    printed = capsys.readouterr().out
    assert "would publish" in printed and "model.safetensors" in printed and "TRAINING.md" in printed
    assert not HfApi().repo_exists("org/dry")


def repo_files(repo: str, root: Path) -> dict[str, bytes]:
    """Every file of a Hub repo but .gitattributes, by name, as bytes."""
    names = sorted(set(HfApi().list_repo_files(repo)) - {".gitattributes"})
    return {n: Path(hf_hub_download(repo, n, cache_dir=root / "dl")).read_bytes() for n in names}


def pard_drafter(target) -> PardDrafter:
    return PardDrafter.from_causal_lm(tiny_lm(), target, mask_token_id=MASK_ID, block_size=4).eval()


@pytest.mark.parametrize("kind", ["block", "pard"])
def test_push_to_hub_sends_what_publish_drafter_sends_with_the_same_card(hub_env, tiny, tmp_path, kind):
    """`drafter.push_to_hub` is `publish_drafter` on the folder the drafter was loaded from: the same allow-listed
    files (the run record and tokenizer files beside the saved weights, no clutter), the same config and weights,
    the same card; and the same dry run."""
    drafter = tiny[1] if kind == "block" else pard_drafter(tiny[0])
    folder = cluttered(save_drafter(drafter, tmp_path / "drafter"))
    (folder / "vocab.json").write_text('{"a": 0}')
    loaded = load_drafter(folder)
    assert type(loaded).push_to_hub is PublishMixin.push_to_hub
    planned = publish_drafter(folder, "org/by-folder", dry_run=True)
    assert loaded.push_to_hub("org/by-folder", dry_run=True) == planned
    assert planned == sorted(OWN_FILES + ["vocab.json"]) and not HfApi().repo_exists("org/by-folder")
    publish_drafter(folder, f"org/{kind}-by-folder")
    loaded.push_to_hub(f"org/{kind}-by-push")
    by_folder = repo_files(f"org/{kind}-by-folder", tmp_path)
    by_push = repo_files(f"org/{kind}-by-push", tmp_path)
    assert sorted(by_push) == sorted(by_folder) == planned
    card = by_push.pop("README.md").decode().replace(f"{kind}-by-push", f"{kind}-by-folder")
    assert card == by_folder.pop("README.md").decode()
    assert json.loads(by_push.pop("config.json")) == json.loads(by_folder.pop("config.json"))
    for name, got in zip(("push", "folder"), (by_push, by_folder), strict=True):
        (tmp_path / f"{name}.safetensors").write_bytes(got.pop("model.safetensors"))
    weights = [load_file(str(tmp_path / f"{name}.safetensors")) for name in ("push", "folder")]
    assert weights[0].keys() == weights[1].keys() and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert by_push == by_folder  # TRAINING.md and vocab.json, byte for byte


def test_push_to_hub_refuses_what_publish_drafter_refuses(hub_env, tiny, tmp_path):
    folder = save_drafter(tiny[1], tmp_path / "drafter")
    (folder / "TRAINING.md").write_text(f"trained with --hub_token {TOKEN} by mistake\n")
    loaded = load_drafter(folder)
    for publish in (lambda: publish_drafter(folder, "org/refused"), lambda: loaded.push_to_hub("org/refused")):
        with pytest.raises(ValueError, match=r"\['TRAINING.md'\].*contain your Hub token") as refused:
            publish()
        assert TOKEN not in str(refused.value)
    (folder / "TRAINING.md").unlink()
    (tmp_path / "outside.md").write_text("elsewhere\n")
    (folder / "TRAINING.md").symlink_to(tmp_path / "outside.md")
    for publish in (lambda: publish_drafter(folder, "org/refused"), lambda: loaded.push_to_hub("org/refused")):
        with pytest.raises(ValueError, match=r"symlinks \['TRAINING.md'\].*refusing to follow"):
            publish()
    assert not HfApi().repo_exists("org/refused")
    with pytest.raises(ValueError, match="not loaded from a local folder"):
        tiny[1].push_to_hub("org/refused", extra_files=["EVAL.md"])


def test_a_pard_adapter_goes_up_with_its_draft_vocabulary_and_loads_back(hub_env, tiny, tmp_path, monkeypatch):
    """A PARD adapter folder loads its draft vocabulary from draft_vocab.safetensors beside the adapter: it is
    published with it, and the drafter loads back from the Hub scoring the same ids."""
    monkeypatch.setenv("HF_SPECDEC_MODELS", str(tmp_path / "models"))
    lm = tiny_lm()
    lm.save_pretrained(tmp_path / "models" / "tiny-lm")
    drafter = PardDrafter.from_causal_lm(lm, tiny[0], mask_token_id=MASK_ID, block_size=4, base_model="tiny-lm")
    drafter.set_draft_vocab(torch.arange(3, 67))
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(drafter, lora)
    peft_model.save_pretrained(tmp_path / "adapter")
    merged = peft_model.merge_and_unload()
    merged.save_adapter_folder(tmp_path / "adapter")
    planned = publish_drafter(tmp_path / "adapter", "org/pard-vocab", target_id=TARGET, dry_run=True)
    assert "draft_vocab.safetensors" in planned and "model.safetensors" not in planned
    publish_drafter(tmp_path / "adapter", "org/pard-vocab", target_id=TARGET)
    monkeypatch.chdir(tmp_path / "..")
    loaded = load_drafter("org/pard-vocab")
    assert isinstance(loaded, PardDrafter) and torch.equal(loaded.draft_vocab, torch.arange(3, 67))
    card = Path(hf_hub_download("org/pard-vocab", "README.md")).read_text()
    assert "holds a LoRA adapter" in card and "has its own token embeddings and LM head" in card
