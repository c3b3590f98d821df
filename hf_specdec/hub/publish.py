"""Publish a saved drafter to the Hugging Face Hub in one call: checked weights, config and model card, one commit.

    from hf_specdec.hub import publish_drafter
    sha = publish_drafter("drafters/qwen2.5-coder-1.5b-pard", "me/qwen2.5-coder-1.5b-drafter",
                          target_id="Qwen/Qwen2.5-Coder-1.5B-Instruct", benchmark="results/x")

Guarantees: only an allow-list of the folder's files goes up (`files_to_publish`: weights, configs, tokenizer files,
the files the card links, and extra files named by the caller), never a symlink and never a file that holds the Hub
token, as written or JSON-escaped, URL-encoded or in base64 (`token_scan.py`); `dry_run=True` lists them and sends
nothing. The local folder is only read (the card is sent from memory, never written into it); a drafter that does
not load, or that holds pickle files, is refused before anything is sent; a drafter whose target has no Hub id is
refused (its card could not name a base model); a failed upload raises a `RuntimeError` with the HTTP status and
server message; the token appears in no message and no card.

No local path goes up: config.json, adapter_config.json, generation_config.json, TRAINING.md and the card are sent
with every absolute path rewritten (`Portable`: the target's folder becomes its Hub id, an offline model its name,
a path under the working directory a relative one); a file that still holds the publisher's home directory or an
absolute path (an extra file, say) is refused, naming the file and the path. A drafter folder inside a training run
(runs/x/drafter) goes up with the run's TRAINING.md and loss plot, and its card tells the run's figures.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError
from safetensors import safe_open

from ..models.loading import load_drafter
from ..models.pard.modeling_pard import DRAFT_VOCAB, FEATURES
from .card import is_hub_id, kind_card, read_benchmark, read_json, render_card
from .portable import Portable
from .record import RunRecord, run_record
from .token_scan import files_holding, text_holds

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
REWRITTEN_JSON = (  # sent with local paths rewritten
    "config.json",
    "adapter_config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.json",
)
REWRITTEN_TEXT = ("TRAINING.md",)
# Files whose bytes are data, not text we or the user wrote: never searched for local paths.
DATA_FILES = re.compile(
    r".*\.safetensors|model\.safetensors\.index\.json|tokenizer\.json|vocab\.json|vocab\.txt|merges\.txt|"
    r"tokenizer\.model|loss\.png"
)

# What a drafter folder publishes by name (anything else, e.g. optimizer state, logs or notes, stays local unless
# named in `extra_files`): weights (one file or shards and their index), configs, tokenizer files, what a PARD
# adapter folder loads beside its adapter (its draft vocabulary, its target-feature projection), and the files the
# card links when they are there (TRAINING.md, loss.png: a card must not link a file the repo lacks).
WEIGHTS = re.compile(r"model(-\d{5}-of-\d{5})?\.safetensors|model\.safetensors\.index\.json|adapter_model\.safetensors")
PUBLISHED = (
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
    DRAFT_VOCAB,
    FEATURES,
    "TRAINING.md",
    "loss.png",
)


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
    adapter = not (folder / "model.safetensors").is_file() and all(
        (folder / name).is_file() for name in ("adapter_config.json", "adapter_model.safetensors")
    )
    if adapter and not (folder / "config.json").is_file():
        raise ValueError(
            f"{folder} is a LoRA adapter without a drafter config.json: its base drafter is a local folder the Hub "
            "does not have. Publish the merged drafter instead (a training run's output_dir/drafter)."
        )
    weights = "adapter_model.safetensors" if adapter else "model.safetensors"
    missing = [name for name in ("config.json", weights) if not (folder / name).is_file()]
    if missing:
        raise ValueError(f"{folder} lacks {missing}: a drafter folder needs config.json and model.safetensors.")
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{folder / 'config.json'} is not valid JSON ({err}).") from err
    _check_loads(folder, full=not adapter)
    return config


def _check_loads(folder: Path, full: bool = True) -> None:
    """Load the drafter and refuse it if any parameter would come from initialisation instead of the file (`full`
    weights; an adapter's base supplies the rest)."""
    try:
        drafter = load_drafter(folder)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ValueError(f"{folder} does not hold a loadable drafter: {err}") from err
    if not full:
        return
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        stored = set(f.keys())
    absent = sorted(name for name, _ in drafter.named_parameters() if name not in stored)
    if absent:
        raise ValueError(f"{folder}/model.safetensors lacks weights {absent[:5]}; save the trained drafter again.")


def files_to_publish(folder: Path, extra_files: Iterable[str] = ()) -> list[Path]:
    """The files of `folder` that go up (the card, README.md, is made apart): the allow-list (`WEIGHTS`,
    `PUBLISHED`) and `extra_files`, top-level file names such as "notes.md". ValueError for a symlink among them, or
    an extra name that is not a plain file of `folder`."""
    extras = [extra_files] if isinstance(extra_files, str) else list(extra_files)
    for name in extras:
        if not name or name in (".", "..") or "/" in name or "\\" in name or Path(name).is_absolute():
            raise ValueError(
                f"extra file {name!r} is not a file name; name top-level files of {folder}, e.g. 'notes.md'."
            )
        if name == "README.md":
            raise ValueError("README.md is the generated model card; it cannot be an extra file.")
        if not (folder / name).is_file() and not (folder / name).is_symlink():
            raise ValueError(f"extra file {name!r} is not a file in {folder}.")
    chosen = sorted(
        {p for p in folder.iterdir() if WEIGHTS.fullmatch(p.name) or p.name in PUBLISHED} | {folder / n for n in extras}
    )
    links = [p.name for p in chosen if p.is_symlink()]
    if links:
        raise ValueError(
            f"{folder} holds symlinks {links} among the files to publish; refusing to follow them (they may point at "
            "anything). Copy the real files into the folder."
        )
    odd = [p.name for p in chosen if not p.is_file()]
    if odd:
        raise ValueError(f"{odd} in {folder} are not regular files; only files are published.")
    return chosen


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


def portable_payloads(files: dict[str, Path], portable: Portable) -> dict[str, Path | bytes]:
    """Repo path -> what goes up: the file, or (configs, TRAINING.md) its bytes with local paths rewritten."""
    out: dict[str, Path | bytes] = dict(files)
    for name, path in files.items():
        if name in REWRITTEN_JSON:
            data = json.loads(path.read_text(encoding="utf-8"))
            if (rewritten := portable.json(data)) != data:
                out[name] = (json.dumps(rewritten, indent=2, sort_keys=True) + "\n").encode("utf-8")
        elif name in REWRITTEN_TEXT:
            text = path.read_text(encoding="utf-8")
            if (rewritten := portable.text(text)) != text:
                out[name] = rewritten.encode("utf-8")
    return out


def check_no_local_paths(payloads: dict[str, Path | bytes], portable: Portable) -> None:
    """The last check before sending: ValueError naming each file (weights, tokenizer vocabularies and images
    aside) that still holds the publisher's home directory or an absolute path."""
    found = {}
    for name, source in payloads.items():
        if DATA_FILES.fullmatch(name):
            continue
        raw = source if isinstance(source, bytes) else source.read_bytes()
        leaks = portable.leaks(raw.decode("utf-8", errors="replace"))
        if leaks:
            found[name] = sorted(set(leaks))[:3]
    if found:
        listed = "; ".join(f"{name}: {', '.join(paths)}" for name, paths in found.items())
        raise ValueError(
            f"refusing to publish local paths ({listed}): a published file must not name folders of this machine "
            "(nor your home directory). Make them relative or replace them with Hub ids in those files, or leave "
            "the files out of extra_files; nothing was sent."
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
    benchmark: str | os.PathLike | dict | None = None,
    benchmark_json: str | os.PathLike | dict | None = None,
    training_log: str | os.PathLike | dict | None = None,
    recipe: str | None = None,
    license: str | None = None,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
    extra_files: Iterable[str] = (),
    dry_run: bool = False,
    record: RunRecord | None = None,
) -> str | list[str]:
    """Upload the drafter saved in `folder` to the Hub repo `repo_id` with a model card; return the commit sha
    (with `dry_run`, the sorted repo paths that would go up, and nothing is sent).

    The allow-listed files of `folder` (`files_to_publish`: weights, config.json, generation_config.json, adapter and
    tokenizer files, TRAINING.md and loss.png, which the card links; the last two from the run folder when `folder`
    is a run's drafter/ or adapter/) plus the `extra_files` named, and a README.md rendered by `render_card`, go up
    in one commit, configs and TRAINING.md with local paths rewritten (module docstring); every other file stays
    local, and a README.md already in `folder` is replaced by the card. A symlink among those files, or a file that
    holds the Hub token (as written, JSON-escaped, URL-encoded or in base64) or a local path, is refused before
    anything is sent. The repo is created if needed
    (`private` applies only then). Publishing again makes a new revision if anything changed (unchanged files are
    not re-sent; an identical publish returns the current sha).

    Args:
        folder: a drafter saved with `save_pretrained` (safetensors); only read, never modified.
        repo_id: `namespace/name` on the Hub.
        target_id: the target's Hub id; defaults to the config's `target_name_or_path` if that is a Hub id.
        target_revision: the target revision the drafter was trained on; defaults to the config's `target_revision`.
        benchmark: a `scripts/benchmark.py` report (its folder, benchmark.json or benchmark.md): the card's Measured
            section; without one the card says it has no measured results. `benchmark_json` is its former name.
        training_log, recipe: see `render_card`; the training log defaults to the run's training_log.json.
        license: the card's license id; default: the config's `license` field, else "apache-2.0" (hf_specdec's).
        token: a Hub token with write access; default: the logged-in token / HF_TOKEN.
        commit_message: default "Upload <kind> for <target>".
        extra_files: more top-level files of `folder` to publish, by name (e.g. ["notes.md"]).
        dry_run: check everything, send nothing, and return the paths the repo would get.
        record: the run record (TRAINING.md, loss.png, log, settings); default `run_record(folder)`. `push_to_hub`
            passes the record of the folder the drafter was loaded from.

    Raises:
        ValueError: the folder is not a loadable safetensors drafter, no Hub id of the target is known, a file to
            publish is a symlink or holds the token or a local path, or an extra file is not a file of `folder`.
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
    record = record if record is not None else run_record(folder)
    files = {p.name: p for p in files_to_publish(folder, extra_files)}
    for found in (record.training_md, record.loss_png):  # from the run folder when the folder has none
        if found is not None:
            files.setdefault(found.name, found)
    leaking = files_holding(list(files.values()), secrets)
    if leaking:
        raise ValueError(
            f"{leaking} in {folder} contain your Hub token (as written, JSON-escaped, URL-encoded or in base64); "
            "refusing to publish them, nothing was sent. Remove the token from those files (and revoke it if it "
            "was shared), or leave the files out."
        )
    portable = Portable(known={str(config.get("target_name_or_path") or ""): target_id})
    if record.settings and record.settings.get("target"):
        portable.known[str(record.settings["target"])] = target_id
    card = render_card(
        folder,
        repo_id,
        target_id=target_id,
        target_revision=target_revision,
        benchmark=read_benchmark(benchmark if benchmark is not None else benchmark_json),
        training_log=read_json(training_log),
        recipe=recipe,
        license=license,
        record=record,
        portable=portable,
    )
    payloads = portable_payloads(files, portable)
    payloads["README.md"] = _scrub(str(card), secrets).encode("utf-8")
    if text_holds(payloads["README.md"].decode("utf-8"), secrets):
        raise ValueError(
            "the model card (README.md) would contain your Hub token encoded (JSON-escaped, URL-encoded or in "
            "base64), from the benchmark report, training log or TRAINING.md it quotes; refusing to publish, "
            "nothing was sent. Remove the token from those files (and revoke it if it was shared)."
        )
    check_no_local_paths(payloads, portable)
    if dry_run:
        return sorted(payloads)
    operations = [
        CommitOperationAdd(path_in_repo=name, path_or_fileobj=source if isinstance(source, bytes) else str(source))
        for name, source in payloads.items()
    ]
    kind = kind_card(config)[0]
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


__all__ = [
    "PUBLISHED",
    "WEIGHTS",
    "check_drafter_folder",
    "check_no_local_paths",
    "files_holding",
    "files_to_publish",
    "portable_payloads",
    "publish_drafter",
    "resolve_target",
]
