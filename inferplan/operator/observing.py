"""spec.observe without Kubernetes: which deployment serves now, what Prometheus says it did, what the planner
predicts for it, how far apart they are, the calibration that follows, and the status that says so.

`observe_plan` is blocking (HTTP to Prometheus, a Deployment read through a callback) and runs off the event
loop; `observe_status` is pure. A failed query never clears what an earlier one found: `status.observed` and
`status.prediction` keep their last good values and only `MetricsAvailable` turns False, with the reason.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from inferplan.deploy.diff import GPU_RESOURCES, engine_container, launch_tokens, names_an_engine, split_launch
from inferplan.deploy.manifests import image_repository, published_repositories
from inferplan.observe.engine_metrics import FAMILIES
from inferplan.observe.observation import Observation, ObserveError, read_observation
from inferplan.observe.prometheus import PrometheusClient, PrometheusEndpoint
from inferplan.operator.cluster_spec import ConfigMapReader, parse_and_resolve
from inferplan.operator.status import (
    KEEP,
    MAX_OTHER_CALIBRATIONS,
    BoundsByMetric,
    CalibrationStatus,
    Condition,
    CurrentStatus,
    ErrorByMetric,
    ErrorQuantiles,
    GpuCalibration,
    Keep,
    LatencyByMetric,
    LatencyQuantiles,
    MeanLatency,
    ObservationUpdate,
    ObservedStatus,
    PredictionStatus,
    QuantileBounds,
    QuantileResiduals,
    ResidualsByMetric,
    assemble_status,
    make_condition,
    serialised,
)
from inferplan.planner.calibration.observed import (
    QUANTILE_NAMES,
    CurrentPrediction,
    CurrentShape,
    Discrepancy,
    ObservedWorkload,
    compare,
    predict_current,
    with_workload,
    worst,
)
from inferplan.planner.calibration.online import (
    MAX_SCALE,
    MIN_REQUESTS,
    MIN_SCALE,
    Calibration,
    calibrated_factors,
    update_calibration,
)
from inferplan.planner.catalog.checkpoint_repos import checkpoint_of_repo
from inferplan.planner.catalog.checkpoints import SIXTEEN_BIT, Checkpoint
from inferplan.planner.catalog.engine_args import VLLM_DATA_PARALLEL, chunked_prefill_problem, flag_spellings
from inferplan.planner.catalog.engines import (
    ENGINES,
    base_line,
    engine_of_line,
    factor_key,
    parse_version,
    version_defaults,
)
from inferplan.planner.catalog.gpus import GPU_VENDORS, parse_gpu_product, resolve_gpu
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import load_factors
from inferplan.planner.model.intervals import conformal_bounds, gpu_family
from inferplan.planner.names import CatalogLookupError
from inferplan.planner.quantiles import percent_text
from inferplan.planner.request import PlanRequest
from inferplan.planner.spec import Observe
from inferplan.planner.spec_parsing import PlanError
from inferplan.planner.spec_rules import window_seconds

DeploymentReader = Callable[[str], Mapping[str, Any] | None]  # name -> the Deployment (dict) or None if absent

GPU_LABELS = tuple(vendor.product_label for vendor in GPU_VENDORS.values())
GPU_TYPE_ANNOTATION = "inferplan.io/gpu-type"
_QUANTIZATION = {"fp8": "fp8", "awq": "int4-awq", "awq_marlin": "int4-awq", "gptq": "int4-gptq",
                 "gptq_marlin": "int4-gptq", "mxfp4": "mxfp4", "compressed-tensors": "int8-w8a8",
                 "modelopt_fp4": "nvfp4"}


DATA_PARALLEL = tuple(dict.fromkeys((*flag_spellings("dp_size"), *VLLM_DATA_PARALLEL)))
"""The data-parallel size of every engine that has one (SGLang's --dp-size, vLLM's --data-parallel-size and -dp)."""


MODEL_FLAGS = ("--model", "--model-path", "--model-id")
"""The flags that give vLLM, SGLang and TGI the repository to serve (trtllm-serve, LMDeploy and `vllm serve REPO`
take it as a positional argument)."""


class CurrentError(Exception):
    """The current deployment cannot be told (no Deployment, no GPU type...); the message says what to set."""


# ----------------------------------------------------------------------------------------------------------
# The current deployment


def _dashed(flag: str) -> str:
    return flag.replace("_", "-")


def _flag(tokens: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the first of `names` (in their order of precedence) that `tokens` carry, as the engine's
    parser takes it: its last occurrence wins (argparse, click and clap all keep the last), and `--max_num_seqs`
    is `--max-num-seqs` (vLLM's FlexibleArgumentParser turns underscores in a flag's name into dashes)."""
    for name in names:
        value = None
        for i, token in enumerate(tokens):
            key, equals, rest = token.partition("=")
            if not token.startswith("-") or _dashed(key) != _dashed(name):
                continue
            if equals:
                value = rest
            elif i + 1 < len(tokens):
                value = tokens[i + 1]
        if value is not None:
            return value
    return None


def _integer(text: Any) -> int | None:
    try:
        return int(str(text))
    except ValueError:
        return None


def _positive_int(text: Any) -> int | None:
    value = _integer(text)
    return value if value is not None and value > 0 else None


def _fraction(text: Any) -> float | None:
    """A memory fraction as the engines take one: a number in (0, 1]; None for anything else (the engine would
    refuse it)."""
    try:
        value = float(str(text))
    except ValueError:
        return None
    return value if 0.0 < value <= 1.0 else None  # NaN fails the comparison too


def _switch(tokens: Sequence[str], on: Sequence[str], off: Sequence[str]) -> bool | None:
    """Whether `tokens` turn a setting on (a spelling of `on`, bare or with `True`, as vLLM 0.6's
    `--enable-chunked-prefill [True|False]` takes one) or off (a spelling of `off`, or `on` with `False`); the last
    one counts, as for `_flag`; None where neither is given."""
    names_on, names_off = {_dashed(f) for f in on}, {_dashed(f) for f in off}
    stated = None
    for i, token in enumerate(tokens):
        key, equals, rest = token.partition("=")
        if not token.startswith("-"):
            continue
        if _dashed(key) in names_off and not equals:
            stated = False
        elif _dashed(key) in names_on:
            following = tokens[i + 1] if i + 1 < len(tokens) else ""
            value = rest if equals else following if following.lower() in ("true", "false") else "true"
            if value.lower() in ("true", "false"):
                stated = value.lower() == "true"
    return stated


_TGI_ENV = ("MODEL_ID", "NUM_SHARD", "QUANTIZE", "DTYPE", "KV_CACHE_DTYPE", "MAX_BATCH_SIZE",
            "MAX_CONCURRENT_REQUESTS", "MAX_BATCH_PREFILL_TOKENS", "CUDA_MEMORY_FRACTION", "MAX_TOTAL_TOKENS")
"""TGI's launcher takes each of its flags from the environment too (clap `env`: NUM_SHARD is --num-shard), as its
own docs and Helm charts give them."""


def _runs_tgi(container: Mapping[str, Any], tokens: Sequence[str]) -> bool:
    """Whether a container runs TGI: its image or its launch (`tokens`) says so."""
    return "text-generation-inference" in str(container.get("image") or "") or bool(
        tokens and tokens[0].rsplit("/", 1)[-1] == "text-generation-launcher")


def _env_flags(container: Mapping[str, Any], tokens: Sequence[str]) -> list[str]:
    """The flags a TGI container's environment gives (`NUM_SHARD=2` as `--num-shard 2`; `tokens`: its launch); none
    for other engines, whose variables of these names mean nothing."""
    if not _runs_tgi(container, tokens):
        return []
    flags: list[str] = []
    for var in container.get("env") or []:
        if isinstance(var, Mapping) and var.get("name") in _TGI_ENV and isinstance(var.get("value"), str):
            flags += ["--" + var["name"].lower().replace("_", "-"), var["value"]]
    return flags


def served_checkpoint(tokens: Sequence[str]) -> Checkpoint | None:
    """The catalog checkpoint an engine's command line serves (`--model REPO` and the like, or a positional
    `vllm serve REPO`), None when it names none the checkpoint catalog lists."""
    positional, _ = split_launch(tokens)
    for name in (_flag(tokens, MODEL_FLAGS), *positional):
        if name and (checkpoint := checkpoint_of_repo(name)) is not None:
            return checkpoint
    return None


