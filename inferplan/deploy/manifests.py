"""Kubernetes objects that run a planned deployment: the engine's container, a Deployment (or a LeaderWorkerSet
when one replica spans nodes), its PodDisruptionBudget, its Service and the ConfigMap of the engine's files, or a
KServe InferenceService. Plain dicts, no Kubernetes client: the same inputs always give the same objects, key order
included, so the YAML they print is stable for GitOps review (docs/deploy.md says how every field is derived).

The engine runs exactly the arguments the plan chose (`Candidate.engine_args`); rendering adds only what a
pod needs to be reachable and observable: the listen address and port (`SERVING_FLAGS`), metrics where the
engine has them off by default, and, for a replica over several nodes, the engine's multi-node launch.
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from inferplan.deploy.bounds import replica_bounds
from inferplan.planner.catalog.checkpoints import checkpoint_precision, download_bytes
from inferplan.planner.catalog.engine_args import DEFAULT_VERSIONS, ROUTER_REPLICAS, router_flags, version_line
from inferplan.planner.catalog.engines import parse_version
from inferplan.planner.catalog.gpus import GPU_VENDORS, GpuSpec, load_gpu_catalog
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.memory import weight_bytes
from inferplan.planner.request import PlanRequest
from inferplan.planner.results import Candidate

TARGETS = ("deployment", "kserve")
PORT = 8000
"""The port every engine is told to listen on, so the Service, the probes and the scrape port never vary."""
FILES_DIR = "/etc/inferplan/engine"
"""Where the ConfigMap of `Candidate.engine_files` is mounted; arguments naming a file get this path."""
CACHE_DIR = "/hf-cache"
"""The Hugging Face cache (HF_HOME): the checkpoint is downloaded here on the pod's first start."""
HF_TOKEN_SECRET = "hf-token"
"""Secret (key `token`) whose value becomes HF_TOKEN, for gated repositories; optional: pods start without it."""
MANAGED_BY = "inferplan"
GIB = 2**30
IMAGE_PULL_S = 600
"""What a Deployment's rollout allows for scheduling a pod and pulling the engine's image (several GiB) before its
startup probe's budget begins: `progressDeadlineSeconds` is the two together."""

# The engines' published server images, by (engine, GPU vendor); `{v}` is the version without a leading "v".
# Where the names come from (each engine's own install / deployment docs):
# - vLLM: docs.vllm.ai "Using Docker" (deployment/docker.md): Docker Hub vllm/vllm-openai, tagged v<version>.
# - SGLang: docs "Install SGLang", method "Using docker": Docker Hub lmsysorg/sglang, tagged v<version>.
# - TGI: docs "Quick Tour" and "Using TGI with AMD GPUs": ghcr.io/huggingface/text-generation-inference:<version>
#   and :<version>-rocm.
# - TensorRT-LLM: docs "Pre-built release container images on NGC": nvcr.io/nvidia/tensorrt-llm/release:<version>
#   (NVIDIA only).
# - LMDeploy: docs "Installation", Docker: Docker Hub openmmlab/lmdeploy, tagged v<version>-cu12.
# llama.cpp, MLC-LLM and ExLlama publish no server image that takes the planned arguments: not rendered.
# AMD images are built per GPU architecture: `_AMD_IMAGES`.
_IMAGES: dict[tuple[str, str], str] = {
    ("vllm", "nvidia"): "vllm/vllm-openai:v{v}",
    ("sglang", "nvidia"): "lmsysorg/sglang:v{v}",
    ("tgi", "nvidia"): "ghcr.io/huggingface/text-generation-inference:{v}",
    ("tensorrt-llm", "nvidia"): "nvcr.io/nvidia/tensorrt-llm/release:{v}",
    ("lmdeploy", "nvidia"): "openmmlab/lmdeploy:v{v}-cu12",
}

# ROCm images by (engine, pinned version line) and GPU family: CDNA 3 (MI300X, MI325X: gfx942), CDNA 4 (MI355X:
# gfx950). A family missing from a line has no image that runs on it (give one with --image).
# - vLLM 0.11 line: upstream vLLM publishes vllm/vllm-openai-rocm:v<version> from 0.16.0 on (read in the vllm
#   0.16.0 sdist: .buildkite/scripts/annotate-release.sh pushes `vllm/vllm-openai-rocm:v${RELEASE_VERSION}`, and
#   docs/getting_started/installation/gpu.rocm.inc.md: "official docker images ... on upstream vLLM docker hub"
#   since 2026-01-20; docker/Dockerfile.rocm_base builds gfx942 and gfx950; the image's entry point is
#   `vllm serve`). The 0.11.2, 0.12.0, 0.14.0 and 0.14.1 sdists publish no ROCm image (0.15 has no sdist to read):
#   their docs point to AMD's rocm/vllm images, tagged by ROCm version and build date, none of which could be
#   checked here. A version before 0.16.0 (the pinned 0.11.2 among them) is therefore rendered with the 0.16.0
#   image (`_AMD_FIRST_VERSION`); every flag the planner and rendering give vLLM 0.11 is an EngineArgs field of
#   0.16.0 (vllm/engine/arg_utils.py: model, tensor_parallel_size, pipeline_parallel_size, max_num_seqs,
#   gpu_memory_utilization, max_model_len, dtype, quantization, kv_cache_dtype, max_num_batched_tokens,
#   enable_chunked_prefill, distributed_executor_backend). An AMD build of the exact release goes through --image.
# - vLLM 0.6 line: the one tag vLLM's own docs name (deployment/k8s.md, ROCm example, read in the 0.11.2 sdist),
#   ROCm 6.2 for MI300, vLLM 0.6.4; ROCm 6.2 predates gfx950, so no MI355X image.
# - SGLang: docs platforms/amd_gpu.md: v<version>-rocm630 (0.4 line) and v<version>-rocm630-mi30x (0.5 line, for
#   MI300X/MI325X). The MI355X build of the 0.5 line, v<version>-rocm700-mi35x (ROCm 7.0, gfx950), follows the
#   tag scheme of SGLang's docker/Dockerfile.rocm; it is NOT verified here (the sglang sdist ships no Dockerfile).
# - TGI: "Using TGI with AMD GPUs": :<version>-rocm (one ROCm build; rendered for every AMD family as before).
_AMD_IMAGES: dict[tuple[str, str], dict[str, str]] = {
    ("vllm", "0.6"): {"cdna3": "rocm/vllm:rocm6.2_mi300_ubuntu20.04_py3.9_vllm_0.6.4"},
    ("vllm", "0.11"): {"cdna3": "vllm/vllm-openai-rocm:v{v}", "cdna4": "vllm/vllm-openai-rocm:v{v}"},
    ("sglang", "0.4"): {"cdna3": "lmsysorg/sglang:v{v}-rocm630"},
    ("sglang", "0.5"): {"cdna3": "lmsysorg/sglang:v{v}-rocm630-mi30x", "cdna4": "lmsysorg/sglang:v{v}-rocm700-mi35x"},
    ("tgi", "2"): {"cdna3": "ghcr.io/huggingface/text-generation-inference:{v}-rocm",
                   "cdna4": "ghcr.io/huggingface/text-generation-inference:{v}-rocm"},
    ("tgi", "3"): {"cdna3": "ghcr.io/huggingface/text-generation-inference:{v}-rocm",
                   "cdna4": "ghcr.io/huggingface/text-generation-inference:{v}-rocm"},
}
_AMD_FIRST_VERSION = {("vllm", "0.11"): "0.16.0"}
"""The first release with a ROCm image of the line's tag scheme: an older version is rendered with it."""
RENDERABLE_ENGINES = tuple(sorted({engine for engine, _ in (*_IMAGES, *_AMD_IMAGES)}))

