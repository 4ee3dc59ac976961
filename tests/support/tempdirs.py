"""Temporary folders the tests make outside pytest's `tmp_path` (a helm home, a Prometheus or engine stand-in run
folder), and the session check that none is left behind (a pytest plugin: tests/conftest.py loads it).

Each is named `inferplan-WHAT-PID-...` with this process's id, so the check sees only this session's folders: other
sessions on the machine make theirs at the same time. Folders made with `tempfile.mkdtemp` directly are invisible to
it; tests/project/test_temporary_folders.py keeps the tests to this module.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_SESSION: list[Path] = []  # folders removed when the session ends (`for_the_session`)


def prefix(what: str) -> str:
    """The name this process's temporary folders for `what` start with."""
    return f"inferplan-{what}-{os.getpid()}-"


def make(what: str) -> Path:
    """A new temporary folder for `what`; the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=prefix(what)))


def for_the_session(what: str) -> Path:
    """A new temporary folder for `what`, removed when the test session ends (a cache kept across tests)."""
    path = make(what)
    _SESSION.append(path)
    return path


def of_this_process() -> set[Path]:
    """This process's temporary folders that exist now."""
    return set(Path(tempfile.gettempdir()).glob(f"inferplan-*-{os.getpid()}-*"))


@pytest.fixture(scope="session", autouse=True)
def no_temporary_folder_left_behind() -> Iterator[None]:
    """Fail the session when a test leaves one of this process's temporary folders behind."""
    before, first = of_this_process(), len(_SESSION)  # before: folders of an earlier process with this id
    yield
    while len(_SESSION) > first:
        shutil.rmtree(_SESSION.pop(), ignore_errors=True)
    left = sorted(str(path) for path in of_this_process() - before)
    if left:
        pytest.fail(f"the tests left temporary folders behind: {', '.join(left)}", pytrace=False)
