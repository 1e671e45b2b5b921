"""Writing files: atomically or not at all, with the mode an ordinary new file gets, and one line when it fails.

A file is written to a temporary file beside it (created with mode ``0o666``, so the umask applies as it does to
any new file; ``mkstemp``'s ``0o600`` would make shared reports and results unreadable to others), flushed to
disk, and renamed over the target. On a full disk, or any other failure, the temporary file is removed and the
target is left as it was: an interrupted or failed run never leaves half a report behind. Several files written
together (a patched template and its diff) are all staged before the first is renamed into place.

A target that exists and is not a regular file (``/dev/stdout``, a named pipe) is written directly; a symlink is
followed, so the file it points to is replaced and the link stays.

:func:`write_if_changed` replaces a file only when its bytes differ, so that a re-run whose results did not change
leaves every file untouched. :func:`write_outputs` is what commands use: a failure becomes an
:class:`~tito_audit.errors.OutputError` naming the option, the path and why
(``--json out/report.json: no space left on device``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Sequence
from pathlib import Path

from tito_audit.errors import OutputError

TEMPORARY_NAME_PART = 64
"""Characters of the target's name kept in the temporary file's name (a name near the file system's limit must
not make the temporary one too long)."""


class WriteFailed(Exception):
    """Writing ``path`` failed; ``reason`` says why in a few words (``no space left on device``), ``code`` is the
    ``errno`` behind it (None when there was none)."""

    def __init__(self, path: Path, reason: str, code: int | None = None) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.code = code


def write_if_changed(path: Path, content: str | bytes) -> Path:
    """Write ``content`` (text as UTF-8) to ``path`` unless the file already holds exactly it; returns ``path``.

    Raises :class:`WriteFailed`."""
    data = _bytes(content)
    try:
        if path.is_file() and path.read_bytes() == data:  # never read a pipe or a device
            return path
    except OSError:
        pass
    write_atomically(path, data)
    return path


def write_atomically(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` in one step, or leave it as it was (raises :class:`WriteFailed`)."""
    write_all_atomically([(path, data)])


def write_all_atomically(files: Sequence[tuple[Path, str | bytes]]) -> None:
    """Write every file, or none: all are staged (written and flushed beside their targets) before the first is
    renamed into place. Raises :class:`WriteFailed` naming the file that failed."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, content in files:
            target = _real_target(path)
            if _is_special(target):
                _write_directly(target, _bytes(content))
            else:
                staged.append((_stage(target, _bytes(content)), target))
        for temporary, target in staged:
            try:
                os.replace(temporary, target)
            except OSError as exc:
                raise WriteFailed(target, describe(exc, target), exc.errno) from exc
    finally:
        for temporary, _ in staged:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)


def write_outputs(outputs: Sequence[tuple[str, Path, str | bytes]]) -> None:
    """Write each ``(option, path, content)`` atomically, all or none; a failure is an :class:`OutputError` naming
    the option and the path (``--json out/report.json: no space left on device``)."""
    options = {}
    for option, path, _ in outputs:
        options[_real_target(path)] = option
        options[path] = option
    try:
        write_all_atomically([(path, content) for _, path, content in outputs])
    except WriteFailed as failed:
        option = options.get(failed.path, outputs[0][0])
        raise OutputError(f"{option} {failed.path}: {failed.reason}") from failed


def check_outputs(outputs: Sequence[tuple[str, Path | None]]) -> None:
    """Refuse, before any work, an output path that cannot be written (:class:`OutputError` naming the option):
    a folder in its place, a file where a folder should be, a folder or file without write permission, too long a
    name. What only writing finds out (a full disk) is still reported when the outputs are written."""
    for option, path in outputs:
        if path is None:
            continue
        target = _real_target(path)
        reason = None
        if target.is_dir():
            reason = "is a folder"
        elif target.exists() and not os.access(target, os.W_OK):
            reason = "permission denied"
        elif len(os.fsencode(target.name)) > _name_max(target.parent):
            reason = "file name too long"
        else:
            blocker = _file_in_the_way(target)
            if blocker is not None:
                reason = f"{blocker} is a file, not a folder"
            else:
                existing = next((a for a in target.parents if a.exists()), None)
                if existing is not None and not target.exists() and not os.access(existing, os.W_OK | os.X_OK):
                    reason = f"permission denied (cannot create files in {existing})"
        if reason is not None:
            raise OutputError(f"{option} {path}: {reason}")


def ensure_folder(path: Path) -> Path:
    """Create the folder ``path`` (and its parents) unless it exists; raises :class:`WriteFailed`."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteFailed(path, describe(exc, path / "x"), exc.errno) from exc
    return path


