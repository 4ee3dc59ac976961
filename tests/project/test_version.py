"""The planner version (inferplan/version.py): the release and a digest of what shapes an answer, so that an upgrade
that changes the model (a refit of factors.json, a catalog, the planner's code) is one the operator re-plans at once.
The digest is taken of a copy of the package in a temporary folder, changed one file at a time."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest

from inferplan import __version__
from inferplan.operator.status import PlanStatus
from inferplan.version import DIGEST_HEX, model_digest, model_files, planner_version

PACKAGE = Path(str(resources.files("inferplan")))


def data_files_the_planner_reads() -> set[str]:
    """Every `data/NAME` the planner's sources open through importlib.resources, as paths inside the package, and
    every file of the kernel tables' folder (`kernels.system_tables` opens a profiled system's by its name)."""
    found = {f"planner/data/kernels/{file.name}" for file in (PACKAGE / "planner" / "data" / "kernels").iterdir()}
    for source in (PACKAGE / "planner").rglob("*.py"):
        found |= {f"planner/{name}" for name in re.findall(r'joinpath\("(data/[^"]+)"\)', source.read_text())}
    return found


READ = sorted(data_files_the_planner_reads())


@pytest.fixture
def package(tmp_path: Path) -> Iterator[Path]:
    copy = tmp_path / "somewhere" / "inferplan"
    shutil.copytree(PACKAGE, copy)
    yield copy


def test_the_planner_reads_the_catalogs_kernels_factors_and_intervals() -> None:
    assert {"planner/data/factors.json", "planner/data/intervals.json", "planner/data/kernels/meta.json",
            "planner/data/kernels/h100_sxm.json", "planner/data/gpus.json", "planner/data/models.json"} <= set(READ)


def test_the_version_is_the_release_and_the_digest_of_this_package() -> None:
    version = planner_version()
    assert re.fullmatch(rf"{re.escape(__version__)}\+[0-9a-f]{{{DIGEST_HEX}}}", version)
    assert version == f"{__version__}+{model_digest(PACKAGE)[:DIGEST_HEX]}"
    assert version != __version__  # what an older build wrote, so its plans are planned again
    assert len(version) <= PlanStatus.model_fields["planner_version"].metadata[0].max_length
    assert version.isascii()


def test_a_copy_elsewhere_has_the_same_digest_whatever_its_times_and_bytecode(package: Path) -> None:
    """Where the package is installed, its files' modification times and compiled bytecode count for nothing."""
    before = model_digest(PACKAGE)
    assert model_digest(package) == before
    for path in package.rglob("*"):
        os.utime(path, (0, 0))
    cache = package / "planner" / "model" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "factors.cpython-311.pyc").write_bytes(b"\0compiled")
    assert model_digest(package) == before


@pytest.mark.parametrize("path", READ)
def test_a_data_file_the_planner_reads_changes_the_digest(package: Path, path: str) -> None:
    assert path in {name for name, _ in model_files(package)}
    before = model_digest(package)
    file = package / path
    file.write_bytes(file.read_bytes() + b"\n")
    assert model_digest(package) != before


@pytest.mark.parametrize("path", ["planner/model/factors.py", "planner/search/plan.py", "deploy/manifests.py"])
def test_a_source_of_the_planner_or_of_the_rendered_objects_changes_the_digest(package: Path, path: str) -> None:
    before = model_digest(package)
    (package / path).write_text((package / path).read_text() + "# changed\n")
    assert model_digest(package) != before


@pytest.mark.parametrize("path", ["planner/data/example-plan.yaml", "planner/data/example-scenarios.jsonl",
                                  "planner/data/LICENSE-aiconfigurator", "cli.py", "report.py",
                                  "operator/controller.py", "__init__.py"])
def test_a_file_that_shapes_no_answer_leaves_the_digest(package: Path, path: str) -> None:
    """The bundled example plan and scenarios (the CLI's defaults), the licence text, the command line, the report
    and the operator's own code answer no plan differently."""
    before = model_digest(package)
    (package / path).write_bytes((package / path).read_bytes() + b"\n# changed\n")
    assert model_digest(package) == before


def test_line_endings_do_not_count(package: Path) -> None:
    """A checkout that writes CRLF (git's autocrlf) has the same model."""
    before = model_digest(package)
    factors = package / "planner" / "data" / "factors.json"
    factors.write_bytes(factors.read_bytes().replace(b"\n", b"\r\n"))
    assert model_digest(package) == before


def test_a_new_data_file_or_source_counts_and_a_removed_one_too(package: Path) -> None:
    before = model_digest(package)
    (package / "planner" / "data" / "new-catalog.json").write_text("{}")
    added = model_digest(package)
    assert added != before
    (package / "planner" / "data" / "new-catalog.json").unlink()
    assert model_digest(package) == before
    (package / "deploy" / "bounds.py").unlink()
    assert model_digest(package) != before
