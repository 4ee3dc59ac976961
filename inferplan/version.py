"""The planner version: which model answers a plan, as `status.plannerVersion` records it.

The release (`inferplan.__version__`, "0.1.0") stays the same across builds whose answers differ (a refit of
factors.json, new kernel tables, a catalog entry, a planner fix), so the planner version adds a digest of what
shapes an answer: `0.1.0+<12 hex digits>`. The operator plans again at once a plan whose status another planner
version wrote (docs/operator.md, "When a plan is re-planned").

What the digest covers (`shapes_answers`): the planner's sources (inferplan/planner/**/*.py), the data it reads
(inferplan/planner/data/*.json and data/kernels/*.json: catalogs, kernel tables, factors, intervals, engine
flags) and the sources of
the objects a status lists (inferplan/deploy/**/*.py). Not the operator's own code (when it plans, the status's
other fields), the command line, the bundled example plan and scenarios, nor the Python and numpy versions.
Each file counts by its path inside the package and its bytes (CRLF read as LF): not where the package is
installed, the order a directory lists in, modification times or compiled bytecode.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from importlib import resources
from importlib.resources.abc import Traversable

from inferplan import __version__

MODEL_FOLDERS = ("planner", "deploy")
"""The package's folders the digest looks in (every file it covers is under one of them)."""

DIGEST_HEX = 12
"""Hex digits of the sha256 the planner version carries: 48 bits, no collision between builds in practice."""


def shapes_answers(path: str) -> bool:
    """Whether the file at `path` (inside the package, '/'-separated: "planner/data/factors.json") is one that
    shapes an answer, and so counts in the planner version."""
    parts = path.split("/")
    if "__pycache__" in parts or parts[0] not in MODEL_FOLDERS:
        return False
    if path.endswith(".py"):
        return True
    if not path.endswith(".json"):
        return False
    return (parts[:2] == ["planner", "data"] and len(parts) == 3) or (parts[:3] == ["planner", "data", "kernels"]
                                                                      and len(parts) == 4)


def _files(folder: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
    for entry in folder.iterdir():
        path = f"{prefix}/{entry.name}"
        if entry.is_dir():
            if entry.name != "__pycache__":
                yield from _files(entry, path)
        elif shapes_answers(path):
            yield path, entry


def model_files(package: Traversable) -> list[tuple[str, Traversable]]:
    """The files of `package` (the inferplan package's root, or a copy of it) that `shapes_answers`, sorted by
    their path inside it."""
    found = [file for name in MODEL_FOLDERS if package.joinpath(name).is_dir()
             for file in _files(package.joinpath(name), name)]
    return sorted(found, key=lambda item: item[0])


def model_digest(package: Traversable) -> str:
    """sha256 (hex) of `model_files(package)`: each file's path, length and bytes, CRLF read as LF."""
    digest = hashlib.sha256()
    for path, file in model_files(package):
        content = file.read_bytes().replace(b"\r\n", b"\n")
        digest.update(f"{path}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


@functools.cache
def planner_version() -> str:
    """This build's planner version, `<release>+<digest>` ("0.1.0+3f2a9c0d1e4b"), computed once per process
    (about 2 MB read and hashed)."""
    return f"{__version__}+{model_digest(resources.files('inferplan'))[:DIGEST_HEX]}"
