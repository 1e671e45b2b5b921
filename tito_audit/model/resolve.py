"""Model resolution: find the folder that holds a model's tokenizer and chat-template files.

Sources are tried in a fixed order and the first that has the model wins:

1. a local folder path;
2. the cache (``templates_cache/`` by default, ``--cache-dir`` / ``TITO_AUDIT_CACHE``);
3. mirror folders of ``<org>--<name>/`` subfolders (``--mirror`` / ``TITO_AUDIT_MIRROR``);
4. the Hugging Face Hub, downloading tokenizer and template files only (never weights) into the cache.

When nothing resolves, :class:`~tito_audit.errors.ResolutionError` says what was tried.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tito_audit.errors import ResolutionError
from tito_audit.model.near_miss import near_miss
from tito_audit.model.threads import first_import
from tito_audit.outputs import new_folder

CACHE_ENV = "TITO_AUDIT_CACHE"
HUB_TIMEOUT_ENV = "TITO_AUDIT_HUB_TIMEOUT"
DEFAULT_HUB_TIMEOUT = 20.0
"""Seconds to connect to the Hub, and to wait for each answer, before a lookup gives up (``TITO_AUDIT_HUB_TIMEOUT``)."""
MIRROR_ENV = "TITO_AUDIT_MIRROR"

TOKENIZER_FILE_PATTERNS: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "chat_template.jinja",
    "additional_chat_templates/*.jinja",
    "generation_config.json",
    "config.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "tokenizer.model",
    "tekken.json",
    "*.tiktoken",
)
"""Files fetched from the hub: everything a tokenizer and its templates need, no weights."""

REMOTE_CODE_PATTERN = "*.py"

_MODEL_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_SYMLINK_STUB_MAX_BYTES = 512


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's files were found."""

    model_id: str
    source: str
    """One of ``local``, ``cache``, ``mirror``, ``hub``."""
    path: Path
    revision: str | None = None
    tried: tuple[str, ...] = field(default=())
    location: str = ""
    """Where the files are, as the user named it (mirror path as given, ``cache:``, ``hub:``): reports show
    this rather than an absolute path, so reports made on different machines agree."""

    def files(self) -> dict[str, Path]:
        """Regular files of the folder by relative name, with git symlink stubs followed."""
        found: dict[str, Path] = {}
        for item in sorted(self.path.rglob("*")):
            if item.is_dir() or ".git" in item.parts:
                continue
            found[item.relative_to(self.path).as_posix()] = follow_symlink_stub(item)
        return found

    def file_hashes(self) -> dict[str, str]:
        """sha256 of every tokenizer/template/config file (provenance files excluded)."""
        return {
            name: sha256_file(path)
            for name, path in self.files().items()
            if not name.upper().startswith(("PROVENANCE", "README")) and not name.startswith(".")
        }


_DIGESTS: dict[tuple[str, int, int, int], str] = {}
"""sha256 of files already read by this process, by (real path, inode, size, mtime): a matrix over thousands of
fine-tunes that link to the same files reads each file once."""


def sha256_file(path: Path) -> str:
    real = path.resolve()
    stat = real.stat()
    seen = (str(real), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    if seen not in _DIGESTS:
        digest = hashlib.sha256()
        with real.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        _DIGESTS[seen] = digest.hexdigest()
    return _DIGESTS[seen]


def follow_symlink_stub(path: Path) -> Path:
    """Follow a git symlink stub: a tiny regular file whose whole content is a relative path.

    Checkouts made without symlink support store a symlink as a text file holding its target
    (``../Qwen--QwQ-32B/vocab.json``). Loading such a file as JSON fails; we follow it instead.

    >>> follow_symlink_stub(Path("/nonexistent/file.json"))
    PosixPath('/nonexistent/file.json')
    """
    try:
        if path.is_symlink() or path.stat().st_size > _SYMLINK_STUB_MAX_BYTES:
            return path
        target_text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return path
    if not target_text or "\n" in target_text or target_text.startswith(("{", "[")):
        return path
    target = (path.parent / target_text).resolve()
    if target.is_file() and target != path.resolve():
        return follow_symlink_stub(target)
    return path


@contextmanager
def staged_folder(model: ResolvedModel) -> Iterator[Path]:
    """A temporary folder of symlinks to the model's files, with git symlink stubs followed.

    ``transformers`` reads every file while loading, so the folder can go once loading is done.
    Nothing is copied.
    """
    files = model.files()
    if all(path == model.path / name for name, path in files.items()):
        yield model.path
        return
    with tempfile.TemporaryDirectory(prefix="tito-audit-stage-") as tmp:
        root = Path(tmp)
        for name, target in files.items():
            link = root / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target.resolve())
        yield root


