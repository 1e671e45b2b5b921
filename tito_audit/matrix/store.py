"""Content-addressed audit results: a result is stored under the digest of everything that decides it.

The key of a (template, tokenizer) pair is the sha256 of a JSON document holding

- the sha256 of every tokenizer, template and config file the audit reads (the template is one of them);
- the family registry's special-token defaults for the id (the only id-dependent input of loading);
- the audit settings (seed, count, turns, examples kept, pinned keyword arguments, the ``--parser`` value) and the
  digest of every real-conversation source with its limit;
- the engines whose parsers the audit runs for the id (``--parser auto``: those whose pair the registry records
  and whose parsers are installed), each with its recorded parsers and the version of its parsers' package;
- the tool version, the digest of the tool's own source files and the versions of the libraries that render
  and tokenize (transformers, tokenizers, jinja2, mistral-common) and of every installed engine's parsers.

Model ids whose files are identical (a fine-tune that ships its base model's tokenizer and template) share a
key, so the pair is audited once. An entry is one JSON file ``<root>/<k[:2]>/<k>.json`` written atomically
(temporary file + rename), carrying its key and the sha256 of its payload: an entry that does not parse,
names another key or fails its digest is counted as corrupt and recomputed.

A store problem never ends a run. A slot that cannot be read (the entry path is a folder, or unreadable) is a
cache miss for that pair: recomputed, and noted. A slot that cannot be written is noted and the result kept in
memory. A store that cannot be written at all (read-only, not creatable) is said once, and the run goes on
uncached (entries already stored are still read).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tito_audit
from tito_audit.outputs import WriteFailed, describe, ensure_folder, write_atomically

ENTRY_FORMAT = 1
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
"""Write errors that mean the whole store cannot be written (not one bad slot)."""


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def digest_of(data: Any) -> str:
    return hashlib.sha256(canonical_json(data).encode("utf-8")).hexdigest()


RESULT_PACKAGES = ("model", "conversations", "parse", "audit", "repair", "formatters", "matrix", "data")
"""The packages whose code decides an audit's result and its published pages; the others (the gateway, the session,
the gate, the command line) never reach a matrix row."""


@functools.cache
def tool_fingerprint() -> str:
    """``<version>+<12 hex digits>``: the package version and a digest of the source and data files that decide a
    result (:data:`RESULT_PACKAGES` and the package's top-level modules), so that a change to that code invalidates
    results even when nobody bumped the version."""
    root = Path(tito_audit.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).parts
        if len(relative) > 1 and relative[0] not in RESULT_PACKAGES:
            continue
        if path.suffix in (".py", ".json", ".jinja") and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return f"{tito_audit.__version__}+{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class PairKey:
    digest: str
    material: dict[str, Any] = field(compare=False, hash=False)


def pair_key(
    file_sha256: dict[str, str],
    special_token_defaults: dict[str, str] | None,
    settings: dict[str, Any],
    libraries: dict[str, str],
) -> PairKey:
    """The key of one audit: see the module docstring for what it holds."""
    material = {
        "files": dict(sorted(file_sha256.items())),
        "special_token_defaults": dict(sorted((special_token_defaults or {}).items())),
        "settings": settings,
        "tool": tool_fingerprint(),
        "libraries": dict(sorted(libraries.items())),
    }
    return PairKey(digest_of(material), material)


@dataclass
class StoreCounts:
    hits: int = 0
    misses: int = 0
    corrupt: int = 0
    written: int = 0


class ResultsStore:
    """Payloads (JSON-compatible data) by key: in a folder, or only in memory when ``root`` is None."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self._memory: dict[str, Any] = {}
        self.counts = StoreCounts()
        self.notes: list[str] = []
        """What went wrong with the store (one line each; the run went on)."""
        self.writable = root is not None
        """False once the store turned out not to be writable: results stay in memory."""

    def _path(self, key: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: PairKey) -> Any | None:
        """The stored payload, or None (missing or corrupt; counted)."""
        if key.digest in self._memory:
            self.counts.hits += 1
            return self._memory[key.digest]
        payload = self._read(key.digest) if self.root is not None else None
        if payload is None:
            self.counts.misses += 1
            return None
        self._memory[key.digest] = payload
        self.counts.hits += 1
        return payload

    def stored(self, digest: str) -> Any | None:
        """The payload stored under the key ``digest`` (an earlier run's, read back from a published row), or None;
        not counted as a hit or a miss of this run."""
        if digest in self._memory:
            return self._memory[digest]
        return self._read(digest) if self.root is not None else None

    def _read(self, key: str) -> Any | None:
        path = self._path(key)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:  # a folder in its place, unreadable, ...: a miss for this pair
            self.counts.corrupt += 1
            self.notes.append(f"results store: cannot read {path} ({describe(exc, path)}); recomputed")
            return None
        except UnicodeDecodeError:
            self.counts.corrupt += 1
            return None
        try:
            entry = json.loads(text)
            valid = (
                entry["format"] == ENTRY_FORMAT
                and entry["key"] == key
                and entry["payload_sha256"] == digest_of(entry["payload"])
            )
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            self.counts.corrupt += 1
            return None
        return entry["payload"]

    def put(self, key: PairKey, payload: Any) -> None:
        """Keep ``payload`` under ``key``, in memory and in the folder when it can be written (see the module
        docstring: a failure is noted, never raised)."""
        self._memory[key.digest] = payload
        if self.root is None or not self.writable:
            return
        entry = {
            "format": ENTRY_FORMAT,
            "key": key.digest,
            "material": key.material,
            "payload_sha256": digest_of(payload),
            "payload": payload,
        }
        # key order is kept (it is the order of the report's tables); the digests sort keys
        text = json.dumps(entry, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            ensure_folder(self.root)
        except WriteFailed as failed:
            self._unwritable(failed)
            return
        try:
            write_atomically(self._path(key.digest), (text + "\n").encode("utf-8"))
        except WriteFailed as failed:
            if failed.code in READ_ONLY:
                self._unwritable(failed)
            else:
                self.notes.append(f"results store: cannot write {failed.path} ({failed.reason}); not stored")
            return
        self.counts.written += 1

    def _unwritable(self, failed: WriteFailed) -> None:
        self.writable = False
        self.notes.append(
            f"results store {self.root} cannot be written ({failed.reason}): this run's results are not stored"
        )
