"""What changes when a running Deployment becomes the recommended one, as a patch a GitOps review can read.

`deployment_change(current, desired)` compares the Deployment that runs (read from the cluster or a file)
with the one `inferplan render` makes of the recommendation, on what the recommendation decides: replicas,
the engine container's image, launch (entry point, model and flags) and GPU/CPU/memory resources, and the
GPU node selector. It returns one line per difference and a strategic merge patch that makes `current`
say what `desired` says on those fields and leaves everything else (other containers, volumes, env, labels
of the user's own) as it is: `kubectl patch deployment NAME --type strategic --patch-file patch.json`.

Arguments are compared by meaning, not by spelling: `--flag=value` and `--flag value` are the same, flag
order does not matter, and `sh -c "vllm serve ..."` is read as the command it runs. When they differ, the
patch replaces the container's command and arguments with the rendered ones as a whole (a partial list edit
of argv would be unreadable and fragile).

The summary lines go where the Deployment's readers may not look (a plan's status, a review): the value of a
secret-like flag or variable (`--api-key`, `--hf-token`, `HF_TOKEN=...`, `secret_name`) and the credentials of a
URL are shown as `<redacted>`. The patch needs no redaction: it holds only what the rendering sets, never a value
of the running Deployment.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from inferplan.deploy.manifests import POOL_ROLES, ROLE_LABEL, deployment, pool_deployment, tolerated
from inferplan.planner.catalog.gpus import GPU_VENDORS

if TYPE_CHECKING:
    from inferplan.planner.request import PlanRequest
    from inferplan.planner.results import Candidate

GPU_RESOURCES = tuple(vendor.resource for vendor in GPU_VENDORS.values())
"""Extended resources a GPU container asks for; the engine's container is the one that asks for one."""
GPU_SELECTOR_LABELS = tuple(vendor.product_label for vendor in GPU_VENDORS.values())
"""Node labels that select a GPU type: a recommendation for another GPU type removes the ones it does not set."""


@dataclass(frozen=True)
class DeploymentDiff:
    """The difference between the running Deployment and the recommended one."""

    summary: tuple[str, ...]
    """One line per difference, e.g. 'replicas: 2 -> 3', 'args: --max-num-seqs 128 -> 256'."""
    patch: dict[str, Any]
    """Strategic merge patch for the Deployment ({} when in sync)."""

    @property
    def in_sync(self) -> bool:
        return not self.summary

    def patch_json(self) -> str:
        """The patch as compact JSON with sorted keys (the same change always prints the same text)."""
        return json.dumps(self.patch, sort_keys=True, separators=(",", ":"))


def _asks_for_a_gpu(container: Mapping[str, Any]) -> bool:
    """A GPU limit, or a GPU request alone (a manifest not yet through the API server, which would set the limit)."""
    requests = (container.get("resources") or {}).get("requests") or {}
    return any(key in _limits(container) or key in requests for key in GPU_RESOURCES)