# Flags that make the engine listen on every address at PORT and export Prometheus metrics (checked against
# the pinned parsers in the tests). vLLM, TGI and TensorRT-LLM serve /metrics on their own; SGLang and LMDeploy
# only with --enable-metrics.
SERVING_FLAGS: dict[str, tuple[str, ...]] = {
    "vllm": ("--host", "0.0.0.0", "--port", str(PORT)),
    "sglang": ("--host", "0.0.0.0", "--port", str(PORT), "--enable-metrics"),
    "tgi": ("--hostname", "0.0.0.0", "--port", str(PORT)),
    "tensorrt-llm": ("--host", "0.0.0.0", "--port", str(PORT)),
    "lmdeploy": ("--server-name", "0.0.0.0", "--server-port", str(PORT), "--enable-metrics"),
}
HEALTH_PATH = "/health"
"""Every renderable engine answers GET /health with 200 once the model is loaded (vLLM, SGLang, TGI,
trtllm-serve, LMDeploy's api_server)."""
TGI_METRICS_PORT = 9000
"""TGI 3 serves /metrics on its own port (--prometheus-port, default 9000); TGI 2 on the main port."""

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


# ----------------------------------------------------------------------------------------------------------
# Images and sizes


def _bare_version(engine: str, version: str | None) -> str:
    """The release an image is tagged with. Images are tagged by release (`v0.11.2`; `vllm/vllm-openai:v0.11` does
    not exist), so a version naming only a minor line (`0.11`) is the pinned release where that is of the line
    (`DEFAULT_VERSIONS`: one whose image is known to exist), else the line's first release (`0.10` -> `0.10.0`)."""
    bare = (version or DEFAULT_VERSIONS[engine]).removeprefix("v")
    if not re.fullmatch(r"\d+\.\d+", bare):
        return bare
    pinned = DEFAULT_VERSIONS[engine]
    return pinned if pinned.startswith(f"{bare}.") else f"{bare}.0"


def engine_image(engine: str, version: str | None, vendor: str, family: str | None = None) -> str:
    """The engine's published server image for `version` (None: the pinned release, `DEFAULT_VERSIONS`) on
    GPUs of `vendor` ("nvidia" | "amd") and, for AMD, of GPU `family` ("cdna3": MI300X, MI325X; "cdna4": MI355X;
    None: "cdna3"). Raises ValueError for an engine, vendor or family without one, naming what can be rendered
    and that an image can be given instead."""
    if engine not in RENDERABLE_ENGINES:
        raise ValueError(f"no server image known for engine {engine!r}: manifests can be rendered for "
                         f"{', '.join(RENDERABLE_ENGINES)}")
    bare = _bare_version(engine, version)
    if vendor != "amd":
        template = _IMAGES.get((engine, vendor))
        if template is None:
            raise ValueError(f"{engine} publishes no {vendor.upper()} image that inferplan can name; give one "
                             "with --image or spec.engine.image")
        return template.format(v=bare)
    line = version_line(engine, version)
    family = family or "cdna3"
    by_family = _AMD_IMAGES.get((engine, line))
    if by_family is None or family not in by_family:
        built = "" if by_family is None else (f" for {family} GPUs (its ROCm images are built for "
                                              f"{', '.join(sorted(by_family))})")
        raise ValueError(f"{engine} {bare} publishes no AMD image{built} that inferplan can name; give one with "
                         "--image or spec.engine.image")
    first = _AMD_FIRST_VERSION.get((engine, line))
    if first is not None and (parse_version(bare) or (0,)) < (parse_version(first) or (0,)):
        bare = first
    return by_family[family].format(v=bare)


def image_repository(image: str) -> str:
    """An image reference's repository without its registry, tag or digest
    (`nvcr.io/nvidia/tensorrt-llm/release:1.0.0`: `nvidia/tensorrt-llm/release`); the first part of the path is a
    registry where it names a host (a dot or a port in it, or `localhost`), as the container runtimes read it."""
    parts = image.partition("@")[0].split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    parts[-1] = parts[-1].partition(":")[0]
    return "/".join(parts)


def published_repositories(engine: str) -> frozenset[str]:
    """The repositories (`image_repository`) of `engine`'s published server images, `engine_image`'s (NVIDIA's and
    AMD's builds): the images whose tag names the engine's release. Another image's tag is its own (NVIDIA NIM's
    `nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.0`, Triton's `tritonserver:24.08-trtllm-python-py3`)."""
    templates = [t for (name, _), t in _IMAGES.items() if name == engine]
    templates += [t for (name, _), by_family in _AMD_IMAGES.items() if name == engine for t in by_family.values()]
    return frozenset(image_repository(t) for t in templates)


