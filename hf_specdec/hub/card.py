"""Model cards for published drafters: YAML metadata built with `ModelCardData`, text from a Jinja template.

The one template is `drafter.md.j2` next to this module (package data, so wheels ship it); the text that differs
by drafter kind comes from the kind's registration (`KindCard`).

The card records what a user needs to trust a drafter: the target it was trained for (`base_model`), usage for
its kind, the measured tau / tokens per second / speedup from a `scripts/benchmark.py` report (or the plain
statement that it has none), and the training recipe with figures from the run's `training_log.json` and saved
settings, including the settings the run clamped or adjusted. No local path survives (`Portable`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from ..models.loading import SAVED_HEAD_KINDS
from ..models.registry import KindCard, card_for
from .portable import Portable
from .record import RunRecord, run_record

TEMPLATE = "drafter.md.j2"
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


def head_name(config: dict) -> str | None:
    """The name of the head a saved drafter's config says it carries (None for a bare base)."""
    if config.get("model_type") in SAVED_HEAD_KINDS:
        return SAVED_HEAD_KINDS[config["model_type"]][1]
    head = config.get("head")
    return head.get("type") if isinstance(head, dict) else None


def kind_card(config: dict) -> tuple[str, KindCard]:
    """(the drafter's base class name, card text) of a saved drafter's config: its base's, with its head's when it
    carries one (also in a format saved when a base with a head was a kind of its own); a generic text for others."""
    model_type = config.get("model_type", "hf_specdec_block_drafter")
    if model_type in SAVED_HEAD_KINDS:
        model_type = SAVED_HEAD_KINDS[model_type][0].model_type
    head = head_name(config)
    return card_for(model_type, {"type": head} if head else None) or (
        "BlockDrafter",
        KindCard("A parallel block drafter"),
    )


def is_hub_id(name: str | None) -> bool:
    """True for a Hub model id `namespace/name`; False for a local filesystem path or nothing."""
    return bool(name) and HUB_ID.fullmatch(name) is not None and ".." not in name and "--" not in name


def template_path() -> Path:
    """The card template, shipped in the hf_specdec.hub package."""
    path = Path(__file__).resolve().with_name(TEMPLATE)
    if not path.is_file():
        raise FileNotFoundError(
            f"model card template {TEMPLATE} not found in the hf_specdec.hub package; reinstall hf_specdec (its "
            "wheel ships the template as package data) or install it from a source checkout."
        )
    return path


def read_json(source: str | os.PathLike | dict | None) -> dict | None:
    """A JSON document given as a dict or as a path to a file."""
    if source is None or isinstance(source, dict):
        return source
    return json.loads(Path(source).read_text(encoding="utf-8"))


def read_benchmark(benchmark: str | os.PathLike | dict | None) -> dict | None:
    """A `scripts/benchmark.py` report as a dict: given as one, as its benchmark.json, as its report folder, or as
    its .md report (the benchmark.json beside it is read). ValueError when none is there."""
    if benchmark is None or isinstance(benchmark, dict):
        return benchmark
    path = Path(benchmark)
    if path.is_dir():
        candidates = [path / "benchmark.json"]
    elif path.suffix == ".md":
        candidates = [path.with_suffix(".json"), path.with_name("benchmark.json")]
    else:
        candidates = [path]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ValueError(
            f"benchmark {str(benchmark)!r}: no {' or '.join(str(c) for c in candidates)}; pass the folder "
            "scripts/benchmark.py wrote (--out-dir), its benchmark.json or its benchmark.md."
        )
    return json.loads(found.read_text(encoding="utf-8"))


def _number(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def results_rows(benchmark: dict) -> list[dict]:
    """One formatted row per task and method of a benchmark.json (`results[task][method]`, `methods[]`)."""
    kinds = {m["label"]: m.get("kind", "") for m in benchmark.get("methods", [])}
    rows = []
    for task, methods in benchmark.get("results", {}).items():
        for label, r in methods.items():
            rows.append(
                {
                    "task": task,
                    "method": label,
                    "kind": kinds.get(label, ""),
                    "tau": _number(r.get("tau")),
                    "tok_s": _number(r.get("e2e_tok_s")),
                    "speedup": _number(r.get("speedup_e2e")) + ("x" if r.get("speedup_e2e") is not None else ""),
                    "decode_tok_s": _number(r.get("decode_tok_s")),
                    "identical": _number(r.get("identical_rate")),
                }
            )
    return rows


def benchmark_summary(benchmark: dict) -> dict:
    """Where and how the numbers were measured (settings, machine, versions, command)."""
    meta, settings = benchmark.get("meta", {}), benchmark.get("settings", {})
    machine = meta.get("machine", {})
    hardware = machine.get("gpu") or f"{machine.get('cpu', 'CPU')} ({machine.get('cpu_count', '?')} cores)"
    temperature = settings.get("temperature")
    command = meta.get("command")
    if command and Path(command.split(" ")[0]).name.startswith("python"):
        command = "python " + command.partition(" ")[2]  # the interpreter's local path says nothing to a reader
    return {
        "date": str(meta.get("date", ""))[:10],
        "hardware": hardware,
        "dtype": settings.get("dtype", "?"),
        "decoding": "greedy" if not temperature else f"sampling at temperature {temperature}",
        "max_new_tokens": settings.get("max_new_tokens", "?"),
        "prompts": len(benchmark.get("prompts", [])),
        "tasks": ", ".join(benchmark.get("tasks", [])),
        "versions": ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items()),
        "command": command,
    }