def engine_container(pod_spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The container that runs the engine: the first one with a GPU limit (or request), else the first whose
    launch or image names an engine (`vllm`, `python -m sglang.launch_server`, `vllm/vllm-openai` ...), else the
    first one."""
    containers = [c for c in pod_spec.get("containers") or [] if isinstance(c, Mapping)]
    with_gpu = [c for c in containers if _asks_for_a_gpu(c)]
    engines = [c for c in containers if names_an_engine(c)]
    return (with_gpu or engines or containers or [None])[0]


def names_an_engine(container: Mapping[str, Any]) -> bool:
    """Whether a container's launch or image names an engine (`vllm serve`, `vllm/vllm-openai` ...); one that gives
    only arguments to an image's entry point names none."""
    return _runs_an_engine(launch_tokens(container)) or any(name in str(container.get("image") or "")
                                                             for name in _ENGINE_IMAGES)


def asks_for_a_gpu(deployment: Mapping[str, Any]) -> bool:
    """Whether a container of `deployment` asks for a GPU (else `engine_container` falls back to one whose launch
    names an engine, or the first one, which may not run an engine at all)."""
    containers = _pod(deployment).get("containers") or []
    return any(isinstance(c, Mapping) and _asks_for_a_gpu(c) for c in containers)


_MODE_FLAG = "--disaggregation-mode"  # SGLang's (and NVIDIA Dynamo's) flag of a pool's role


def pool_role(deployment: Mapping[str, Any]) -> str | None:
    """Which pool of a disaggregated deployment the running `deployment` is ("prefill" or "decode"): the
    `inferplan.io/role` label of its pods (or of the Deployment), else its engine's `--disaggregation-mode`; None
    where it says neither."""
    def mapping(value: Any, key: str) -> Mapping[str, Any]:
        found = value.get(key) if isinstance(value, Mapping) else None
        return found if isinstance(found, Mapping) else {}

    template = mapping(mapping(deployment, "spec"), "template")
    for meta in (mapping(template, "metadata"), mapping(deployment, "metadata")):
        if mapping(meta, "labels").get(ROLE_LABEL) in POOL_ROLES:
            return str(meta["labels"][ROLE_LABEL])
    pod = mapping(template, "spec")
    container = engine_container(pod) if isinstance(pod.get("containers") or [], list) else None
    tokens = launch_tokens(container) if container is not None else []
    for i, token in enumerate(tokens):
        value = token.partition("=")[2] if token.startswith(f"{_MODE_FLAG}=") else (
            tokens[i + 1] if token == _MODE_FLAG and i + 1 < len(tokens) else None)
        if value in POOL_ROLES:
            return value
    return None


def desired_deployment(request: PlanRequest, candidate: Candidate, current: Mapping[str, Any], *, name: str,
                       namespace: str | None = None, image: str | None = None) -> dict[str, Any]:
    """The Deployment that applying `candidate` (of plan `name`) makes of the running Deployment `current`, what
    `deployment_change` compares it with: for a disaggregated candidate the Deployment of the pool `current` is
    (`pool_role`), never the other pool's; else the one Deployment. Raises ValueError where `current` is neither
    pool's, and where the candidate runs as no Deployment (a replica over nodes, an engine without an image)."""
    if not candidate.roles:
        return deployment(request, candidate, name=name, namespace=namespace, image=image)
    role = pool_role(current)
    if role is None:
        running = (current.get("metadata") or {}).get("name", "the Deployment")
        raise ValueError(f"the recommendation is disaggregated: prefill and decode pools, each its own Deployment "
                         f"({name}-prefill, {name}-decode); {running} is neither's (no {ROLE_LABEL} label, no "
                         f"{_MODE_FLAG} argument): compare one pool's Deployment")
    return pool_deployment(request, candidate, name=name, role=role, namespace=namespace, image=image)


_ENGINE_PROGRAMS = frozenset({"vllm", "trtllm-serve", "text-generation-launcher", "lmdeploy"})
_ENGINE_MODULES = ("vllm.", "sglang.")  # python -m vllm.entrypoints.openai.api_server, -m sglang.launch_server
_ENGINE_IMAGES = ("vllm", "sglang", "text-generation-inference", "tensorrt-llm", "lmdeploy")  # their entry points
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;"})


def _runs_an_engine(words: Sequence[str]) -> bool:
    return any(w.rsplit("/", 1)[-1] in _ENGINE_PROGRAMS or w.startswith(_ENGINE_MODULES) for w in words)


def _script_command(script: str) -> list[str] | None:
    """The command of a shell script (`sh -c SCRIPT`) that runs the engine: of the commands its operators (`&&`,
    `;`, `|` ...) separate, the last one that names an engine's program or module, else the last one; without a
    leading `exec` and variable assignments. None where the script cannot be split."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:
        return None
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _SHELL_OPERATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    commands = [c for c in commands if c]
    engine = [c for c in commands if _runs_an_engine(c)]
    command = (engine or commands or [[]])[-1]
    while command and (command[0] == "exec" or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0])):
        command = command[1:]
    return command


def launch_tokens(container: Mapping[str, Any]) -> list[str]:
    """The container's command and arguments as one argv; `sh -c "..."` strings are split as a shell would, and
    of a script that runs several commands (`pip install ... && exec vllm serve ...`) the engine's is taken."""
    parts = [part for key in ("command", "args") if isinstance(container.get(key), list)
             for part in container[key] if isinstance(part, str)]
    if len(parts) >= 3 and parts[0].rsplit("/", 1)[-1] in ("sh", "bash") and parts[1] == "-c" and \
            (command := _script_command(parts[2])) is not None:
        return command  # what follows the script is its $0, $1 ...
    tokens: list[str] = []
    for part in parts:
        try:  # `sh -c "vllm serve ... --max-num-seqs 64"` carries the arguments in one string
            tokens.extend(shlex.split(part) if " " in part.strip() else [part])
        except ValueError:
            tokens.append(part)
    if len(tokens) >= 2 and tokens[0].rsplit("/", 1)[-1] in ("sh", "bash") and tokens[1] == "-c":
        tokens = tokens[2:]
    return tokens


def split_launch(tokens: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str | None]]:
    """(positional tokens before the first flag, {flag: value or None}) with `--a=b` read as `--a b`.

    A flag takes the next token as its value unless that token is a flag itself; a later repeat of a flag
    wins, as it does in the engines' argparse parsers."""
    positional: list[str] = []
    flags: dict[str, str | None] = {}
    i = 0
    while i < len(tokens) and not tokens[i].startswith("-"):
        positional.append(tokens[i])
        i += 1
    while i < len(tokens):
        token = tokens[i]
        if token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
            flags[name] = value
            i += 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            flags[token] = tokens[i + 1]
            i += 2
        else:
            flags[token] = None
            i += 1
    return tuple(positional), flags