def folder_name(model_id: str) -> str:
    """``Qwen/Qwen3-4B`` -> ``Qwen--Qwen3-4B`` (the mirror and cache folder name)."""
    return model_id.replace("/", "--")


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    project_cache = Path(__file__).resolve().parents[2] / "templates_cache"  # beside the tito_audit package
    if project_cache.is_dir():
        return project_cache
    return Path.home() / ".cache" / "tito-audit"


def mirrors_from_env() -> list[Path]:
    env = os.environ.get(MIRROR_ENV, "")
    return [Path(p).expanduser() for p in env.split(os.pathsep) if p.strip()]


def _looks_like_path(text: str) -> bool:
    return text.startswith((".", "/", "~")) or text.count("/") > 1 or "\\" in text


def _has_tokenizer_files(folder: Path) -> bool:
    names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    return bool(
        names
        & {
            "tokenizer.json",
            "tokenizer_config.json",
            "tekken.json",
            "vocab.json",
            "tokenizer.model",
            "chat_template.jinja",
            "chat_template.json",
        }
    )


def resolve_model(
    model: str,
    *,
    mirrors: Sequence[Path] = (),
    cache_dir: Path | None = None,
    revision: str | None = None,
    allow_hub: bool = True,
    trust_remote_code: bool = False,
) -> ResolvedModel:
    """Find ``model`` (a folder path or a hub id) in the sources, in order.

    >>> resolve_model("no/such-model", allow_hub=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tito_audit.errors.ResolutionError: model 'no/such-model' not found; tried: cache ...
    """
    tried: list[str] = []
    if not model.strip():
        raise ResolutionError("the model id is empty: give a hub id (org/name) or a folder ('.' for this one)")
    local = Path(model).expanduser()
    if local.is_dir():
        if not _has_tokenizer_files(local):
            raise ResolutionError(
                f"folder '{model}' has no tokenizer or chat-template files "
                "(tokenizer.json, tokenizer_config.json, chat_template.jinja, ...)"
            )
        return ResolvedModel(model_id=_id_from_folder(local), source="local", path=local.resolve(), location=model)
    if _looks_like_path(model) or not _MODEL_ID.match(model):
        raise ResolutionError(f"'{model}' is neither an existing folder nor a hub model id of the form org/name")

    cache = cache_dir or default_cache_dir()
    cached = cache / folder_name(model) / (revision or "main")
    cache_label = (
        str(cache_dir) if cache_dir is not None else ("$" + CACHE_ENV if os.environ.get(CACHE_ENV) else cache.name)
    )
    tried.append(f"cache {cache_label}/{folder_name(model)}/{revision or 'main'}")
    if cache_entry_is_valid(cached):
        return ResolvedModel(
            model_id=model,
            source="cache",
            path=cached,
            revision=revision,
            location=f"cache:{folder_name(model)}/{revision or 'main'}",
        )

    for mirror in [*mirrors, *mirrors_from_env()]:
        candidate = mirror / folder_name(model)
        tried.append(f"mirror {candidate}")
        if candidate.is_dir() and _has_tokenizer_files(candidate):
            return ResolvedModel(
                model_id=model, source="mirror", path=candidate.resolve(), revision=revision, location=str(candidate)
            )

    if not allow_hub:
        tried.append("hub (disabled)")
    elif os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        tried.append("hub (HF_HUB_OFFLINE is set)")
    else:
        tried.append("hub")
        downloaded = _download_from_hub(model, cached, revision, trust_remote_code, tried)
        if downloaded is not None:
            return ResolvedModel(
                model_id=model,
                source="hub",
                path=downloaded,
                revision=revision,
                location=f"hub:{model}@{revision or 'main'}",
            )
    near = near_miss(folder_name(model), [*mirrors, *mirrors_from_env()])
    hint = f" (did you mean '{near[0]}'? it is in mirror {near[1]})" if near is not None else ""
    raise ResolutionError(f"model '{model}' not found{hint}; tried: " + "; ".join(tried))


MANIFEST = ".complete"


