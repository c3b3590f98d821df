"""Publish a saved drafter to the Hugging Face Hub in one call: checked weights, config and model card, one commit.

    from hf_specdec.hub import publish_drafter
    sha = publish_drafter("drafters/qwen2.5-coder-1.5b", "me/qwen2.5-coder-1.5b-drafter",
                          target_id="Qwen/Qwen2.5-Coder-1.5B-Instruct", benchmark_json="results/x/benchmark.json")

Guarantees: the local folder is only read (the card is sent from memory, never written into it); a drafter that
does not load, or that holds pickle files, is refused before anything is sent; a drafter whose target has no Hub
id is refused (its card could not name a base model); a failed upload raises a `RuntimeError` with the HTTP status
and server message; the token appears in no message and no card.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError
from safetensors import safe_open

from ..models.loading import load_drafter
from .card import is_hub_id, kind_card, read_json, render_card

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def check_drafter_folder(folder: Path) -> dict:
    """The drafter's config.json as a dict, after checking that `folder` holds a loadable safetensors drafter."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder; pass the folder a drafter was saved to with save_pretrained.")
    pickles = sorted(p.name for p in folder.iterdir() if p.name.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise ValueError(
            f"{folder} holds pickle files {pickles}, which run code when loaded; refusing to publish them. Re-save "
            "the drafter with save_pretrained (safetensors) into a folder without them."
        )
    missing = [name for name in ("config.json", "model.safetensors") if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{folder} lacks {missing}: a drafter folder needs config.json and model.safetensors.")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{folder / 'config.json'} is not valid JSON ({err}).") from err
    _check_loads(folder)
    return config


def _check_loads(folder: Path) -> None:
    """Load the drafter and refuse it if any parameter would come from initialisation instead of the file."""
    try:
        drafter = load_drafter(folder)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ValueError(f"{folder} does not hold a loadable drafter: {err}") from err
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        stored = set(f.keys())
    absent = sorted(name for name, _ in drafter.named_parameters() if name not in stored)
    if absent:
        raise ValueError(f"{folder}/model.safetensors lacks weights {absent[:5]}; save the trained drafter again.")


def resolve_target(config: dict, target_id: str | None) -> str:
    """The target's Hub id: `target_id`, else the config's `target_name_or_path`; refused if neither is one."""
    candidate = target_id or config.get("target_name_or_path")
    if is_hub_id(candidate):
        return candidate
    where = "target_id" if target_id else "the drafter config's target_name_or_path"
    raise ValueError(
        f"cannot publish without the target's Hub id: {where} is {candidate!r}, which is not a Hub model id "
        "(namespace/name; a local folder is not one). The card's base_model must say which target the drafter "
        "works with. Pass target_id='org/target-model' (the Hub id of the model the drafter was trained for), "
        "and target_revision=... if it was trained on a pinned revision."
    )


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _failure_reason(err: Exception) -> str:
    if isinstance(err, HfHubHTTPError) and err.response is not None:
        request = err.response.request
        what = f" on {request.method} {request.url}" if request is not None else ""
        message = err.server_message or str(err).splitlines()[0]
        denied = err.response.status_code in (401, 403)
        hint = " (check that the token has write access to this namespace)" if denied else ""
        return f"HTTP {err.response.status_code}{what}: {message}{hint}"
    return f"{type(err).__name__}: {err}"


def publish_drafter(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    target_id: str | None = None,
    target_revision: str | None = None,
    benchmark_json: str | os.PathLike | dict | None = None,
    training_log: str | os.PathLike | dict | None = None,
    recipe: str | None = None,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Upload the drafter saved in `folder` to the Hub repo `repo_id` with a model card; return the commit sha.

    The top-level files of `folder` (config.json, model.safetensors, and e.g. TRAINING.md, loss.png) and a
    README.md rendered by `render_card` go up in one commit; a README.md already in `folder` is replaced by the
    card. The repo is created if needed (`private` applies only then). Publishing again makes a new revision if
    anything changed (unchanged files are not re-sent; an identical publish returns the current sha).

    Args:
        folder: a drafter saved with `save_pretrained` (safetensors); only read, never modified.
        repo_id: `namespace/name` on the Hub.
        target_id: the target's Hub id; defaults to the config's `target_name_or_path` if that is a Hub id.
        target_revision: the target revision the drafter was trained on; defaults to the config's `target_revision`.
        benchmark_json, training_log, recipe: see `render_card`.
        token: a Hub token with write access; default: the logged-in token / HF_TOKEN.
        commit_message: default "Upload <kind> for <target>".

    Raises:
        ValueError: the folder is not a loadable safetensors drafter, or no Hub id of the target is known.
        RuntimeError: the Hub refused or could not be reached; the message gives the HTTP status and the server's
            reason. Nothing in `folder` is changed.
    """
    folder = Path(folder)
    config = check_drafter_folder(folder)
    target_id = resolve_target(config, target_id)
    target_revision = target_revision or config.get("target_revision")
    if not is_hub_id(repo_id):
        raise ValueError(f"repo_id {repo_id!r} is not a Hub repo id; pass 'namespace/name'.")
    secrets = [s for s in (token, get_token()) if s]
    card = render_card(
        folder,
        repo_id,
        target_id=target_id,
        target_revision=target_revision,
        benchmark_json=read_json(benchmark_json),
        training_log=read_json(training_log),
        recipe=recipe,
    )
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and p.name != "README.md")
    operations = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p)) for p in files]
    operations.append(CommitOperationAdd("README.md", _scrub(str(card), secrets).encode("utf-8")))
    kind = kind_card(config.get("model_type"))[0]
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        message = _scrub(commit_message or f"Upload {kind} for {target_id} (hf_specdec)", secrets)
        info = api.create_commit(repo_id, operations, commit_message=message)
    except Exception as err:  # any failure of the remote side, whichever HTTP client huggingface_hub uses
        reason = _scrub(_failure_reason(err), secrets)
        raise RuntimeError(
            f"publishing {folder} to {repo_id} on {api.endpoint} failed: {reason}. Nothing was changed locally: "
            f"the local checkpoint at {folder} is intact."
        ) from None  # the chained exception is dropped: its text is not scrubbed of the token
    return info.oid


__all__ = ["check_drafter_folder", "publish_drafter", "resolve_target"]
