"""Published cards are true and portable: no local path in any published file, the run's record goes up with the
weights, a benchmark can be attached (and its absence is said), the license is an option, adjusted settings are
stated. Each kind's card states what is true of that kind (hub_cards/): a block drafter reads its target's hidden
states and uses its LM head, a PARD drafter has its own and reads none unless it injects target features, a head
needs its backbone; what a card says of other targets is what `generate()` does with one. Publishing goes to the
loopback Hub of tests/hub_server.py (fixtures of test_hub.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import MASK_ID, make_drafter, tiny_target
from huggingface_hub import HfApi, ModelCard, hf_hub_download
from test_hub import BENCHMARK, REPO_ROOT, TARGET, TRAINING_LOG, hub_env, local_hub  # noqa: F401 (fixtures)
from test_pard import tiny_lm

from hf_specdec import DecodingSettings, PardConfig, PardDrafter
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
    assert "No benchmark recorded" in card.text and "| task |" not in card.text
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
    assert "## Benchmark" in text and "on test CPU (2 cores)" in text and "No benchmark recorded" not in text
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
    assert card.data.license == "cc-by-4.0" and "| task |" in card.text and "test CPU" in card.text
    assert f"--target {TARGET}" in card.text and ADJUSTED in card.text
    record = (tmp_path / "drafters" / "tiny" / "TRAINING.md").read_text()
    assert f"--target {TARGET}" in record and f"adjusted: {ADJUSTED}" in record and str(tmp_path) not in record


SECTIONS = [
    "## What it is",
    "## How to use",
    "## Intended use",
    "## Limitations",
    "## Training",
    "## Benchmark",
    "## License",
    "## Citation",
]
READS_TARGET = "reads the target's hidden states"
READS_NO_TARGET = "reads no hidden states of the target"
USES_TARGET_HEAD = "no token embeddings or LM head of its own"
OWN_HEAD = "has its own token embeddings and LM head"
ONE_TARGET = "works with the one target it was trained for"
REFUSES = "refuses a target of another shape"
PARD_PAPER = "PARD: Accelerating LLM Inference with Low-Cost PARallel Draft Model Adaptation"
DFLASH_PAPER = "DFlash: Block Diffusion for Flash Speculative Decoding"


def pard_config(**kwargs) -> dict:
    """A PARD drafter's config for the tiny llama target, over a tiny LM named by a Hub id."""
    config = PardConfig.for_target(
        tiny_target("llama").config, tiny_lm().config, mask_token_id=MASK_ID, block_size=4, **kwargs
    )
    return {**config.to_dict(), "base_model": "org/tiny-lm", "target_name_or_path": TARGET}