def training_summary(log: dict) -> dict:
    """Figures from a training_log.json: steps, time, supervised count, data size and the loss at start and end."""
    losses = [v for _, v in log.get("losses", [])]
    head, tail = losses[:20], losses[-20:]
    supervised = log.get("supervised_tokens", log.get("supervised_slots"))
    return {
        "steps": log.get("steps"),
        "minutes": _number(log["train_seconds"] / 60, 1) if log.get("train_seconds") is not None else None,
        "supervised": f"{supervised:,}" if supervised is not None else None,
        "supervised_what": "supervised block tokens" if "supervised_tokens" in log else "supervised corrector slots",
        "sequences": log.get("sequences"),
        "sequence_tokens": f"{log['sequence_tokens']:,}" if log.get("sequence_tokens") is not None else None,
        "loss_start": _number(sum(head) / len(head), 3) if head else None,
        "loss_end": _number(sum(tail) / len(tail), 3) if tail else None,
        "device": log.get("device"),
        "dtype": log.get("dtype"),
        "resumed": log.get("resumed", False),
        "objective": log.get("objective"),
    }


def card_metadata(config: dict, target_id: str, target_revision: str | None, license: str) -> ModelCardData:
    """The YAML block: base model, library, tags and license (what the Hub indexes and filters on)."""
    model_type = config.get("model_type", "hf_specdec_block_drafter")
    extra_tags = list(kind_card(config)[1].tags)
    revision = {"base_model_revision": target_revision} if target_revision else {}
    return ModelCardData(
        base_model=target_id,
        # Not "transformers": on the Hub that label adds a plain `AutoModel.from_pretrained` snippet and widgets,
        # which fail without `import hf_specdec` (the drafter kinds are registered by that import, not by
        # transformers). A library name the Hub does not know is accepted; the card's own usage section applies.
        library_name="hf_specdec",
        license=license,
        tags=["hf_specdec", "speculative-decoding", "dflash", "drafter", model_type, *extra_tags],
        **revision,  # not a Hub-defined field; records which revision of the target the drafter was trained on
    )


def render_card(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    target_id: str,
    target_revision: str | None = None,
    benchmark: str | os.PathLike | dict | None = None,
    benchmark_json: str | os.PathLike | dict | None = None,
    training_log: str | os.PathLike | dict | None = None,
    recipe: str | None = None,
    license: str = "apache-2.0",
    record: RunRecord | None = None,
    portable: Portable | None = None,
) -> ModelCard:
    """The model card (README.md) of the drafter saved in `folder`, to be published as `repo_id`.

    Args:
        folder: a saved drafter (its config.json is read). Its run record (`run_record`: TRAINING.md, loss.png,
            training_log.json and saved settings, in the folder or its run folder) fills the Training section.
        repo_id: the Hub id the drafter will have (used in the usage snippet).
        target_id: Hub id of the target model (`base_model`); a local path is refused.
        target_revision: the target's revision the drafter was trained on, if pinned.
        benchmark: a `scripts/benchmark.py` report (its folder, benchmark.json or benchmark.md, or a dict): the
            Measured section; without one the card says it has no measured results.
        benchmark_json: the former name of `benchmark`.
        training_log: a training_log.json of the training scripts (path or dict); default: the run record's.
        recipe: the command that trained the drafter.
        license: license id of the drafter weights (a Hub license id such as "apache-2.0", "mit", "other").
        record: the run record; default `run_record(folder)`.
        portable: how local paths are rewritten; default: the target's local folder becomes `target_id`.
    """
    if not is_hub_id(target_id):
        raise ValueError(
            f"target_id {target_id!r} is not a Hub model id (namespace/name); the card's base_model must name the "
            "target on the Hub. Pass target_id='org/target-model'."
        )
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    model_type = config.get("model_type", "hf_specdec_block_drafter")
    class_name, card = kind_card(config)
    record = record if record is not None else run_record(folder)
    benchmark = read_benchmark(benchmark if benchmark is not None else benchmark_json)
    log = read_json(training_log) if training_log is not None else record.log
    portable = portable or Portable(known={str(config.get("target_name_or_path") or ""): target_id})
    bench = benchmark_summary(benchmark) if benchmark else None
    if bench and bench["command"]:
        bench["command"] = portable.text(bench["command"])
    card = ModelCard.from_template(
        card_metadata(config, target_id, target_revision, license),
        template_path=str(template_path()),
        model_name=repo_id.split("/")[-1],
        repo_id=repo_id,
        target_id=target_id,
        target_revision=target_revision,
        model_type=model_type,
        class_name=class_name,
        head=head_name(config),
        kind_summary=card.summary,
        kind_detail=card.detail,
        config=config,
        block_size=config.get("block_size", 0),
        target_layer_ids=config.get("target_layer_ids") or [],
        results=results_rows(benchmark) if benchmark else [],
        bench=bench,
        training=training_summary(log) if log else None,
        recipe=portable.text(recipe) if recipe else None,
        settings=portable.json(record.told_settings()),
        adjustments=[portable.text(s) for s in RunRecord(log=log, settings=record.settings).adjustments],
        has_training_md=record.training_md is not None,
        has_loss_png=record.loss_png is not None,
    )
    return ModelCard(portable.text(card.content))


__all__ = ["is_hub_id", "read_benchmark", "render_card", "template_path"]