def deployment_change(current: Mapping[str, Any], desired: Mapping[str, Any]) -> DeploymentDiff:
    """What to change in `current` (a Deployment as it runs) so that it runs `desired` (a rendered one).

    Raises ValueError when `current` is not a Deployment with a container, or a field the comparison reads has
    another shape than the API server gives it."""
    if current.get("kind") not in (None, "Deployment"):
        raise ValueError(f"expected a Deployment, got a {current.get('kind')}")
    problem = _shape_problem(current)
    if problem:
        raise ValueError(f"the Deployment is malformed: {problem}")
    cur_pod = _pod(current)
    want_pod = _pod(desired)
    cur_container = engine_container(cur_pod)
    want_container = engine_container(want_pod)
    if cur_container is None:
        raise ValueError("the Deployment has no container")
    if want_container is None:
        raise ValueError("the rendered Deployment has no container")
    summary: list[str] = []
    patch: dict[str, Any] = {}

    replicas = (desired.get("spec") or {}).get("replicas")
    current_replicas = (current.get("spec") or {}).get("replicas", 1)  # the API server's default
    if replicas is not None and replicas != current_replicas:
        summary.append(f"replicas: {current_replicas} -> {replicas}")
        patch.setdefault("spec", {})["replicas"] = replicas

    container_patch = _container_change(cur_container, want_container, summary)
    selector_patch = _selector_change(cur_pod.get("nodeSelector") or {}, want_pod.get("nodeSelector") or {}, summary)
    tolerations = _toleration_change(cur_pod.get("tolerations") or [], want_pod.get("tolerations") or [], summary)
    pod_patch: dict[str, Any] = {}
    if container_patch:
        pod_patch["containers"] = [{"name": cur_container.get("name"), **container_patch}]
    if selector_patch:
        pod_patch["nodeSelector"] = selector_patch
    if tolerations is not None:
        pod_patch["tolerations"] = tolerations
    if pod_patch:
        patch.setdefault("spec", {})["template"] = {"spec": pod_patch}
    return DeploymentDiff(tuple(summary), patch)


def _shape_problem(deployment: Mapping[str, Any]) -> str | None:
    """The first field the comparison reads whose shape is not the API server's (a mapping, a list of strings, a
    whole number), as 'path: expected ...'; None where every one is as the API server stores it."""
    for path in (("metadata",), ("spec",), ("spec", "template"), ("spec", "template", "spec")):
        value: Any = deployment
        for key in path:  # a parent of another shape was reported on its own path first
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is not None and not isinstance(value, Mapping):
            return f"{'.'.join(path)}: expected a mapping"
    replicas = (deployment.get("spec") or {}).get("replicas")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int)):
        return f"spec.replicas: expected a whole number, got {replicas!r}"
    pod, where = _pod(deployment), "spec.template.spec"
    if not isinstance(pod.get("containers") or [], list):
        return f"{where}.containers: expected a list"
    for i, container in enumerate(pod.get("containers") or []):
        at = f"{where}.containers[{i}]"
        if not isinstance(container, Mapping):
            return f"{at}: expected a mapping"
        for key in ("command", "args"):
            value = container.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                return f"{at}.{key}: expected a list of strings"
        resources = container.get("resources")
        if resources is not None and not isinstance(resources, Mapping):
            return f"{at}.resources: expected a mapping"
        for kind in ("limits", "requests"):
            if not isinstance((resources or {}).get(kind) or {}, Mapping):
                return f"{at}.resources.{kind}: expected a mapping"
    if not isinstance(pod.get("nodeSelector") or {}, Mapping):
        return f"{where}.nodeSelector: expected a mapping"
    tolerations = pod.get("tolerations") or []
    if not (isinstance(tolerations, list) and all(isinstance(t, Mapping) for t in tolerations)):
        return f"{where}.tolerations: expected a list of mappings"
    return None


