"""GPU catalog: dated, sourced specs per GPU and a resolver from every name a GPU is known by.

Units: memory in bytes (`memory_bytes`, as the card reports it) and marketing GB (`memory_gb`), bandwidths in
decimal GB/s (`memory_bandwidth_gb_s`; `interconnect_gb_s` and `pcie_gb_s` per GPU and per direction),
dense tensor throughput in TFLOPS / TOPS, power in W, price in USD per GPU-hour. `nvlink_domain_gpus` is the
number of GPUs one NVLink domain joins where it spans nodes (GB200 NVL72: 72 GPUs, trays of 4).

The data lives in `data/gpus.json` (format and provenance rules: docs/catalogs-gpus.md). Every figure points
to source entries with a date and a status (`sourced` or `unverified`); the loader rejects a file where a
figure lacks provenance, a required figure is missing or not positive, a key repeats, or a name is claimed
by two GPUs, and names the GPU and the field in the error.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from inferplan.planner.names import CatalogLookupError, closest_names, normalize_name

__all__ = [
    "AMD",
    "GPU_VENDORS",
    "NVIDIA",
    "FigureProvenance",
    "GpuCatalog",
    "GpuCatalogError",
    "GpuProductLabel",
    "GpuSpec",
    "GpuVendor",
    "SourceRef",
    "load_gpu_catalog",
    "parse_gpu_catalog",
    "parse_gpu_product",
    "resolve_gpu",
]

# Figures every GPU must state with a positive value, and those that may be null (with a source saying why).
REQUIRED_FIGURES = (
    "memory_gb",
    "memory_mib",
    "cuda_total_mib",
    "memory_bandwidth_gb_s",
    "fp16_tflops",
    "interconnect_gb_s",
    "pcie_gb_s",
    "usd_per_hour",
    "sm_count",
)
NULLABLE_FIGURES = ("fp8_tflops", "int8_tops", "tdp_w")
FIGURES = REQUIRED_FIGURES + NULLABLE_FIGURES
# Figures a GPU states only where it has them (each with its sources); absent means None on the spec.
OPTIONAL_FIGURES = (
    "fp4_tflops",  # dense FP4 tensor throughput: NVFP4 on NVIDIA Blackwell, MXFP4 on AMD CDNA 4
)
# Published kernel microbenchmarks a GPU without AIConfigurator profiles may state (each with its sources): the
# step-time model's measured basis for AMD GPUs (`inferplan.planner.model.kernels`). Efficiencies are fractions of the
# catalog's own peaks.
KERNEL_FIGURES = (
    "gemm_bf16_efficiency",          # large 16-bit GEMM throughput / fp16_tflops
    "gemm_fp8_efficiency",           # large FP8 GEMM throughput / fp8_tflops
    "hbm_stream_efficiency",         # STREAM-like bandwidth / memory_bandwidth_gb_s
    "prefill_attention_efficiency",  # flash-attention forward throughput / fp16_tflops
    "allreduce_busbw_gb_s",          # all-reduce bus bandwidth of a full node, large messages
    "allreduce_latency_us",          # all-reduce latency of small messages
)

# Architectures with FP8 tensor cores; the others must have a null fp8_tflops.
FP8_FAMILIES = frozenset({"ada", "hopper", "blackwell", "cdna3", "cdna4"})
# Architectures with FP4 tensor cores; only they may state an fp4_tflops.
FP4_FAMILIES = frozenset({"blackwell", "cdna4"})
# Architectures below compute capability 8.0. They have no bfloat16 arithmetic: engines run a bf16 checkpoint there
# in float16, and vLLM refuses `--dtype bfloat16` on them ("Bfloat16 is only supported on GPUs with compute capability
# of at least 8.0", `platforms/cuda.py` in 0.11.0; `supported_dtypes` is [float16, float32] below 8.0). vLLM's V1
# engine attends there with FlexAttention (`engine_args.kv_dtype_problem`).
PRE_AMPERE_FAMILIES = frozenset({"turing"})

# Leading words a name may carry or drop ("NVIDIA-GeForce-RTX-4090" == "RTX 4090", "Tesla-T4" == "T4").
_VENDOR_WORDS = re.compile(r"^(?:nvidia|geforce|tesla|amd|instinct)+")

@dataclass(frozen=True)
class GpuVendor:
    """The node labels and the extended resource one GPU vendor's Kubernetes tooling publishes."""

    product_label: str  # GPU product name (NVIDIA GPU feature discovery, AMD node labeller)
    count_label: str  # GPUs on the node, used where the device plugin reports no allocatable resource
    resource: str  # extended resource in status.allocatable, and what a pod asks for in its limits


