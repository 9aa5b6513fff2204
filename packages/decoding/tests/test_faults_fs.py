"""File-system faults a user can fix are one line naming the path (even for a failed write) and exit 2."""

from __future__ import annotations

import errno

import pytest

from vidspec.decoding.fsutil import describe_fs_error, file_in_traceback


class _Log:
    def __init__(self, path):
        self._fh = open(path, "ab")  # noqa: SIM115 - closed by the test

    def append(self, line: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # what a write on a full disk raises


def test_a_failed_write_names_the_file_being_written(tmp_path):
    (tmp_path / "input.txt").write_text("x")
    log = _Log(tmp_path / "records.jsonl")
    try:
        with open(tmp_path / "input.txt") as src:  # a file open for reading is not the culprit
            log.append(src.read().encode())
    except OSError as e:
        assert file_in_traceback(e.__traceback__) == str(tmp_path / "records.jsonl")
        line = describe_fs_error(e)
    finally:
        log._fh.close()
    assert line.startswith(f"{tmp_path / 'records.jsonl'}: No space left on device (free some space")


def test_a_named_file_wins():
    e = PermissionError(errno.EACCES, "Permission denied", "runs/x/report.md")
    assert describe_fs_error(e) == ("runs/x/report.md: Permission denied (choose a writable location, or fix its "
                                    "permissions)")


@pytest.mark.parametrize("error, needle", [
    (OSError(28, "No space left on device"), "No space left on device (free some space"),
    (OSError(30, "Read-only file system", "runs/x/.lock"), "runs/x/.lock: Read-only file system"),
    (PermissionError(13, "Permission denied", "runs/x/report.md"), "runs/x/report.md: Permission denied"),
])
def test_cli_file_system_faults_are_one_line_exit_2(monkeypatch, capfd, error, needle):
    from vidspec.decoding import cli

    def command(argv):
        raise error

    class EntryPoint:
        def load(self):
            return command

    monkeypatch.setattr(cli, "_commands", lambda: {"fake": EntryPoint()})
    assert cli.main(["fake"]) == 2
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("vidspec fake: error: ")