def _pod(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}


def _limits(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return (container.get("resources") or {}).get("limits") or {}


def _show(value: Any) -> str:
    return "(none)" if value is None else str(value)


REDACTED = "<redacted>"
_SECRET_WORDS = frozenset({"secret", "secrets", "password", "passwd", "passphrase", "credential", "credentials"})
_SECRET_LAST_WORDS = frozenset({"key", "keys", "token", "apikey", "authtoken"})
_NOT_SECRET = frozenset({"--bucket-time-to-first-token", "--max-prompt-adapter-token"})
"""Flags of the engines' tables (data/engine-flags.json) that the rule takes for secrets: latency buckets, a count."""
_WORD_IN_TEXT = r"""("[^"]*"|'[^']*'|\S+)"""  # a quoted value whole: its secret may hold a space
_SECRET_FLAG_IN_TEXT = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][\w.-]*)(=|\s+)(?!-)" + _WORD_IN_TEXT)
_ASSIGNMENT_IN_TEXT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_]*)=" + _WORD_IN_TEXT)
_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")


def secret_name(name: str) -> bool:
    """Whether a flag or an environment variable holds a secret by its name: a word of it (split at `-` and `_`)
    says secret, password or credentials, or its last word is key, keys or token (`--api-key`, vLLM's `--hf-token`,
    LMDeploy's `--api-keys`, TGI's `--ngrok-authtoken`, the router's `--oracle-password`, `HF_TOKEN`,
    `AWS_SECRET_ACCESS_KEY`). A count of tokens (`--max-num-batched-tokens`) or a file of keys (`--ssl-keyfile`)
    is none: the planner sets some of them, and a review must see their values."""
    if name in _NOT_SECRET:
        return False
    words = [word for word in re.split(r"[-_]+", name.lower()) if word]
    return bool(words) and (words[-1] in _SECRET_LAST_WORDS or any(word in _SECRET_WORDS for word in words))


def redacted(text: str) -> str:
    """`text` (a launch, or a word of one) with the value of each secret-like flag (`--api-key sk-...`,
    `--hf-token=hf_...`) and variable (`HF_TOKEN=hf_...`), and the credentials of each URL
    (`https://user:pass@host`), replaced by `<redacted>`."""
    text = _URL_CREDENTIALS.sub(rf"\1{REDACTED}@", text)
    text = _SECRET_FLAG_IN_TEXT.sub(
        lambda m: f"{m[1]}{m[2]}{REDACTED}" if secret_name(m[1]) else m[0], text)
    return _ASSIGNMENT_IN_TEXT.sub(lambda m: f"{m[1]}={REDACTED}" if secret_name(m[1]) else m[0], text)