NVIDIA = GpuVendor("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu")
AMD = GpuVendor("amd.com/gpu.product-name", "amd.com/gpu.count", "amd.com/gpu")
GPU_VENDORS = {"nvidia": NVIDIA, "amd": AMD}
"""Catalog vendor -> its labels and resource: the one home of these names."""


# GFD appends "-MIG-<profile>" (MIG single strategy) and "-SHARED" (time-slicing / MPS, not renamed) to gpu.product.
_SHARED_SUFFIX = re.compile(r"[^a-z0-9]*shared$", re.IGNORECASE)
_MIG_SUFFIX = re.compile(r"[^a-z0-9]*mig[^a-z0-9]*(?P<profile>\d[a-z0-9.+]*)$", re.IGNORECASE)


class GpuCatalogError(ValueError):
    """The GPU data file is invalid; `gpu` and `field` name where (either may be None)."""

    def __init__(self, message: str, gpu: str | None = None, field: str | None = None) -> None:
        self.gpu = gpu
        self.field = field
        where = ", ".join(
            part for part in (f"GPU {gpu!r}" if gpu else "", f"field {field!r}" if field else "") if part
        )
        super().__init__(f"{where}: {message}" if where else message)


# ----------------------------------------------------------------------------------------------------------
# Public results


@dataclass(frozen=True)
class SourceRef:
    """One source entry of the data file."""

    id: str
    url: str | None
    description: str | None
    as_of: str  # ISO date
    status: str  # "sourced" | "unverified"


@dataclass(frozen=True)
class FigureProvenance:
    """Where one figure of one GPU comes from: its sources, the date and the status it counts as."""

    status: str  # "unverified" if the figure or any of its sources says so
    as_of: str  # ISO date of the first source
    sources: tuple[SourceRef, ...]
    note: str | None


@dataclass(frozen=True)
class GpuSpec:
    """One GPU. Bandwidths in decimal GB/s, throughput dense (no sparsity), price in USD per GPU-hour."""

    key: str
    display_name: str
    vendor: str  # "nvidia" | "amd"
    family: str  # "turing" | "ampere" | "ada" | "hopper" | "blackwell" | "cdna3" | "cdna4"
    segment: str  # "datacenter" | "workstation" | "consumer"
    memory_bytes: int  # total memory as the card reports it (nvidia-smi MiB x 2**20)
    memory_bandwidth_gb_s: float
    fp16_tflops: float  # dense FP16/BF16 tensor with FP32 accumulate
    fp8_tflops: float | None  # dense; None where the GPU has no FP8 tensor cores
    int8_tops: float | None
    interconnect: str  # "nvlink" | "xgmi" | "pcie"
    interconnect_gb_s: float  # per GPU, per direction, used by all-reduce
    tdp_w: float | None
    usd_per_hour: float
    price_as_of: str  # ISO date
    names: tuple[str, ...]
    unverified_fields: tuple[str, ...]
    memory_gb: float | None = None  # marketing GB
    pcie_gb_s: float | None = None  # host link, per direction
    cuda_total_bytes: int | None = None  # total the CUDA/ROCm runtime reports; engines size pools from it
    product_label: str = ""  # the node label value: nvidia.com/gpu.product (GFD) or amd.com/gpu.product-name
    gpus_per_node: int = 8  # in the common chassis `chassis` names (a plan or the cluster's nodes override it)
    chassis: str = ""
    sm_count: int | None = None  # streaming multiprocessors (AMD: compute units); None: unknown, no per-SM cap
    # The AIConfigurator system whose measured kernel tables serve this GPU (data/kernels/): its own
    # (`kernel_tables_own`) or a sibling's of the same die or architecture, scaled to this GPU's peaks.
    kernel_tables: str | None = None
    kernel_tables_own: bool = False
    kernel_figures: tuple[tuple[str, float], ...] = ()  # published microbenchmarks (KERNEL_FIGURES), where stated
    fp4_tflops: float | None = None  # dense FP4 (NVFP4 on NVIDIA, MXFP4 on AMD); None where not stated
    # GPUs one NVLink domain joins across nodes (GB200 NVL72: 72, in trays of 4); None where it ends at the node.
    nvlink_domain_gpus: int | None = None

    @property
    def product_label_key(self) -> str:
        """The node label that carries `product_label`."""
        return (AMD if self.vendor == "amd" else NVIDIA).product_label

    def link_domain_gpus(self, gpus_per_node: int) -> int:
        """GPUs a replica reaches without the nodes' network, on nodes of `gpus_per_node`: the node's, or the
        NVLink domain's where it spans nodes (GB200 NVL72)."""
        return max(gpus_per_node, self.nvlink_domain_gpus or 0)

    @property
    def usable_memory_bytes(self) -> int:
        """Memory an engine sizes its KV pool from: the runtime's total (cudaMemGetInfo), which is below the
        NVML total by what the driver reserves; the NVML total where the catalog has no runtime figure."""
        return self.cuda_total_bytes or self.memory_bytes

    @property
    def memory_gib(self) -> float:
        """Total memory in GiB (2**30 bytes)."""
        return self.memory_bytes / 2**30

    def with_price(self, usd_per_hour: float, as_of: str | None = None) -> GpuSpec:
        """This GPU at a caller's price [USD per GPU-hour], dated `as_of` (ISO date; today if None)."""
        if not usd_per_hour > 0:
            raise ValueError(f"GPU {self.key!r}: price must be positive, got {usd_per_hour!r}")
        as_of = date.fromisoformat(as_of).isoformat() if as_of else date.today().isoformat()
        unverified = tuple(field for field in self.unverified_fields if field != "usd_per_hour")
        return dataclasses.replace(
            self, usd_per_hour=float(usd_per_hour), price_as_of=as_of, unverified_fields=unverified
        )