def _gpu(candidate: Candidate) -> GpuSpec:
    return load_gpu_catalog().get(candidate.gpu_type)


def _gib(value_bytes: float) -> int:
    return max(1, math.ceil(value_bytes / GIB))


def _checkpoint_bytes(request: PlanRequest, candidate: Candidate) -> float:
    precision = candidate.precision
    if candidate.provenance.get("checkpoint") == "online":
        precision = "bf16"  # the engine quantises the repository's 16-bit weights while loading
    try:  # as the repository holds it (Meta's FP8 405B keeps its attention 16-bit: `checkpoint_precision`)
        return float(weight_bytes(request.arch, checkpoint_precision(precision, candidate.checkpoint)))
    except Exception:  # a precision the catalog does not size (GGUF, MLC): the 16-bit size bounds it
        return float(weight_bytes(request.arch, weight_precision("bf16")))


def checkpoint_gib(request: PlanRequest, candidate: Candidate) -> int:
    """Size of the checkpoint's weights on disk [GiB]: the weights at the planned precision, or at 16 bits when the
    engine quantises the model's own (16-bit) repository while loading."""
    return _gib(_checkpoint_bytes(request, candidate))


def download_gib(request: PlanRequest, candidate: Candidate) -> int:
    """What the engine downloads from the checkpoint's repository [GiB]: its weights plus the extra weight files
    the repository holds that the engine's download rule takes (`checkpoints.download_bytes`: Mistral AI's
    consolidated.safetensors, a second copy of the weights, is downloaded by every engine)."""
    return _gib(download_bytes(candidate.checkpoint or request.served_model, request.engine,
                               _checkpoint_bytes(request, candidate)))


@dataclass(frozen=True)
class PodSizing:
    """What one pod of a replica asks for (docs/deploy.md, "Resources"): `gpus` of the node's GPUs, CPU
    cores and memory [GiB] requested, a memory limit [GiB], shared memory [GiB], the cache volume [GiB] and
    the start-up budget [s] the startup probe allows for downloading and loading the weights."""

    gpus: int
    cpu: int
    memory_gib: int
    memory_limit_gib: int
    shm_gib: int
    cache_gib: int
    startup_s: int


def pod_sizing(request: PlanRequest, candidate: Candidate, gpus: int, nodes: int = 1) -> PodSizing:
    """Resources of one pod holding `gpus` GPUs of a replica spread over `nodes` pods.

    CPU: 2 cores for the API server and tokenizer plus 2 per GPU worker (each drives its GPU from one busy
    thread). Memory: 4 GiB plus 4 GiB per GPU process (CUDA context, pinned buffers) plus the shared memory,
    which counts against the pod; the limit adds this pod's share of the checkpoint, which passes through host
    memory while it loads. Shared memory: 1 GiB per GPU, at least 2 (NCCL's buffers between the GPUs of a
    replica). Cache: what the engine downloads (`download_gib`: the weights, and a second copy where the
    repository holds one the engine also takes) plus 10% and 2 GiB. Start-up: 10 minutes plus 30 s per GiB
    downloaded (a download at about 35 MB/s, then loading and CUDA-graph capture)."""
    ckpt = checkpoint_gib(request, candidate)
    download = download_gib(request, candidate)
    shm = max(2, gpus)
    memory = 4 + 4 * gpus + shm
    share = math.ceil(ckpt / nodes)
    return PodSizing(gpus=gpus, cpu=2 + 2 * gpus, memory_gib=memory, memory_limit_gib=memory + share, shm_gib=shm,
                     cache_gib=math.ceil(download * 1.1) + 2, startup_s=60 * math.ceil((600 + 30 * download) / 60))


def nodes_per_replica(request: PlanRequest, candidate: Candidate) -> int:
    """Pods (nodes) one replica needs: 1 when its GPUs fit one node of its GPU type (the plan's gpusPerNode,
    else the catalog's chassis), else the replica's GPUs over a node's. Raises ValueError when they do not
    divide evenly (the engines split a model over nodes of equal GPU counts)."""
    per_node = request.gpus_per_node.get(candidate.gpu_type) or _gpu(candidate).gpus_per_node
    if candidate.gpus_per_replica <= per_node:
        return 1
    if candidate.gpus_per_replica % per_node:
        raise ValueError(f"a replica of {candidate.gpus_per_replica} GPUs does not split evenly over nodes of "
                         f"{per_node} {candidate.gpu_type}")
    return candidate.gpus_per_replica // per_node


# ----------------------------------------------------------------------------------------------------------
# Names and labels


