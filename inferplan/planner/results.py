"""What a plan answers: the recommendation, its Pareto alternatives and the nearest infeasible candidates.

Pydantic models in camelCase, shaped as the `InferenceCapacityPlan` status will carry them. Numbers are
rounded to four significant digits (costs [$/h] to the cent, `cents`) so that the same inputs always print the
same output and a status only changes when a prediction really moves.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Literal, overload

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

SIGNIFICANT_DIGITS = 4

# Bounds on every string and list, so that the CRD's status schema is bounded (CEL cost limits).
_Name = Annotated[str, Field(max_length=64)]
_Label = Annotated[str, Field(max_length=317)]  # a label key: 253-char prefix, '/', 63-char name
_Arg = Annotated[str, Field(max_length=256)]
_Text = Annotated[str, Field(max_length=1024)]


def replica_shape(replicas: int, gpus_per_replica: int, gpu: str) -> str:
    """Replicas and the GPUs of each in words: "3 x H100-SXM5-80GB" (one GPU a replica), "3 x 2 H100-SXM5-80GB"."""
    return f"{replicas} x {gpu}" if gpus_per_replica == 1 else f"{replicas} x {gpus_per_replica} {gpu}"


def rounded(value: float) -> float:
    """`value` to four significant digits (0 stays 0; never NaN or infinite in output)."""
    if not math.isfinite(value):
        raise ValueError(f"non-finite number in a plan result: {value!r}")
    if value == 0:
        return 0.0
    digits = SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(value)))
    return round(value, digits)


def cents(dollars: float) -> float:
    """`dollars` to the cent: how a cost [$/h] is kept, printed (`per_hour`) and compared, so that costs that print
    alike tie ($1019.35/h stays 1019.35, where four significant digits made it 1019)."""
    if not math.isfinite(dollars):
        raise ValueError(f"non-finite cost in a plan result: {dollars!r}")
    return round(dollars, 2) + 0.0  # + 0.0: never -0.0


def per_hour(dollars: float) -> str:
    """A cost [$/h] as every output writes it, to the cent, never in exponent form: "$3.20/h", "$1019.35/h"."""
    return f"${dollars:.2f}/h"


def dollar_figure(dollars: float) -> str:
    """An amount [$] with the four significant digits a result keeps (`rounded`), at least to the cent and never in
    exponent form: "0.3278", "0.004917" (.3f read "0.005"), "283.20", "0.04"."""
    places = max(2, SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(dollars)))) if dollars else 2
    whole, _, fraction = f"{dollars:.{places}f}".partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


class _Result(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid")


class Percentiles(_Result):
    """Latency percentiles in milliseconds."""

    p50: float
    p90: float
    p95: float
    p99: float


_Bounds = Annotated[list[float], Field(min_length=2, max_length=2)]


class PercentileIntervals(_Result):
    """[low, high] of each latency percentile [ms]."""

    p50: _Bounds
    p90: _Bounds
    p95: _Bounds
    p99: _Bounds


class Intervals(_Result):
    """Where the measured value of each predicted latency percentile falls with probability `confidence`:
    bounds from the planner's held-out errors on published runs
    (docs/model.md#prediction-intervals-intervalspy-dataintervalsjson)."""

    ttft_ms: PercentileIntervals
    tpot_ms: PercentileIntervals | None = Field(
        default=None, description="[low, high] of each TPOT percentile [ms]; absent where TPOT is undefined "
                                  "(`Predicted.tpotMs`: no request generates a second token).")
    e2e_ms: PercentileIntervals = Field(alias="e2eMs")
    max_requests_per_second_per_replica: _Bounds | None = Field(
        default=None, description="[low, high] of the highest rate per replica within every SLO (the capacity) "
                                  "[requests/s], from the held-out errors of measured request rates.")
    max_concurrency: _Bounds | None = Field(
        default=None, description="[low, high] of the sequences one replica runs at once where the KV cache bounds "
                                  "them (null where the batch cap does), from the held-out errors of measured "
                                  "concurrency.")


class SloCheck(_Result):
    """One SLO judged by the planner's held-out errors (docs/planning.md#slo-confidence): the predicted percentile
    times the one-sided bound at `Predicted.confidence` (the plan's `slo.confidence`, where set a condition of every
    candidate), and the confidence the target holds with."""

    metric: Literal["ttft", "tpot", "e2e"]
    percentile: Literal["p50", "p90", "p95", "p99"]
    target_ms: float = Field(description="The plan's target [ms].")
    predicted_ms: float = Field(description="The predicted percentile [ms].")
    bound_ms: float = Field(description="predictedMs x ratio: the measured percentile stays at or below it with "
                                        "probability `confidence` [ms].")
    ratio: float = Field(description="The one-sided bound of measured / predicted at `confidence` (>= 1), from "
                                     "held-out errors of this kind of prediction.")
    margin: float = Field(description="1 - boundMs / targetMs: the share of the target the bound leaves (>= 0 where "
                                      "the SLO holds at this confidence).")
    holds_with: float = Field(description="The largest confidence (0.5-0.99) at which the bound stays within the "
                                          "target: the probability, by the held-out errors, that the measured "
                                          "percentile meets it; 0 where even the median error misses it.")


class Predicted(_Result):
    """The model's predictions at the planned per-replica rate: latencies of a request; concurrency, utilisation and
    request rates per replica; output tokens per second of the whole deployment."""

    ttft_ms: Percentiles = Field(description="Time to first token (queueing + prefill) [ms].")
    tpot_ms: Percentiles | None = Field(
        default=None, description="Time per output token after the first [ms]; absent (null) where no request "
                                  "generates a second token (every output is one token): TPOT is undefined there.")
    e2e_ms: Percentiles = Field(alias="e2eMs", description="End-to-end request latency [ms].")
    output_tokens_per_second: float = Field(description="Generated tokens per second, whole deployment.")
    utilization: float = Field(description="Planned rate / the rate at which every slot of a replica is busy.")
    max_concurrency: float = Field(description="Sequences one replica runs at once (max batch or KV bound).")
    requests_per_second_per_replica: float = Field(description="Planned rate per replica [requests/s].")
    max_requests_per_second_per_replica: float = Field(
        description="Highest rate per replica within every SLO and the utilisation cap [requests/s]."
    )
    intervals: Intervals | None = Field(
        default=None, description="[low, high] of each latency percentile at `confidence` (the recommendation and "
                                  "alternatives; absent elsewhere).")
    confidence: float | None = Field(default=None, description="The probability the intervals and the SLO checks "
                                                                "are stated at (the plan's slo.confidence).")
    slo_checks: list[SloCheck] = Field(
        default_factory=list, max_length=3, description="Each SLO at `confidence`: its target, prediction, bound and "
                                                        "margin (the recommendation and alternatives).")


class Cost(_Result):
    dollars_per_hour: float = Field(description="GPUs x price per GPU-hour [$/h], to the cent.")
    dollars_per_million_tokens: float = Field(description="Cost of a million generated tokens at the planned rate "
                                                          "[$ per million output tokens].")


def dollars_per_hour(pools: Iterable[tuple[int, float]]) -> float:
    """What `pools` cost an hour, each given as (count, price of one an hour): GPUs and the price per GPU-hour, or
    replicas and the price of one replica. Summed in the order given, from 0."""
    return sum(count * price for count, price in pools)


def cost_of(pools: Iterable[tuple[int, float]], output_tokens_per_hour: float) -> Cost:
    """The `Cost` of `pools` (as `dollars_per_hour` takes them) generating `output_tokens_per_hour`: [$/h] and
    [$ per million output tokens], the first to the cent (`cents`), the second `rounded`, both from the unrounded
    $/h."""
    dollars = dollars_per_hour(pools)
    return Cost(dollars_per_hour=cents(dollars),
                dollars_per_million_tokens=rounded(dollars / output_tokens_per_hour * 1e6))


@overload
def headroom(rate_rps: float, capacity_rps: float) -> float: ...
@overload
def headroom(rate_rps: float, capacity_rps: NDArray[np.float64]) -> NDArray[np.float64]: ...
def headroom(rate_rps: float, capacity_rps: float | NDArray[np.float64]) -> float | NDArray[np.float64]:
    """The share of `capacity_rps` [requests/s: replicas x the highest rate of one within the targets; a number or
    an array] that serving `rate_rps` leaves unused: 1 - rate / capacity, below 0 over capacity (the reported
    `Candidate.headroom` is this at least 0)."""
    return 1.0 - rate_rps / capacity_rps


class UpperCost(_Result):
    """What an unmeasured candidate (`Candidate.measured` false) needs if every step of it takes `stepSlowdown`
    times as long as predicted: the planner's held-out error where a GPU's kernels were not measured
    (docs/planning.md#unmeasured-candidates). Its replicas searched again with the slower steps, the same batch cap,
    SLOs and utilisation cap."""

    step_slowdown: float = Field(description="Every step's time x this (1.83: 83% slower).")
    replicas: int | None = Field(default=None, description="Replicas needed then; absent where no count meets every "
                                                            "SLO (`missed`).")
    gpus: int | None = Field(default=None, description="replicas x gpusPerReplica.")
    dollars_per_hour: float | None = Field(default=None, description="Their cost [$/h], to the cent.")
    missed: str = Field(default="", max_length=256,
                        description="Where no replica count meets every SLO: the SLO missed even at light load.")
    evidence: str = Field(default="", max_length=256, description="Where `stepSlowdown` comes from, in words.")

    def words(self) -> str:
        """"up to $10.72/h (5 replicas) if its steps are 83% slower (EVIDENCE)", or the SLO no count meets then."""
        slower = f"if its steps are {self.step_slowdown - 1:.0%} slower ({self.evidence})"
        if self.dollars_per_hour is None:
            return f"no replica count meets {self.missed} {slower}"
        return f"up to {per_hour(self.dollars_per_hour)} ({self.replicas} replicas) {slower}"


class Role(_Result):
    """One pool of a disaggregated deployment: its replicas, what runs them, and how busy they are."""

    role: Literal["prefill", "decode"]
    gpu_type: str = Field(max_length=64, description="Canonical GPU key of the catalog.")
    node_selector: dict[_Label, Annotated[str, Field(max_length=63)]] = Field(
        max_length=4, description="Node labels that select this GPU type."
    )
    gpus_per_replica: int = Field(description="Tensor-parallel size of one replica of the role.")
    nodes_per_replica: int = Field(default=1, description="Nodes one replica of the role spans.")
    replicas: int
    gpus: int = Field(description="replicas x gpusPerReplica.")
    max_batch: int = Field(description="Engine cap on running sequences per replica (vLLM --max-num-seqs).")
    data_parallel_attention: bool = Field(default=False, description="The role's attention runs data-parallel.")
    expert_parallel: bool = Field(default=False, description="The role's MoE layers run expert-parallel (DeepEP).")
    utilization: float = Field(description="Planned rate per replica / the rate at which it is saturated.")
    max_requests_per_second_per_replica: float = Field(
        description="Highest rate per replica at which the role's share of every SLO holds [requests/s].")
    engine_args: list[_Arg] = Field(max_length=64, description="Arguments that make the engine run this role.")
    dynamo_args: list[_Arg] = Field(
        default_factory=list, max_length=64,
        description="The same role as an NVIDIA Dynamo worker: the arguments after `python3 -m dynamo.vllm` (or "
                    "dynamo.sglang); empty for an engine Dynamo does not run.")


class Candidate(_Result):
    """One deployment: GPU type, parallelism, batch cap, precision, replicas, and what it will do.

    A disaggregated one (`shape`) has a prefill and a decode role (`roles`); its top-level GPU type, replicas,
    parallelism, batch cap and engine arguments are the decode role's, its GPUs and cost those of both."""

    gpu_type: str = Field(max_length=64, description="Canonical GPU key of the catalog, e.g. H100-SXM5-80GB.")
    node_selector: dict[_Label, Annotated[str, Field(max_length=63)]] = Field(
        max_length=4, description="Node labels that select this GPU type."
    )
    gpus_per_replica: int = Field(description="GPUs one replica spans: the tensor-parallel size x pipelineParallel.")
    nodes_per_replica: int = Field(default=1, description="Nodes one replica spans (over 1: a LeaderWorkerSet "
                                                          "group of this many pods, gpusPerReplica / this each).")
    pipeline_parallel: int = Field(default=1, ge=1, le=64, description=(
        "Pipeline stages of a replica, each on a node of its own (tensor parallel within it): over 1, the engine's "
        "--pipeline-parallel-size (vLLM), --pp-size (SGLang) or --pp_size (TensorRT-LLM)."))
    replicas: int
    gpus: int = Field(description="replicas x gpusPerReplica; disaggregated: every role's GPUs together.")
    max_batch: int = Field(description="Engine cap on running sequences (vLLM --max-num-seqs).")
    precision: str = Field(max_length=32, description="Weight precision.")
    kv_cache_dtype: str = Field(max_length=32)
    data_parallel_attention: bool = Field(
        default=False, description="Attention runs data-parallel (each rank its own requests and their KV; SGLang "
                                   "--enable-dp-attention), the MoE layers over all ranks.")
    expert_parallel: bool = Field(
        default=False, description="The MoE layers run expert-parallel over the replica's ranks with DeepEP's "
                                   "all-to-all (SGLang --ep-size with --moe-a2a-backend deepep), with data-parallel "
                                   "attention.")
    shape: Literal["aggregated", "disaggregated"] = Field(
        default="aggregated", description="aggregated: every replica prefills and decodes; disaggregated: a "
                                          "prefill pool sends each prompt's KV cache to a decode pool (roles).")
    roles: list[Role] = Field(default_factory=list, max_length=2,
                              description="Disaggregated: the prefill and the decode pool.")
    predicted: Predicted
    cost: Cost
    measured: bool = Field(
        default=True, description="False where the predictions rest on no measurement: neither the GPU's kernels nor "
                                  "a sibling's were measured (provenance kernels published or typical) and no serving "
                                  "run of the engine's release line on its GPU family was (measuredLines 0).")
    upper_cost: UpperCost | None = Field(
        default=None, description="Unmeasured: what it needs if its steps are as far off as the planner's held-out "
                                  "error on unmeasured GPUs (absent for a disaggregated candidate).")
    headroom: float = Field(description="Share of the SLO-compliant capacity the planned rate leaves unused.")
    tags: list[_Name] = Field(default_factory=list, max_length=8, description="cheapest, lowestTtft, lowestTpot, ...")
    engine_args: list[_Arg] = Field(max_length=64, description="Arguments that make the engine run this deployment.")
    engine_command: str = Field(default="", max_length=64,
                                description="The engine's entry point the arguments follow, e.g. vllm serve.")
    engine_files: dict[_Name, Annotated[str, Field(max_length=2048)]] = Field(
        default_factory=dict, max_length=2, description="Files the arguments name (file name -> content), e.g. "
                                                        "TensorRT-LLM's extra LLM API options.")
    engine_notes: list[_Text] = Field(default_factory=list, max_length=8,
                                      description="Why the arguments are what they are (step token budget, caps).")
    checkpoint: str = Field(default="", max_length=128, description="The repository the engine loads.")
    provenance: dict[_Name, _Name] = Field(max_length=16, description="Where each group of numbers comes from.")
    warnings: list[_Text] = Field(default_factory=list, max_length=16)
    why: str = Field(default="", max_length=256, description="One line: why this one is shown (what it is best at "
                                                             "and what it costs over the recommendation).")

    def max_requests_per_second(self) -> float:
        """The highest rate [requests/s] at which the whole deployment meets every SLO: replicas x
        maxRequestsPerSecondPerReplica, a disaggregated one's the lower of its pools'. `headroom` is the share of it
        the planned rate leaves unused; rounded, the headroom no longer gives it back near 1 (a tiny planned rate)."""
        if self.roles:
            return min(r.replicas * r.max_requests_per_second_per_replica for r in self.roles)
        return self.replicas * self.predicted.max_requests_per_second_per_replica

    def pools(self) -> str:
        """A disaggregated candidate's pools in a few words ("11 x 8 H100-SXM5-80GB prefill + 2 x 8 ... decode");
        "" for an aggregated one."""
        return " + ".join(f"{replica_shape(r.replicas, r.gpus_per_replica, r.gpu_type)} {r.role}" for r in self.roles)


class Infeasible(_Result):
    """A candidate that failed a gate, and why, in words a user can act on."""

    gpu_type: str = Field(max_length=64)
    gpus_per_replica: int
    precision: str = Field(max_length=32)
    kv_cache_dtype: str = Field(max_length=32)
    max_batch: int | None = None
    gate: str = Field(max_length=64, description="The first gate it failed, in the order the search applies them.")
    reason: str = Field(max_length=1024)
    also: list[_Text] = Field(default_factory=list, max_length=8,
                              description="The other gates it fails, each as 'gate: reason'.")
    pipeline_parallel: int = Field(default=1, ge=1, le=64, description="Pipeline stages of a replica.")
    data_parallel_attention: bool = Field(default=False, description="Attention runs data-parallel.")
    expert_parallel: bool = Field(default=False, description="The MoE layers run expert-parallel.")

    def layout(self, with_kv: bool = True) -> str:
        """What sets this candidate apart beyond its GPU type, TP, precision and batch cap (which its reason names),
        in a few words: "DP attention + EP", "2 pipeline stages", "KV fp8" (`with_kv`, where not auto); "" for none
        of them. Two rows of one GPU type, TP and precision can otherwise read alike but for their numbers."""
        words = []
        if self.data_parallel_attention or self.expert_parallel:
            words.append(" + ".join(name for name, on in (("DP attention", self.data_parallel_attention),
                                                          ("EP", self.expert_parallel)) if on))
        if self.pipeline_parallel > 1:
            words.append(f"{self.pipeline_parallel} pipeline stages")
        if with_kv and self.kv_cache_dtype != "auto":
            words.append(f"KV {self.kv_cache_dtype}")
        return ", ".join(words)


class ShapeOption(_Result):
    """One deployment shape's line of `PlanResult.shapes` before it is put in words: its cheapest feasible
    candidate (cost and a few words), or the nearest miss where it has none."""

    name: str                 # "aggregated, a replica within a node", ...
    layout: int | None        # aggregated: 0 within a node, 1 tensor or expert parallel over nodes, 2 pipeline
    #                           stages over nodes; None: disaggregated
    cost: float | None = None
    words: str | None = None
    miss: str | None = None
    headroom: float = 0.0     # the option's headroom and GPUs: with its cost, its place in `select.by_cost`
    gpus: int = 0


class PlanResult(_Result):
    recommendation: Candidate | None
    alternatives: list[Candidate]
    infeasible: list[Infeasible]
    warnings: list[str]
    assumptions: list[str] = Field(default_factory=list, description="What the plan left open and was assumed.")
    suggestions: list[str] = Field(default_factory=list,
                                   description="Without a recommendation: the smallest changes that make it "
                                               "feasible (SLO, budget, GPU count, GPU type).")
    shapes: list[str] = Field(default_factory=list,
                              description="When the plan allows more than one deployment shape (constraints.shapes, "
                                          "maxNodesPerReplica): each shape's cheapest feasible candidate, or why it "
                                          "has none, against the recommendation.")
    count_bounds: dict[str, tuple[int, int | None]] = Field(
        default_factory=dict, exclude=True,
        description="GPU type -> the (lowest, highest; None: no highest) available count with which this planning "
                    "gives the same answer (not serialised; `search.core.recording`).")
    shape_options: list[ShapeOption] = Field(default_factory=list, exclude=True,
                                             description="`shapes` before it is put in words (not serialised): "
                                                         "verification puts the lines again from them.")


    def __eq__(self, other: object) -> bool:
        """The same answer: every field but `count_bounds`, which says for which available counts the answer holds,
        not what it is (two plans of different counts give the same answer, each with its own range)."""
        if not isinstance(other, PlanResult):
            return NotImplemented
        return ({k: v for k, v in self.__dict__.items() if k != "count_bounds"}
                == {k: v for k, v in other.__dict__.items() if k != "count_bounds"})

    __hash__ = None  # type: ignore[assignment]  # lists inside: never hashable
