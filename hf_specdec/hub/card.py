"""Model cards for published drafters: YAML metadata built with `ModelCardData`, text from the Jinja templates in
`hub_cards/` (`card_kinds.py`: which template a kind gets, and what its config and folder say of it).

The card records what a user needs to trust a drafter: what it is and what it reads of its target (true of its
kind: a PARD drafter's own LM head, a block drafter's use of the target's, the backbone a head needs), how to load
it, intended use and limitations, the training recipe with figures from the run's `training_log.json` and saved
settings (including the settings the run clamped or adjusted), the measured tau / tokens per second / speedup from
a `scripts/benchmark.py` report (or the plain statement that it has none), the license and how to cite the method.
No local path survives (`Portable`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from huggingface_hub import ModelCard, ModelCardData

from .card_kinds import (
    base_model_type,
    environment,
    head_name,
    is_hub_id,
    kind_card,
    kind_facts,
    kind_template,
    resolve_license,
    template_path,
)
from .portable import Portable
from .record import RunRecord, run_record


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
    extra_tags = [*kind_template(config)[1], *kind_card(config)[1].tags]
    revision = {"base_model_revision": target_revision} if target_revision else {}
    return ModelCardData(
        base_model=target_id,
        # Not "transformers": on the Hub that label adds a plain `AutoModel.from_pretrained` snippet and widgets,
        # which fail without `import hf_specdec` (the drafter kinds are registered by that import, not by
        # transformers). A library name the Hub does not know is accepted; the card's own usage section applies.
        library_name="hf_specdec",
        license=license,
        tags=list(dict.fromkeys(["hf_specdec", "speculative-decoding", "drafter", model_type, *extra_tags])),
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
    license: str | None = None,
    record: RunRecord | None = None,
    portable: Portable | None = None,
) -> ModelCard:
    """The model card (README.md) of the drafter saved in `folder`, to be published as `repo_id`; nothing is sent.

    Args:
        folder: a saved drafter (its config.json is read, and which weight files it holds). Its run record
            (`run_record`: TRAINING.md, loss.png, training_log.json and saved settings, in the folder or its run
            folder) fills the Training section; without one the card says it has no training record.
        repo_id: the Hub id the drafter will have (used in the usage snippet).
        target_id: Hub id of the target model (`base_model`); a local path is refused.
        target_revision: the target's revision the drafter was trained on, if pinned.
        benchmark: a `scripts/benchmark.py` report (its folder, benchmark.json or benchmark.md, or a dict): the
            Benchmark section; without one the card says no benchmark is recorded.
        benchmark_json: the former name of `benchmark`.
        training_log: a training_log.json of the training scripts (path or dict); default: the run record's.
        recipe: the command that trained the drafter.
        license: license id of the drafter weights (a Hub license id such as "apache-2.0", "mit", "other");
            default: the config's `license` field, else "apache-2.0", the license hf_specdec declares.
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
    class_name, card = kind_card(config)
    record = record if record is not None else run_record(folder)
    benchmark = read_benchmark(benchmark if benchmark is not None else benchmark_json)
    log = read_json(training_log) if training_log is not None else record.log
    portable = portable or Portable(known={str(config.get("target_name_or_path") or ""): target_id})
    bench = benchmark_summary(benchmark) if benchmark else None
    if bench and bench["command"]:
        bench["command"] = portable.text(bench["command"])
    license, license_source = resolve_license(license, config)
    data = card_metadata(config, target_id, target_revision, license)
    content = (
        environment()
        .get_template(kind_template(config)[0])
        .render(
            card_data=data.to_yaml(),
            model_name=repo_id.split("/")[-1],
            repo_id=repo_id,
            target_id=target_id,
            target_revision=target_revision,
            model_type=config.get("model_type", "hf_specdec_block_drafter"),
            class_name=class_name,
            kind_summary=card.summary,
            kind_detail=base_detail(config),
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
            license=license,
            license_source=license_source,
            **kind_facts(folder, config),
        )
    )
    return ModelCard(portable.text(content.lstrip()))


def base_detail(config: dict) -> str:
    """The detail line the drafter's base registered for its card (its head's text is the head's section's)."""
    return kind_card({**config, "head": None, "model_type": base_model_type(config)})[1].detail


__all__ = ["head_name", "is_hub_id", "kind_card", "read_benchmark", "render_card", "template_path"]