def dns_label(text: str) -> str:
    """`text` as a DNS-1035 label (what Service names must be): lowercase letters, digits and '-', starting with
    a letter, at most 63 characters; e.g. 'meta-llama/Llama-3.1-8B-Instruct' -> 'llama-3-1-8b-instruct' (the
    last path component)."""
    name = re.sub(r"[^a-z0-9]+", "-", text.rsplit("/", 1)[-1].lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"llm-{name}".rstrip("-")
    return name[:63].rstrip("-")


def check_name(name: str) -> str:
    """`name` itself when it can name every rendered object (a DNS-1035 label, as a Service name must be);
    else ValueError."""
    if not isinstance(name, str) or not _DNS_LABEL.match(name):  # a plan file's `metadata: {name: 123}` too
        raise ValueError(f"name {name!r} is not a DNS-1035 label (lowercase letters, digits and '-', starting with "
                         "a letter, at most 63 characters)")
    return name


LABEL_VALUE_MAX = 63
STATEFULSET_NAME_MAX = 52
"""The longest StatefulSet name whose pods can be created: each carries the label `controller-revision-hash:
NAME-<hash of up to 10 characters>`, a label value of at most 63 characters (a longer name is accepted, but its
pods are refused)."""


def _check_derived_name(name: str, derived: str, limit: int, why: str) -> None:
    """ValueError naming `name` and the longest it may be when `derived`, made from it, is over `limit` characters
    (`why` says what `derived` is, with NAME for the name)."""
    if len(derived) > limit:
        longest = limit - (len(derived) - len(name))
        raise ValueError(f"name {name!r} is {len(name)} characters, too long {why} (at most {limit} characters): "
                         f"the longest name allowed is {longest} characters")


def labels(name: str) -> dict[str, str]:
    """The labels of every rendered object and pod."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": MANAGED_BY, "inferplan.io/plan": name}


def selector_labels(name: str) -> dict[str, str]:
    """The labels the Deployment and the Service select pods by (immutable once applied: no version in them)."""
    return {"app.kubernetes.io/name": name, "inferplan.io/plan": name}


def metadata(name: str, namespace: str | None, *, plan: str | None = None,
             annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An object's metadata: its name, namespace (left out when None), the labels of `plan` (default: `name`)."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = labels(plan or name)
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return meta


def files_config_map_name(name: str) -> str:
    return f"{name}-engine-files"


ROLE_LABEL = "inferplan.io/role"
"""What a pod does in its plan: `prefill`, `decode` or `router` in a disaggregated deployment, `leader` or `worker`
in a LeaderWorkerSet group; the Services select on it."""


def lws_name(name: str) -> str:
    """The LeaderWorkerSet of plan `name`: `NAME-lws`, not `NAME`. LeaderWorkerSet's controller makes a headless
    Service named after the LeaderWorkerSet (only where no Service of that name exists), through which every pod of a
    group resolves LWS_LEADER_ADDRESS (`<leader pod>.<LWS name>.<namespace>`); the clients' Service keeps the plan's
    name, as for every other shape, so the two must differ."""
    return f"{name}-lws"


# ----------------------------------------------------------------------------------------------------------
# The container


def _image(request: PlanRequest, candidate: Candidate, image: str | None) -> str:
    gpu = _gpu(candidate)
    return image or request.engine_image or engine_image(request.engine, request.engine_version, gpu.vendor,
                                                         gpu.family)


def _quantity_gib(gib: int) -> str:
    return f"{gib}Gi"


def _probe(period_s: int, failures: int, timeout_s: int) -> dict[str, Any]:
    return {"httpGet": {"path": HEALTH_PATH, "port": "http"}, "periodSeconds": period_s,
            "timeoutSeconds": timeout_s, "failureThreshold": failures}


def _engine_args(candidate: Candidate) -> list[str]:
    """The planned arguments, with every argument that names one of the engine's files given its mounted path."""
    return [f"{FILES_DIR}/{arg}" if arg in candidate.engine_files else arg for arg in candidate.engine_args]


def _ports(request: PlanRequest) -> list[dict[str, Any]]:
    ports = [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
    if request.engine == "tgi" and version_line("tgi", request.engine_version) == "3":
        ports.append({"name": "metrics", "containerPort": TGI_METRICS_PORT, "protocol": "TCP"})
    return ports


def engine_container(request: PlanRequest, candidate: Candidate, *, image: str | None = None,
                     sizing: PodSizing | None = None, launch: tuple[list[str], list[str]] | None = None,
                     probes: bool = True) -> dict[str, Any]:
    """The container named `engine` that runs the candidate: image (`image`, else the plan's engine.image,
    else the engine's published one), command and arguments, GPUs, CPU and memory, probes on the health
    endpoint, shared memory, the engine's files, the model cache and HF_TOKEN from an optional Secret.

    `sizing` and `launch` (command, args) are for a pod of a multi-node replica; by default one pod holds the
    whole replica and runs the planned command. TGI gets no `command`: its image's entry point (a wrapper
    that prepares the environment, then runs text-generation-launcher) is the engine's entry point."""
    sizing = sizing or pod_sizing(request, candidate, candidate.gpus_per_replica)
    if launch is None:
        command = [] if request.engine == "tgi" else shlex.split(candidate.engine_command)
        launch = (command, [*_engine_args(candidate), *SERVING_FLAGS.get(request.engine, ())])
    command, args = launch
    resource = GPU_VENDORS[_gpu(candidate).vendor].resource
    container: dict[str, Any] = {"name": "engine", "image": _image(request, candidate, image)}
    if command:
        container["command"] = command
    container["args"] = args
    container["env"] = [
        {"name": "HF_HOME", "value": CACHE_DIR},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": "token",
                                                            "optional": True}}},
    ]
    container["ports"] = _ports(request)
    container["resources"] = {
        "requests": {"cpu": str(sizing.cpu), "memory": _quantity_gib(sizing.memory_gib),
                     "ephemeral-storage": _quantity_gib(sizing.cache_gib)},
        "limits": {resource: str(sizing.gpus), "memory": _quantity_gib(sizing.memory_limit_gib)},
    }
    if probes:
        container["startupProbe"] = _probe(10, sizing.startup_s // 10, 5)
        container["readinessProbe"] = _probe(10, 3, 5)
        container["livenessProbe"] = _probe(30, 5, 10)
    mounts = [{"name": "shm", "mountPath": "/dev/shm"}, {"name": "hf-cache", "mountPath": CACHE_DIR}]
    if candidate.engine_files:
        mounts.append({"name": "engine-files", "mountPath": FILES_DIR, "readOnly": True})
    container["volumeMounts"] = mounts
    return container


def _volumes(name: str, candidate: Candidate, sizing: PodSizing) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": _quantity_gib(sizing.shm_gib)}},
        {"name": "hf-cache", "emptyDir": {"sizeLimit": _quantity_gib(sizing.cache_gib)}},
    ]
    if candidate.engine_files:
        volumes.append({"name": "engine-files", "configMap": {"name": files_config_map_name(name)}})
    return volumes


def gpu_tolerations(resource: str) -> list[dict[str, str]]:
    """The tolerations of a pod that asks for `resource` (`nvidia.com/gpu`, `amd.com/gpu`): the taint of that key,
    any value, NoSchedule, which GPU nodes carry to keep pods that ask for no GPU off them (GKE sets
    nvidia.com/gpu=present:NoSchedule on every GPU node pool; the ExtendedResourceToleration admission plugin adds
    this same toleration where it runs). A taint of any other key keeps the pod off (`tolerated`)."""
    return [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}]


def tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Whether one of `tolerations` tolerates `taint` (a node's spec.taints item), by Kubernetes' rules: the keys
    match (an empty key with Exists matches every key), the effects match (an empty effect matches every effect),
    and the operator is Exists or the values are equal (Equal, the default)."""
    for toleration in tolerations:
        key, effect = toleration.get("key") or "", toleration.get("effect") or ""
        exists = toleration.get("operator") == "Exists"
        if (key and key != taint.get("key")) or (not key and not exists):
            continue
        if effect and effect != taint.get("effect"):
            continue
        if exists or (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _pod_spec(name: str, candidate: Candidate, container: dict[str, Any], sizing: PodSizing) -> dict[str, Any]:
    return {"nodeSelector": dict(sorted(candidate.node_selector.items())),
            "tolerations": gpu_tolerations(GPU_VENDORS[_gpu(candidate).vendor].resource), "containers": [container],
            "volumes": _volumes(name, candidate, sizing)}


# ----------------------------------------------------------------------------------------------------------
# Objects


def config_map(candidate: Candidate, *, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    """The ConfigMap of the engine's files (e.g. TensorRT-LLM's extra options YAML); None when it has none."""
    if not candidate.engine_files:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": metadata(files_config_map_name(name), namespace, plan=name),
            "data": dict(sorted(candidate.engine_files.items()))}


def deployment(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None = None,
               image: str | None = None) -> dict[str, Any]:
    """An apps/v1 Deployment of `candidate.replicas` pods, each one replica (all its GPUs on one node).

    Rolling updates add one pod before removing one (maxSurge 1, maxUnavailable 0), so serving capacity never
    drops below the plan; that needs one replica's GPUs free during a rollout. A rollout is declared stalled
    (Progressing=False, ProgressDeadlineExceeded) only once a new pod has had the image pull and the startup
    probe's whole budget to become available (`progressDeadlineSeconds`; Kubernetes' default, 600 s, is shorter than
    a model's download and load). Raises ValueError when a
    replica spans nodes (see `leader_worker_set`), and for a disaggregated candidate, whose pools are a Deployment
    each (`pool_deployment`)."""
    check_name(name)
    if candidate.roles:
        raise ValueError(f"a disaggregated recommendation runs as prefill and decode pools, each its own Deployment "
                         f"({name}-prefill, {name}-decode), not as one Deployment {name}")
    if nodes_per_replica(request, candidate) > 1:
        raise ValueError(f"a replica of {candidate.gpus_per_replica} {candidate.gpu_type} spans nodes: it runs as a "
                         "LeaderWorkerSet, not a Deployment")
    sizing = pod_sizing(request, candidate, candidate.gpus_per_replica)
    container = engine_container(request, candidate, image=image, sizing=sizing)
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(name, namespace),
        "spec": {
            "replicas": candidate.replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "progressDeadlineSeconds": IMAGE_PULL_S + sizing.startup_s,
            "template": {"metadata": {"labels": labels(name)},
                         "spec": _pod_spec(name, candidate, container, sizing)},
        },
    }


def service(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None = None,
            image: str | None = None) -> dict[str, Any]:
    """A ClusterIP Service on the engine's HTTP port (and TGI 3's metrics port). For a multi-node replica it
    selects the leader pods only, the ones that serve HTTP, by the role label of their template (LeaderWorkerSet
    labels no pod with a role). `image` is accepted for a signature like the others'."""
    check_name(name)
    selector = selector_labels(name)
    if nodes_per_replica(request, candidate) > 1:
        selector[ROLE_LABEL] = "leader"
    ports = [{"name": port["name"], "port": port["containerPort"], "targetPort": port["name"], "protocol": "TCP"}
             for port in _ports(request)]
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(name, namespace),
            "spec": {"type": "ClusterIP", "selector": selector, "ports": ports}}


# PodDisruptionBudgets: how many of a workload's pods a voluntary disruption (a node drain, a cluster upgrade, the
# cluster autoscaler removing a node) may take at once. Without one, `kubectl drain` of the nodes a plan runs on
# evicts every replica together and the plan's availability floor (constraints.minReplicas) is gone until they load
# their weights again.
# - maxUnavailable 1, never minAvailable: with one replica minAvailable 1 would refuse every eviction and block a
#   drain forever; maxUnavailable 1 lets a lone replica go (it offers no availability to keep) and, with more, lets
#   them go one at a time. It follows any replica count, so an autoscaler (HPA, KEDA) changing it needs no change
#   here.
# - unhealthyPodEvictionPolicy AlwaysAllow: a pod that is not Ready (crash-looping, or still loading its weights)
#   serves nothing, so evicting it costs no availability; with the default (IfHealthyBudget) a deployment whose
#   pods are all unready would block a drain until they recover (Kubernetes' documentation recommends AlwaysAllow).
# - Rendered for a workload of 2 or more replicas (`render`), or one an autoscaler may take to 2 or more
#   (`autoscaling.hand_replicas_to_autoscaler`): with one replica a budget of maxUnavailable 1 protects nothing.
DISRUPTION_BUDGET_MIN_REPLICAS = 2
"""A workload gets a PodDisruptionBudget when it may run this many replicas or more."""


