"""A plan's spec as the cluster gives it: a `model.configMapRef` read and inlined, a `model.configFile` refused,
and the spec's problems named after the fields the plan's author wrote. Used by planning (`reconcile.py`)
and by observing (`observing.py`); no Kubernetes client here: the caller passes the ConfigMap reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from inferplan.planner.request import PlanRequest, resolve_plan
from inferplan.planner.spec import MAX_ARCHITECTURE_KEYS, PlanSpec
from inferplan.planner.spec_parsing import PlanError, parse_plan
from inferplan.planner.spec_rules import inline_architecture

ConfigMapReader = Callable[[str, str], str]  # (name, key) -> the value in the plan's namespace; raises KeyError


def error_reason(problems: list[tuple[str, str]]) -> str:
    paths = [path for path, _ in problems]
    if any(p.startswith("model") for p in paths):
        return "InvalidModel"
    if any(p.startswith("constraints.gpuTypes") for p in paths):
        return "UnknownGpuType"
    return "InvalidSpec"


def with_config_map(spec: Mapping, read_config_map: ConfigMapReader | None) -> Mapping:
    """The spec with `model.configMapRef` replaced by the config.json it points to (inline architecture)."""
    model = spec.get("model") or {}
    ref = model.get("configMapRef")
    if not ref:
        return spec
    name, key = ref.get("name", ""), ref.get("key", "config.json")
    if read_config_map is None:
        raise PlanError([("model.configMapRef", "reading ConfigMaps is not available here")])
    try:
        text = read_config_map(name, key)
    except KeyError as exc:  # the reader says "... not found" for a missing ConfigMap, else the key is missing
        reason = str(exc.args[0]) if exc.args else ""
        missing = (f"ConfigMap {name!r} not found in the plan's namespace" if "not found" in reason
                   else f"ConfigMap {name!r} has no key {key!r}")
        raise PlanError([("model.configMapRef", missing)]) from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} is not JSON: {exc.msg} "
                                                f"(line {exc.lineno})")]) from None
    except (ValueError, RecursionError) as exc:  # an integer of > 4300 digits; nesting deeper than the stack
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} is not usable JSON: "
                                                f"{str(exc)[:200]}")]) from None
    if not isinstance(config, dict):
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} must hold a config.json "
                                                f"object, got a JSON {type(config).__name__}")])
    if not {"architectures", "num_hidden_layers", "text_config"} & set(config):
        # Not a Hugging Face config.json: say so without echoing its keys (the plan's author may not be allowed
        # to read the ConfigMap the operator reads for them).
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r} is not a Hugging Face "
                                                "config.json: it has neither 'architectures' nor "
                                                "'num_hidden_layers'")])
    # Its problems are the ConfigMap's, reported here: once inlined, they would read as model.architecture.
    if len(config) > MAX_ARCHITECTURE_KEYS:
        raise PlanError([("model.configMapRef", f"key {key!r} of ConfigMap {name!r}: a config.json with "
                                                f"{len(config)} top-level keys; at most {MAX_ARCHITECTURE_KEYS} are "
                                                "read (drop the ones that do not describe the architecture)")])
    try:
        inline_architecture(config)
    except ValueError as exc:
        raise PlanError([("model.configMapRef", f"ConfigMap {name!r}, key {key!r}: {exc}")]) from None
    inline = {k: v for k, v in model.items() if k != "configMapRef"} | {"architecture": config}
    return {**spec, "model": inline}


def config_map_problems(spec: Mapping, exc: PlanError) -> PlanError:
    """`exc` with the problems of the config.json a `model.configMapRef` supplied reported at model.configMapRef
    (the user never wrote model.architecture: `with_config_map` put the ConfigMap's JSON there)."""
    ref = (spec.get("model") or {}).get("configMapRef") if isinstance(spec.get("model"), Mapping) else None
    if not ref:
        return exc
    source = f"ConfigMap {ref.get('name', '')!r}, key {ref.get('key', 'config.json')!r}: "
    return PlanError([("model.configMapRef", source + message)
                      if path == "model.architecture" or path.startswith("model.architecture.") else (path, message)
                      for path, message in exc.problems])


def parse_and_resolve(spec: Mapping, read_config_map: ConfigMapReader | None) -> tuple[PlanSpec, PlanRequest]:
    """The validated spec and its resolution, a `model.configMapRef` read through `read_config_map`; raises
    PlanError (problems of the ConfigMap's config.json at model.configMapRef).

    `model.configFile` is refused before anything is read: it names a file on the machine that resolves the
    plan, which in the cluster is the operator's (its service account token, the Prometheus bearer token,
    /dev/zero): a plan author must not make the operator read its files."""
    model = spec.get("model")
    if isinstance(model, Mapping) and model.get("configFile") is not None:
        raise PlanError([("model.configFile", "a file path is read by the command line only; in the cluster give "
                                              "model.configMapRef (a ConfigMap in the plan's namespace) or "
                                              "model.name")])
    try:
        parsed = parse_plan(with_config_map(spec, read_config_map))
        return parsed, resolve_plan(parsed)
    except PlanError as exc:
        raise config_map_problems(spec, exc) from None