def new_folder(parent: Path, prefix: str) -> Path:
    """A new, empty folder with a random name in ``parent``, with the mode an ordinary new folder gets (``mkdtemp``
    makes it ``0o700``, which a cache entry renamed from it would keep); raises ``OSError``."""
    parent.mkdir(parents=True, exist_ok=True)
    while True:
        folder = parent / f"{prefix}{secrets.token_hex(6)}"
        try:
            folder.mkdir(0o777)
            return folder
        except FileExistsError:
            continue


def describe(exc: OSError, path: Path) -> str:
    """Why writing ``path`` failed, in a few lowercase words."""
    code = exc.errno
    if code in (errno.ENOTDIR, errno.EEXIST):
        blocker = _file_in_the_way(path)
        if blocker is not None:
            return f"{blocker} is a file, not a folder"
    if code == errno.EISDIR:
        return "is a folder"
    if code == errno.ENAMETOOLONG:
        return "file name too long"
    reason = os.strerror(code) if code is not None else (str(exc) or type(exc).__name__)
    return reason[:1].lower() + reason[1:]


# -- inside ---------------------------------------------------------------------------------------------------
def _bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def _real_target(path: Path) -> Path:
    """``path``, or the file a symlink at ``path`` points to (replacing the link would cut it)."""
    try:
        if path.is_symlink():
            return Path(os.path.realpath(path))
    except OSError:
        pass
    return path


def _is_special(path: Path) -> bool:
    """An existing target that is neither a regular file nor a folder (a device, a pipe): it cannot be renamed over."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _write_directly(path: Path, data: bytes) -> None:
    try:
        with path.open("wb") as stream:
            stream.write(data)
    except OSError as exc:
        raise WriteFailed(path, describe(exc, path), exc.errno) from exc


def _stage(target: Path, data: bytes) -> Path:
    """A flushed temporary file beside ``target`` holding ``data`` (mode ``0o666`` minus the umask)."""
    try:
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(target))
        if target.exists() and not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))
        if len(os.fsencode(target.name)) > _name_max(target.parent):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(target))
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteFailed(target, describe(exc, target), exc.errno) from exc
    while True:
        temporary = target.parent / f".{target.name[:TEMPORARY_NAME_PART]}.{secrets.token_hex(4)}.tmp"
        try:
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            break
        except FileExistsError:
            continue
        except OSError as exc:
            raise WriteFailed(target, describe(exc, target), exc.errno) from exc
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
    except BaseException as exc:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise WriteFailed(target, describe(exc, target), exc.errno) from exc
        raise
    return temporary


def _name_max(folder: Path) -> int:
    """The longest file name the file system of ``folder`` (or of its nearest existing ancestor) takes."""
    for candidate in (folder, *folder.parents):
        try:
            return os.pathconf(candidate, "PC_NAME_MAX")
        except (OSError, ValueError):
            continue
    return 255


def _file_in_the_way(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` that exists but is not a folder, if any."""
    for ancestor in path.parents:
        try:
            if ancestor.exists():
                return None if ancestor.is_dir() else ancestor
        except OSError:
            return None
    return None