def pod_disruption_budget(workload: Mapping[str, Any]) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget of a rendered Deployment or LeaderWorkerSet, named and labelled as it is:
    `maxUnavailable: 1` over the pods it runs (the comment above says why not minAvailable).

    A Deployment's pods by its own selector. A LeaderWorkerSet's by the plan's selector labels, which every pod of
    every group carries (leaders and workers: its template labels differ only in `inferplan.io/role`). Not the
    leaders alone: LeaderWorkerSet recreates a whole group when any of its pods goes
    (`RecreateGroupOnPodRestart`), so evicting one worker takes its group down as surely as evicting the leader,
    and a budget over the leaders would let a drain evict workers of every group at once. Over all the pods, one
    pod away (or one group being recreated: its leader is unready until the engine serves again) uses the budget
    up, so a drain takes one group at a time and waits for it to serve again. The disruption controller counts the
    expected pods from their StatefulSets (LeaderWorkerSet runs the leaders and each group's workers as
    StatefulSets), as it does for any pods whose controller has a scale."""
    kind = workload.get("kind")
    meta = workload["metadata"]
    if kind == "Deployment":
        selector = dict(workload["spec"]["selector"]["matchLabels"])
    elif kind == "LeaderWorkerSet":
        selector = selector_labels(meta["labels"]["inferplan.io/plan"])
    else:
        raise ValueError(f"no PodDisruptionBudget for a {kind}: only for a Deployment or a LeaderWorkerSet")
    own = {key: meta[key] for key in ("name", "namespace") if meta.get(key)}
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {**own, "labels": dict(meta["labels"])},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector},
                     "unhealthyPodEvictionPolicy": "AlwaysAllow"}}


def with_disruption_budgets(objects: list[dict[str, Any]], replicas: int | None = None) -> list[dict[str, Any]]:
    """`objects` with a PodDisruptionBudget (`pod_disruption_budget`) after each Deployment or LeaderWorkerSet that
    runs `DISRUPTION_BUDGET_MIN_REPLICAS` replicas or more and has none yet: its own `spec.replicas`, or `replicas`
    where given (the most an autoscaler may run, for a workload handed to one)."""
    budgeted = {o["metadata"]["name"] for o in objects if o["kind"] == "PodDisruptionBudget"}
    out = []
    for obj in objects:
        out.append(obj)
        if obj["kind"] not in ("Deployment", "LeaderWorkerSet") or obj["metadata"]["name"] in budgeted:
            continue
        most = replicas if replicas is not None else obj["spec"].get("replicas", 1)
        if most >= DISRUPTION_BUDGET_MIN_REPLICAS:
            out.append(pod_disruption_budget(obj))
    return out


def _multi_node_launch(request: PlanRequest, candidate: Candidate, nodes: int,
                       role: str) -> tuple[list[str], list[str]]:
    """(command, args) of the leader or a worker of a replica over `nodes` pods.

    vLLM: a Ray cluster per replica (vLLM's LeaderWorkerSet guide): the leader starts the Ray head, waits for
    every worker's node, then serves with `--distributed-executor-backend ray`; a worker joins the head at
    LWS_LEADER_ADDRESS. SGLang: every pod runs the server with --nnodes, --node-rank (LWS_WORKER_INDEX, 0 on
    the leader) and --dist-init-addr (the leader's address); only rank 0 serves HTTP."""
    engine = request.engine
    args = _engine_args(candidate)
    if engine == "sglang":
        command = shlex.split(candidate.engine_command)
        return command, [*args, *SERVING_FLAGS["sglang"], "--nnodes", str(nodes), "--node-rank",
                         "$(LWS_WORKER_INDEX)", "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000"]
    if engine == "vllm":
        if role == "worker":
            return ["sh", "-c"], ["exec ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"]
        serve = shlex.join([*shlex.split(candidate.engine_command), *args, *SERVING_FLAGS["vllm"],
                            "--distributed-executor-backend", "ray"])
        wait = ("until [ \"$(python3 -c 'import ray; ray.init(address=\"auto\"); "
                "print(sum(1 for n in ray.nodes() if n[\"Alive\"]))' 2>/dev/null)\" = \"$(LWS_GROUP_SIZE)\" ]; "
                "do sleep 5; done")
        return ["sh", "-c"], [f"ray start --head --port=6379 && {wait} && exec {serve}"]
    raise ValueError(f"a replica over {nodes} nodes is rendered for vllm (Ray) and sglang only, not {engine}")


def leader_worker_set(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None = None,
                      image: str | None = None) -> dict[str, Any]:
    """A LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) named `lws_name(name)`: `candidate.replicas` groups of one
    leader and nodes - 1 workers, one pod per node with a node's GPUs each, labelled with their role (`leader`,
    `worker`). A group is recreated whole when one of its pods restarts (the engine cannot lose a rank). Only the
    leader is probed: it serves HTTP."""
    check_name(name)
    last_group = max(candidate.replicas, replica_bounds(request, candidate).max) - 1  # an autoscaler may add groups
    _check_derived_name(name, f"{lws_name(name)}-{last_group}", STATEFULSET_NAME_MAX,
                        f"for a replica over nodes: the workers of group {last_group} (the last of "
                        f"{last_group + 1} at most) run as the StatefulSet NAME-lws-{last_group}, whose name "
                        "its pods' controller-revision-hash label holds with a hash")
    nodes = nodes_per_replica(request, candidate)
    gpus = candidate.gpus_per_replica // nodes
    sizing = pod_sizing(request, candidate, gpus, nodes)
    templates = {}
    for role in ("leader", "worker"):
        launch = _multi_node_launch(request, candidate, nodes, role)
        container = engine_container(request, candidate, image=image, sizing=sizing, launch=launch,
                                     probes=role == "leader")
        templates[role] = {"metadata": {"labels": {**labels(name), ROLE_LABEL: role}},
                           "spec": _pod_spec(name, candidate, container, sizing)}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": metadata(lws_name(name), namespace, plan=name),
        "spec": {
            "replicas": candidate.replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": {
                "size": nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": templates["leader"],
                "workerTemplate": templates["worker"],
            },
        },
    }


def inference_service(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None = None,
                      image: str | None = None) -> dict[str, Any]:
    """A KServe InferenceService (serving.kserve.io/v1beta1) whose predictor runs the same container.

    RawDeployment mode (a plain Deployment and Service, no Knative): the pod keeps its node selector, startup
    probe and memory volumes, which Knative restricts. `minReplicas` is the recommendation and `maxReplicas`
    the autoscaling bound (bounds.replica_bounds); KServe's own autoscaler is switched off
    (`autoscalerClass: external`), because it scales on CPU, which does not follow an engine's load: render
    `--autoscaling hpa|keda` to scale on requests. KServe names the container `kserve-container` itself, so
    it is rendered so. A replica over several nodes is not rendered for KServe (ValueError)."""
    check_name(name)
    if nodes_per_replica(request, candidate) > 1:
        raise ValueError("a replica that spans nodes is rendered as a LeaderWorkerSet (--target deployment), "
                         "not for KServe")
    # RawDeployment mode: the Deployment and Service NAME-predictor, whose pods and selector carry this label.
    _check_derived_name(name, f"isvc.{name}-predictor", LABEL_VALUE_MAX,
                        "for KServe: it labels the predictor's pods app: isvc.NAME-predictor")
    sizing = pod_sizing(request, candidate, candidate.gpus_per_replica)
    container = {**engine_container(request, candidate, image=image, sizing=sizing), "name": "kserve-container"}
    bounds = replica_bounds(request, candidate)
    annotations = {"serving.kserve.io/autoscalerClass": "external",
                   "serving.kserve.io/deploymentMode": "RawDeployment",
                   "inferplan.io/max-replicas-from": bounds.max_from}
    predictor = {"minReplicas": candidate.replicas, "maxReplicas": max(bounds.max, candidate.replicas),
                 **_pod_spec(name, candidate, container, sizing)}
    return {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
            "metadata": metadata(name, namespace, annotations=annotations), "spec": {"predictor": predictor}}


