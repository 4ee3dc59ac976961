"""The test suite leaves no `inferplan-*` folder in the temporary directory: the session check of
tests/support/tempdirs.py fails a session that does, and every test makes its folders where that check sees them."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from tests.support import tempdirs

pytest_plugins = ["pytester"]
REPO = Path(__file__).resolve().parents[2]


def test_a_session_that_leaves_a_folder_behind_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from tests.support import tempdirs

        def test_leaks():
            tempdirs.make("leak")
    """)
    before = tempdirs.of_this_process()
    try:
        result = pytester.runpytest_inprocess(plugins=[tempdirs])
    finally:
        leaked = tempdirs.of_this_process() - before
        for path in leaked:
            shutil.rmtree(path)
    assert [path.name.split("-")[1] for path in leaked] == ["leak"]
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the tests left temporary folders behind: *inferplan-leak-*"])


def test_a_session_folder_is_removed_when_the_session_ends(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from tests.support import tempdirs

        def test_keeps_one_for_the_session():
            assert tempdirs.for_the_session("cache").is_dir()
    """)
    before = tempdirs.of_this_process()
    result = pytester.runpytest_inprocess(plugins=[tempdirs])
    result.assert_outcomes(passed=1)
    assert tempdirs.of_this_process() == before


def test_tests_make_temporary_folders_only_where_the_check_sees_them() -> None:
    """tempfile.mkdtemp names a folder without this process's id: the check could not tell it from another
    session's. Tests use tmp_path, tmp_path_factory, TemporaryDirectory (removed on exit) or tests/support/tempdirs."""
    helper = REPO / "tests" / "support" / "tempdirs.py"
    found = [f"{path.relative_to(REPO)}:{node.lineno}"
             for path in sorted((REPO / "tests").rglob("*.py")) if path != helper
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)
             and getattr(node.func, "attr", getattr(node.func, "id", None)) == "mkdtemp"]
    assert not found, found
