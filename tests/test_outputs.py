"""Output files: the umask's mode, symlinks and devices, and one line naming the option, the path and why when a
file cannot be written (a full device, a folder, a path under a file, a name too long, a read-only target)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests import templates
from tests.test_cli import run_cli
from tito_audit.errors import OutputError
from tito_audit.outputs import write_atomically, write_outputs


def _refused(path: Path, option: str = "--json") -> str:
    with pytest.raises(OutputError) as raised:
        write_outputs([(option, path, '{"report": 1}\n')])
    return str(raised.value)


def test_a_new_file_gets_the_mode_the_umask_gives(tmp_path):
    previous = os.umask(0o002)
    try:
        write_atomically(tmp_path / "shared.json", "{}")
    finally:
        os.umask(previous)
    assert oct((tmp_path / "shared.json").stat().st_mode & 0o777) == oct(0o664)


def test_a_symlink_is_followed_and_a_device_written_directly(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    (tmp_path / "link.json").symlink_to(real)
    write_atomically(tmp_path / "link.json", "new")
    assert (tmp_path / "link.json").is_symlink() and real.read_text() == "new"
    write_atomically(Path(os.devnull), "into the void")
    assert Path(os.devnull).exists() and not Path(os.devnull).is_file()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_full_device():
    assert _refused(Path("/dev/full")) == "--json /dev/full: no space left on device"


def test_a_folder_a_path_under_a_file_and_a_name_too_long(tmp_path):
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").write_text("x")
    assert _refused(tmp_path / "a-folder") == f"--json {tmp_path / 'a-folder'}: is a folder"
    under = tmp_path / "a-file" / "report.json"
    assert _refused(under, "--markdown") == f"--markdown {under}: {tmp_path / 'a-file'} is a file, not a folder"
    long = tmp_path / ("x" * 300 + ".json")
    assert _refused(long, "--junit") == f"--junit {long}: file name too long"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "a-folder"], "nothing left behind"


def test_a_name_near_the_limit_still_works(tmp_path):
    """The temporary file beside it must not be the one whose name is too long."""
    target = tmp_path / ("y" * 250 + ".json")
    write_atomically(target, "{}")
    assert target.read_text() == "{}" and [p.name for p in tmp_path.iterdir()] == [target.name]


@pytest.fixture
def read_only(tmp_path):
    """A folder holding ``report.json`` that cannot be written: a read-only tmpfs when one can be mounted (root),
    else the file and folder without write permission (other users)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        (folder / "report.json").write_text("old")
        (folder / "report.json").chmod(0o444)
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    if not shutil.which("mount"):
        pytest.skip("running as root without mount: nothing here is read-only")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], check=False).returncode:
        pytest.skip("running as root and cannot mount a tmpfs: nothing here is read-only")
    try:
        (folder / "report.json").write_text("old")
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_read_only_target(read_only):
    message = _refused(read_only / "report.json", "--report")
    assert message.startswith(f"--report {read_only / 'report.json'}: ")
    assert message.endswith(("read-only file system", "permission denied")), message
    assert (read_only / "report.json").read_text() == "old"


def test_the_command_line_says_which_option_and_path(tiny_model_dir, write_template, tmp_path):
    (tmp_path / "out").mkdir()
    result = run_cli(
        "audit",
        str(tiny_model_dir),
        "--template",
        str(write_template("good", templates.GOOD)),
        "-n",
        "2",
        "-q",
        "--json",
        str(tmp_path / "out"),
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --json {tmp_path / 'out'}: is a folder"
