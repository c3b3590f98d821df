"""A small Hugging Face Hub-compatible server on loopback, for publishing tests (stdlib only).

    python tests/hub_server.py --host 127.0.0.1 --port 0 --data DIR [--token X]   # first stdout line: PORT=<n>

It speaks the part of the Hub protocol that `huggingface_hub` 2.x uses to create a repo, commit files and
download them again: repo creation (409 when it exists), model info with
`sha`, `siblings` and `cardData`, tree, refs, commits, branches, tags, preupload (every file "regular", with the
current git-blob oid so unchanged files are skipped), the NDJSON commit (412 when `parentCommit` is stale),
validate-yaml, paths-info, resolve (with `X-Repo-Commit`, `ETag`, `Content-Length` and `Range`), whoami-v2 and
/health. Errors carry `X-Error-Code` (RepoNotFound, RevisionNotFound, EntryNotFound) like the Hub's.

Every commit makes a new revision sha; old revisions stay resolvable. Not implemented: pull requests, LFS/Xet
uploads, access control of private repos, pagination, dataset and Space repos.

Security: binds to loopback only; `--token X` makes every write require `Authorization: Bearer X` (without it any
token is accepted, and reads are always open); repo names must match `[A-Za-z0-9._-]`; file paths with `..`, `.`,
empty segments, a `.git` segment or a backslash are refused with 400. No request string ever becomes a filesystem
path: blobs are stored by their sha256 and each repo's state is one JSON file named by the sha256 of its id.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import re
import threading
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

USER = "local-user"
NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")
REVISION = re.compile(r"[A-Za-z0-9._/-]{1,256}")
SHA256 = re.compile(r"[0-9a-f]{64}")
LOOPBACK = ("127.0.0.1", "localhost")
GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"


class HubError(Exception):
    """An HTTP error answer: status, message, and the Hub's `X-Error-Code` when it has one."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None, **body) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.body = status, message, code, headers or {}, body


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def git_oid(content: bytes) -> str:
    """The git blob id the Hub reports for a regular file (compared by the client to skip unchanged files)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def check_repo(org: str, name: str) -> str:
    for part in (org, name):
        if not NAME.fullmatch(part) or ".." in part or "--" in part:
            raise HubError(400, f"invalid repo name {part!r}: use letters, digits, '.', '_' and '-'")
    return f"{org}/{name}"


def check_path(path: str) -> str:
    """A repo file path, or 400: no traversal, no `.git`, no backslash, no absolute or empty segments."""
    parts = path.split("/")
    bad = not path or len(path) > 1000 or "\\" in path or "\0" in path
    if bad or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts):
        raise HubError(400, f"invalid path in repo: {path!r}")
    return path


def check_revision(rev: str) -> str:
    if not REVISION.fullmatch(rev) or ".." in rev or "//" in rev or rev.startswith(("/", "-")):
        raise HubError(400, f"invalid revision {rev!r}")
    return rev


def front_matter(text: str) -> dict | None:
    """The YAML metadata block of a README as a dict (a YAML subset: what `ModelCardData.to_yaml` writes)."""
    if not text.startswith("---"):
        return None
    lines = text.splitlines()
    try:
        end = lines.index("---", 1)
    except ValueError:
        return None
    rows = [
        (len(s) - len(s.lstrip(" ")), s.strip()) for s in lines[1:end] if s.strip() and not s.lstrip().startswith("#")
    ]
    try:
        value, i = _yaml_block(rows, 0, 0) if rows else ({}, 0)
    except (ValueError, IndexError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) and i == len(rows) else None


def _yaml_block(rows: list[tuple[int, str]], i: int, indent: int):
    if rows[i][1] == "-" or rows[i][1].startswith("- "):
        items = []
        while i < len(rows) and rows[i][0] == indent and (rows[i][1] == "-" or rows[i][1].startswith("- ")):
            item = rows[i][1][2:].strip()
            if re.match(r"[\w.-]+:( |$)", item):  # a mapping starts on the item's line
                rows[i] = (indent + 2, item)
                value, i = _yaml_block(rows, i, indent + 2)
            else:
                value, i = _yaml_scalar(item), i + 1
            items.append(value)
        return items, i
    mapping = {}
    while i < len(rows) and rows[i][0] == indent:
        key, sep, rest = rows[i][1].partition(":")
        if not sep or (rest and not rest.startswith(" ")):
            raise ValueError(f"not a mapping line: {rows[i][1]!r}")
        key, rest, i = _yaml_scalar(key.strip()), rest.strip(), i + 1
        if rest:
            while i < len(rows) and rows[i][0] > indent:  # a plain scalar folded over several lines
                rest, i = f"{rest} {rows[i][1]}", i + 1
            mapping[key] = _yaml_scalar(rest)
        elif i < len(rows) and (rows[i][0] > indent or (rows[i][0] == indent and rows[i][1].startswith("-"))):
            mapping[key], i = _yaml_block(rows, i, rows[i][0])
        else:
            mapping[key] = None
    return mapping, i


def _yaml_scalar(s: str):
    if s.startswith('"'):
        return json.loads(s)
    if s.startswith("'"):
        return s[1:-1].replace("''", "'")
    if s.startswith("[") and s.endswith("]"):
        return [_yaml_scalar(x.strip()) for x in s[1:-1].split(",") if x.strip()]
    if s == "{}":
        return {}
    constants = {"null": None, "~": None, "true": True, "false": False}
    if s.lower() in constants:
        return constants[s.lower()]
    for kind in (int, float):
        try:
            return kind(s)
        except ValueError:
            pass
    return s


def file_entry(path: str, f: dict) -> dict:
    return {"type": "file", "oid": f["oid"], "size": f["size"], "path": path}


def folder_entry(path: str) -> dict:
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}


def path_info(files: dict, path: str) -> list[dict]:
    """paths-info: the file or folder at `path`, or nothing."""
    if path in files:
        return [file_entry(path, files[path])]
    return [folder_entry(path)] if any(p.startswith(path + "/") for p in files) else []


class Store:
    """Repos as JSON state files (one per repo) plus content-addressed blobs; one lock serialises all access."""

    def __init__(self, root: Path) -> None:
        self.repos, self.blobs = root / "repos", root / "blobs"
        self.repos.mkdir(parents=True, exist_ok=True)
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()

    def _state_file(self, repo: str) -> Path:
        return self.repos / (hashlib.sha256(repo.encode()).hexdigest() + ".json")

    def _write(self, path: Path, data: bytes) -> None:
        tmp = path.with_name(f".{uuid.uuid4().hex}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def load(self, repo: str) -> dict:
        path = self._state_file(repo)
        if not path.exists():
            raise HubError(404, f"Repository {repo} not found", "RepoNotFound")
        return json.loads(path.read_text())

    def save(self, state: dict) -> None:
        self._write(self._state_file(state["id"]), json.dumps(state).encode())

    def put_blob(self, content: bytes) -> dict:
        digest = hashlib.sha256(content).hexdigest()
        path = self.blobs / digest
        if not path.exists():
            self._write(path, content)
        return {"sha256": digest, "size": len(content), "oid": git_oid(content)}

    def blob_path(self, sha256: str) -> Path:
        if not SHA256.fullmatch(sha256):
            raise HubError(400, "invalid blob id")
        return self.blobs / sha256

    def create(self, repo: str, private: bool, url: str) -> dict:
        with self.lock:
            if self._state_file(repo).exists():
                raise HubError(409, "You already created this model repo", url=url)  # the client reads `url`
            state = {"id": repo, "private": private, "createdAt": now(), "branches": {}, "tags": {}, "commits": {}}
            files = {".gitattributes": self.put_blob(GITATTRIBUTES)}
            state["branches"]["main"] = self.add_commit(state, None, files, "initial commit", "")
            self.save(state)
            return state

    @staticmethod
    def add_commit(state: dict, parent: str | None, files: dict, title: str, message: str) -> str:
        """Record a commit and return its new sha (unique even for identical trees)."""
        seed = json.dumps([parent, files, title, message, uuid.uuid4().hex], sort_keys=True)
        sha = hashlib.sha1(seed.encode()).hexdigest()
        state["commits"][sha] = {"parents": [parent] if parent else [], "title": title, "message": message}
        state["commits"][sha].update(date=now(), files=files)
        return sha

    @staticmethod
    def resolve(state: dict, rev: str) -> str:
        """Branch, tag or full commit sha -> commit sha, or 404 RevisionNotFound."""
        sha = state["branches"].get(rev) or state["tags"].get(rev) or (rev if rev in state["commits"] else None)
        if sha is None:
            raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return sha


class Handler(BaseHTTPRequestHandler):
    """Routes one request; `self.server.store`, `.token` and `.max_body` are set by `serve`."""

    protocol_version = "HTTP/1.1"
    server_version = "hf-specdec-test-hub/1"

    def do_GET(self) -> None:
        self.handle_request("GET")

    def do_HEAD(self) -> None:
        self.handle_request("HEAD")

    def do_POST(self) -> None:
        self.handle_request("POST")

    def do_DELETE(self) -> None:
        self.handle_request("DELETE")

    def do_PUT(self) -> None:
        self.handle_request("PUT")

    def log_message(self, format: str, *args) -> None:  # request lines only, never headers (tokens)
        if self.server.verbose:
            super().log_message(format, *args)

    # -- plumbing -------------------------------------------------------------------------------------------------

    def handle_request(self, method: str) -> None:
        try:
            body = self.read_body()
            url = urlsplit(self.path)
            self.query = parse_qs(url.query)
            segments = [unquote(s) for s in url.path.split("/")[1:]]
            if method in ("POST", "DELETE", "PUT") and segments != ["api", "validate-yaml"]:
                self.check_token()
            self.route(method, segments, body)
        except HubError as err:
            safe = err.message.encode("ascii", "backslashreplace").decode()  # headers are latin-1 only
            headers = {"X-Error-Message": safe, **err.headers}
            if err.code:
                headers["X-Error-Code"] = err.code
            self.send(err.status, {"error": err.message, **err.body}, headers, head=method == "HEAD")
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # malformed request bodies
            self.send(400, {"error": f"bad request: {type(err).__name__}"}, head=method == "HEAD")
        except Exception as err:  # a bug here must answer 500, not drop the connection
            self.log_error("internal error: %r", err)
            self.send(500, {"error": f"internal error: {type(err).__name__}"}, head=method == "HEAD")

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise HubError(411, "send a Content-Length (chunked bodies are not supported)")
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.server.max_body:
            self.close_connection = True
            raise HubError(413, f"request body over {self.server.max_body} bytes")
        return self.rfile.read(length) if length else b""

    def check_token(self) -> None:
        expected = self.server.token
        given = self.headers.get("Authorization", "")
        if expected is not None and not hmac.compare_digest(given.encode(), f"Bearer {expected}".encode()):
            raise HubError(401, "Invalid credentials in Authorization header")

    def send(self, status: int, payload, headers: dict | None = None, head: bool = False) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    # -- routes ---------------------------------------------------------------------------------------------------

    def route(self, method: str, seg: list[str], body: bytes) -> None:
        store: Store = self.server.store
        read = method in ("GET", "HEAD")
        if seg == ["health"] and read:
            return self.send(200, {"status": "ok"}, head=method == "HEAD")
        if seg == ["api", "whoami-v2"] and read:
            return self.whoami()
        if seg == ["api", "validate-yaml"] and method == "POST":
            return self.validate_yaml(json.loads(body or b"{}"))
        if seg[:2] == ["api", "repos"] and len(seg) == 3:
            return self.repos_route(method, seg[2], json.loads(body or b"{}"))
        if len(seg) >= 4 and seg[:2] == ["api", "models"]:
            repo = check_repo(seg[2], seg[3])
            with store.lock:
                return self.repo_route(method, store, repo, seg[4:], body)
        if len(seg) >= 5 and seg[2] == "resolve" and read:
            repo = check_repo(seg[0], seg[1])
            return self.resolve(method, store, repo, check_revision(seg[3]), check_path("/".join(seg[4:])))
        raise HubError(404, "not found on this test Hub")

    def whoami(self) -> None:
        token = self.server.token
        given = self.headers.get("Authorization", "")
        if not given or (token is not None and not hmac.compare_digest(given.encode(), f"Bearer {token}".encode())):
            raise HubError(401, "Invalid credentials in Authorization header")
        access = {"displayName": "local", "role": "write"}
        self.send(
            200,
            {
                "type": "user",
                "id": USER,
                "name": USER,
                "fullname": "Local test user",
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": access},
            },
        )

    def validate_yaml(self, body: dict) -> None:
        content = body.get("content", "")
        if content.startswith("---") and "---" not in content.splitlines()[1:]:
            raise HubError(400, "the YAML metadata block is not closed")
        if content.startswith("---") and front_matter(content) is None:
            return self.send(200, {"errors": [], "warnings": [{"message": "metadata not checked (YAML subset)"}]})
        self.send(200, {"errors": [], "warnings": []})

    def repos_route(self, method: str, action: str, body: dict) -> None:
        if body.get("type", "model") not in ("model", None):
            raise HubError(400, "this test Hub serves model repos only")
        repo = check_repo(body.get("organization") or USER, body.get("name", ""))
        store: Store = self.server.store
        if action == "create" and method == "POST":
            private = bool(body.get("private")) or body.get("visibility") == "private"
            store.create(repo, private, f"{self.base}/{repo}")
            return self.send(200, {"url": f"{self.base}/{repo}", "name": repo, "id": repo})
        if action == "delete" and method == "DELETE":
            with store.lock:
                store.load(repo)
                store._state_file(repo).unlink()
            return self.send(200, {})
        raise HubError(404, "not found on this test Hub")

    def repo_route(self, method: str, store: Store, repo: str, rest: list[str], body: bytes) -> None:
        state = store.load(repo)
        read = method in ("GET", "HEAD")
        if not rest and read:
            return self.info(state, store.resolve(state, "main"), head=method == "HEAD")
        kind, args = rest[0], rest[1:]
        if kind == "revision" and len(args) == 1 and read:
            return self.info(state, store.resolve(state, check_revision(args[0])), head=method == "HEAD")
        if kind == "tree" and args and read:
            sha = store.resolve(state, check_revision(args[0]))
            path = check_path("/".join(args[1:])) if args[1:] else ""
            recursive = self.query.get("recursive", ["false"])[0].lower() in ("1", "true")
            return self.send(200, self.tree(state["commits"][sha]["files"], path, recursive))
        if kind == "paths-info" and len(args) == 1 and method == "POST":
            files = state["commits"][store.resolve(state, check_revision(args[0]))]["files"]
            paths = [check_path(p) for p in parse_qs(body.decode()).get("paths", [])]
            return self.send(200, [e for p in paths for e in path_info(files, p)])
        if kind == "refs" and not args and read:
            return self.send(200, self.refs(state))
        if kind == "commits" and len(args) == 1 and read:
            return self.send(200, self.history(state, store.resolve(state, check_revision(args[0]))))
        if kind == "preupload" and len(args) == 1 and method == "POST":
            files = state["commits"][store.resolve(state, check_revision(args[0]))]["files"]
            wanted = [check_path(f["path"]) for f in json.loads(body)["files"]]
            answer = [
                {"path": p, "uploadMode": "regular", "shouldIgnore": False, "oid": files.get(p, {}).get("oid")}
                for p in wanted
            ]
            return self.send(200, {"files": answer, "commitOid": store.resolve(state, args[0])})
        if kind == "commit" and len(args) == 1 and method == "POST":
            return self.commit(store, state, check_revision(args[0]), body)
        if kind in ("branch", "tag") and len(args) == 1 and method in ("POST", "DELETE"):
            return self.ref(store, state, kind, check_revision(args[0]), method, json.loads(body or b"{}"))
        raise HubError(404, "not found on this test Hub")

    def info(self, state: dict, sha: str, head: bool) -> None:
        commit = state["commits"][sha]
        files = commit["files"]
        card = self.readme_metadata(files)
        org = state["id"].split("/")[0]
        payload = {
            "_id": hashlib.sha1(state["id"].encode()).hexdigest()[:24],
            "id": state["id"],
            "modelId": state["id"],
            "author": org,
            "sha": sha,
            "lastModified": commit["date"],
            "createdAt": state["createdAt"],
            "private": state["private"],
            "disabled": False,
            "gated": False,
            "downloads": 0,
            "likes": 0,
            "library_name": (card or {}).get("library_name"),
            "tags": tags if isinstance(tags := (card or {}).get("tags"), list) else [],
            "siblings": [{"rfilename": p, "size": f["size"], "blobId": f["oid"]} for p, f in sorted(files.items())],
        }
        if card is not None:
            payload["cardData"] = card
        config = self.json_file(files, "config.json")
        if isinstance(config, dict):
            payload["config"] = {k: config[k] for k in ("model_type", "architectures") if k in config}
        self.send(200, payload, head=head)

    def readme_metadata(self, files: dict) -> dict | None:
        entry = files.get("README.md")
        if entry is None:
            return None
        return front_matter(self.server.store.blob_path(entry["sha256"]).read_bytes().decode("utf-8", "replace"))

    def json_file(self, files: dict, name: str):
        entry = files.get(name)
        if entry is None:
            return None
        try:
            return json.loads(self.server.store.blob_path(entry["sha256"]).read_bytes())
        except ValueError:
            return None

    @staticmethod
    def tree(files: dict, path: str, recursive: bool) -> list[dict]:
        """Files and folders under `path` (all depths if `recursive`); 404 EntryNotFound if there are none."""
        prefix = f"{path}/" if path else ""
        entries: dict[str, dict] = {}
        for name, f in files.items():
            if not name.startswith(prefix):
                continue
            parts = name[len(prefix) :].split("/")
            for d in range(1, len(parts) if recursive else min(len(parts), 2)):  # folders on the way
                entries[prefix + "/".join(parts[:d])] = folder_entry(prefix + "/".join(parts[:d]))
            if recursive or len(parts) == 1:
                entries[name] = file_entry(name, f)
        if path and not entries:
            raise HubError(404, f"{path} does not exist", "EntryNotFound")
        return [entries[k] for k in sorted(entries)]

    @staticmethod
    def refs(state: dict) -> dict:
        def info(kind: str, name: str, sha: str) -> dict:
            return {"name": name, "ref": f"refs/{kind}/{name}", "targetCommit": sha}

        return {
            "branches": [info("heads", b, s) for b, s in sorted(state["branches"].items())],
            "tags": [info("tags", t, s) for t, s in sorted(state["tags"].items())],
            "converts": [],
            "pullRequests": [],
        }

    @staticmethod
    def history(state: dict, sha: str) -> list[dict]:
        out = []
        while sha:
            c = state["commits"][sha]
            out.append(
                {
                    "id": sha,
                    "title": c["title"],
                    "message": c["message"],
                    "date": c["date"],
                    "authors": [{"user": USER, "avatar": None}],
                }
            )
            sha = c["parents"][0] if c["parents"] else None
        return out

    def commit(self, store: Store, state: dict, branch: str, body: bytes) -> None:
        if self.query.get("create_pr"):
            raise HubError(400, "pull requests are not supported by this test Hub")
        if branch not in state["branches"]:
            code = "RevisionNotFound" if branch not in state["tags"] and branch not in state["commits"] else None
            raise HubError(404 if code else 400, f"can only commit to an existing branch, not {branch!r}", code)
        head = state["branches"][branch]
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "the commit body must start with a header line")
        header = lines[0]["value"]
        if header.get("parentCommit") not in (None, head):
            raise HubError(412, "A commit has happened since. Please refresh and try again.")
        files = dict(state["commits"][head]["files"])
        for line in lines[1:]:
            self.apply(store, files, line["key"], line["value"])
        sha = store.add_commit(state, head, files, header.get("summary") or "", header.get("description") or "")
        state["branches"][branch] = sha
        store.save(state)
        self.send(
            200,
            {
                "success": True,
                "commitOid": sha,
                "commitUrl": f"{self.base}/{state['id']}/commit/{sha}",
                "hookOutput": "",
            },
        )

    @staticmethod
    def apply(store: Store, files: dict, key: str, value: dict) -> None:
        """One NDJSON operation of a commit, applied to the file map."""
        path = check_path(value["path"].rstrip("/") if key == "deletedFolder" else value["path"])
        if key == "file":
            raw = value["content"]
            content = base64.b64decode(raw, validate=True) if value.get("encoding") == "base64" else raw.encode()
            files[path] = store.put_blob(content)
        elif key == "lfsFile":
            blob = store.blob_path(value.get("oid", ""))
            if value.get("algo", "sha256") != "sha256" or not blob.exists():
                raise HubError(422, "lfsFile only copies blobs this test Hub already has; upload files as regular")
            files[path] = store.put_blob(blob.read_bytes())
        elif key == "deletedFile":
            if files.pop(path, None) is None:
                raise HubError(404, "A file with this name doesn't exist", "EntryNotFound")
        elif key == "deletedFolder":
            gone = [p for p in files if p.startswith(path + "/")]
            if not gone:
                raise HubError(404, "A folder with this name doesn't exist", "EntryNotFound")
            for p in gone:
                del files[p]
        else:
            raise HubError(400, f"unknown commit operation {key!r}")

    def ref(self, store: Store, state: dict, kind: str, name: str, method: str, body: dict) -> None:
        refs = state["branches" if kind == "branch" else "tags"]
        if method == "DELETE":
            if name not in refs:
                raise HubError(404, f"no {kind} {name!r}", "RevisionNotFound")
            if kind == "branch" and name == "main":
                raise HubError(403, "the main branch cannot be deleted")
            del refs[name]
        elif kind == "branch":
            if name in refs:
                raise HubError(409, "Reference already exists")
            refs[name] = store.resolve(state, check_revision(body.get("startingPoint") or "main"))
        else:  # POST /tag/{rev} with {"tag": name}
            tag = check_revision(body["tag"])
            if tag in refs:
                raise HubError(409, "Tag already exists")
            refs[tag] = store.resolve(state, name)
        store.save(state)
        self.send(200, {})

    def resolve(self, method: str, store: Store, repo: str, rev: str, path: str) -> None:
        with store.lock:
            state = store.load(repo)
            sha = store.resolve(state, rev)
            entry = state["commits"][sha]["files"].get(path)
        if entry is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        size = entry["size"]
        start, end, status = 0, size - 1, 200
        spec = self.headers.get("Range")
        if spec:
            match = re.fullmatch(r"bytes=(\d*)-(\d*)", spec.strip())
            if match and match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            elif match and match.group(2):
                start = max(size - int(match.group(2)), 0)
            if not match or not (match.group(1) or match.group(2)) or start > end or start >= size:
                raise HubError(416, "Range Not Satisfiable", headers={"Content-Range": f"bytes */{size}"})
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{entry["oid"]}"')
        self.send_header("X-Repo-Commit", sha)
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if method == "GET":
            with open(store.blob_path(entry["sha256"]), "rb") as f:
                f.seek(start)
                left = end - start + 1
                while left > 0:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    left -= len(chunk)


def serve(host: str, port: int, data: Path, token: str | None, max_body: int, verbose: bool) -> None:
    if host not in LOOPBACK:
        raise SystemExit(f"refusing to bind to {host}: this test Hub listens on loopback only (127.0.0.1)")
    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.store, server.token, server.max_body, server.verbose = Store(data), token, max_body, verbose
    print(f"PORT={server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="loopback address to bind (127.0.0.1 or localhost)")
    parser.add_argument("--port", type=int, default=0, help="0: the OS picks a free port (printed as PORT=<n>)")
    parser.add_argument("--data", type=Path, required=True, help="folder for repo state and blobs")
    parser.add_argument("--token", default=None, help="if set, writes need `Authorization: Bearer TOKEN`")
    parser.add_argument("--max-body-mib", type=int, default=1024, help="largest request body accepted")
    parser.add_argument("--verbose", action="store_true", help="log request lines to stderr")
    args = parser.parse_args()
    serve(args.host, args.port, args.data, args.token, args.max_body_mib * 2**20, args.verbose)


if __name__ == "__main__":
    main()
