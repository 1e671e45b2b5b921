"""Model resolution: local folders, cache, mirrors, git symlink stubs, clear failures."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tito_audit.errors import ModelLoadError, ResolutionError, TemplateMissingError
from tito_audit.model import resolve
from tito_audit.model.load_folder import load_model
from tito_audit.model.resolve import follow_symlink_stub, resolve_model, staged_folder, write_manifest


@pytest.fixture
def mirror(tmp_path: Path, tiny_model_dir: Path) -> Path:
    root = tmp_path / "mirror"
    target = root / "acme--tiny"
    shutil.copytree(tiny_model_dir, target)
    return root


def test_local_folder(tiny_model_dir):
    resolved = resolve_model(str(tiny_model_dir), allow_hub=False)
    assert resolved.source == "local"
    assert resolved.model_id == "tiny-org/tiny-model"


def test_mirror_folder(mirror):
    resolved = resolve_model("acme/tiny", mirrors=[mirror], allow_hub=False)
    assert resolved.source == "mirror" and resolved.path == (mirror / "acme--tiny").resolve()


def test_mirror_from_environment(mirror, monkeypatch):
    monkeypatch.setenv("TITO_AUDIT_MIRROR", str(mirror))
    assert resolve_model("acme/tiny", allow_hub=False).source == "mirror"


def test_cache_wins_over_mirror(mirror, tmp_path, tiny_model_dir):
    cache = tmp_path / "cache"
    entry = cache / "acme--tiny" / "main"
    shutil.copytree(tiny_model_dir, entry)
    write_manifest(entry, None)
    assert resolve_model("acme/tiny", mirrors=[mirror], cache_dir=cache, allow_hub=False).source == "cache"
    (entry / "tokenizer.json").write_text("{}")  # damaged after download: no longer trusted
    assert resolve_model("acme/tiny", mirrors=[mirror], cache_dir=cache, allow_hub=False).source == "mirror"


def test_incomplete_cache_entry_is_ignored(mirror, tmp_path, tiny_model_dir):
    cache = tmp_path / "cache"
    shutil.copytree(tiny_model_dir, cache / "acme--tiny" / "main")
    assert resolve_model("acme/tiny", mirrors=[mirror], cache_dir=cache, allow_hub=False).source == "mirror"


def test_not_found_says_what_was_tried(tmp_path):
    with pytest.raises(ResolutionError) as info:
        resolve_model("acme/none", mirrors=[tmp_path], cache_dir=tmp_path / "c", allow_hub=False)
    message = str(info.value)
    assert "\n" not in message
    assert "cache" in message and "mirror" in message and "hub (disabled)" in message


def test_offline_hub_is_not_contacted(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ResolutionError, match="HF_HUB_OFFLINE"):
        resolve_model("acme/none", cache_dir=tmp_path, allow_hub=True)


@pytest.mark.parametrize("bad", ["./missing-folder", "a/b/c", "not an id"])
def test_bad_model_argument(bad):
    with pytest.raises(ResolutionError):
        resolve_model(bad, allow_hub=False)


def test_folder_without_tokenizer_files(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResolutionError, match="no tokenizer or chat-template files"):
        resolve_model(str(tmp_path / "empty"), allow_hub=False)


def test_git_symlink_stubs_are_followed(tmp_path, tiny_model_dir, write_template):
    shared = tmp_path / "shared"
    shutil.copytree(tiny_model_dir, shared / "acme--base")
    other = shared / "acme--other"
    other.mkdir()
    for name in ("tokenizer_config.json",):
        shutil.copy(tiny_model_dir / name, other / name)
    (other / "tokenizer.json").write_text("../acme--base/tokenizer.json")
    stub = other / "tokenizer.json"
    assert follow_symlink_stub(stub) == (shared / "acme--base" / "tokenizer.json").resolve()
    resolved = resolve_model("acme/other", mirrors=[shared], allow_hub=False)
    with staged_folder(resolved) as folder:
        assert (folder / "tokenizer.json").resolve() == (shared / "acme--base" / "tokenizer.json").resolve()
    loaded = load_model(resolved, template_file=write_template("t", "{{ messages[0].content }}"))
    assert len(loaded.tokenizer) > 700  # the real vocabulary was loaded through the stub
    assert set(loaded.file_hashes) == {"tokenizer.json", "tokenizer_config.json"}


def test_tokenizer_without_template_is_a_clear_error(tiny_model_dir):
    with pytest.raises(TemplateMissingError, match="no chat template"):
        load_model(resolve_model(str(tiny_model_dir), allow_hub=False))


def test_remote_code_is_refused_without_flag(tmp_path, tiny_model_dir):
    folder = tmp_path / "acme--remote"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_acme.AcmeTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "tokenization_acme.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(ModelLoadError, match=r"tokenization_acme\.py.*--trust-remote-code"):
        load_model(resolve_model(str(folder), allow_hub=False))


def test_corrupt_tokenizer_json_is_a_clear_error(tmp_path, tiny_model_dir):
    folder = tmp_path / "acme--corrupt"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    with pytest.raises(ModelLoadError, match="cannot load tokenizer"):
        load_model(resolve_model(str(folder), allow_hub=False))


def _fake_hub(monkeypatch, source: Path, delay: float = 0.0, fail_after: int | None = None):
    """snapshot_download replaced by a copy of ``source`` (slow or failing on demand); no network."""
    import time

    import huggingface_hub

    def snapshot_download(repo_id, revision=None, allow_patterns=None, local_dir=None, token=None):
        for number, item in enumerate(sorted(source.iterdir())):
            if fail_after is not None and number >= fail_after:
                raise ConnectionError("connection reset")
            shutil.copy(item, Path(local_dir) / item.name)
            time.sleep(delay)
        return str(local_dir)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(resolve, "hub_commit", lambda model, revision, token, timeout: revision)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def test_concurrent_downloads_leave_one_valid_entry(monkeypatch, tmp_path, tiny_model_dir):
    from concurrent.futures import ThreadPoolExecutor

    from tito_audit.model.resolve import cache_entry_is_valid

    _fake_hub(monkeypatch, tiny_model_dir, delay=0.01)
    cache = tmp_path / "cache"
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: resolve_model("acme/tiny", cache_dir=cache), range(4)))
    assert {r.source for r in results} <= {"hub", "cache"}
    entry = cache / "acme--tiny" / "main"
    assert cache_entry_is_valid(entry)
    assert sorted(p.name for p in (cache / "acme--tiny").iterdir()) == ["main"], "no staging folder left behind"


def test_interrupted_download_leaves_no_entry(monkeypatch, tmp_path, tiny_model_dir):
    _fake_hub(monkeypatch, tiny_model_dir, fail_after=1)
    cache = tmp_path / "cache"
    with pytest.raises(ResolutionError, match="ConnectionError"):
        resolve_model("acme/tiny", cache_dir=cache)
    assert not (cache / "acme--tiny").exists(), "no entry, no staging folder, no empty folder left behind"


def test_a_downloaded_cache_entry_honours_the_umask(monkeypatch, tmp_path, tiny_model_dir):
    """The entry is renamed from a staging folder: it must not keep a private temporary folder's 0o700."""
    from tito_audit.model.resolve import MANIFEST

    _fake_hub(monkeypatch, tiny_model_dir)
    previous = os.umask(0o022)
    try:
        resolve_model("acme/tiny", cache_dir=tmp_path / "cache")
    finally:
        os.umask(previous)
    entry = tmp_path / "cache" / "acme--tiny" / "main"
    assert oct(entry.stat().st_mode & 0o777) == oct(0o755)
    assert oct((entry / MANIFEST).stat().st_mode & 0o777) == oct(0o644)