@dataclass(frozen=True)
class GpuProductLabel:
    """A `nvidia.com/gpu.product` value split into the base GPU and the GFD suffixes."""

    base: str
    mig_profile: str | None  # e.g. "1g.5gb" from "...-MIG-1g.5gb"
    shared: bool  # "-SHARED": time-slicing or MPS


def parse_gpu_product(label: str) -> GpuProductLabel:
    """Split a GPU product label into its base name, MIG profile and sharing flag.

    `NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED` -> base `NVIDIA-A100-SXM4-40GB`, profile `1g.5gb`, shared.
    """
    text = label.strip()
    shared = False
    match = _SHARED_SUFFIX.search(text)
    if match and match.start() > 0:
        shared = True
        text = text[: match.start()]
    mig_profile = None
    match = _MIG_SUFFIX.search(text)
    if match and match.start() > 0:
        mig_profile = match.group("profile")
        text = text[: match.start()]
    return GpuProductLabel(base=text, mig_profile=mig_profile, shared=shared)


# ----------------------------------------------------------------------------------------------------------
# File models (pydantic: where data enters)


class _SourceModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    description: str | None = None
    as_of: date
    status: Literal["sourced", "unverified"]

    @model_validator(mode="after")
    def _has_url_or_description(self) -> _SourceModel:
        if not (self.url or self.description):
            raise ValueError("a source needs a url or a description")
        return self


class _FigureModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: float | None
    sources: list[str] = Field(min_length=1)
    status: Literal["unverified"] | None = None  # downgrade a sourced figure the facts doubt
    note: str | None = None


class _KernelTablesModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    system: str = Field(min_length=1)
    own: bool
    note: str = Field(min_length=1)


class _GpuModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1)
    display_name: str = Field(min_length=1)
    vendor: Literal["nvidia", "amd"]
    family: Literal["turing", "ampere", "ada", "hopper", "blackwell", "cdna3", "cdna4"]
    segment: Literal["datacenter", "workstation", "consumer"]
    interconnect: Literal["nvlink", "xgmi", "pcie"]
    product_label: str = Field(pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
    gpus_per_node: int = Field(ge=1, le=64)
    nvlink_domain_gpus: int | None = Field(default=None, ge=2, le=576)
    chassis: str = Field(min_length=1)
    names: list[str]
    device_ids: list[str] = []
    figures: dict[str, _FigureModel]
    kernel_tables: _KernelTablesModel | None = None
    notes: str | None = None


class _CatalogFileModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1]
    about: str
    sources: dict[str, _SourceModel]
    gpus: list[dict[str, Any]]


