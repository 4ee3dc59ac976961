"""Build inferplan/planner/data/engine-flags.json: the long flags each serving engine's CLI parser accepts,
per pinned version line, read from the engines' own source.

    python scripts/engine_flags.py [--work /tmp/engine-flags] [--out inferplan/planner/data/engine-flags.json]

vLLM, SGLang and LMDeploy: `pip download --no-deps` of the pinned release wheels (those for CPython 3.11 on
x86-64 Linux, whatever runs the script, `WHEEL_TARGET`; wheels already in `--work`/wheels are used as they are),
unpacked, and every `add_argument("--...")` call of their CLI modules read with `ast` (no engine code is imported:
their parsers import torch and CUDA kernels at module level). vLLM V1 builds most arguments from config dataclasses via
`get_kwargs(SomeConfig)` (`vllm/engine/arg_utils.py`, `_compute_kwargs`): a field typed `bool` becomes
`argparse.BooleanOptionalAction` (so `--x` and `--no-x`), a `Literal[...]` type becomes `choices`, and an
Optional Literal also accepts "None"; this script resolves those field annotations the same way.

TensorRT-LLM: the 1.x and 0.18 wheels on PyPI are stubs that download the real wheel from NVIDIA's own index,
which cannot be reached here, so its `trtllm-serve` options are taken from the documented click options
(source "docs"). TGI: the launcher is Rust and its source is not on PyPI; its flags are the launcher's
documented clap arguments (source "docs"), cross-checked against the `launcher/src/main.rs` quotes in
shared/catalog-facts/engine-defaults.md. Both are kept in the DOCS_FLAGS table below.

This script downloads; it never runs in tests or CI. The JSON it writes is committed, and the script writes it
again byte for byte (2026-12-06).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "inferplan" / "planner" / "data" / "engine-flags.json"

# (engine, line, wheel spec, files holding the CLI, entry point)
WHEELS: list[tuple[str, str, str, list[str], str]] = [
    ("vllm", "0.6", "vllm==0.6.3.post1",
     ["vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py"],
     "python3 -m vllm.entrypoints.openai.api_server"),
    ("vllm", "0.11", "vllm==0.11.2",
     ["vllm/engine/arg_utils.py", "vllm/entrypoints/openai/cli_args.py", "vllm/entrypoints/cli/serve.py"],
     "vllm serve"),
    ("sglang", "0.4", "sglang==0.4.6.post5", ["sglang/srt/server_args.py"], "python3 -m sglang.launch_server"),
    ("sglang", "0.5", "sglang==0.5.2", ["sglang/srt/server_args.py"], "python3 -m sglang.launch_server"),
    ("lmdeploy", "0.10", "lmdeploy==0.10.2", ["lmdeploy/cli/serve.py", "lmdeploy/cli/utils.py"], "lmdeploy"),
]

_NO_VALUE_ACTIONS = {"store_true", "store_false", "count", "help", "version", "store_const", "append_const"}


def _r(value: bool) -> str:
    return "none" if value else "required"


# ---------------------------------------------------------------------------------------------- docs tables
# TensorRT-LLM `trtllm-serve` (tensorrt_llm/commands/serve.py, click options). 0.18: the options listed on
# https://nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html (backend choice "pytorch" only, opt-in;
# the default is the TensorRT engine path). 1.x: serve.py at commit 4c05a748 as quoted in engine-defaults.md
# (`--backend pytorch` default, `--enable_chunked_prefill` flag), plus the documented 1.0 options.
_TRT_COMMON: dict[str, dict[str, Any]] = {
    "--tokenizer": {"value": "required"},
    "--host": {"value": "required"},
    "--port": {"value": "required"},
    "--log_level": {"value": "required", "choices": ["internal_error", "error", "warning", "info", "verbose",
                                                     "debug", "trace"]},
    "--max_beam_width": {"value": "required"},
    "--max_batch_size": {"value": "required"},
    "--max_num_tokens": {"value": "required"},
    "--max_seq_len": {"value": "required"},
    "--tp_size": {"value": "required"},
    "--pp_size": {"value": "required"},
    "--ep_size": {"value": "required"},
    "--cluster_size": {"value": "required"},
    "--gpus_per_node": {"value": "required"},
    "--kv_cache_free_gpu_memory_fraction": {"value": "required"},
    "--num_postprocess_workers": {"value": "required"},
    "--trust_remote_code": {"value": "none"},
    "--extra_llm_api_options": {"value": "required"},
    "--reasoning_parser": {"value": "required"},
}
TRT_FLAGS: dict[str, dict[str, Any]] = {
    "0.18": {
        "version": "0.18.2", "entry_point": "trtllm-serve",
        "source": "docs: https://nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html (click options of "
                  "tensorrt_llm/commands/serve.py); the wheel is not on PyPI (stub to NVIDIA's index), not read",
        "flags": {**_TRT_COMMON, "--backend": {"value": "required", "choices": ["pytorch"]}},
    },
    "1": {
        "version": "1.0.0", "entry_point": "trtllm-serve",
        "source": "docs: tensorrt_llm/commands/serve.py at 4c05a748 as quoted in "
                  "shared/catalog-facts/engine-defaults.md and "
                  "https://nvidia.github.io/TensorRT-LLM/commands/trtllm-serve/ ; the wheel is not on PyPI "
                  "(stub to NVIDIA's index), not read",
        "flags": {**_TRT_COMMON,
                  "--backend": {"value": "required", "choices": ["pytorch", "tensorrt", "_autodeploy"]},
                  "--enable_chunked_prefill": {"value": "none"},
                  "--metadata_server_config_file": {"value": "required"},
                  "--server_role": {"value": "required"},
                  "--fail_fast_on_attention_window_too_large": {"value": "none"}},
    },
}

# TGI `text-generation-launcher` (launcher/src/main.rs, clap `Args`; long names are the field names with `-`).
_TGI_COMMON: dict[str, dict[str, Any]] = {
    f"--{name}": {"value": value}
    for name, value in (
        ("model-id", "required"), ("revision", "required"), ("validation-workers", "required"),
        ("sharded", "required"), ("num-shard", "required"), ("speculate", "required"),
        ("trust-remote-code", "none"), ("max-concurrent-requests", "required"), ("max-best-of", "required"),
        ("max-stop-sequences", "required"), ("max-top-n-tokens", "required"), ("max-input-tokens", "required"),
        ("max-input-length", "required"), ("max-total-tokens", "required"), ("waiting-served-ratio", "required"),
        ("max-batch-prefill-tokens", "required"), ("max-batch-total-tokens", "required"),
        ("max-waiting-tokens", "required"), ("max-batch-size", "required"), ("cuda-graphs", "required"),
        ("hostname", "required"), ("port", "required"), ("shard-uds-path", "required"),
        ("master-addr", "required"), ("master-port", "required"), ("huggingface-hub-cache", "required"),
        ("weights-cache-override", "required"), ("disable-custom-kernels", "none"),
        ("cuda-memory-fraction", "required"), ("rope-scaling", "required"), ("rope-factor", "required"),
        ("json-output", "none"), ("otlp-endpoint", "required"), ("otlp-service-name", "required"),
        ("cors-allow-origin", "required"), ("api-key", "required"), ("watermark-gamma", "required"),
        ("watermark-delta", "required"), ("ngrok", "none"), ("ngrok-authtoken", "required"),
        ("ngrok-edge", "required"), ("tokenizer-config-path", "required"), ("disable-grammar-support", "none"),
        ("env", "none"), ("max-client-batch-size", "required"), ("lora-adapters", "required"),
        ("usage-stats", "required"),
    )
}
_TGI_DTYPE = ["float16", "bfloat16"]
_TGI_KV = ["fp8_e4m3fn", "fp8_e5m2"]
_TGI_QUANTIZE = ["awq", "compressed-tensors", "eetq", "exl2", "gptq", "marlin", "bitsandbytes", "bitsandbytes-nf4",
                 "bitsandbytes-fp4", "fp8"]
TGI_FLAGS: dict[str, dict[str, Any]] = {
    "2": {
        "version": "2.4.1", "entry_point": "text-generation-launcher",
        "source": "docs: text-generation-launcher --help reference (docs/source/reference/launcher.md at v2.4.1) and "
                  "launcher/src/main.rs quotes in shared/catalog-facts/engine-defaults.md; the launcher is Rust and "
                  "not on PyPI, main.rs not read in this pass",
        "flags": {**_TGI_COMMON,
                  "--quantize": {"value": "required", "choices": _TGI_QUANTIZE},
                  "--dtype": {"value": "required", "choices": _TGI_DTYPE},
                  "--kv-cache-dtype": {"value": "required", "choices": _TGI_KV}},
    },
    "3": {
        "version": "3.3.7", "entry_point": "text-generation-launcher",
        "source": "docs: text-generation-launcher --help reference (docs/source/reference/launcher.md at v3.x) and "
                  "launcher/src/main.rs quotes (v3.3.7) in shared/catalog-facts/engine-defaults.md; the launcher is "
                  "Rust and not on PyPI, main.rs not read in this pass",
        "flags": {**_TGI_COMMON,
                  "--quantize": {"value": "required", "choices": _TGI_QUANTIZE},
                  "--dtype": {"value": "required", "choices": _TGI_DTYPE},
                  "--kv-cache-dtype": {"value": "required", "choices": _TGI_KV},
                  "--prometheus-port": {"value": "required"},
                  "--payload-limit": {"value": "required"},
                  "--enable-prefill-logprobs": {"value": "none"},
                  "--graceful-termination-timeout": {"value": "required"}},
    },
}


# ------------------------------------------------------------------------------------------------ source index
class SourceIndex:
    """Module-level names of an unpacked package: list/dict literals, `X = Literal[...]` aliases, and the
    annotated fields of every class (for vLLM's `get_kwargs(Config)`)."""

    def __init__(self, root: Path, package: str) -> None:
        self.values: dict[str, list[str]] = {}
        self.aliases: dict[str, ast.expr] = {}
        self.classes: dict[str, dict[str, ast.expr]] = {}
        for path in sorted((root / package).rglob("*.py")):
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError):
                continue
            for node in tree.body:
                self._module_node(node)

    def _module_node(self, node: ast.stmt) -> None:
        if isinstance(node, ast.ClassDef):
            fields = self.classes.setdefault(node.name, {})
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    fields.setdefault(item.target.id, item.annotation)
            return
        target: ast.expr | None = None
        value: ast.expr | None = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if not isinstance(target, ast.Name) or value is None:
            return
        if isinstance(value, ast.Subscript) and _name(value.value) == "Literal":
            self.aliases.setdefault(target.id, value)
        strings = _strings(value, self)
        if strings is not None:
            self.values.setdefault(target.id, strings)


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _strings(node: ast.expr, index: SourceIndex | None) -> list[str] | None:
    """The string values of a list/tuple/set literal, dict-literal keys, `[*NAME, ...]`, `list(NAME)`,
    `list(NAME.keys())`, `NAME`; None when it is none of these."""
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        out: list[str] = []
        for elt in node.elts:
            if isinstance(elt, ast.Constant):
                if isinstance(elt.value, str):
                    out.append(elt.value)
                elif elt.value is None:
                    out.append("None")
            elif isinstance(elt, ast.Starred):
                inner = _strings(elt.value, index)
                if inner is None:
                    return None
                out.extend(inner)
            else:
                return None
        return out
    if isinstance(node, ast.Dict):
        keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        return keys if len(keys) == len(node.keys) else None
    if isinstance(node, ast.Call) and _name(node.func) == "list" and len(node.args) == 1:
        arg = node.args[0]
        if isinstance(arg, ast.Call) and _name(arg.func) == "keys" and isinstance(arg.func, ast.Attribute):
            arg = arg.func.value
        return _strings(arg, index)
    if isinstance(node, ast.Call) and _name(node.func) == "get_args" and len(node.args) == 1 and index is not None:
        name = _name(node.args[0])
        if name and name in index.aliases:
            return _literal_values(index.aliases[name])
    if isinstance(node, ast.Name) and index is not None:
        if node.id in index.values:
            return list(index.values[node.id])
        if node.id in index.aliases:
            return _literal_values(index.aliases[node.id])
    return None


