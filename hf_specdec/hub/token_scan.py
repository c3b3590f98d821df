"""Finding the Hub token in files about to be published, as written or encoded.

A token leaks in more forms than its own characters: JSON writers escape characters (`\\u0068f_...`, `\\/`), URLs
percent-encode them (`quote`, `quote_plus`), and configs or logs embed base64 blobs (standard or URL-safe alphabet)
in which the token may start at any of the three byte alignments. `files_holding` finds every such copy: the bytes
of every file are searched for the token itself (in chunks, so weights of any size pass); a text file (no NUL byte
near its start: configs, tokenizer files, TRAINING.md, notes) is also read after undoing JSON escapes and
percent-encoding (up to two layers, in either order), and each reading is searched for the token and, with
whitespace removed (wrapped base64), for the parts of its base64 encodings that do not depend on the bytes around
it. Nothing here prints the token; callers name the files.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from urllib.parse import unquote, unquote_plus

TEXT_PROBE = 8192  # bytes read to tell a text file from a binary one (a NUL byte there: binary)
LAYERS = 2  # encodings undone on top of each other (a JSON-escaped URL, say)
BINARY = re.compile(r".*\.(safetensors|png)")  # weights and images: searched for the token as written only

_JSON_ESCAPE = re.compile(r'\\(?:u([0-9a-fA-F]{4})|(["\\/bfnrt]))')
_JSON_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_WHITESPACE = re.compile(r"\s+")


def files_holding(files: list[Path], secrets: list[str], chunk: int = 1 << 24) -> list[str]:
    """Names of the `files` that hold any of `secrets`: as written in any file, or JSON-escaped, percent-encoded or
    base64-encoded in a text file (module docstring)."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return []
    return [path.name for path in files if _raw_in_file(path, secrets, chunk) or _encoded_in_file(path, secrets)]


def text_holds(text: str, secrets: list[str]) -> bool:
    """Whether `text` holds any of `secrets` as written, JSON-escaped, percent-encoded or base64-encoded."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return False
    needles = [n for s in secrets for n in base64_forms(s)]
    for view in readings(text):
        if any(s in view for s in secrets):
            return True
        packed = _WHITESPACE.sub("", view)
        if any(n in packed for n in needles):
            return True
    return False


def readings(text: str) -> list[str]:
    """`text` and what it reads as once JSON escapes and percent-encoding (`quote`, `quote_plus`) are undone, up to
    `LAYERS` encodings deep, in either order."""
    seen = {text: None}
    frontier = [text]
    for _ in range(LAYERS):
        found = []
        for view in frontier:
            for decode in (json_unescape, unquote, unquote_plus):
                decoded = decode(view)
                if decoded not in seen:
                    seen[decoded] = None
                    found.append(decoded)
        frontier = found
    return list(seen)


def json_unescape(text: str) -> str:
    """`text` with every JSON string escape (`\\uXXXX`, `\\/`, `\\n`, ...) replaced by its character, wherever it
    stands (inside a JSON string or not)."""
    if "\\" not in text:
        return text
    return _JSON_ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else _JSON_SIMPLE[m[2]], text)


def base64_forms(secret: str) -> list[str]:
    """The base64 characters that encode `secret` alone wherever it starts in a longer base64 string: for each of
    the 3 byte alignments, the characters whose 6 bits all fall inside the secret, in the standard and URL-safe
    alphabets."""
    raw = secret.encode("utf-8")
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        first = -(-8 * offset // 6)  # the first character whose bits start inside the secret
        last = 8 * (offset + len(raw)) // 6  # past the last character whose bits end inside it
        piece = encoded[first:last]
        forms.update({piece, piece.replace("+", "-").replace("/", "_")})
    return sorted(f for f in forms if f)


def _raw_in_file(path: Path, secrets: list[str], chunk: int) -> bool:
    """Whether the file's bytes hold a secret as written (read in chunks that overlap by a secret's length)."""
    needles = [s.encode("utf-8") for s in secrets]
    overlap = max(len(n) for n in needles) - 1
    with open(path, "rb") as f:
        tail = b""
        while block := f.read(chunk):
            window = tail + block
            if any(n in window for n in needles):
                return True
            tail = window[max(0, len(window) - overlap) :] if overlap else b""
    return False


def _encoded_in_file(path: Path, secrets: list[str]) -> bool:
    """Whether a text file holds a secret encoded (weights, images and other binary files are not read as text)."""
    if BINARY.fullmatch(path.name):
        return False
    with open(path, "rb") as f:
        if b"\0" in f.read(TEXT_PROBE):
            return False
    return text_holds(path.read_bytes().decode("utf-8", errors="replace"), secrets)


__all__ = ["base64_forms", "files_holding", "json_unescape", "readings", "text_holds"]