def write_manifest(folder: Path, revision: str | None) -> None:
    """Record the sha256 of every file of a finished download; the entry counts only with this file."""
    files = {
        item.relative_to(folder).as_posix(): sha256_file(item)
        for item in sorted(folder.rglob("*"))
        if item.is_file() and item.name != MANIFEST
    }
    (folder / MANIFEST).write_text(
        json.dumps({"revision": revision or "main", "sha256": files}, indent=1), encoding="utf-8"
    )


def cache_entry_is_valid(folder: Path) -> bool:
    """A cache entry is used only when its manifest exists and every file still has its recorded sha256."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        recorded = manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return bool(recorded) and all(
        (folder / name).is_file() and sha256_file(folder / name) == digest for name, digest in recorded.items()
    )


def _id_from_folder(folder: Path) -> str:
    name = folder.resolve().name
    return name.replace("--", "/", 1) if "--" in name else name


def _download_from_hub(
    model: str, target: Path, revision: str | None, trust_remote_code: bool, tried: list[str]
) -> Path | None:
    """Download tokenizer/template files into ``target`` atomically; None (with a reason in ``tried``) on failure."""
    try:
        with first_import():
            from huggingface_hub import snapshot_download
            from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
    except ImportError:  # pragma: no cover - huggingface_hub ships with transformers
        tried[-1] = "hub (huggingface_hub not installed)"
        return None
    patterns = list(TOKENIZER_FILE_PATTERNS)
    if trust_remote_code:
        patterns.append(REMOTE_CODE_PATTERN)
    created = [folder for folder in (target.parent.parent, target.parent) if not folder.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = new_folder(target.parent, ".download-")  # renamed into the cache: the umask's mode, not mkdtemp's
    timeout = hub_timeout()
    token = os.environ.get("HF_TOKEN") or None
    try:
        # the commit first, with a time limit on connecting and on the answer: snapshot_download asks for it with
        # none (a Hub that accepts the connection and never answers would hold the lookup for ever), and given a
        # commit it does not ask again
        commit = hub_commit(model, revision, token, timeout)
        snapshot_download(
            repo_id=model,
            revision=commit,
            allow_patterns=patterns,
            local_dir=staging,
            token=token,
        )
        shutil.rmtree(staging / ".cache", ignore_errors=True)
        write_manifest(staging, revision)
        try:
            staging.rename(target)  # atomic: readers see no entry or a complete one
        except OSError:
            if not cache_entry_is_valid(target):  # a broken entry: replace it
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
            # else another process finished the same download first; keep its entry
        return target
    except GatedRepoError:
        tried[-1] = "hub (gated repository: set HF_TOKEN with access)"
    except RepositoryNotFoundError:
        tried[-1] = "hub (repository not found or private)"
    except RevisionNotFoundError:
        tried[-1] = f"hub (revision '{revision}' not found)"
    except Exception as exc:  # network errors come in many types; the reason is what matters
        if _timed_out(exc):
            tried[-1] = (
                f"hub (no answer within {timeout:g}s from {_endpoint()}: a connect or read time-out; set "
                f"{HUB_TIMEOUT_ENV} to wait longer, or use --mirror or --no-hub)"
            )
        else:
            tried[-1] = f"hub ({type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else 'unreachable'})"
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    for folder in reversed(created):  # a failed lookup leaves no empty folder behind
        with contextlib.suppress(OSError):
            folder.rmdir()
    return None


def hub_timeout() -> float:
    """``TITO_AUDIT_HUB_TIMEOUT`` seconds (a positive number), else :data:`DEFAULT_HUB_TIMEOUT`."""
    try:
        value = float(os.environ.get(HUB_TIMEOUT_ENV, ""))
    except ValueError:
        return DEFAULT_HUB_TIMEOUT
    return value if value > 0 else DEFAULT_HUB_TIMEOUT


def hub_commit(model: str, revision: str | None, token: str | None, timeout: float) -> str | None:
    """The commit ``revision`` of ``model`` names on the Hub (connect and read bounded by ``timeout``)."""
    with first_import():
        from huggingface_hub import HfApi

    return HfApi(token=token).repo_info(model, revision=revision, timeout=timeout).sha


def _timed_out(exc: BaseException | None) -> bool:
    seen = 0
    while exc is not None and seen < 8:
        if "timeout" in type(exc).__name__.lower() or isinstance(exc, TimeoutError):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _endpoint() -> str:
    with first_import():
        from huggingface_hub import constants

    return constants.ENDPOINT
