"""A plan from a mapping or a file: `parse_plan` and `load_plan_file` validate it into a `PlanSpec`, with each
problem named by its field path (`PlanError`)."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from inferplan.planner.spec import ENGINE_VERSION, IMAGE_REFERENCE, SPEC_MODELS, PlanSpec
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
        if (camel := to_camel(name)) != name and camel in _fields_at(tuple(error["loc"][:-1])):
            return f"unknown field; keys are camelCase: write {camel}"
        if close:
            return f"unknown field; did you mean {' or '.join(close)}?" + (f" ({elsewhere})" if elsewhere else "")
        return f"unknown field; {elsewhere}" if elsewhere else "unknown field (keys are camelCase)"
    if kind == "missing":
        return "required"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == _DECIMAL_PATTERN:
        return f"must be a decimal number in a string, such as \"12.5\" (digits, optional fraction), got {value!r}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == ENGINE_VERSION:
        return _version_message(str(value))
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
    if kind == "string_type" and isinstance(value, int | float) and not isinstance(value, bool):
        # `version: 0.10` is the number 0.1 to YAML: saying "got 0.1" alone hides why
        lost = ", and 0.10 as 0.1" if isinstance(value, float) else ""
        return f"must be a string: put it in quotes (unquoted, YAML reads it as the number {value!r}{lost})"
    if kind == "string_type" and value is None:
        return "must be a string, got nothing (an empty value or null)"
    message = str(error["msg"])
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    if kind in {"int_type", "bool_type", "string_type", "int_from_float", "string_too_long", "string_too_short",
                "string_pattern_mismatch"}:
        message += got
    return message


def _version_message(value: str) -> str:
    """Why `value` is not an engine release, and what to write: an image reference's tag is written as the release
    and the image as engine.image; a tag without a number (`latest`, `nightly`) names no release."""
    tag = value.rsplit("/", 1)[-1].partition("@")[0]
    name, _, tag = tag.rpartition(":") if ":" in tag else ("", "", tag)
    if name and re.fullmatch(ENGINE_VERSION, tag):
        return (f"must be the engine's release, not its image: write version {tag.removeprefix('v')!r} and, for that "
                f"image, image {value!r}, got {value!r}")
    return (f"must be a release number such as 0.11.2, v0.10.1.1, 0.5.4.post1 or 1.0.0rc4: a tag such as 'latest' "
            "names no release, and the release sets the defaults and flags the plan is made for (leave version out "
            f"for the pinned one), got {value!r}")


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
        if error["type"] == "extra_forbidden" and loc:  # the key as written, not the field it may be a spelling of
            where = _path(loc[:-1])
            problems.append((f"{where}.{loc[-1]}" if where else str(loc[-1]), _message(error)))
        else:
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
            # By the camelCase keys only, as the API server reads them: the snake_case names pydantic also accepts
            # from Python would make a file the command line plans one that `kubectl apply` refuses.
            spec = PlanSpec.model_validate(dict(spec_data), by_alias=True, by_name=False)
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


class KeyGivenTwice(ValueError):
    """A key given twice in one JSON object."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads's object_pairs_hook: a key given twice in one object is an error (JSON would keep the last)."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise KeyGivenTwice(key)
        seen[key] = value
    return seen


def _kind_of(document: Any) -> str:
    if isinstance(document, Mapping):
        return str(document.get("kind") or "a bare spec")
    return type(document).__name__


def decode_plan(text: str, source: str, *, as_json: bool | None = False) -> Mapping[str, Any]:
    """The plan text decoded, as JSON (`as_json`), YAML, or (None) JSON where the text is JSON and YAML otherwise;
    not yet validated. (YAML reads most JSON, but not JSON indented with tabs.)

    A key given twice in one mapping, malformed text, an empty text and a YAML stream of more than one document
    (empty documents, such as a trailing `---`, aside) raise a PlanError whose one problem is named `source`.
    """
    text = text.removeprefix("\ufeff")  # a byte order mark some editors write
    documents: list[Any] | None = None
    if as_json is not False:
        try:
            documents = [json.loads(text, object_pairs_hook=unique_keys)]
        except KeyGivenTwice as exc:
            raise PlanError([(source, f"key {exc.key!r} is given twice in one object")]) from None
        except json.JSONDecodeError as exc:
            if as_json:
                raise PlanError(
                    [(source, f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
                ) from None
    if documents is None:
        try:  # a SafeLoader subclass: no arbitrary objects
            documents = [doc for doc in yaml.load_all(text, Loader=_UniqueKeyLoader) if doc is not None]
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise PlanError([(source, f"malformed YAML{where}: {problem}")]) from None
    if not documents:
        raise PlanError([(source, "holds no plan: it is empty, or only comments")])
    if len(documents) > 1:
        raise PlanError([(source, f"holds {len(documents)} YAML documents ({', '.join(map(_kind_of, documents))}); "
                                  "a plan is read from one document: put each plan in a file of its own")])
    data = documents[0]
    if not isinstance(data, Mapping):
        raise PlanError([(source, f"expected a mapping at the top level, got {type(data).__name__}")])
    return data


def read_plan_document(path: str | Path) -> Mapping[str, Any]:
    """The plan file decoded (`decode_plan`): JSON for a `.json` file, YAML otherwise. An unreadable file, or one
    `decode_plan` refuses, raises a PlanError naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError([(str(path), f"cannot read the file: {exc}")]) from None
    return decode_plan(text, str(path), as_json=path.suffix.lower() == ".json")


def load_plan_file(path: str | Path) -> PlanSpec:
    """Read and validate a plan file, YAML or JSON (`.json`), bare spec or whole manifest.

    Unreadable files and syntax errors become a PlanError naming the file (and line); a key given twice, in YAML or
    JSON, is one too, and so is a YAML file of several documents (empty ones aside). Validation problems are all
    collected into one PlanError. Resolve relative `model.configFile` paths by passing the file's directory to
    `resolve_plan`.
    """
    return parse_plan(read_plan_document(path))
