"""The README's command table names every command `inferplan --help` lists, with options each command takes.
It left out `inferplan cleanup-kopf-state`, which install.md and operator.md tell users to run after an upgrade."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from inferplan.cli import build_parser

README = Path(__file__).resolve().parents[2] / "README.md"


def _table() -> dict[str, str]:
    """Command -> its usage cell in the README's Commands table."""
    section = README.read_text().split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `inferplan ([a-z-]+)([^`]*)` \|", section, re.M)
    return {name: usage for name, usage in rows}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_every_command_is_in_the_readme() -> None:
    assert set(_table()) == set(_commands())


def test_every_option_the_readme_shows_exists() -> None:
    commands = _commands()
    unknown = []
    for name, usage in _table().items():
        options = {s for action in commands[name]._actions for s in action.option_strings}
        unknown += [f"{name} {flag}" for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", usage)
                    if flag not in options]
    assert not unknown, unknown