def read_deployment(body: Mapping[str, Any], engine: str | None = None) -> dict[str, Any]:
    """What a Deployment says about the serving fleet: replicas (ready replicas when it has a status), GPU type
    (node selector, required node affinity, or the inferplan.io/gpu-type annotation), and the engine's tensor-
    parallel size, max batch, precision, KV dtype, step token budget (`max_num_batched_tokens`), chunked prefill
    (`chunked_prefill`: vLLM's and TensorRT-LLM's switches, SGLang's --chunked-prefill-size -1), memory share
    (`memory_fraction`, in (0, 1]) and context length (`max_model_len`) from the container's arguments (the GPU limit
    for TGI's TP
    size, whose launcher shards over every GPU it is given; the data-parallel ranks of a pod, and whether its MoE
    layers are expert-parallel: a size above 1 or vLLM's --enable-expert-parallel switch), read by the flags
    of `engine_args.ENGINE_FLAGS`, `engine`'s first (both --flag value and --flag=value).
    Without a quantisation flag, a pre-quantised checkpoint the engine serves gives the precision (its method is in
    its own config, so `inferplan render` writes no flag for it; a --dtype then sets only the activations'), and a
    catalogued 16-bit one its own dtype where no --dtype is given.
    Only fields it finds are returned."""
    found: dict[str, Any] = {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if isinstance(status.get("readyReplicas"), int):
        found["replicas"] = status["readyReplicas"]
    elif status:  # the API server leaves readyReplicas out when it is 0: a status without it has none ready
        found["replicas"] = 0
    elif isinstance(spec.get("replicas"), int):
        found["replicas"] = spec["replicas"]
    pod = (spec.get("template") or {}).get("spec") or {}
    selector = pod.get("nodeSelector") or {}
    labels = [selector[key] for key in GPU_LABELS if isinstance(selector.get(key), str)]
    affinity = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    allowed: list[str] = []  # the GPU products a required node affinity lets the pods run on (any of them)
    for term in affinity.get("nodeSelectorTerms") or []:
        for expression in (term or {}).get("matchExpressions") or []:
            if expression.get("key") in GPU_LABELS and expression.get("operator") == "In":
                allowed += [v for v in expression.get("values") or [] if isinstance(v, str) and v not in allowed]
    annotation = ((body.get("metadata") or {}).get("annotations") or {}).get(GPU_TYPE_ANNOTATION)
    given = ([annotation] if isinstance(annotation, str) else []) + labels
    types = [gpu for gpu in map(_gpu_type, given) if gpu]
    if not types:
        # An affinity that allows several GPU types says only that the replicas run on one of them (or on several).
        types = list(dict.fromkeys(gpu for gpu in map(_gpu_type, allowed) if gpu))
        if len(types) > 1:
            found["gpu_types_allowed"] = allowed
            types = []
    if types:
        found["gpu_type"] = types[0]
    container = engine_container(pod) or {}
    launch = launch_tokens(container)
    tokens = [*_env_flags(container, launch), *launch]  # a flag on the command line wins over its env var
    resources = container.get("resources") or {}
    limits = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}  # a GPU request alone counts
    tp = _positive_int(_flag(tokens, flag_spellings("tp", engine)))
    if tp is None and (_runs_tgi(container, launch) or (engine == "tgi" and not names_an_engine(container))):
        # Without --num-shard, TGI's launcher shards over every GPU the pod is given.
        tp = next((_positive_int(limits[key]) for key in GPU_RESOURCES if key in limits), None)
    elif tp is None and container:
        tp = 1  # vLLM, SGLang, trtllm-serve and LMDeploy: their parsers' default, however many GPUs the pod is given
    if isinstance(container.get("image"), str) and container["image"]:
        found["image"] = container["image"]
    if tp:
        found["gpus_per_replica"] = tp
    if (pp := _positive_int(_flag(tokens, flag_spellings("pp", engine)))) and pp > 1:
        # A pipelined replica's GPUs are all its stages': the TP size (or the pod's limit) is one stage's.
        found["pipeline_parallel"] = pp
        found["gpus_per_replica"] = (tp or 1) * pp
    if batch := _positive_int(_flag(tokens, flag_spellings("batch", engine))):
        found["max_batch"] = batch
    quantization = _flag(tokens, flag_spellings("quantization", engine))
    dtype = _flag(tokens, flag_spellings("dtype", engine))
    checkpoint = None if quantization else served_checkpoint(tokens)
    if quantization:
        precision = _QUANTIZATION.get(quantization.lower())
    elif checkpoint is not None and checkpoint.precision not in SIXTEEN_BIT:
        precision = checkpoint.precision
    else:
        precision = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16"}.get(
            (dtype or "").lower())
        if precision is None and checkpoint is not None:
            # No --dtype (or `auto`): the engine runs a 16-bit repository in its own dtype (vLLM's `--dtype auto`
            # help: "will use FP16 precision for FP32 and FP16 models, and BF16 precision for BF16 models", SGLang's
            # the same; TGI's `--dtype` is unset by default, the launcher docs: "The dtype to be forced upon the
            # model", so unforced it is the config's; trtllm-serve has no dtype flag, docs/engines.md), so the
            # precision is the repository's, not the plan's first (fp8 in examples/platform/trtllm-70b-fp8.yaml).
            precision = checkpoint.precision
    if precision:
        found["precision"] = precision
    kv = (_flag(tokens, flag_spellings("kv_cache_dtype", engine)) or "").lower()
    if kv.startswith("fp8"):
        found["kv_cache_dtype"] = "fp8"
    elif kv in ("auto", "fp16", "bf16"):
        found["kv_cache_dtype"] = kv
    if any(flag in tokens for flag in flag_spellings("dp_attention", engine)):  # a switch (SGLang's)
        found["data_parallel_attention"] = True
    elif (dp := _positive_int(_flag(tokens, DATA_PARALLEL))) and dp > 1:
        # Data-parallel ranks without data-parallel attention: each an engine of the TP size with its own batch
        # (vLLM's --data-parallel-size, SGLang's --dp-size), the pod's traffic spread over them.
        found["data_parallel"] = dp
    if ((ep := _positive_int(_flag(tokens, flag_spellings("ep", engine)))) and ep > 1) or any(
            flag in tokens for flag in flag_spellings("ep_switch", engine)):  # vLLM's --enable-expert-parallel
        found["expert_parallel"] = True
    if (budget := _integer(_flag(tokens, flag_spellings("step_tokens", engine)))) is not None and budget > 0:
        found["max_num_batched_tokens"] = budget
    elif budget is not None:  # SGLang's --chunked-prefill-size -1 (`engine_args.STEP_TOKENS_CHUNKING_OFF`)
        found["chunked_prefill"] = False
    chunked = _switch(tokens, flag_spellings("chunked_on", engine), flag_spellings("chunked_off", engine))
    if chunked is not None:  # vLLM's --[no-]enable-chunked-prefill, TensorRT-LLM's --enable_chunked_prefill
        found["chunked_prefill"] = chunked
    if (fraction := _fraction(_flag(tokens, flag_spellings("memory_fraction", engine)))) is not None:
        found["memory_fraction"] = fraction
    if context := _positive_int(_flag(tokens, flag_spellings("context", engine))):
        found["max_model_len"] = context
    return found


def _gpu_type(label: str) -> str | None:
    """The catalog key of a GPU product label, None where the catalog has none. A MIG slice or a shared GPU stays
    the label (resolve_current refuses it): its key is the whole GPU's."""
    try:
        key = resolve_gpu(label).key
    except CatalogLookupError:
        return None
    product = parse_gpu_product(label)
    return label if product.mig_profile or product.shared else key


def image_release(image: str | None, engine: str) -> str | None:
    """The release of `engine` an image's tag names, where the image is one of the engine's own published ones
    (`published_repositories`, on any registry or mirror path: `vllm/vllm-openai:v0.6.3`: v0.6.3; AMD's
    `rocm/vllm:rocm6.2_..._vllm_0.6.4`: the tag, read past its platform versions by `parse_version`). None where the
    tag names none (`latest`, a digest alone) or the image is another's, whose tag is its own release (NVIDIA NIM's
    `nvcr.io/nim/meta/llama-3.1-8b-instruct:1.8.0` is NIM 1.8.0, not vLLM 1.8.0; a team's own build)."""
    repository = image_repository(image or "")
    if not any(repository == own or repository.endswith(f"/{own}") for own in published_repositories(engine)):
        return None
    tag = (image or "").partition("@")[0].rsplit("/", 1)[-1].partition(":")[2]
    return tag if parse_version(tag) is not None else None