def saved(folder: Path, config: dict, *files: str) -> Path:
    """A drafter folder as the card reads it: its config.json and the (empty) weight files named."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name in files:
        (folder / name).write_bytes(b"")
    return folder


KINDS = {  # a drafter folder of each kind the cards tell apart: config changes and the weight files it holds
    "block": (lambda: make_drafter(tiny_target("llama"), 4).config.to_dict(), ["model.safetensors"]),
    "pard adapter": (pard_config, ["adapter_model.safetensors", "adapter_config.json"]),
    "pard full": (pard_config, ["model.safetensors"]),
    "pard-2": (lambda: pard_config(feature_injection=True, target_layer_ids=[-1, -2]), ["model.safetensors"]),
    "block + dcoco": (
        lambda: {**make_drafter(tiny_target("llama"), 4).config.to_dict(), "head": {"type": "dcoco"}},
        ["model.safetensors"],
    ),
    "pard + dblast, head alone": (
        lambda: {**pard_config(), "head": {"type": "dblast"}, "backbone": "../pard"},
        ["head.safetensors"],
    ),
}


def kind_card(kind: str, tmp_path: Path, **changes) -> tuple[ModelCard, str]:
    """The card of a folder of `kind` (KINDS) with `changes` to its config, and its text on one line."""
    make_config, files = KINDS[kind]
    folder = saved(tmp_path / kind.replace(" ", "_"), {**make_config(), **changes}, *files)
    card = render_card(folder, "org/kind", target_id=TARGET)
    return card, " ".join(card.text.split())


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_s_card_has_every_section_in_order(kind, tmp_path):
    card, flat = kind_card(kind, tmp_path)
    at = [card.text.find("\n" + section + "\n") for section in SECTIONS]
    assert -1 not in at and at == sorted(at), dict(zip(SECTIONS, at, strict=True))
    assert 'hf_specdec.load_drafter("org/kind"' in card.text and "assistant_model=drafter" in card.text
    assert "import hf_specdec" in card.text and "No training record" in flat and "No benchmark recorded" in flat
    assert "@software{hf_specdec," in card.text and "released under `apache-2.0`" in flat
    data = card.data.to_dict()
    assert data["library_name"] == "hf_specdec" and data["base_model"] == TARGET and data["license"] == "apache-2.0"
    assert {"hf_specdec", "speculative-decoding", "drafter", data["tags"][3]} <= set(data["tags"])


def test_the_block_drafter_card_says_it_reads_its_target_and_scores_with_the_target_s_lm_head(tmp_path):
    card, flat = kind_card("block", tmp_path)
    assert READS_TARGET in flat and USES_TARGET_HEAD in flat and ONE_TARGET in flat and REFUSES in flat
    layers = json.loads((tmp_path / "block" / "config.json").read_text())["target_layer_ids"]
    assert f"target layer(s) {', '.join(map(str, layers))}," in flat
    assert DFLASH_PAPER in flat and "2602.06036" in flat and "dflash" in card.data.tags
    assert OWN_HEAD not in flat and READS_NO_TARGET not in flat and "PARD" not in flat and "pard" not in card.data.tags


@pytest.mark.parametrize("kind", ["pard adapter", "pard full"])
def test_the_pard_card_says_it_has_its_own_lm_head_and_reads_no_target_states(kind, tmp_path):
    card, flat = kind_card(kind, tmp_path)
    assert OWN_HEAD in flat and "it does not use the target's" in flat and READS_NO_TARGET in flat
    assert "it needs only a target that shares its tokenizer" in flat and REFUSES not in flat
    assert READS_TARGET not in flat and USES_TARGET_HEAD not in flat and ONE_TARGET not in flat
    assert PARD_PAPER in flat and "2504.18583" in flat and "DFlash" not in flat
    assert "pard" in card.data.tags and "dflash" not in card.data.tags
    if kind == "pard adapter":
        assert "holds a LoRA adapter" in flat and "`base_model` in config.json names (`org/tiny-lm`)" in flat
        assert "downloaded from the Hub" in flat and "Loading needs its base LM `org/tiny-lm`" in flat
    else:
        assert "holds the drafter's full weights" in flat and "LoRA adapter" not in flat


def test_the_pard_2_card_says_which_target_layers_it_reads_and_ties_it_to_that_width(tmp_path):
    card, flat = kind_card("pard-2", tmp_path)
    assert OWN_HEAD in flat and READS_TARGET in flat and "PARD-2 feature injection" in flat
    assert "the outputs of target layers -1, -2," in flat and "hidden size 64" in flat and REFUSES in flat
    assert READS_NO_TARGET not in flat and "one drafter can serve every target" not in flat
    assert PARD_PAPER in flat and "PARD-2" in flat


@pytest.mark.parametrize("kind, head", [("block + dcoco", "dcoco"), ("pard + dblast, head alone", "dblast")])
def test_a_head_s_card_says_it_needs_its_backbone(kind, head, tmp_path):
    card, flat = kind_card(kind, tmp_path)
    assert f"**Head: {head.upper()}.**" in card.text and head in card.data.tags
    assert "A head needs its backbone" in flat and "works on that backbone only" in flat
    if kind.endswith("head alone"):
        assert "holds the head alone (`head.safetensors`)" in flat and "sits on: `../pard`" in flat
        assert "loads the backbone first (`../pard`)" in flat and "not from the Hub by itself" in flat
        assert "holds the drafter's full weights" not in flat and "meant for sampling" in flat
        assert "do_sample=True" in card.text and "Dependent Block Drafting" in flat
        _, on_the_hub = kind_card(kind, tmp_path / "hub", backbone="org/pard")
        assert "loads the backbone first (`org/pard`)" in on_the_hub and "not from the Hub by itself" not in on_the_hub
    else:
        assert "holds the backbone and the head together" in flat and "re-ranks" in flat
        assert "do_sample=True" not in card.text and "Contextual Correction of Parallel Drafts" in flat


def test_the_license_is_the_one_given_else_the_config_s_else_the_package_s(tmp_path):
    card, flat = kind_card("block", tmp_path / "default")
    assert card.data.license == "apache-2.0" and "the license hf_specdec declares" in flat
    card, flat = kind_card("block", tmp_path / "config", license="mit")
    assert card.data.license == "mit" and "released under `mit` (as config.json states)" in flat
    folder = tmp_path / "config" / "block"
    card = render_card(folder, "org/kind", target_id=TARGET, license="cc-by-4.0")
    assert card.data.license == "cc-by-4.0" and "as config.json states" not in card.text


def built(kind: str, target):
    """A real drafter of `kind` for `target`, drafting with a fixed budget."""
    if kind == "block":
        drafter = make_drafter(target, 4)
    else:
        drafter = PardDrafter.from_causal_lm(tiny_lm(), target, mask_token_id=MASK_ID, block_size=4).eval()
    drafter.decoding = DecodingSettings(budget="fixed")
    return drafter


@pytest.mark.parametrize("kind", ["block", "pard"])
def test_what_a_card_says_of_other_targets_is_what_generate_does(kind, tmp_path):
    """The card's claims about targets, checked against `generate()`: a target of another shape (same tokenizer) is
    refused when the card says so, one of the recorded shape runs."""
    target = tiny_target("llama")
    target.config._name_or_path = TARGET
    drafter = built(kind, target)
    drafter.save_pretrained(tmp_path / kind)
    flat = " ".join(render_card(tmp_path / kind, "org/x", target_id=TARGET).text.split())
    prompt = torch.tensor([[5, 9, 17, 23, 9, 30]])
    other_shape = tiny_target("llama", seed=3, layers=6)  # the same vocabulary (tokenizer), two more layers
    try:
        other_shape.generate(prompt, assistant_model=drafter, max_new_tokens=6, do_sample=False)
        refused = False
    except ValueError as err:
        assert "built for a different target" in str(err)
        refused = True
    assert (REFUSES in flat) == refused
    same_shape = tiny_target("llama", seed=7)  # other weights, the recorded shape
    out = same_shape.generate(prompt, assistant_model=drafter, max_new_tokens=6, do_sample=False)
    assert torch.equal(out, same_shape.generate(prompt, max_new_tokens=6, do_sample=False))
    said = "Another model of that shape" if kind == "block" else "whatever the target's size"
    assert said in flat
    if kind == "pard":  # no target features read, as the card says
        assert drafter.feature_proj is None and READS_NO_TARGET in flat


def test_the_shipped_drafters_cards_state_their_kind():
    pard = " ".join(render_card(REPO_ROOT / "drafters/qwen2.5-coder-1.5b-pard", "me/p", target_id=TARGET).text.split())
    assert OWN_HEAD in pard and READS_NO_TARGET in pard and READS_TARGET not in pard and USES_TARGET_HEAD not in pard
    assert "`python scripts/offline_models.py qwen2.5-coder-0.5b`" in pard and PARD_PAPER in pard
    folder = REPO_ROOT / "drafters/qwen2.5-coder-1.5b-pard-dblast"
    head = " ".join(render_card(folder, "me/h", target_id=TARGET).text.split())
    assert "A head needs its backbone" in head and "sits on: `../qwen2.5-coder-1.5b-pard`" in head
    assert "holds the head alone" in head and "meant for sampling" in head and READS_TARGET not in head