# ----------------------------------------------------------------------------------------------------------
# Disaggregated prefill and decode (SGLang)

BOOTSTRAP_PORT = 8998
"""SGLang's default --disaggregation-bootstrap-port: a decode server fetches the KV of a request from the prefill
server's bootstrap server at this port; the router learns it from the pod annotation `BOOTSTRAP_ANNOTATION`."""
BOOTSTRAP_ANNOTATION = "sglang.ai/bootstrap-port"  # sglang-router's service discovery reads it (router_args.py)
ROUTER_METRICS_PORT = 29000  # sglang-router's --prometheus-port default


def _role_candidate(candidate: Candidate, role: str) -> Candidate:
    """`candidate` as one of its pools: the role's GPU type, node selector, GPUs, replicas, batch and arguments."""
    r = next(r for r in candidate.roles if r.role == role)
    return candidate.model_copy(update={
        "gpu_type": r.gpu_type, "node_selector": r.node_selector, "gpus_per_replica": r.gpus_per_replica,
        "nodes_per_replica": r.nodes_per_replica, "pipeline_parallel": 1, "replicas": r.replicas,
        "gpus": r.gpus, "max_batch": r.max_batch, "engine_args": r.engine_args, "roles": [],
        "data_parallel_attention": r.data_parallel_attention, "expert_parallel": r.expert_parallel})


def _with_role(obj: dict[str, Any], name: str, role: str) -> dict[str, Any]:
    """A Deployment of plan `name` relabelled as its `role`: the plan's labels and the role's on the object, its
    selector and its pods (so the plan's Service and the router tell the pools apart)."""
    role_labels = {**labels(name), ROLE_LABEL: role}
    obj["metadata"]["labels"] = role_labels
    obj["spec"]["selector"] = {"matchLabels": {**selector_labels(name), ROLE_LABEL: role}}
    obj["spec"]["template"]["metadata"]["labels"] = dict(role_labels)
    return obj


def _pool(request: PlanRequest, candidate: Candidate, *, name: str, role: str, namespace: str | None,
          image: str | None) -> dict[str, Any]:
    pool = _role_candidate(candidate, role)
    obj = _with_role(deployment(request, pool, name=check_name(f"{name}-{role}"), namespace=namespace, image=image),
                     name, role)
    if role == "prefill":
        container = obj["spec"]["template"]["spec"]["containers"][0]
        container["args"] = [*container["args"], "--disaggregation-bootstrap-port", str(BOOTSTRAP_PORT)]
        container["ports"].append({"name": "bootstrap", "containerPort": BOOTSTRAP_PORT, "protocol": "TCP"})
        obj["spec"]["template"]["metadata"]["annotations"] = {BOOTSTRAP_ANNOTATION: str(BOOTSTRAP_PORT)}
    return obj


def router_args(name: str) -> list[str]:
    """sglang-router's arguments: prefill-decode mode over the plan's pods found by their labels (Kubernetes
    service discovery in the router's own namespace, `$(POD_NAMESPACE)`), every pool served at PORT, requests
    spread round robin over each pool as the plan simulated, listening on every address at PORT."""
    plan = f"inferplan.io/plan={name}"
    return ["--pd-disaggregation", "--service-discovery",
            "--prefill-selector", plan, f"{ROLE_LABEL}=prefill", "--decode-selector", plan, f"{ROLE_LABEL}=decode",
            "--service-discovery-port", str(PORT), "--service-discovery-namespace", "$(POD_NAMESPACE)",
            "--policy", "round_robin", "--host", "0.0.0.0", "--port", str(PORT),
            "--prometheus-port", str(ROUTER_METRICS_PORT)]


def _router(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None,
            image: str | None) -> list[dict[str, Any]]:
    """The router's ServiceAccount, Role (pods: get, list, watch, for its service discovery), RoleBinding and
    Deployment (two replicas, no GPU), in apply order."""
    router = check_name(f"{name}-router")
    rbac = "rbac.authorization.k8s.io/v1"
    container = {
        "name": "router",
        "image": _image(request, candidate, image),  # SGLang's images ship sglang-router
        "command": router_flags()["entry_point"].split(),
        "args": router_args(name),
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": ROUTER_METRICS_PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
        "readinessProbe": _probe(10, 3, 5),
        "livenessProbe": _probe(30, 5, 10),
    }
    role_labels = {**labels(name), ROLE_LABEL: "router"}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(router, namespace, plan=name)},
        {"apiVersion": rbac, "kind": "Role", "metadata": metadata(router, namespace, plan=name),
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": rbac, "kind": "RoleBinding", "metadata": metadata(router, namespace, plan=name),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": router},
         "subjects": [{"kind": "ServiceAccount", "name": router,
                       **({"namespace": namespace} if namespace else {})}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {**metadata(router, namespace, plan=name),
                                                                     "labels": role_labels},
         "spec": {"replicas": ROUTER_REPLICAS,
                  "selector": {"matchLabels": {**selector_labels(name), ROLE_LABEL: "router"}},
                  "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
                  "template": {"metadata": {"labels": dict(role_labels)},
                               "spec": {"serviceAccountName": router, "containers": [container]}}}},
    ]


def _check_disaggregated_name(name: str) -> None:
    """ValueError, naming `name`, where it cannot name every object of a disaggregated deployment (`NAME-prefill`,
    the longest, is a DNS-1035 label as every rendered name is)."""
    check_name(name)
    longest = max((f"{name}-{role}" for role in (*POOL_ROLES, "router")), key=len)
    _check_derived_name(name, longest, LABEL_VALUE_MAX,
                        f"for a disaggregated deployment: it names {longest.replace(name, 'NAME', 1)}")