def test_default_cache_is_the_projects_templates_cache(monkeypatch):
    """Beside the package (``templates_cache/`` of a checkout), wherever the resolving module sits in the package."""
    from pathlib import Path

    import tito_audit
    from tito_audit.model.resolve import CACHE_ENV, default_cache_dir

    monkeypatch.delenv(CACHE_ENV, raising=False)
    project = Path(tito_audit.__file__).resolve().parent.parent / "templates_cache"
    if project.is_dir():
        assert default_cache_dir() == project


def test_a_hub_that_never_answers_is_given_up_with_a_clear_line(tmp_path):
    """HF_ENDPOINT accepts connections (the kernel completes them) and never answers: the lookup ends at its time
    limit with one line, and leaves no empty cache folder behind."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        environment = {
            "PATH": "/usr/bin:/bin",
            "HF_ENDPOINT": f"http://127.0.0.1:{port}",
            "TITO_AUDIT_HUB_TIMEOUT": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
        }
        cache = tmp_path / "cache"
        result = subprocess.run(
            [sys.executable, "-m", "tito_audit.cli", "audit", "acme/stalled", "--cache-dir", str(cache)],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no answer within 1s" in lines[0] and "time-out" in lines[0], result.stderr
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_model_id_is_refused(empty, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ResolutionError, match="the model id is empty"):
        resolve_model(empty, allow_hub=False)