def _literal_values(node: ast.expr) -> list[str]:
    assert isinstance(node, ast.Subscript)
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


def _union_members(node: ast.expr) -> list[ast.expr]:
    """Top-level members of an annotation: X | Y, Optional[X], Union[X, Y], Annotated[X, ...]."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _union_members(node.left) + _union_members(node.right)
    if isinstance(node, ast.Subscript):
        outer = _name(node.value)
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer == "Optional":
            return [*_union_members(elts[0]), ast.Constant(None)]
        if outer == "Union":
            return [m for e in elts for m in _union_members(e)]
        if outer in ("Annotated", "SkipValidation"):  # pydantic's SkipValidation[X] is Annotated[X, ...]
            return _union_members(elts[0])
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return _union_members(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return []
    return [node]


def _field_kwargs(annotation: ast.expr, index: SourceIndex) -> dict[str, Any]:
    """What vLLM's `_compute_kwargs` makes of a dataclass field of this annotation (same order of checks:
    dataclass, bool, Literal, anything else takes a value)."""
    members = _union_members(annotation)
    names = [_name(m) for m in members]
    optional = any(isinstance(m, ast.Constant) and m.value is None for m in members) or "None" in names
    if any(n in index.classes and n.endswith("Config") for n in names if n):
        return {"value": "required"}
    if "bool" in names:
        return {"value": "none", "boolean_optional": True}
    choices: list[str] = []
    for m in members:
        if isinstance(m, ast.Subscript) and _name(m.value) == "Literal":
            choices += _literal_values(m)
        elif (n := _name(m)) and n in index.aliases:
            choices += _literal_values(index.aliases[n])
    if choices:
        return {"value": "required", "choices": [*choices, "None"] if optional else choices}
    return {"value": "required"}


def _call_kwargs(call: ast.Call, env: dict[str, str], index: SourceIndex) -> dict[str, Any]:
    out: dict[str, Any] = {"value": "required"}
    for kw in call.keywords:
        if kw.arg is None:  # **model_kwargs["max_model_len"], or **{**kwargs["x"], "default": None}
            v = kw.value
            if isinstance(v, ast.Dict):
                v = next((val for key, val in zip(v.keys, v.values, strict=True) if key is None), v)
            if isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id in env:
                field = v.slice.value if isinstance(v.slice, ast.Constant) else None
                cls = index.classes.get(env[v.value.id], {})
                if isinstance(field, str) and field in cls:
                    out.update(_field_kwargs(cls[field], index))
        elif kw.arg == "action":
            action = kw.value.value if isinstance(kw.value, ast.Constant) else _name(kw.value)
            if action in _NO_VALUE_ACTIONS:
                out["value"] = "none"
            elif action == "BooleanOptionalAction":
                out["value"] = "none"
                out["boolean_optional"] = True
            elif action == "StoreBoolean":  # vLLM 0.6: `--flag [true|false]`, case-insensitive
                out["choices"] = ["true", "false", "True", "False"]
        elif kw.arg == "nargs" and isinstance(kw.value, ast.Constant) and kw.value.value in ("?", "*"):
            out["value"] = "optional"
        elif kw.arg == "choices":
            choices = _strings(kw.value, index)
            if choices is not None:
                out["choices"] = choices
    return out


def _add(flags: dict[str, dict[str, Any]], name: str, spec: dict[str, Any]) -> None:
    spec = dict(spec)
    negate = spec.pop("boolean_optional", False)
    flags[name] = spec
    if negate:
        flags["--no-" + name[2:]] = {"value": "none"}


def extract(root: Path, package: str, files: list[str]) -> dict[str, dict[str, Any]]:
    """The long flags the `add_argument` calls of `files` declare, with value arity and choices."""
    index = SourceIndex(root, package)
    flags: dict[str, dict[str, Any]] = {}
    for rel in files:
        tree = ast.parse((root / rel).read_text(encoding="utf-8"))
        env: dict[str, str] = {}  # model_kwargs -> ModelConfig, from `x = get_kwargs(Cls)`
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Call) and _name(node.value.func) == "get_kwargs"
                    and node.value.args and (cls := _name(node.value.args[0]))):
                env[node.targets[0].id] = cls
        for node in ast.walk(tree):
            # `for key, value in frontend_kwargs.items(): group.add_argument(f"--{key...}", **value)`
            if (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                    and isinstance(node.iter.func, ast.Attribute) and node.iter.func.attr == "items"
                    and isinstance(node.iter.func.value, ast.Name) and node.iter.func.value.id in env):
                cls = index.classes.get(env[node.iter.func.value.id], {})
                for field, annotation in cls.items():
                    _add(flags, "--" + field.replace("_", "-"), _field_kwargs(annotation, index))
            if not (isinstance(node, ast.Call) and _name(node.func) == "add_argument"):
                continue
            names = [a.value for a in node.args
                     if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")]
            if not names:
                continue
            spec = _call_kwargs(node, env, index)
            for name in names:
                _add(flags, name, spec)
    return dict(sorted(flags.items()))


# The wheels of the shipped file, whatever interpreter and machine run the script: pip picks the wheel of the running
# one, and a wheel's name is in each line's `source` (under Python 3.12 LMDeploy's and sglang-router's were cp312).
WHEEL_TARGET = ("--python-version", "3.11", "--platform", "manylinux2014_x86_64", "--only-binary=:all:")


def _unpack(spec: str, work: Path) -> tuple[Path, str]:
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    name, version = spec.split("==")
    found = sorted(wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", *WHEEL_TARGET, "-d",
                        str(wheels), spec], check=True)
        found = sorted(wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    wheel = found[0]
    target = work / "src" / f"{name}-{version}"
    if not target.exists():
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target, [n for n in z.namelist() if n.endswith(".py")])
    return target, wheel.name


# SGLang's P/D router (what `inferplan render` runs in front of disaggregated SGLang pools). Its parser builds the
# flag names with f-strings, so it is imported (router_args.py needs only the standard library) rather than read.
ROUTER = ("sglang-router", "sglang-router==0.2.1", "sglang_router/router_args.py",
          "python3 -m sglang_router.launch_router")


def router_flags(work: Path) -> dict[str, Any]:
    import importlib.util

    name, spec, file, entry = ROUTER
    root, wheel = _unpack(spec, work)
    module_spec = importlib.util.spec_from_file_location("router_args", root / file)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    parser = argparse.ArgumentParser()
    module.RouterArgs.add_cli_args(parser)
    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        for option in action.option_strings:
            if option.startswith("--") and option != "--help":
                value = "none" if action.nargs == 0 else "optional" if action.nargs == "?" else "required"
                flags[option] = {"value": value, **({"choices": list(action.choices)} if action.choices else {})}
    return {name: {"version": spec.split("==")[1], "entry_point": entry,
                   "source": f"wheel {wheel}: {file} (RouterArgs.add_cli_args, imported)",
                   "flags": dict(sorted(flags.items()))}}


def build(work: Path) -> dict[str, Any]:
    engines: dict[str, dict[str, Any]] = {}
    for engine, line, spec, files, entry in WHEELS:
        root, wheel = _unpack(spec, work)
        package = files[0].split("/")[0]
        engines.setdefault(engine, {})[line] = {
            "version": spec.split("==")[1], "entry_point": entry,
            "source": f"wheel {wheel}: " + ", ".join(files) + " (add_argument calls read with ast)",
            "flags": extract(root, package, files),
        }
    engines["tensorrt-llm"] = {line: {**v, "flags": dict(sorted(v["flags"].items()))} for line, v in TRT_FLAGS.items()}
    engines["tgi"] = {line: {**v, "flags": dict(sorted(v["flags"].items()))} for line, v in TGI_FLAGS.items()}
    return {
        "about": "Long flags each engine's CLI accepts, per pinned version line: value is 'required', 'optional' "
                 "(nargs '?') or 'none' (a switch); choices where the parser declares them. Built by "
                 "scripts/engine_flags.py; source says where each list comes from ('docs' = not read from the "
                 "engine's code).",
        "engines": engines,
        "routers": router_flags(work),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/engine-flags"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    data = build(args.work)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n", encoding="ascii")
    for engine, lines in data["engines"].items():
        for line, entry in lines.items():
            print(f"{engine} {line} ({entry['version']}): {len(entry['flags'])} flags")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