def _container_change(current: Mapping[str, Any], desired: Mapping[str, Any], summary: list[str]) -> dict[str, Any]:
    """The patch of the engine container (image, command and args, resources); appends to `summary`."""
    patch: dict[str, Any] = {}
    if desired.get("image") and desired.get("image") != current.get("image"):
        summary.append(f"image: {_show(current.get('image'))} -> {desired['image']}")
        patch["image"] = desired["image"]
    if _launch_lines(launch_tokens(current), launch_tokens(desired), summary):
        # The whole launch is replaced: an explicit empty list clears what the rendered container leaves out.
        patch["command"] = list(desired.get("command") or [])
        patch["args"] = list(desired.get("args") or [])
    resources: dict[str, Any] = {}
    for kind in ("limits", "requests"):
        have = (current.get("resources") or {}).get(kind) or {}
        want = (desired.get("resources") or {}).get(kind) or {}
        changed: dict[str, Any] = {}
        for key in sorted(set(want) | {k for k in have if k in GPU_RESOURCES}):
            old, new = have.get(key), want.get(key)
            if kind == "requests" and new is None and key in GPU_RESOURCES and \
                    _quantity(old) == _quantity(_limits(desired).get(key)):
                continue  # a GPU request equal to the limit: the API server sets it so where it is left out
            if _quantity(old) != _quantity(new):
                summary.append(f"resources.{kind}.{key}: {_show(old)} -> {_show(new)}")
                changed[key] = new  # None removes another vendor's GPU resource
        if changed:
            resources[kind] = changed
    if resources:
        patch["resources"] = resources
    return patch


_QUANTITY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
                      "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1, "k": 10**3,
                      "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def _quantity(value: Any) -> Decimal | str | None:
    """A resource quantity by its amount, as the API server compares them: 19Gi and 19456Mi, 4 and 4000m, 1 and
    "1" are the same. Text that is no quantity compares as itself."""
    if value is None:
        return None
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        return str(value)
    return Decimal(match.group(1)) * Decimal(_QUANTITY_SUFFIXES[match.group(2) or ""])


def _launch_lines(current: Sequence[str], desired: Sequence[str], summary: list[str]) -> bool:
    """Append the differences between two launches to `summary`; True when they differ."""
    cur_positional, cur_flags = split_launch(current)
    want_positional, want_flags = split_launch(desired)
    before = len(summary)
    if cur_positional != want_positional:
        summary.append(f"command: {_command_text(cur_positional) or '(none)'} -> {_command_text(want_positional)}")
    for flag in sorted(set(cur_flags) | set(want_flags)):
        if flag not in want_flags:
            summary.append(f"args: - {_flag_text(flag, cur_flags[flag])}")
        elif flag not in cur_flags:
            summary.append(f"args: + {_flag_text(flag, want_flags[flag])}")
        elif cur_flags[flag] != want_flags[flag]:
            summary.append(f"args: {flag} {_show(_value_text(flag, cur_flags[flag]))} -> "
                           f"{_show(_value_text(flag, want_flags[flag]))}")
    return len(summary) > before


def _command_text(words: Sequence[str]) -> str:
    """The words before the first flag, as a shell would read them; a word that is a whole script (one that could
    not be split) or an assignment (`env HF_TOKEN=... vllm serve`) shown without its secrets."""
    return shlex.join(redacted(word) for word in words)


def _value_text(flag: str, value: str | None) -> str | None:
    if value is None:
        return None
    return REDACTED if secret_name(flag) else redacted(value)


def _flag_text(flag: str, value: str | None) -> str:
    return flag if value is None else f"{flag} {_value_text(flag, value)}"


def _toleration_change(current: list[Mapping[str, Any]], desired: list[Mapping[str, Any]],
                       summary: list[str]) -> list[Mapping[str, Any]] | None:
    """The tolerations to set where a rendered one (the GPU taint's, `manifests.gpu_tolerations`) tolerates a taint
    none of the running ones does: the running list with those added (a strategic merge replaces the list), else
    None. Tolerations the running pods have beyond the rendered ones are theirs and stay."""
    missing = [want for want in desired if not tolerated(
        {"key": want.get("key"), "value": want.get("value") or "", "effect": want.get("effect")}, current)]
    for want in missing:
        summary.append(f"tolerations: + {want.get('key') or '*'}:{want.get('effect') or '*'} "
                       f"({want.get('operator') or 'Equal'})")
    return [*current, *missing] if missing else None


def _selector_change(current: Mapping[str, Any], desired: Mapping[str, Any], summary: list[str]) -> dict[str, Any]:
    """The node selector patch: the desired labels set, GPU labels the desired one lacks removed."""
    patch: dict[str, Any] = {}
    for key in sorted(set(desired) | {k for k in current if k in GPU_SELECTOR_LABELS}):
        old, new = current.get(key), desired.get(key)
        if old != new:
            summary.append(f"nodeSelector.{key}: {_show(old)} -> {_show(new)}")
            patch[key] = new
    return patch