@dataclass(frozen=True)
class Current:
    shape: CurrentShape
    deployment: str | None
    sources: dict[str, str]
    image: str | None = None  # the engine container's image (its version), when a Deployment was read
    line: str | None = None   # the factor line that predicts it (`engines.factor_key` at its release on its GPU)

    @property
    def release(self) -> str | None:
        """The engine release it runs (sources.engineRelease): whose defaults fill what is not given, and whose
        scheduling, factor line and CUDA graphs predict it."""
        return self.shape.release


def resolve_current(given: Mapping[str, Any], deployment: Mapping[str, Any] | None, req: PlanRequest) -> Current:
    """The current deployment: spec.observe.current's fields over the Deployment's, then defaults (the engine's
    max batch, the plan's first precision, KV auto). Raises CurrentError when the GPU type or replicas are
    unknown."""
    name = given.get("deployment")
    from_deployment = read_deployment(deployment, req.engine) if deployment is not None else {}
    keys = {"gpu_type": "gpuType", "replicas": "replicas", "gpus_per_replica": "gpusPerReplica",
            "max_batch": "maxBatch", "precision": "precision", "kv_cache_dtype": "kvCacheDtype"}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for field_name, spec_key in keys.items():
        if given.get(spec_key) is not None:
            value = given[spec_key]
            values[field_name], sources[spec_key] = value, "spec"
        elif field_name in from_deployment:
            values[field_name], sources[spec_key] = from_deployment[field_name], "Deployment"
    ranks = from_deployment.get("data_parallel", 1)
    # vLLM's wide expert parallelism (--data-parallel-size N --enable-expert-parallel) on a mixture of experts: one
    # instance of N ranks of the TP size, the attention data-parallel over them and the experts spread over all
    # their GPUs, each rank scheduling its own batch, as the planner reads it in scenario files
    # (`predict._resolve`). Other data-parallel ranks are whole copies of the model.
    wide = ranks > 1 and req.engine == "vllm" and bool(from_deployment.get("expert_parallel")) and req.arch.is_moe
    if sources.get("replicas") == "Deployment" and not wide:
        # A pod of several data-parallel ranks runs that many engines (replicas of the TP size), each its own batch.
        values["replicas"] *= ranks
    if wide and sources.get("gpusPerReplica") == "Deployment":
        values["gpus_per_replica"] *= ranks  # the instance's: every rank's
    where = f"Deployment {name!r}" if name else "spec.observe.current"
    if "gpu_type" in values and sources.get("gpuType") == "Deployment":
        product = parse_gpu_product(values["gpu_type"])
        if product.mig_profile or product.shared:
            raise CurrentError(f"{where} runs on {values['gpu_type']!r}, a MIG slice or a shared GPU: the planner "
                               "predicts whole GPUs only, so its figures cannot be compared with a prediction")
    if "gpu_type" in values:
        try:
            values["gpu_type"] = resolve_gpu(values["gpu_type"]).key
        except CatalogLookupError as exc:
            raise CurrentError(f"observe.current.gpuType: {exc}") from None
    if "gpu_type" not in values and (allowed := from_deployment.get("gpu_types_allowed")):
        raise CurrentError(f"{where} may run on any of {', '.join(allowed)} (a required node affinity allows each): "
                           f"which its replicas run on cannot be told; give observe.current.gpuType, the "
                           f"{GPU_TYPE_ANNOTATION} annotation, or a node selector on one GPU product")
    if "gpu_type" not in values:
        raise CurrentError(f"the GPU type of {where} is unknown: give a node selector on {GPU_LABELS[0]}, the "
                           f"{GPU_TYPE_ANNOTATION} annotation, or observe.current.gpuType")
    if not values.get("replicas"):
        raise CurrentError(f"{where} has no ready replicas")
    gpus = max(values.get("gpus_per_replica", 1) // (ranks if wide else 1), 1)  # one engine's (a rank's)
    gpu = resolve_gpu(values["gpu_type"])
    # The engine's own default at the release the Deployment runs (its image's tag, else the plan's version) on this
    # GPU type (vLLM 0.11: 1024 sequences on an H100, 256 on an L4; vLLM 0.6: 256), as the planner predicts a
    # deployment that states none.
    release = image_release(from_deployment.get("image"), req.engine)
    sources["engineRelease"] = "Deployment" if release else "spec" if req.engine_version else "default"
    release = release or req.engine_release
    # The context length (max_model_len) and chunked prefill the Deployment's engine runs: its flags; without them,
    # the engine's own choice at that release (the model's context; chunking as the release decides, and a release
    # that chunks whatever it is told, vLLM 0.8.0-0.11.0, chunks); with no Deployment read (spec.observe.current
    # alone), the plan's (engine.maxModelLen, engine.chunkedPrefill), else what the planner takes for them.
    read = deployment is not None
    if "max_model_len" in from_deployment:
        values["max_model_len"], sources["maxModelLen"] = from_deployment["max_model_len"], "Deployment"
    elif read:
        values["max_model_len"], sources["maxModelLen"] = req.arch.max_position_embeddings, "default"
    else:
        values["max_model_len"] = req.max_model_len
        sources["maxModelLen"] = "spec" if req.max_model_len is not None else "default"
    context = values["max_model_len"] or req.arch.max_position_embeddings
    chunked = from_deployment.get("chunked_prefill")
    sources["chunkedPrefill"] = "Deployment" if chunked is not None else "spec" if not read and \
        req.chunked_prefill is not None else "default"
    if chunked is False and chunked_prefill_problem(req.engine, release, False) is not None:
        chunked, sources["chunkedPrefill"] = True, "default"
    engine_defaults = version_defaults(ENGINES[req.engine], release, float(gpu.usable_memory_bytes), gpu.key,
                                       gpus, context, chunked=chunked)
    if read and chunked is None:
        chunked = engine_defaults.scheduling.chunked
    values["chunked_prefill"] = chunked if read else req.chunked_prefill
    engine_batch = engine_defaults.max_num_seqs
    defaults = {"gpus_per_replica": 1, "max_batch": engine_batch, "precision": req.precisions[0],
                "kv_cache_dtype": "auto"}
    for field_name, default in defaults.items():
        if field_name not in values:
            values[field_name], sources[keys[field_name]] = default, "default"
    try:
        values["precision"] = weight_precision(values["precision"]).name
    except CatalogLookupError as exc:
        raise CurrentError(f"observe.current.precision: {exc}") from None
    # Data-parallel attention only from the Deployment's arguments (the spec has no field for it), and only where
    # its TP leaves something to split.
    if from_deployment.get("data_parallel_attention") and values["gpus_per_replica"] > 1:
        values["data_parallel_attention"] = True
        # Expert parallelism as the search plans it: with data-parallel attention.
        values["expert_parallel"] = bool(from_deployment.get("expert_parallel"))
    if wide:
        values.update(data_parallel_attention=True, expert_parallel=True, data_parallel=ranks)
    # Pipeline stages likewise; a spec's gpusPerReplica that the stages do not divide is taken as one stage.
    pp = from_deployment.get("pipeline_parallel", 1)
    if pp > 1 and values["gpus_per_replica"] % pp == 0:
        values["pipeline_parallel"] = pp
    # The step token budget the Deployment's engine runs: its flag; without one, the engine's own default at the
    # release it runs (vLLM 0.11 on an H100: 8192), at least the context where prompts go whole (as the planner takes
    # it: the engines refuse less), as for its max batch; with no Deployment read (spec.observe.current alone), the
    # plan's (engine.maxNumBatchedTokens, else what `inferplan render` writes for it). The prediction's TTFT under
    # load depends on it.
    if "max_num_batched_tokens" in from_deployment:
        sources["maxNumBatchedTokens"] = "Deployment"
        values["max_num_batched_tokens"] = from_deployment["max_num_batched_tokens"]
    elif read and math.isfinite(engine_defaults.step_tokens):
        sources["maxNumBatchedTokens"] = "default"
        values["max_num_batched_tokens"] = int(engine_defaults.step_tokens) if chunked else max(
            int(engine_defaults.step_tokens), context)
    else:
        sources["maxNumBatchedTokens"] = "spec" if req.max_num_batched_tokens is not None else "default"
        values["max_num_batched_tokens"] = req.max_num_batched_tokens
    # The memory share the engine sizes its KV cache from (vLLM --gpu-memory-utilization, SGLang --mem-fraction-static,
    # TGI --cuda-memory-fraction, TensorRT-LLM --kv_cache_free_gpu_memory_fraction), each as the planner's memory
    # model takes that engine's (`memory.kv_pool_bytes`); without one, the engine's own default at that release
    # (SGLang's by GPU memory); with no Deployment read, the plan's engine.gpuMemoryUtilization, else the engine's.
    if "memory_fraction" in from_deployment:
        values["memory_fraction"], sources["memoryFraction"] = from_deployment["memory_fraction"], "Deployment"
    elif read:
        values["memory_fraction"], sources["memoryFraction"] = engine_defaults.memory_fraction, "default"
    else:
        values["memory_fraction"] = req.memory_fraction
        sources["memoryFraction"] = "spec" if req.memory_fraction is not None else "default"
    return Current(CurrentShape(**values, release=release), name, sources, from_deployment.get("image"),
                   factor_key(req.engine, release, gpu.vendor))


# ----------------------------------------------------------------------------------------------------------
# One observation


@dataclass(frozen=True)
class ObserveOutcome:
    prometheus: str
    window: str
    observation: Observation | None = None
    error: tuple[str, str] | None = None          # MetricsAvailable=False (reason, message)
    current: Current | None = None
    current_error: str | None = None              # PredictionAccurate=Unknown (NoCurrentDeployment)
    prediction: CurrentPrediction | None = None
    discrepancies: list[Discrepancy] = field(default_factory=list)
    calibration: Calibration | None = None        # the calibration to plan with (observe.calibrate)
    calibration_gpu: str | None = None
    settings: Observe | None = None               # spec.observe as parsed (None when the spec could not be)
    changed_at: str | None = None                 # when an observation first found the current deployment changed
    settled: bool = True                          # the window lies wholly after that: it may calibrate and narrow
    # ... and wholly after the window that last updated the calibration it is predicted with (observe.calibrate): its
    # errors are out of sample, and may narrow
    out_of_sample: bool = True


def _read_calibration(recorded: Mapping[str, Any]) -> tuple[str, Calibration] | None:
    """(GPU type, calibration) of one recorded entry; None when unreadable, or when a factor lies outside the
    bounds the fit works within (MIN_SCALE-MAX_SCALE: no update can produce it, so it is not the operator's)."""
    if not isinstance(recorded, Mapping) or not recorded.get("gpuType"):
        return None
    try:
        calibration = Calibration(
            decode=float(recorded["decode"]), prefill=float(recorded["prefill"]),
            samples=int(recorded.get("samples", 0)), updates=int(recorded.get("updates", 0)),
            note=str(recorded.get("note", "")))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if not all(MIN_SCALE <= factor <= MAX_SCALE for factor in (calibration.decode, calibration.prefill)):
        return None  # NaN fails the comparison too
    return str(recorded["gpuType"]), calibration


def recorded_calibration(status: Mapping[str, Any] | None) -> tuple[str, Calibration] | None:
    """(GPU type, calibration) as `status.calibration` records it for the current GPU type; None when absent or
    unreadable."""
    return _read_calibration((status or {}).get("calibration") or {})


def _recorded_entries(status: Mapping[str, Any] | None) -> dict[str, tuple[Calibration, Mapping[str, Any]]]:
    """The usable entries of `status.calibration` by GPU type, each read and as recorded: the current GPU type's
    first, then `others`."""
    recorded = (status or {}).get("calibration") or {}
    others = recorded.get("others") if isinstance(recorded, Mapping) else None
    out: dict[str, tuple[Calibration, Mapping[str, Any]]] = {}
    for entry in [recorded, *(others if isinstance(others, list) else [])]:
        if (read := _read_calibration(entry)) is not None:
            out.setdefault(read[0], (read[1], entry))
    return out


def recorded_calibrations(status: Mapping[str, Any] | None) -> dict[str, Calibration]:
    """Every calibration `status.calibration` records by GPU type: the current GPU type's and those of the GPU types
    the deployment ran before (`others`), so that each keeps planning its GPU type."""
    return {gpu: calibration for gpu, (calibration, _) in _recorded_entries(status).items()}


def previous_calibration(status: Mapping[str, Any] | None, gpu_type: str | None) -> Calibration:
    """The calibration recorded in status for `gpu_type`, the current one's or an earlier GPU type's (a GPU type
    never calibrated starts from the catalog)."""
    return recorded_calibrations(status).get(gpu_type or "", Calibration())


def last_calibrated_at(status: Mapping[str, Any] | None, gpu_type: str | None) -> str | None:
    """When the last window that updated `gpu_type`'s calibration (the current one's or an earlier GPU type's)
    ended, as the status records it (`lastUpdateTime`); None when none did."""
    entry = _recorded_entries(status).get(gpu_type or "")
    time = entry[1].get("lastUpdateTime") if entry is not None else None
    return time if isinstance(time, str) else None


_CHANGE_FIELDS = ("deployment", "image", "gpuType", "replicas", "gpusPerReplica", "maxBatch", "precision",
                  "kvCacheDtype", "pipelineParallel", "dataParallel", "dataParallelAttention", "expertParallel",
                  "maxNumBatchedTokens", "chunkedPrefill", "memoryFraction", "maxModelLen")
_RECORDED_LATER = ("image", "pipelineParallel", "dataParallel", "dataParallelAttention", "expertParallel")
"""The fields of `status.observed.current` that a status written before they were recorded (or by an API server
whose CRD prunes them) lacks: their absence alone is no change, else every observation would find one and calibration
would stop for good."""
_SOURCED_FIELDS = ("maxNumBatchedTokens", "chunkedPrefill", "memoryFraction", "maxModelLen")
"""The fields recorded with a source of their own, left out where None: absent from a status whose `sources` name the
field's they were None (a change where they are not now); from one whose `sources` do not, written before the field
was recorded (chunkedPrefill: before it was recorded apart from the step budget, when it was left out where the plan's),
unknown, and no change."""


def current_changed_at(old_status: Mapping[str, Any] | None, current: Current, now: str) -> str | None:
    """When an observation first found the current deployment as it is now, if it found it changed: `now` when the
    last observation recorded another one (its Deployment, engine image, GPU type, replicas, GPUs per replica, max
    batch, precision, KV dtype, rank layout: pipeline stages, data-parallel ranks, data-parallel attention, expert
    parallelism, or step token budget, chunking, memory share or context length) or none, else what it recorded.
    None when nothing was observed before (the first observation cannot tell when the deployment took its shape) or
    nothing changed since."""
    observed = (old_status or {}).get("observed")
    if not isinstance(observed, Mapping):
        return None
    before = observed.get("current")
    if not isinstance(before, Mapping):
        return now
    s = current.shape
    now_fields = dict(zip(_CHANGE_FIELDS, (current.deployment, current.image, s.gpu_type, s.replicas,
                                           s.gpus_per_replica, s.max_batch, s.precision, s.kv_cache_dtype,
                                           s.pipeline_parallel, s.data_parallel, s.data_parallel_attention,
                                           s.expert_parallel, s.max_num_batched_tokens, s.chunked_prefill,
                                           s.memory_fraction, s.max_model_len),
                          strict=True))
    sources = before.get("sources")
    recorded = sources if isinstance(sources, Mapping) else {}
    for key in _RECORDED_LATER:
        if key not in before:
            del now_fields[key]
    for key in _SOURCED_FIELDS:
        if key not in recorded:
            del now_fields[key]
    if any(before.get(key) != value for key, value in now_fields.items()):
        return now
    changed = before.get("changedAt")
    return changed if isinstance(changed, str) else None


def _settled(changed_at: str | None, window: str, now: str) -> bool:
    """Whether a window ending at `now` lies wholly after `changed_at` (a change, or the end of the last window whose
    errors were kept; None or a time that cannot be read: True)."""
    if changed_at is None:
        return True
    since, at = _parse_time(changed_at), _parse_time(now)
    if since is None or at is None:  # a time no one can read (a hand edit) would hold every later window back
        return True
    try:
        seconds = window_seconds(window)
    except (ValueError, KeyError, IndexError):
        return False
    return (at - since).total_seconds() >= seconds


def utc_now() -> str:
    """Now, as the status's times say it (RFC 3339, UTC, whole seconds): what `_parse_time` reads."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Measured:
    """What one observation read (the spec, Prometheus, the current Deployment), before any prediction: the
    outcome so far (an error, or the observation and the current deployment) and the request to predict with."""

    outcome: ObserveOutcome
    request: PlanRequest | None = None


def observe_plan(spec: Mapping[str, Any], endpoints: Mapping[str, PrometheusEndpoint],
                 read_deployment_body: DeploymentReader, old_status: Mapping[str, Any] | None,
                 read_config_map: ConfigMapReader | None = None) -> ObserveOutcome:
    """Observe one plan (blocking): `measure`, then `assess`. Never raises for a bad spec or a failing
    Prometheus: the outcome says."""
    return assess(measure(spec, endpoints, read_deployment_body, read_config_map), old_status)


def measure(spec: Mapping[str, Any], endpoints: Mapping[str, PrometheusEndpoint],
            read_deployment_body: DeploymentReader, read_config_map: ConfigMapReader | None = None) -> Measured:
    """The reading half of an observation: waits on Prometheus and the API, computes little (the operator runs
    it in its observe threads)."""
    observe = spec.get("observe") or {}
    name, window = str(observe.get("prometheus", "")), str(observe.get("window", "5m"))
    try:
        parsed, req = parse_and_resolve(spec, read_config_map)
    except PlanError as exc:
        return Measured(ObserveOutcome(name, window, error=("InvalidSpec", f"the spec cannot be planned: {exc}")))
    assert parsed.observe is not None
    settings = parsed.observe
    window = settings.window
    endpoint = endpoints.get(name)
    if endpoint is None:
        known = ", ".join(sorted(endpoints)) or "none configured"
        return Measured(ObserveOutcome(name, window, settings=settings, error=(
            "UnknownPrometheus", f"no Prometheus endpoint named {name!r} in INFERPLAN_PROMETHEUS_CONFIG ({known})")))
    family = FAMILIES.get(req.engine)
    if family is None:
        return Measured(ObserveOutcome(name, window, settings=settings, error=(
            "UnsupportedEngine", f"reading {req.engine} metrics is not supported (vllm, sglang)")))
    try:
        observation = read_observation(PrometheusClient(endpoint), family, parsed.observe.selector, window,
                                       parsed.observe.min_requests)
    except ObserveError as exc:
        return Measured(ObserveOutcome(name, window, settings=settings, error=(exc.reason, str(exc))))
    except ValueError as exc:  # a selector or window the PromQL builder refuses (the spec lets none through)
        return Measured(ObserveOutcome(name, window, settings=settings,
                                       error=("InvalidSpec", f"observe.selector: {exc}")))

    given = parsed.observe.current.model_dump(by_alias=True, exclude_none=True)
    try:
        body = read_deployment_body(given["deployment"]) if given.get("deployment") else None
        if given.get("deployment") and body is None:
            raise CurrentError(f"Deployment {given['deployment']!r} not found in the plan's namespace")
        current = resolve_current(given, body, req)
    except CurrentError as exc:
        return Measured(ObserveOutcome(name, window, observation, current_error=str(exc), settings=settings))
    return Measured(ObserveOutcome(name, window, observation, current=current, settings=settings), req)


def assess(measured: Measured, old_status: Mapping[str, Any] | None, now: str | None = None) -> ObserveOutcome:
    """The computing half of an observation: the calibration (observe.calibrate) and the prediction for the
    current deployment under the observed workload, compared with what was observed; with calibration, the
    prediction is the calibration's before this window updates it (out of sample). CPU only, no I/O (the
    operator runs it in its planner pool, off its event loop's process). A window that reaches back before the
    current deployment was found changed (`current_changed_at`; `now` is the observation's time, UTC now by
    default) holds the old deployment's latencies: it updates no calibration (nor, in `observe_status`, the
    deployment's own errors); one that reaches back before the end of the window that last updated the calibration
    (`last_calibrated_at`) shares its requests: it updates none either, and is predicted by a calibration fitted to
    some of them, so its errors are not kept (`out_of_sample`)."""
    outcome, req = measured.outcome, measured.request
    observation, current = outcome.observation, outcome.current
    if req is None or observation is None or current is None:
        return outcome
    now = now or utc_now()
    changed_at = current_changed_at(old_status, current, now)
    settled = _settled(changed_at, observation.window, now)
    workload = ObservedWorkload(observation.requests_per_second, observation.prompt_mean, observation.output_mean)
    observed_req = with_workload(req, workload)
    factors = load_factors()
    calibration = None
    out_of_sample = True
    if outcome.settings is not None and outcome.settings.calibrate:
        previous = previous_calibration(old_status, current.shape.gpu_type)
        last_update = last_calibrated_at(old_status, current.shape.gpu_type)
        out_of_sample = _settled(last_update, observation.window, now)
        if not settled:
            calibration = dataclasses.replace(previous, note=(
                f"not updated: the current deployment changed at {changed_at}, and the last {observation.window} "
                "reach back before it (the old deployment's latencies)"))
        elif not out_of_sample:
            # Observed every minute, 5m windows overlap by four: a window that reaches back before the end of the
            # last one that updated shares its requests, and would count them again (samples about 5x, and the fit
            # moving about 5x as fast as n / (n + 500) per window says).
            calibration = dataclasses.replace(previous, note=(
                f"not updated: the last {observation.window} reach back before the end of the window that last "
                f"updated it ({last_update}), whose requests it counted"))
        else:
            calibration = update_calibration(observed_req, current.shape, observation.latency_mean,
                                             observation.requests_in_window, observation.waiting, previous, factors)
        # Judged (and its errors kept) against what the calibration predicted before this window: a prediction
        # already fitted to the window would make its errors in-sample, and the band they narrow too narrow. The
        # update goes to the status, for the next plan and the next window.
        factors = calibrated_factors(factors, req.engine, current.shape.gpu_type, previous, current.release)
    prediction = predict_current(observed_req, current.shape, factors)
    observed = {metric: {q: (v.value, v.low, v.high) for q, v in quantiles.items()}
                for metric, quantiles in observation.latency.items()}
    return dataclasses.replace(outcome, prediction=prediction, discrepancies=compare(prediction.latency, observed),
                               calibration=calibration, calibration_gpu=current.shape.gpu_type,
                               changed_at=changed_at, settled=settled, out_of_sample=out_of_sample)


# ----------------------------------------------------------------------------------------------------------
# Judging the prediction: against the recommendation's prediction interval, else the fixed ratio

_INTERVAL_KEYS = {"ttft": "ttftMs", "tpot": "tpotMs", "e2e": "e2eMs"}  # observed metric -> recommendation key


@dataclass(frozen=True)
class Bands:
    """The recommendation's prediction intervals as ratios to its own prediction, per observed metric and quantile:
    (low / predicted, high / predicted). An interval is the prediction times bounds that depend on what the prediction
    rests on (model kind, engine line, GPU family), not on the load
    (docs/model.md#prediction-intervals-intervalspy-dataintervalsjson), so the same
    ratios around the prediction for the observed workload on the current deployment are the interval the planner
    gives that prediction, as long as the current deployment runs the recommendation's GPU family. `missing` says
    why there are none (empty when there are)."""

    ratios: dict[str, dict[float, tuple[float, float]]]
    confidence: float | None
    missing: str = ""
    narrowed: tuple[tuple[str, float], ...] = ()  # the (metric, quantile) whose band this deployment's errors narrowed

    def band(self, metric: str, quantile: float, predicted_s: float) -> tuple[float, float] | None:
        """[low, high] [s] around `predicted_s`, or None where the recommendation has no interval for it."""
        ratio = self.ratios.get(metric, {}).get(quantile)
        return None if ratio is None else (predicted_s * ratio[0], predicted_s * ratio[1])

    def narrowed_by(self, residuals: Mapping[str, Mapping[float, Sequence[float]]]) -> Bands:
        """These bands, each narrowed by the deployment's own errors (`residuals`: log(observed / predicted) per
        metric and quantile, `Residuals`) where they are enough to bound at the same confidence (`own_windows`):
        their split-conformal interval at that confidence (the method of the recommendation's intervals, on this
        deployment's windows), where that is narrower than the recommendation's band, widened to contain the
        prediction. Never wider."""
        if self.confidence is None:
            return self
        ratios = {metric: dict(by_q) for metric, by_q in self.ratios.items()}
        narrowed = []
        for metric, by_q in self.ratios.items():
            for q, (low, high) in by_q.items():
                own = residuals.get(metric, {}).get(q, ())
                if len(own) < own_windows(self.confidence):
                    continue
                own_low, own_high = conformal_bounds(own, self.confidence)
                own_low, own_high = math.exp(min(own_low, 0.0)), math.exp(max(own_high, 0.0))
                if math.log(own_high / own_low) < math.log(high / low):
                    ratios[metric][q] = (own_low, own_high)
                    narrowed.append((metric, q))
        return dataclasses.replace(self, ratios=ratios, narrowed=tuple(narrowed))


KEPT_WINDOWS = 20
"""The most recent windows whose errors a percentile keeps (`status.prediction.residuals`)."""


def own_windows(confidence: float) -> int:
    """Windows of its own a percentile needs before its errors narrow its band at `confidence`: the fewest whose
    split-conformal bounds at that confidence lie inside the sample (9 at 80%, 20 at 90%). Fewer cannot bound at
    it: their range covers about (n - 1) / (n + 1) of the next window, 80% for nine, whatever the plan's confidence.
    KEPT_WINDOWS + 1 where even the windows kept are too few (above 90%): such a band is not narrowed. The ranks
    floor((n + 1) a/2) >= 1 and ceil((n + 1)(1 - a/2)) <= n (a = 1 - confidence) in exact arithmetic: in floating
    point, 10 x 0.1 of a = 0.2 comes out just under 1."""
    half_alpha = (1 - Fraction(str(confidence))) / 2
    return next((n for n in range(1, KEPT_WINDOWS + 1)
                 if math.floor((n + 1) * half_alpha) >= 1 and math.ceil((n + 1) * (1 - half_alpha)) <= n),
                KEPT_WINDOWS + 1)


Residuals = dict[str, dict[float, list[float]]]
"""log(observed / predicted) per metric and quantile, oldest first."""


def rank_layout(shape: CurrentShape) -> str:
    """How one instance's GPUs are split beyond its tensor parallelism, in a few words (`pp2`, `dp4+dp-attention+ep`);
    "" for a single engine of tensor-parallel ranks."""
    parts = ((f"pp{shape.pipeline_parallel}", shape.pipeline_parallel > 1),
             (f"dp{shape.data_parallel}", shape.data_parallel > 1),
             ("dp-attention", shape.data_parallel_attention), ("ep", shape.expert_parallel))
    return "+".join(part for part, on in parts if on)


def engine_settings_part(shape: CurrentShape) -> str:
    """The engine settings a Deployment states beyond its shape, as `residuals_key` names them: its step token budget,
    memory share, context length and chunked prefill, those it gives ("budget2048+mem0.95+ctx16384+unchunked");
    "" where it gives none (the plan's then stand in, as for a deployment an earlier release keyed)."""
    parts = [f"budget{shape.max_num_batched_tokens}" if shape.max_num_batched_tokens is not None else "",
             f"mem{shape.memory_fraction:g}" if shape.memory_fraction is not None else "",
             f"ctx{shape.max_model_len}" if shape.max_model_len is not None else "",
             {True: "chunked", False: "unchunked", None: ""}[shape.chunked_prefill]]
    return "+".join(part for part in parts if part)


def residuals_key(current: Current | None) -> str | None:
    """What the kept errors were observed on: the Deployment read (`NAME:`, where observe.current names one: another
    Deployment's errors are not this one's, whatever its shape), the current deployment's GPU type, GPUs per replica,
    max batch, precision and KV dtype, its rank layout where it has one (`rank_layout`: dp 8 x tp 1 and dp 4 x tp 2
    over the same GPUs are other deployments), the engine settings it states (`engine_settings_part`: another step
    budget, memory share, context or chunking queues and batches otherwise, where the model may err otherwise), and
    its engine image where a Deployment gives it (another engine version is another deployment); its replicas may
    change: every prediction is per replica at the observed rate."""
    return None if current is None else _key(current, settings=True)


def _key(current: Current, settings: bool) -> str:
    s = current.shape
    key = f"{s.gpu_type}/{s.gpus_per_replica}/{s.max_batch}/{s.precision}/{s.kv_cache_dtype}"
    key = f"{key}/{layout}" if (layout := rank_layout(s)) else key
    key = f"{key}/{part}" if settings and (part := engine_settings_part(s)) else key
    key = f"{current.deployment}:{key}" if current.deployment else key
    return f"{key}@{current.image}" if current.image else key


def earlier_residuals_keys(current: Current | None) -> tuple[str, ...]:
    """The keys an earlier release wrote `residualsFor` with for the deployment `residuals_key` names now: without the
    engine settings (before 2026-12-06), and of either without the Deployment's name (`_unnamed`). Those errors were
    observed on this Deployment, at settings the prediction did not read then: an upgrade keeps them."""
    if current is None:
        return ()
    keys = {_key(current, settings=False), _key(current, settings=True)}
    return tuple(sorted(keys | {_unnamed(k) for k in keys}))


def _unnamed(key: str) -> str:
    """`key` without the Deployment's name, as a release before the name was part of it wrote `residualsFor`: those
    errors were observed on the Deployment observe.current named (no other is read), so an upgrade keeps them."""
    name, colon, rest = key.partition(":")
    return rest if colon and "/" not in name else key


def read_residuals(old_prediction: Mapping[str, Any], key: str | None, earlier: Sequence[str] = ()) -> Residuals:
    """The errors kept in `old_prediction` (`status.prediction`) for deployment `key` (or its shape and image alone,
    as an earlier release wrote it: `_unnamed`; or one of `earlier`, `earlier_residuals_keys`); none for another
    one."""
    if key is None or old_prediction.get("residualsFor") not in (key, _unnamed(key), *earlier):
        return {}
    kept = old_prediction.get("residuals")
    out: Residuals = {}
    for metric, by_name in (kept.items() if isinstance(kept, Mapping) else ()):
        for q, name in QUANTILE_NAMES.items():
            values = by_name.get(name) if isinstance(by_name, Mapping) else None
            if isinstance(values, list) and all(isinstance(v, int | float) and math.isfinite(v) for v in values):
                out.setdefault(metric, {})[q] = [float(v) for v in values][-KEPT_WINDOWS:]
    return out


def with_window(kept: Residuals, verdicts: Sequence[Verdict], requests: float) -> Residuals:
    """`kept` with this window's errors appended: only from a window of at least MIN_REQUESTS requests (the online
    calibration's guard) and only for percentiles judged inside their band (an error outside it is drift to flag,
    not width to learn), at most KEPT_WINDOWS each."""
    out = {metric: {q: list(v) for q, v in by_q.items()} for metric, by_q in kept.items()}
    if requests < MIN_REQUESTS:
        return out
    for v in verdicts:
        d = v.discrepancy
        if v.band is None or v.outside or not (d.observed_s > 0 and d.predicted_s > 0):
            continue
        values = out.setdefault(d.metric, {}).setdefault(d.quantile, [])
        values.append(round(math.log(d.observed_s / d.predicted_s), 4))
        del values[:-KEPT_WINDOWS]
    return out


def _residuals_status(kept: Residuals) -> ResidualsByMetric | None:
    if not any(kept.values()):
        return None
    return ResidualsByMetric(**{metric: QuantileResiduals(**{QUANTILE_NAMES[q]: v for q, v in by_q.items() if v})
                                for metric, by_q in kept.items() if by_q})


def recommendation_bands(status: Mapping[str, Any] | None, current_gpu_type: str | None,
                         current_line: str | None = None) -> Bands:
    """The `Bands` of `status.recommendation.predicted.intervals` (none where the status carries none, or where the
    current deployment runs another GPU family than the recommendation, or an older release line of the engine
    (`current_line`, `engines.factor_key`: vLLM V0) than a plan's current one, whose intervals then rest on other
    evidence)."""
    recommendation = (status or {}).get("recommendation")
    predicted = (recommendation or {}).get("predicted") if isinstance(recommendation, Mapping) else None
    intervals = (predicted or {}).get("intervals") if isinstance(predicted, Mapping) else None
    if not isinstance(intervals, Mapping) or not intervals:
        return Bands({}, None, "the status's recommendation carries no prediction interval")
    assert isinstance(recommendation, Mapping) and isinstance(predicted, Mapping)
    theirs, ours = gpu_family(recommendation.get("gpuType")), gpu_family(current_gpu_type)
    if theirs != ours:
        return Bands({}, None, f"the recommendation's intervals are for {recommendation.get('gpuType')} "
                               f"({theirs or 'unknown'} family), the current deployment runs {current_gpu_type} "
                               f"({ours or 'unknown'} family)")
    if current_line is not None and base_line(current_line) != engine_of_line(current_line):  # an older line
        return Bands({}, None, f"the recommendation's intervals are for {engine_of_line(current_line)}'s current "
                               f"release line, the current deployment runs its older line {base_line(current_line)}")
    ratios: dict[str, dict[float, tuple[float, float]]] = {}
    for metric, key in _INTERVAL_KEYS.items():
        for q, name in QUANTILE_NAMES.items():
            bounds = (intervals.get(key) or {}).get(name) if isinstance(intervals.get(key), Mapping) else None
            point = (predicted.get(key) or {}).get(name) if isinstance(predicted.get(key), Mapping) else None
            if not (isinstance(bounds, Sequence) and len(bounds) == 2 and _positive(point)
                    and all(_positive(b) for b in bounds)):
                continue
            low, high = float(bounds[0]) / float(point), float(bounds[1]) / float(point)
            ratios.setdefault(metric, {})[q] = (min(low, 1.0), max(high, 1.0))  # rounding never excludes the point
    confidence = predicted.get("confidence")
    confidence = float(confidence) if _positive(confidence) else None
    return Bands(ratios, confidence, "" if ratios else "the status's recommendation carries no usable interval")


def _positive(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")


@dataclass(frozen=True)
class Verdict:
    """One percentile judged: against its prediction interval `band` [s] where it has one, else against the
    fixed ratio; `outside` beyond the histogram's bucket resolution, by `beyond` (a ratio; 0 inside)."""

    discrepancy: Discrepancy
    band: tuple[float, float] | None
    outside: bool
    beyond: float

    def describe(self, max_error_ratio: float, confidence: float | None) -> str:
        d = self.discrepancy
        if self.band is None:
            return (f"{d.describe()}, {abs(d.resolved_error_ratio):.0%} beyond the bucket > {max_error_ratio:.0%} "
                    "(maxErrorRatio)")
        bucket = f"bucket {d.low_s * 1e3:.4g}-{d.high_s * 1e3:.4g} ms" if math.isfinite(d.high_s) \
            else f"bucket above {d.low_s * 1e3:.4g} ms"
        where = f"{self.beyond:.0%} beyond it" if self.outside else "inside it"
        return (f"{d.metric.upper()} {QUANTILE_NAMES[d.quantile]} observed {d.observed_s * 1e3:.4g} ms ({bucket}), "
                f"{_share(confidence)} prediction interval {self.band[0] * 1e3:.4g}-{self.band[1] * 1e3:.4g} ms "
                f"around the predicted {d.predicted_s * 1e3:.4g} ms: {where}")


def _share(confidence: float | None) -> str:
    return percent_text(confidence) if confidence is not None else "the"


def judge(discrepancies: Sequence[Discrepancy], bands: Bands, max_error_ratio: float) -> list[Verdict]:
    """Each percentile against its rule. With an interval, the observed quantile is outside when its whole bucket
    (low, high] is: above the interval (low >= its high end) or below it (high < its low end). Without one, when the
    smallest error the histogram allows exceeds `max_error_ratio` (`Discrepancy.resolved_error_ratio`)."""
    verdicts = []
    for d in discrepancies:
        band = bands.band(d.metric, d.quantile, d.predicted_s)
        if band is None:
            excess = abs(d.resolved_error_ratio) - max_error_ratio
            verdicts.append(Verdict(d, None, excess > 0, max(excess, 0.0)))
        elif d.low_s >= band[1]:
            verdicts.append(Verdict(d, band, True, (d.low_s - band[1]) / band[1]))
        elif d.high_s < band[0]:
            verdicts.append(Verdict(d, band, True, (band[0] - d.high_s) / band[0]))
        else:
            verdicts.append(Verdict(d, band, False, 0.0))
    return verdicts


def rules_text(verdicts: Sequence[Verdict], bands: Bands, max_error_ratio: float) -> str:
    """Which rule judged which metrics, in words: "judged against the recommendation's 80% prediction intervals
    (TTFT, TPOT, E2E)", "judged by maxErrorRatio 25% (TTFT, TPOT, E2E: <why no interval>)", or both."""
    def metrics(by_interval: bool) -> str:
        names = dict.fromkeys(v.discrepancy.metric.upper() for v in verdicts if (v.band is not None) == by_interval)
        return ", ".join(names)

    parts = []
    if by_interval := metrics(True):
        own = ", ".join(f"{m.upper()} {QUANTILE_NAMES[q]}" for m, q in bands.narrowed)
        parts.append(f"against the recommendation's {_share(bands.confidence)} prediction intervals ({by_interval})"
                     + (f", narrowed by this deployment's own errors ({own})" if own else ""))
    if by_ratio := metrics(False):
        why = bands.missing or "no interval for these percentiles"
        parts.append(f"by maxErrorRatio {max_error_ratio:.0%} ({by_ratio}: {why})")
    return "judged " + " and ".join(parts)


# ----------------------------------------------------------------------------------------------------------
# The status it leads to


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1e3, 4)


def _latency(table: Mapping[str, Mapping[float, float]]) -> LatencyByMetric:
    """Latency [s] by metric and quantile as the status's `latencyMs` [ms]."""
    return LatencyByMetric(**{metric: LatencyQuantiles(**{QUANTILE_NAMES[q]: _ms(v) for q, v in quantiles.items()})
                              for metric, quantiles in table.items()})


def _mean(means: Mapping[str, float]) -> MeanLatency:
    """Mean latency [s] by metric as the status's `meanLatencyMs` [ms]."""
    return MeanLatency(**{metric: _ms(value) for metric, value in means.items()})


def _intervals(latency: Mapping[str, Mapping[float, float]], bands: Bands) -> BoundsByMetric | None:
    """`status.prediction.intervalMs`: the band of each predicted percentile that has one [ms] (None: no band)."""
    out: dict[str, dict[str, list[float]]] = {}
    for metric, quantiles in latency.items():
        for q, value in quantiles.items():
            if q in QUANTILE_NAMES and (band := bands.band(metric, q, value)) is not None:
                out.setdefault(metric, {})[QUANTILE_NAMES[q]] = [round(band[0] * 1e3, 4), round(band[1] * 1e3, 4)]
    return BoundsByMetric(**{m: QuantileBounds(**qs) for m, qs in out.items()}) if out else None


def _parse_time(text: str | None) -> datetime.datetime | None:
    """An RFC 3339 time as the status holds it (`2026-12-06T11:43:27Z`; fractional seconds or an offset, as a hand
    edit or another writer gives them, read too), in UTC; None where it is none."""
    try:
        parsed = datetime.datetime.fromisoformat(text or "")
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)).astimezone(datetime.UTC)


def _observed(outcome: ObserveOutcome, obs: Observation, now: str) -> ObservedStatus:
    """`status.observed`: what the observation read, sampled at `now`."""
    current = outcome.current
    return ObservedStatus(
        prometheus=outcome.prometheus, window=obs.window, sample_time=now,
        requests_per_second=round(obs.requests_per_second, 6), requests_in_window=round(obs.requests_in_window, 3),
        prompt_tokens_mean=None if obs.prompt_mean is None else round(obs.prompt_mean, 3),
        output_tokens_mean=None if obs.output_mean is None else round(obs.output_mean, 3),
        latency_ms=_latency({m: {q: v.value for q, v in qs.items()} for m, qs in obs.latency.items()}),
        mean_latency_ms=_mean(obs.latency_mean),
        running_requests=obs.running, waiting_requests=obs.waiting, kv_cache_usage=obs.kv_usage,
        kv_cache_blocks=obs.kv_blocks, block_size=obs.block_size,
        current=None if current is None else CurrentStatus(
            deployment=current.deployment, gpu_type=current.shape.gpu_type, replicas=current.shape.replicas,
            gpus_per_replica=current.shape.gpus_per_replica, max_batch=current.shape.max_batch,
            precision=current.shape.precision, kv_cache_dtype=current.shape.kv_cache_dtype,
            sources=current.sources, image=current.image, engine_release=current.release,
            max_num_batched_tokens=current.shape.max_num_batched_tokens,
            chunked_prefill=current.shape.chunked_prefill,
            memory_fraction=current.shape.memory_fraction, max_model_len=current.shape.max_model_len,
            pipeline_parallel=current.shape.pipeline_parallel,
            data_parallel=current.shape.data_parallel,
            data_parallel_attention=current.shape.data_parallel_attention,
            expert_parallel=current.shape.expert_parallel, changed_at=outcome.changed_at))


def _same_figures(old_observed: Any, observed: ObservedStatus) -> bool:
    """Whether `observed` is what the last observation (`old_observed`, status.observed) found, its sampleTime
    apart."""
    if not isinstance(old_observed, Mapping):
        return False
    new = serialised(observed)
    return {k: v for k, v in old_observed.items() if k != "sampleTime"} == \
        {k: v for k, v in new.items() if k != "sampleTime"}


def observe_status(old: Mapping[str, Any] | None, outcome: ObserveOutcome, *, now: str,
                   generation: int) -> dict[str, Any]:
    """The whole new status after one observation (pure; `old` is not modified): the observed, prediction and
    calibration blocks and the MetricsAvailable and PredictionAccurate conditions, made as the status's typed models
    (`status.ObservationUpdate`) and put into `old` by `status.assemble_status`. Each observed percentile is judged
    against the prediction interval of `old`'s recommendation where it carries one (`recommendation_bands`, `judge`),
    else against observe.maxErrorRatio; the thresholds (observe.maxErrorRatio, driftSeconds, calibrate) are the
    spec's, as `outcome.settings` parsed them."""
    previous = (old or {}).get("conditions") or []
    made: list[Condition] = []

    def make(type_: str, state: str, reason: str, message: str) -> None:
        made.append(make_condition(type_, state, reason, message, generation, now, previous))

    if outcome.error is not None:
        reason, message = outcome.error
        make("MetricsAvailable", "False", reason, message)
        if not any(c.get("type") == "PredictionAccurate" for c in previous if isinstance(c, Mapping)):
            make("PredictionAccurate", "Unknown", "NoObservation", "nothing observed yet")
        return assemble_status(old, observation=ObservationUpdate(made))  # the last good blocks stay

    obs, settings = outcome.observation, outcome.settings
    assert obs is not None and settings is not None
    max_error_ratio, drift_seconds = float(settings.max_error_ratio), float(settings.drift_seconds)
    make("MetricsAvailable", "True", "SeriesFound",
         f"{obs.requests_in_window:.0f} requests in the last {obs.window} ({obs.requests_per_second:.3g} req/s) "
         f"from Prometheus {outcome.prometheus!r}")
    current = outcome.current
    observed = _observed(outcome, obs, now)

    prediction: PredictionStatus | None = None
    if outcome.current_error is not None or outcome.prediction is None:
        make("PredictionAccurate", "Unknown", "NoCurrentDeployment",
             outcome.current_error or "the current deployment is unknown")
    else:
        old_prediction = (old or {}).get("prediction") or {}
        largest = worst(outcome.discrepancies)
        errors: dict[str, dict[str, float]] = {}
        for d in outcome.discrepancies:
            errors.setdefault(d.metric, {})[QUANTILE_NAMES[d.quantile]] = round(d.error_ratio, 4)
        key = residuals_key(current)
        kept = read_residuals(old_prediction, key, earlier_residuals_keys(current))
        last_kept = old_prediction.get("residualsAt") if kept else None
        bands = recommendation_bands(old, current.shape.gpu_type if current is not None else None,
                                     current.line if current is not None else None).narrowed_by(kept)
        verdicts = judge(outcome.discrepancies, bands, max_error_ratio)
        # A window that reaches back before a change holds the old deployment's latencies; one whose figures are the
        # last observation's read the same samples (no scrape since): it is that window again, not another; one that
        # reaches back before the end of the last window whose errors were kept shares its requests (observed every
        # minute, 5m windows overlap by four): its errors would count those requests again, and nine such windows,
        # about two windows' traffic, would narrow the band as if they were nine; one that reaches back before the end
        # of the window that last updated the calibration it is predicted with was predicted by a fit to some of its
        # requests: its errors are in sample, and would narrow the band too far.
        if outcome.settled and outcome.out_of_sample and not _same_figures((old or {}).get("observed"), observed) and \
                _settled(last_kept if isinstance(last_kept, str) else None, obs.window, now):
            if (added := with_window(kept, verdicts, obs.requests_in_window)) != kept:
                kept, last_kept = added, now
        outside = [v for v in verdicts if v.outside]
        rules = rules_text(verdicts, bands, max_error_ratio)
        drift_since = None
        if largest is None:
            make("PredictionAccurate", "Unknown", "NoLatencyData", "the engine exports no latency histograms here")
        elif not outside:
            bound = (f"within {max_error_ratio:.0%} of the prediction" if all(v.band is None for v in verdicts)
                     else "inside its bound")
            make("PredictionAccurate", "True", "Accurate",
                 f"every latency percentile {bound} beyond the histogram's bucket resolution; largest error: "
                 f"{largest.describe()}; {rules}")
        else:
            drift_since = old_prediction.get("driftSince") or now
            since = _parse_time(drift_since)
            elapsed = (_parse_time(now) - since).total_seconds() if since and _parse_time(now) else 0.0
            farthest = max(outside, key=lambda v: v.beyond)
            more = f" (and {len(outside) - 1} more outside)" if len(outside) > 1 else ""
            text = f"{farthest.describe(max_error_ratio, bands.confidence)}{more} since {drift_since}; {rules}"
            if elapsed >= drift_seconds:
                make("PredictionAccurate", "False", "PredictionDrift", text)
            else:
                make("PredictionAccurate", "True", "DriftPending",
                     f"{text}; False after {drift_seconds:g} s (observe.driftSeconds)")
        interval_ms = _intervals(outcome.prediction.latency, bands)
        prediction = PredictionStatus(
            latency_ms=_latency(outcome.prediction.latency),
            mean_latency_ms=_mean(outcome.prediction.mean),
            error_ratio=ErrorByMetric(**{m: ErrorQuantiles(**qs) for m, qs in errors.items()}),
            worst=None if largest is None else largest.describe(),
            utilization=round(outcome.prediction.utilization, 4),
            interval_ms=interval_ms,
            confidence=bands.confidence if interval_ms else None,
            residuals=_residuals_status(kept),
            residuals_for=key if any(kept.values()) else None,
            residuals_at=last_kept if any(kept.values()) and isinstance(last_kept, str) else None,
            drift_since=drift_since,
        )

    calibration: CalibrationStatus | Literal[Keep.KEEP] | None = KEEP  # calibrating, but nothing new: the last stays
    if settings.calibrate and outcome.calibration is not None:
        cal = outcome.calibration
        old_cal = (old or {}).get("calibration") or {}
        # What the status recorded for this GPU type: the current entry, or one of `others` it goes on from.
        was = old_cal if outcome.calibration_gpu == old_cal.get("gpuType") else \
            _recorded_entries(old).get(outcome.calibration_gpu or "", (None, {}))[1]
        updated = cal.updates != was.get("updates", 0)
        calibration = CalibrationStatus(
            gpu_type=outcome.calibration_gpu, decode=round(cal.decode, 4), prefill=round(cal.prefill, 4),
            provenance=cal.provenance, samples=cal.samples, updates=cal.updates, note=cal.note[:1024],
            last_update_time=now if updated and cal.updates else was.get("lastUpdateTime"),
            others=_other_calibrations(old, outcome.calibration_gpu))
    elif not settings.calibrate:
        calibration = None
    return assemble_status(old, observation=ObservationUpdate(made, observed, prediction, calibration))


def _other_calibrations(old: Mapping[str, Any] | None, gpu_type: str | None) -> list[GpuCalibration] | None:
    """`status.calibration.others`: what was learnt on the GPU types the deployment ran before `gpu_type` (each
    with an accepted update), most recent first, at most MAX_OTHER_CALIBRATIONS. A deployment that moves to another
    GPU type keeps planning the one it left with what was learnt there, and goes on from it when it returns."""
    out = [GpuCalibration(gpu_type=gpu, decode=round(cal.decode, 4), prefill=round(cal.prefill, 4),
                          samples=cal.samples, updates=cal.updates,
                          last_update_time=time if isinstance(time := entry.get("lastUpdateTime"), str) else None)
           for gpu, (cal, entry) in _recorded_entries(old).items() if gpu != gpu_type and cal.updates]
    return out[:MAX_OTHER_CALIBRATIONS] or None


def only_sample_time_moved(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether `new` differs from `old` in nothing but `observed.sampleTime`: an observation that found what the
    last one did. The operator writes no such status: `sampleTime` then stays the time of the observation that
    first found these figures."""
    if not old or old == new:
        return False

    def without_time(status: Mapping[str, Any]) -> dict[str, Any]:
        observed = status.get("observed")
        if not isinstance(observed, Mapping):
            return dict(status)
        return {**status, "observed": {k: v for k, v in observed.items() if k != "sampleTime"}}

    return without_time(old) == without_time(new)