def _check_disaggregated(request: PlanRequest, candidate: Candidate) -> None:
    """ValueError where the pools of a disaggregated candidate are not rendered: another engine than SGLang, or a
    pool whose replica spans nodes."""
    if request.engine != "sglang":
        raise ValueError(f"a disaggregated {request.engine} deployment is not rendered: its pools need a P/D proxy "
                         "in front (for vLLM's NIXL connector, llm-d's inference scheduler or vLLM's example proxy), "
                         "which inferplan does not render; each role's engine arguments are in its roles entry. "
                         "SGLang's are rendered with sglang-router")
    for role in candidate.roles:
        if nodes_per_replica(request, _role_candidate(candidate, role.role)) > 1:
            raise ValueError(f"the {role.role} pool's replica of {role.gpus_per_replica} {role.gpu_type} spans "
                             "nodes: a disaggregated pool over nodes is not rendered")


POOL_ROLES = ("prefill", "decode")


def pool_deployment(request: PlanRequest, candidate: Candidate, *, name: str, role: str,
                    namespace: str | None = None, image: str | None = None) -> dict[str, Any]:
    """The Deployment `NAME-ROLE` of one pool (`role`: "prefill" or "decode") of a disaggregated candidate, as
    `disaggregated` renders it: what a running pool is compared with (`inferplan diff`). Raises ValueError for a
    candidate without pools, another role, and where `disaggregated` does not render the pools."""
    if role not in POOL_ROLES:
        raise ValueError(f"unknown pool {role!r}; a disaggregated deployment's pools: {', '.join(POOL_ROLES)}")
    if not candidate.roles:
        raise ValueError("the recommendation has no prefill and decode pools: it runs as one Deployment")
    _check_disaggregated(request, candidate)
    _check_disaggregated_name(name)
    return _pool(request, candidate, name=name, role=role, namespace=namespace, image=image)


def disaggregated(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None = None,
                  image: str | None = None) -> list[dict[str, Any]]:
    """A disaggregated SGLang candidate's objects: a Deployment per pool (`NAME-prefill`, `NAME-decode`, each a
    replica per pod with the role's arguments; prefill pods annotated with their bootstrap port), sglang-router in
    prefill-decode mode (`NAME-router`, with the RBAC its service discovery needs), and the Service `NAME` in
    front of the router; each pool of 2 or more replicas, and the router, followed by its PodDisruptionBudget.
    Raises ValueError for another engine (vLLM's NIXL pools need a P/D proxy inferplan does not render) or a pool
    whose replica spans nodes."""
    _check_disaggregated(request, candidate)
    _check_disaggregated_name(name)
    pools = [_pool(request, candidate, name=name, role=role, namespace=namespace, image=image)
             for role in POOL_ROLES]
    front = service(request, candidate, name=name, namespace=namespace)
    front["spec"]["selector"] = {**selector_labels(name), ROLE_LABEL: "router"}
    front["spec"]["ports"] = [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}]
    return with_disruption_budgets([*pools, *_router(request, candidate, name=name, namespace=namespace, image=image),
                                    front])


def render(request: PlanRequest, candidate: Candidate, *, name: str, namespace: str | None = None,
           target: str = "deployment", image: str | None = None) -> list[dict[str, Any]]:
    """Every object that runs `candidate`, in apply order.

    target "deployment": [ConfigMap of the engine's files] + Deployment + Service, or a LeaderWorkerSet in place
    of the Deployment when a replica needs more GPUs than one node of its type has, each workload of 2 or more
    replicas followed by its PodDisruptionBudget (`with_disruption_budgets`). target "kserve": [ConfigMap]
    + InferenceService. A disaggregated candidate (SGLang): its pools, router and Service, and the budgets of
    those workloads (`disaggregated`).
    Raises ValueError for an unknown target, a name that cannot name a Service, an engine (or GPU vendor) without
    a published image when none is given, and a disaggregated candidate that `disaggregated` cannot render or
    for KServe."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    if candidate.roles and target == "kserve":
        raise ValueError("a disaggregated deployment (prefill and decode pools) is rendered for --target deployment "
                         "only")
    check_name(name)
    _image(request, candidate, image)  # fail early, before anything is built, for an engine without an image
    if candidate.roles:
        return disaggregated(request, candidate, name=name, namespace=namespace, image=image)
    objects = [obj for obj in [config_map(candidate, name=name, namespace=namespace)] if obj]
    if target == "kserve":
        return [*objects, inference_service(request, candidate, name=name, namespace=namespace, image=image)]
    multi_node = nodes_per_replica(request, candidate) > 1
    workload = (leader_worker_set if multi_node else deployment)(request, candidate, name=name, namespace=namespace,
                                                                 image=image)
    return with_disruption_budgets([*objects, workload, service(request, candidate, name=name, namespace=namespace)])


# libyaml's emitter where PyYAML was built with it (its wheels are): the same text as the pure-Python one, about four
# times faster, which counts in the operator, where every status carries the digest of its rendering.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def to_yaml(objects: list[Mapping[str, Any]]) -> str:
    """The objects as one multi-document YAML stream (`---` between documents), keys in rendering order."""
    return "---\n".join(yaml.dump(dict(obj), Dumper=_DUMPER, sort_keys=False, width=2**31 - 1) for obj in objects)


def manifests_digest(objects: list[Mapping[str, Any]]) -> str:
    """`sha256:<hex>` of `to_yaml(objects)`: what `inferplan render -o yaml` prints on stderr for the same
    objects, so a reviewer can check that a rendered file is a status's recommendation."""
    return "sha256:" + hashlib.sha256(to_yaml(objects).encode("utf-8")).hexdigest()


__all__ = [
    "DISRUPTION_BUDGET_MIN_REPLICAS",
    "POOL_ROLES",
    "RENDERABLE_ENGINES",
    "TARGETS",
    "PodSizing",
    "config_map",
    "deployment",
    "disaggregated",
    "dns_label",
    "engine_container",
    "engine_image",
    "inference_service",
    "labels",
    "leader_worker_set",
    "lws_name",
    "manifests_digest",
    "nodes_per_replica",
    "pod_disruption_budget",
    "pod_sizing",
    "pool_deployment",
    "render",
    "router_args",
    "service",
    "to_yaml",
    "with_disruption_budgets",
]