def _first_error(exc: ValidationError) -> tuple[str, str]:
    """(field path, message) of the first pydantic error, with a plain word for a missing source list."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    if loc[:1] == ["figures"] and len(loc) >= 2:
        field = loc[1]
        if loc[2:] == ["sources"] and error["type"] in ("missing", "too_short"):
            return field, "no provenance: the figure needs a non-empty 'sources' list"
        return field, f"{'.'.join(loc[2:]) or 'figure'}: {error['msg']}"
    return ".".join(loc) or "entry", error["msg"]


# ----------------------------------------------------------------------------------------------------------
# Catalog


class GpuCatalog:
    """The GPUs of one data file, looked up by canonical key (`get`) or by any name (`resolve`)."""

    def __init__(
        self,
        specs: list[GpuSpec],
        provenance: Mapping[str, Mapping[str, FigureProvenance]],
        device_ids: Mapping[str, tuple[str, ...]],
    ) -> None:
        self._specs = {spec.key: spec for spec in specs}
        self._provenance = {key: dict(figures) for key, figures in provenance.items()}
        self._device_ids = dict(device_ids)
        self._by_name: dict[str, str] = {}
        for spec in specs:
            for name in spec.names:
                self._by_name[_core_key(name)] = spec.key

    def __iter__(self) -> Iterator[GpuSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)

    def get(self, key: str) -> GpuSpec:
        """The GPU with exactly this canonical key; raises CatalogLookupError."""
        try:
            return self._specs[key]
        except KeyError:
            raise CatalogLookupError("GPU", key, closest_names(key, self._specs)) from None

    def resolve(self, name: str) -> GpuSpec:
        """The GPU answering to `name`: a GFD / AMD labeller value (MIG and SHARED suffixes allowed), a key,
        a marketing name, or an unambiguous AMD device id. Case and separators are ignored.

        Raises CatalogLookupError("GPU", name, suggestions) listing the closest canonical keys.
        """
        base = parse_gpu_product(name).base
        key = self._by_name.get(_core_key(base))
        if key is not None:
            return self._specs[key]
        device_keys = self._device_ids.get(_device_key(base), ())
        if len(device_keys) == 1:
            return self._specs[device_keys[0]]
        suggestions = list(device_keys) or self._closest_keys(base)
        raise CatalogLookupError("GPU", name, suggestions)

    def provenance(self, key: str) -> dict[str, FigureProvenance]:
        """Sources and status of each figure of GPU `key`, by file field name (`memory_mib`, ...)."""
        self.get(key)
        return dict(self._provenance[key])

    def with_prices(self, prices: Mapping[str, float], as_of: str | None = None) -> GpuCatalog:
        """A copy where the GPUs named in `prices` (any resolvable name -> USD per GPU-hour) cost that."""
        specs = dict(self._specs)
        for name, usd_per_hour in prices.items():
            spec = self.resolve(name)
            specs[spec.key] = spec.with_price(usd_per_hour, as_of)
        return GpuCatalog(list(specs.values()), self._provenance, self._device_ids)

    def _closest_keys(self, name: str, limit: int = 5) -> list[str]:
        names = [n for spec in self for n in spec.names]
        owner = {normalize_name(n): spec.key for spec in self for n in spec.names}
        keys: list[str] = []
        for match in closest_names(name, names, limit=4 * limit):
            key = owner[normalize_name(match)]
            if key not in keys:
                keys.append(key)
        return keys[:limit]


def _core_key(name: str) -> str:
    """Normalised name without leading vendor words; every name of a GPU is indexed by this key."""
    key = normalize_name(name)
    return _VENDOR_WORDS.sub("", key) or key


def _device_key(name: str) -> str:
    key = normalize_name(name)
    return key[2:] if key.startswith("0x") else key


def parse_gpu_catalog(data: Mapping[str, Any]) -> GpuCatalog:
    """Validate the decoded data file and build the catalog; raises GpuCatalogError naming GPU and field."""
    try:
        file = _CatalogFileModel.model_validate(data)
    except ValidationError as exc:
        field, message = _first_error(exc)
        raise GpuCatalogError(message, field=field) from None
    sources = {
        source_id: SourceRef(source_id, s.url, s.description, s.as_of.isoformat(), s.status)
        for source_id, s in file.sources.items()
    }

    specs: list[GpuSpec] = []
    provenance: dict[str, dict[str, FigureProvenance]] = {}
    name_owner: dict[str, str] = {}
    device_ids: dict[str, list[str]] = {}
    for index, raw in enumerate(file.gpus):
        label = str(raw.get("key") or f"#{index}")
        try:
            entry = _GpuModel.model_validate(raw)
        except ValidationError as exc:
            field, message = _first_error(exc)
            raise GpuCatalogError(message, gpu=label, field=field) from None
        if entry.key in provenance:
            raise GpuCatalogError("duplicate key", gpu=entry.key, field="key")
        figures = _check_figures(entry, sources)
        if entry.nvlink_domain_gpus is not None and (
                entry.interconnect != "nvlink" or entry.nvlink_domain_gpus <= entry.gpus_per_node):
            raise GpuCatalogError("an NVLink domain across nodes needs interconnect 'nvlink' and more GPUs than "
                                  "gpus_per_node", gpu=entry.key, field="nvlink_domain_gpus")
        provenance[entry.key] = figures
        spec = _build_spec(entry, figures)
        for name in spec.names:
            core = _core_key(name)
            owner = name_owner.setdefault(core, entry.key)
            if owner != entry.key:
                raise GpuCatalogError(
                    f"name {name!r} is already claimed by GPU {owner!r}", gpu=entry.key, field="names"
                )
        for device_id in entry.device_ids:
            device_ids.setdefault(_device_key(device_id), []).append(entry.key)
        specs.append(spec)
    for device_id in device_ids:
        if device_id in name_owner:
            raise GpuCatalogError(
                f"device id {device_id!r} is also a GPU name",
                gpu=device_ids[device_id][0],
                field="device_ids",
            )
    return GpuCatalog(specs, provenance, {d: tuple(keys) for d, keys in device_ids.items()})


def _check_figures(entry: _GpuModel, sources: Mapping[str, SourceRef]) -> dict[str, FigureProvenance]:
    unknown = sorted(set(entry.figures) - set(FIGURES) - set(OPTIONAL_FIGURES) - set(KERNEL_FIGURES))
    if unknown:
        raise GpuCatalogError("unknown figure", gpu=entry.key, field=unknown[0])
    result: dict[str, FigureProvenance] = {}
    for field in FIGURES + tuple(f for f in OPTIONAL_FIGURES + KERNEL_FIGURES if f in entry.figures):
        figure = entry.figures.get(field)
        if figure is None:
            raise GpuCatalogError(
                "missing figure (state it, or null with a source saying why)", gpu=entry.key, field=field
            )
        missing = [s for s in figure.sources if s not in sources]
        if missing:
            raise GpuCatalogError(f"no provenance: unknown source {missing[0]!r}", gpu=entry.key, field=field)
        if figure.value is None:
            if field in REQUIRED_FIGURES:
                raise GpuCatalogError("value is required", gpu=entry.key, field=field)
        elif not figure.value > 0:
            raise GpuCatalogError(f"must be positive, got {figure.value!r}", gpu=entry.key, field=field)
        elif field.endswith("_efficiency") and figure.value > 1:
            raise GpuCatalogError(f"an efficiency is at most 1, got {figure.value!r}", gpu=entry.key, field=field)
        refs = tuple(sources[s] for s in figure.sources)
        unverified = figure.status == "unverified" or any(ref.status == "unverified" for ref in refs)
        result[field] = FigureProvenance(
            "unverified" if unverified else "sourced", refs[0].as_of, refs, figure.note
        )

    has_fp8 = entry.figures["fp8_tflops"].value is not None
    if has_fp8 != (entry.family in FP8_FAMILIES):
        expected = "a value" if entry.family in FP8_FAMILIES else "null"
        raise GpuCatalogError(f"family {entry.family!r} needs {expected}", gpu=entry.key, field="fp8_tflops")
    fp4 = entry.figures.get("fp4_tflops")
    if fp4 is not None and fp4.value is not None and entry.family not in FP4_FAMILIES:
        raise GpuCatalogError(f"family {entry.family!r} has no FP4 tensor cores", gpu=entry.key, field="fp4_tflops")
    memory_mib = entry.figures["memory_mib"].value
    if memory_mib is not None and memory_mib != int(memory_mib):
        raise GpuCatalogError("must be a whole number of MiB", gpu=entry.key, field="memory_mib")
    marketing_bytes = (entry.figures["memory_gb"].value or 0) * 1e9
    if memory_mib is not None and not 0.9 <= memory_mib * 2**20 / marketing_bytes <= 1.1:
        raise GpuCatalogError(
            "disagrees with memory_gb by more than 10% (unit slip?)", gpu=entry.key, field="memory_mib"
        )
    cuda_total = entry.figures["cuda_total_mib"].value
    if memory_mib is not None and cuda_total is not None and not 0.95 * memory_mib <= cuda_total <= memory_mib:
        raise GpuCatalogError(
            "must be at most memory_mib and within 5% of it", gpu=entry.key, field="cuda_total_mib"
        )
    return result


def _value(entry: _GpuModel, field: str) -> float | None:
    return entry.figures[field].value


def _build_spec(entry: _GpuModel, figures: Mapping[str, FigureProvenance]) -> GpuSpec:
    names: list[str] = []
    seen: set[str] = set()
    for name in [entry.key, entry.display_name, entry.product_label, *entry.names]:
        if normalize_name(name) not in seen:
            seen.add(normalize_name(name))
            names.append(name)
    required = {field: float(_value(entry, field) or 0) for field in REQUIRED_FIGURES}
    return GpuSpec(
        key=entry.key,
        display_name=entry.display_name,
        vendor=entry.vendor,
        family=entry.family,
        segment=entry.segment,
        memory_bytes=int(required["memory_mib"]) * 2**20,
        memory_bandwidth_gb_s=required["memory_bandwidth_gb_s"],
        fp16_tflops=required["fp16_tflops"],
        fp8_tflops=_value(entry, "fp8_tflops"),
        int8_tops=_value(entry, "int8_tops"),
        interconnect=entry.interconnect,
        interconnect_gb_s=required["interconnect_gb_s"],
        tdp_w=_value(entry, "tdp_w"),
        usd_per_hour=required["usd_per_hour"],
        price_as_of=figures["usd_per_hour"].as_of,
        names=tuple(names),
        unverified_fields=tuple(
            _SPEC_FIELD.get(f, f) for f, p in figures.items() if p.status == "unverified"
        ),
        memory_gb=required["memory_gb"],
        pcie_gb_s=required["pcie_gb_s"],
        cuda_total_bytes=int(required["cuda_total_mib"] * 2**20),
        product_label=entry.product_label,
        gpus_per_node=entry.gpus_per_node,
        chassis=entry.chassis,
        sm_count=int(required["sm_count"]),
        kernel_tables=entry.kernel_tables.system if entry.kernel_tables else None,
        kernel_tables_own=bool(entry.kernel_tables and entry.kernel_tables.own),
        kernel_figures=tuple((f, float(entry.figures[f].value)) for f in KERNEL_FIGURES
                             if f in entry.figures and entry.figures[f].value is not None),
        fp4_tflops=_value(entry, "fp4_tflops") if "fp4_tflops" in entry.figures else None,
        nvlink_domain_gpus=entry.nvlink_domain_gpus,
    )


# The file stores memory as reported MiB; the spec exposes bytes.
_SPEC_FIELD = {"memory_mib": "memory_bytes", "cuda_total_mib": "cuda_total_bytes"}


@functools.cache
def load_gpu_catalog() -> GpuCatalog:
    """The packaged GPU catalog (inferplan/planner/data/gpus.json), validated once and cached."""
    text = resources.files("inferplan.planner").joinpath("data/gpus.json").read_text(encoding="utf-8")
    return parse_gpu_catalog(json.loads(text))


def resolve_gpu(name: str) -> GpuSpec:
    """The packaged catalog's GPU answering to `name` (see GpuCatalog.resolve)."""
    return load_gpu_catalog().resolve(name)
