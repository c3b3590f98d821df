"""Publishing a trained drafter to the Hub with a model card that records the run's command line: checked before
training starts (`check_publishing`), done after it (`publish`)."""

from __future__ import annotations

import os
from pathlib import Path

from .commands import recipe_command
from .config import DrafterTrainingConfig

NO_PUSH = "or leave out --push_to_hub and publish the saved drafter later (scripts/ship_drafter.py --push_to_hub)"


def check_publishing(config: DrafterTrainingConfig) -> None:
    """With `push_to_hub`: refuse (ValueError, naming the command-line flags) what would make publishing fail after
    training: no Hub id of the target, a --benchmark that is not there, offline mode, no token, a token the Hub
    refuses or a read-only one, an unreachable Hub. Asks the Hub who the token belongs to (one request)."""
    if not config.push_to_hub:
        return
    from huggingface_hub import HfApi, constants, get_token

    from ..hub.card import is_hub_id

    target = config.hub_target_id or config.target
    if not is_hub_id(target) or (config.hub_target_id is None and os.path.exists(config.target)):
        given = f"--hub_target_id {config.hub_target_id!r}" if config.hub_target_id else f"--target {config.target!r}"
        raise ValueError(
            f"--push_to_hub needs the target's Hub id for the card's base_model, and {given} is not one: pass "
            "--hub_target_id org/target-model (the Hub id of the model the drafter is trained for; "
            "--hub_target_revision REV if it is pinned)."
        )
    if config.benchmark is not None and not Path(config.benchmark).exists():
        raise ValueError(f"--benchmark {config.benchmark!r} does not exist: pass a benchmark output folder or file.")
    if constants.HF_HUB_OFFLINE:
        raise ValueError(
            "--push_to_hub cannot publish in offline mode (HF_HUB_OFFLINE=1 is set): unset HF_HUB_OFFLINE, " + NO_PUSH
        )
    token = get_token()
    if token is None:
        raise ValueError(
            "--push_to_hub needs a Hub token with write access: set HF_TOKEN or run `hf auth login`, " + NO_PUSH
        )
    api = HfApi()
    try:
        who = api.whoami(token=token)
    except Exception as err:  # whichever HTTP client and error huggingface_hub uses; the token is not in the text
        status = getattr(getattr(err, "response", None), "status_code", None)
        if status in (401, 403):
            problem = f"the Hub at {api.endpoint} refused the token (HTTP {status}): check HF_TOKEN / `hf auth login`"
        else:
            problem = (
                f"the Hub at {api.endpoint} cannot be reached ({type(err).__name__}); check the network/HF_ENDPOINT"
            )
        raise ValueError(f"--push_to_hub {config.push_to_hub}: {problem}, " + NO_PUSH) from None
    role = ((who.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise ValueError(f"--push_to_hub {config.push_to_hub}: the Hub token is read-only; use one with write access")


def publish(config: DrafterTrainingConfig, drafter_dir: Path) -> str:
    """Upload the trained drafter with a generated card; the commit sha (the local copy stays as it is, whatever
    happens)."""
    from ..hub import publish_drafter

    run = Path(config.output_dir)
    write_run_record(run, recipe_command(config))
    return publish_drafter(
        drafter_dir,
        config.push_to_hub,
        target_id=config.hub_target_id,
        target_revision=config.hub_target_revision,
        training_log=run / "training_log.json",
        recipe=recipe_command(config),
        license=config.license,
        benchmark=config.benchmark,
    )


def write_run_record(run: Path, recipe: str) -> None:
    """The run's TRAINING.md and loss.png (from its training_log.json), which publishing uploads with the weights:
    the command, the figures and the loss curve. Nothing when the log is missing; the plot needs matplotlib."""
    import json

    from ..hub.record import write_plot

    log_file = run / "training_log.json"
    if not log_file.is_file():
        return
    log = json.loads(log_file.read_text(encoding="utf-8"))
    losses = log.get("losses") or []
    plotted = bool(losses) and write_plot(losses, run / "loss.png")
    first, last = (losses[0][1], losses[-1][1]) if losses else (float("nan"), float("nan"))
    lines = [
        "# Training record",
        "",
        "```bash",
        recipe,
        "```",
        "",
        f"- objective: {log.get('objective', '?')}, steps: {log.get('steps', '?')}, supervised tokens: "
        f"{log.get('supervised_tokens', 0):,}, training seconds: {log.get('train_seconds', 0):.0f}",
        f"- loss: {first:.3f} at the first step -> {last:.3f} at the last",
        *(f"- adjusted: {sentence}" for sentence in log.get("adjustments") or []),
    ]
    if plotted:
        lines += ["", "![loss](loss.png)"]
    (run / "TRAINING.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def published_message(repo_id: str, revision: str) -> str:
    """Where a push went: the repo id, the revision and its URL."""
    from huggingface_hub import constants

    return f"published to {repo_id} at revision {revision}: {constants.ENDPOINT}/{repo_id}/tree/{revision}"


__all__ = ["check_publishing", "publish", "published_message", "recipe_command", "write_run_record"]
