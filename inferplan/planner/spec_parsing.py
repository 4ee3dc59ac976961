"""A plan from a mapping or a file: `parse_plan` and `load_plan_file` validate it into a `PlanSpec`, with each
problem named by its field path (`PlanError`)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from inferplan.planner.spec import IMAGE_REFERENCE, SPEC_MODELS, PlanSpec
from inferplan.planner.spec_rules import _DECIMAL_PATTERN
from inferplan.resource import API_VERSION, KIND


class PlanError(ValueError):
    """A plan that cannot be used: `problems` holds (field path, message) pairs, paths in camelCase.

    `str()` gives one line per problem, `path: message`.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(f"{path}: {message}" if path else message for path, message in self.problems))


_ALIAS_OF: dict[str, str] = {}


for _model in SPEC_MODELS:
    for _name, _field in _model.model_fields.items():
        _ALIAS_OF[_name] = _field.alias or _name
def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The spec model a field's annotation holds (through Optional, list and dict), None for a plain value."""
    pending = [annotation]
    while pending:
        kind = pending.pop()
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return kind
        pending.extend(get_args(kind))
    return None


def _field_paths(model: type[BaseModel], prefix: str = "") -> dict[str, list[str]]:
    """Every field of the spec by its camelCase name: the dotted paths it has (`kvCacheDtypes`: model.kvCacheDtypes)."""
    paths: dict[str, list[str]] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        paths.setdefault(key, []).append(f"{prefix}{key}")
        if (inner := _model_of(info.annotation)) is not None:
            for inner_key, more in _field_paths(inner, f"{prefix}{key}.").items():
                paths.setdefault(inner_key, []).extend(more)
    return paths


_FIELD_PATHS = _field_paths(PlanSpec)
_ALIASES = sorted(_FIELD_PATHS)  # every camelCase field name of the spec


def _fields_at(loc: tuple[int | str, ...]) -> list[str]:
    """The camelCase field names of the spec mapping at `loc` (empty where it is not a spec model)."""
    model: type[BaseModel] | None = PlanSpec
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int) or part == "[key]":
            continue
        info = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        model = _model_of(info.annotation) if info is not None else None
    return [] if model is None else [f.alias or n for n, f in model.model_fields.items()]


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":
            pass
        else:
            name = _ALIAS_OF.get(part, part)
            path = f"{path}.{name}" if path else name
    return path


def _message(error: Mapping[str, Any]) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == "extra_forbidden":
        name = str(error["loc"][-1]) if error["loc"] else ""
        # Close names of this mapping first, then where the spec has the name itself (a field put in the wrong place).
        close = difflib.get_close_matches(name, _fields_at(tuple(error["loc"][:-1])), n=3, cutoff=0.6)
        elsewhere = f"{name} is {' or '.join(_FIELD_PATHS[name])}" if name in _FIELD_PATHS else ""
        if not close and not elsewhere:
            close = difflib.get_close_matches(name, _ALIASES, n=3, cutoff=0.6)
        if close:
            return f"unknown field; did you mean {' or '.join(close)}?" + (f" ({elsewhere})" if elsewhere else "")
        return f"unknown field; {elsewhere}" if elsewhere else "unknown field (keys are camelCase)"
    if kind == "missing":
        return "required"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == _DECIMAL_PATTERN:
        return f"must be a decimal number in a string, such as \"12.5\" (digits, optional fraction), got {value!r}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == IMAGE_REFERENCE:
        return ("must be a container image reference such as vllm/vllm-openai:v0.11.2 ([registry[:port]/]path[:tag]"
                f"[@sha256:digest], path in lowercase), got {value!r}")
    got = f", got {value!r}" if isinstance(value, str | int | float | bool) else ""
    if kind in _BOUND_WORDS:
        op, key = _BOUND_WORDS[kind]
        return f"must be {op} {ctx.get(key)}{got}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}{got}"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return f"must be a mapping, got {type(value).__name__}"
    if kind == "list_type":
        return f"must be a list, got {type(value).__name__}"
    message = str(error["msg"])
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind in {"int_type", "bool_type", "string_type", "int_from_float", "string_too_long", "string_too_short",
                "string_pattern_mismatch"}:
        message += got
    return message


_BOUND_WORDS = {
    "greater_than": (">", "gt"),
    "greater_than_equal": (">=", "ge"),
    "less_than": ("<", "lt"),
    "less_than_equal": ("<=", "le"),
}


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        subpath = (error.get("ctx") or {}).get("subpath")
        if error["type"] == "plan_rule" and subpath:
            loc = (*loc, subpath)
        problems.append((_path(loc), _message(error)))
    return problems


def parse_plan(data: Mapping[str, Any]) -> PlanSpec:
    """Validate a decoded plan: the bare spec, or a whole `InferenceCapacityPlan` manifest.

    A mapping with `apiVersion`, `kind` or `spec` is read as a manifest. Every problem found is raised at
    once as a PlanError; paths are relative to the spec (`workload.promptTokens.p95`), manifest-level
    problems are named by their key (`apiVersion`).
    """
    if not isinstance(data, Mapping):
        raise PlanError([("", f"a plan must be a mapping, got {type(data).__name__}")])
    problems: list[tuple[str, str]] = []
    spec_data: Any = data
    if {"apiVersion", "kind", "spec"} & set(data):
        spec_data, problems = _unwrap_manifest(data)
    if isinstance(spec_data, Mapping):
        try:
            spec = PlanSpec.model_validate(dict(spec_data))
        except ValidationError as exc:
            problems += _problems(exc)
        else:
            if not problems:
                return spec
    raise PlanError(problems)


def _unwrap_manifest(data: Mapping[str, Any]) -> tuple[Any, list[tuple[str, str]]]:
    problems = []
    if data.get("apiVersion") != API_VERSION:
        problems.append(("apiVersion", f"must be {API_VERSION}, got {data.get('apiVersion')!r}"))
    if data.get("kind") != KIND:
        problems.append(("kind", f"must be {KIND}, got {data.get('kind')!r}"))
    metadata = data.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        problems.append(("metadata", f"must be a mapping, got {type(metadata).__name__}"))
    for key in data:
        if key not in {"apiVersion", "kind", "metadata", "spec", "status"}:
            problems.append((str(key), "unknown field; a manifest has apiVersion, kind, metadata, spec (status)"))
    spec = data.get("spec")
    if spec is None:
        problems.append(("spec", "required"))
    elif not isinstance(spec, Mapping):
        problems.append(("spec", f"must be a mapping, got {type(spec).__name__}"))
    return spec, problems


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (YAML would silently keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_plan_file(path: str | Path) -> PlanSpec:
    """Read and validate a plan file, YAML or JSON (`.json`), bare spec or whole manifest.

    Unreadable files and syntax errors become a PlanError naming the file (and line); validation problems
    are all collected into one PlanError. Resolve relative `model.configFile` paths by passing the file's
    directory to `resolve_plan`.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError([(str(path), f"cannot read the file: {exc}")]) from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanError(
                [(str(path), f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
            ) from None
    else:
        try:
            data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise PlanError([(str(path), f"malformed YAML{where}: {problem}")]) from None
    if not isinstance(data, Mapping):
        raise PlanError([(str(path), f"expected a mapping at the top level, got {type(data).__name__}")])
    return parse_plan(data)
