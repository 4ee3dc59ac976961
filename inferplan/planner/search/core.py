"""The search's shared vocabulary below both front doors (`search/plan.py` and `search/disaggregated.py`): the grid of
deployment shapes, the rows of (shape, batch) the rate search walks, the rate search itself, the limits and count
bounds, and one candidate priced and described. Both searches import it; it imports neither, so the two are no
longer an import circle."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.catalog.checkpoints import Checkpoint
from inferplan.planner.catalog.engine_args import ENGINE_FLAGS, engine_launch, flex_attention, version_line
from inferplan.planner.catalog.engines import (
    EngineProfile,
    EngineSettings,
    cuda_graph_max_batch,
    factor_key,
)
from inferplan.planner.catalog.gpus import GpuSpec, load_gpu_catalog
from inferplan.planner.catalog.precisions import (
    resolve_kv_dtype,
)
from inferplan.planner.model.factors import FactorSet
from inferplan.planner.model.intervals import (
    CONFIDENCES,
    DEFAULT_CONFIDENCE,
    PLAN_METRICS,
    Evidence,
    load_intervals,
)
from inferplan.planner.model.kernels import kernel_basis
from inferplan.planner.model.performance import (
    Hardware,
    take_hardware,
)
from inferplan.planner.model.serving import (
    LoadResult,
    PoissonModel,
    Traffic,
    poisson_capacity,
    poisson_model,
    replica_arrival_cv2,
    running_context,
)
from inferplan.planner.quantiles import QUANTILE_NAMES
from inferplan.planner.request import PlanRequest, SloTarget
from inferplan.planner.results import (
    Candidate,
    Percentiles,
    Predicted,
    SloCheck,
    UpperCost,
    cost_of,
    dollars_per_hour,
    headroom,
    rounded,
)

SEARCH_SAMPLES = 64 # stratified sample size while searching (coarse, fast)


REPORT_SAMPLES = 512     # ... and for the numbers reported


BISECTION_STEPS = 10       # geometric, over three decades of rate: 0.7% precision


BRACKET_FLOOR = 1e-3       # the search's lower end, as a share of capacity


HIGH_VARIANCE_CV2 = 4.0  # at or above this arrival/service CV^2 the analytic tail is optimistic


PRACTICAL_COST_FACTOR = 3.0  # candidates costing more than this x the cheapest feasible one are not searched


FIRST_PASS_ROWS = 64         # rows searched first (cheapest cost floors) to find the cheapest feasible cost


GRID_CELLS = 2**BISECTION_STEPS  # cells of the geometric grid the search's answers lie on


@dataclass(frozen=True)
class _Shape:
    """One (GPU, TP, precision, KV dtype): everything but the batch cap."""

    gpu: GpuSpec
    tp: int
    precision: str
    kv_dtype: str
    dp_attention: bool = False  # data-parallel attention (SGLang, MLA models): `dp_attention_possible`
    pp: int = 1                 # pipeline stages, each on a node of its own (`pipeline_possible`)
    ep: bool = False            # MoE layers expert-parallel (DeepEP, with DP attention): `expert_parallel_possible`

    @property
    def gpus(self) -> int:
        """GPUs of one replica: TP x PP."""
        return self.tp * self.pp

    def parallelism(self) -> str:
        """`tp` x the GPU, or the TP x PP layout of a pipelined replica, in a few words."""
        one = self.gpu.key if self.tp == 1 else f"{self.tp} x {self.gpu.key}"
        return one if self.pp == 1 else f"{self.pp} stages of {one}"


@dataclass(frozen=True)
class _Rejections:
    """The candidates one gate rejected, as arrays; a reason is only worded when `_finish` shows it."""

    gate: str
    index: NDArray[np.intp]          # what `reason` takes (a shape or a row); orders equal sort keys as found
    shape: NDArray[np.intp]          # the shape of each
    batch: NDArray[np.int_] | None   # None where the gate does not depend on the batch cap
    cost: NDArray[np.float64]
    reason: Callable[[int], str]
    # How far each is from passing its gate: the value over the gate's limit (> 1; light-load latency over the SLO,
    # GPUs over maxGpus, memory needed over the engine's share, ...); None where the gate has no such measure
    # (parallelism, placement, precision): `_nearness`.
    miss: NDArray[np.float64] | None = None


@dataclass(frozen=True)
class _Grid:
    """Every (GPU, TP, precision, KV dtype) shape of a request, flat in that loop order, and its rows: the
    (shape, max batch) pairs through the placement, memory and precision gates, in (shape, batch) order."""

    gpus: list[GpuSpec]
    gpu: NDArray[np.intp]          # per shape: index into `gpus`
    tp: NDArray[np.int_]
    precision: NDArray[np.intp]    # index into req.precisions
    kv: NDArray[np.intp]           # index into req.kv_dtypes
    dp: NDArray[np.bool_]          # data-parallel attention
    pp: NDArray[np.int_]           # pipeline stages
    ep: NDArray[np.bool_]          # expert parallelism
    price: NDArray[np.float64]     # $/h of one of its GPUs
    hardware: Hardware             # per shape
    batch_sizes: NDArray[np.int_]
    settings: list[EngineSettings]  # per batch size
    row_shape: NDArray[np.intp]
    row_batch: NDArray[np.int_]
    row_kv_tokens: NDArray[np.float64]
    rejected: list[_Rejections]
    checkpoints: list[list[Checkpoint | str]]  # per GPU and precision: what the engine loads there, or why nothing
    slo_limits: NDArray[np.float64]  # (SLO, GPU): each target at the plan's confidence on each GPU (`slo_limits`)

    def shape(self, req: PlanRequest, s: int) -> _Shape:
        return _Shape(self.gpus[self.gpu[s]], int(self.tp[s]), req.precisions[self.precision[s]],
                      req.kv_dtypes[self.kv[s]], bool(self.dp[s]), int(self.pp[s]), bool(self.ep[s]))


SANITY_REPLICAS = 10_000
"""A candidate with more replicas is warned about: `constraints.maxReplicas` and the rendered autoscaler stop there,
and no one cluster runs that many (a plan for 606,992 GPUs was printed as feasible without a word)."""


def kv_hint(checkpoint: Checkpoint | str) -> str | None:
    """What `precisions.resolve_kv_dtype` needs to know of a checkpoint: whether it declares an FP8 KV cache."""
    if not isinstance(checkpoint, Checkpoint):
        return None
    return "modelopt" if checkpoint.format == "modelopt-fp8" or checkpoint.kv_cache == "fp8" else checkpoint.repo


def prefix_caching(req: PlanRequest) -> bool | None:
    """Whether the launch turns the engine's prefix cache on or off: as engine.prefixCaching says, else on where the
    plan counts hits (workload.prefixCacheHitRate above 0), else the engine's default (None)."""
    if req.prefix_caching is not None:
        return req.prefix_caching
    return True if req.prefix_hit_rate > 0 else None


def dp_attention_args(tp: int) -> list[str]:
    """SGLang's arguments for data-parallel attention over a replica's `tp` ranks."""
    flags = ENGINE_FLAGS["sglang"]
    return [flags.dp_attention[0], flags.dp_size[0], str(tp)]


def expert_parallel_args(engine_version: str | None, tp: int) -> list[str]:
    """SGLang's arguments for expert parallelism over a replica's `tp` ranks with DeepEP's all-to-all (given with
    `dp_attention_args`): `--moe-a2a-backend deepep` from 0.5, `--enable-deepep-moe` before."""
    line = version_line("sglang", engine_version)
    backend = ["--moe-a2a-backend", "deepep"] if line != "0.4" else ["--enable-deepep-moe"]
    return [ENGINE_FLAGS["sglang"].ep[0], str(tp), *backend]


def _grid_rate(low: NDArray[np.float64], high: NDArray[np.float64], k: NDArray[np.int_]) -> NDArray[np.float64]:
    """Point k (0 .. GRID_CELLS) of the geometric bisection grid from `low` to `high`, computed as the bisection
    computes it (the square root of its bracket's ends at each halving on the way to k), to the bit."""
    a, b = low, high
    for level in reversed(range(BISECTION_STEPS)):
        mid = np.sqrt(a * b)
        up = (k >> level) & 1 == 1
        a, b = np.where(up, mid, a), np.where(up, b, mid)
    return np.where(k >= GRID_CELLS, high, a)


@dataclass(frozen=True)
class _RateSearch:
    """Per row: the highest rate within every SLO, at most `high` (the utilisation cap).

    The answer is the one a geometric bisection of `BISECTION_STEPS` steps from `low` to `high` gives: the
    highest point of its grid (`_grid_rate`) that meets every SLO, `low` when none above it does. An
    evaluation of the model has a fixed cost of a couple of hundred rows' worth, so instead of ten halvings, one
    rate per row at a time, this takes fewer evaluations of a few rates per row: `at_cap` finds the rows
    that meet their SLOs at the cap (done); for the others, `refine` interpolates the SLO margin (the largest
    log of value over target) linearly in rate between the bracket's ends and tries the two grid points
    around the estimate, two a twentieth of the bracket further out and the bracket's midpoint. The latencies
    rise with the rate, so the bracket only narrows (at least by half, for the midpoint) and ends where
    bisection would, in three to five rounds instead of ten. `light_margin`, the margin at light load, stands
    in for the margin at `low` until a point above it is known.
    """

    model_of: Callable[[NDArray[np.intp]], PoissonModel]
    capacity: NDArray[np.float64]       # per row (read when a row is searched)
    max_utilization: float
    wanted: Sequence[tuple[str, float]]
    targets: NDArray[np.float64]        # (SLO, 1) [s], or (SLO, rows): each row's own
    light_margin: NDArray[np.float64]

    def bracket(self, rows: NDArray[np.intp]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The ends of the grid of `rows`: (BRACKET_FLOOR x capacity, the utilisation cap)."""
        high = self.capacity[rows] * self.max_utilization
        return np.minimum(high, self.capacity[rows] * BRACKET_FLOOR), high

    def evaluate(self, rows: NDArray[np.intp], k: NDArray[np.int_], low: NDArray[np.float64],
                 high: NDArray[np.float64]) -> tuple[NDArray[np.bool_], NDArray[np.float64], NDArray[np.float64]]:
        """(meets every SLO, margin, rate) at grid point k of each of `rows` (grid ends `low`, `high`)."""
        if not len(rows):
            return np.zeros(0, dtype=bool), np.zeros(0), np.zeros(0)
        rate = _grid_rate(low, high, k)
        ok, margin = self._judge(rows, self.model_of(rows).quantiles(rate, self.wanted))
        return ok, margin, rate

    def _judge(self, rows: NDArray[np.intp], values: NDArray[np.float64]) -> tuple[NDArray[np.bool_],
                                                                                NDArray[np.float64]]:
        """(meets every SLO, margin) of `rows`' latencies `values` (one column per row)."""
        targets = self.targets if self.targets.shape[1] == 1 else self.targets[:, rows]  # per row, or for all
        with np.errstate(divide="ignore"):  # an unbounded target (inf) has margin -inf
            margin = np.max(np.log(values / targets), axis=0)
        return np.all(values <= targets, axis=0), margin

    def at_cap(self, rows: NDArray[np.intp], period: int | None = None) -> tuple[NDArray[np.bool_],
                                                                                   NDArray[np.float64]]:
        """Whether `rows` meet every SLO at the cap, and their margins there. `period`: rows i and i + k x period
        are the same model at the same capacity (targets apart), so each one's latencies are computed once."""
        if period is None:
            low, high = self.bracket(rows)
            ok, margin, _ = self.evaluate(rows, np.full(len(rows), GRID_CELLS), low, high)
            return ok, margin
        unique, back = np.unique(rows % period, return_inverse=True)
        values = self.model_of(unique).quantiles(self.capacity[unique] * self.max_utilization, self.wanted)
        return self._judge(rows, values[:, back])

    def refine(self, rows: NDArray[np.intp], cap_margin: NDArray[np.float64],
               guess: NDArray[np.float64] | None = None) -> NDArray[np.float64]:
        """The highest rates of `rows`, which miss an SLO at the cap (margins there `cap_margin`). `guess`: a rate
        per row near its answer (another search's, of a coarser sample), whose two grid points around it join the
        first round's probes: where it is right, that round ends the row's search."""
        low_all, high_all = self.bracket(rows)
        guessed = None
        if guess is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                guessed = np.nan_to_num(np.floor(GRID_CELLS * np.log(guess / low_all) / np.log(high_all / low_all)),
                                        nan=-1.0, posinf=-1.0, neginf=-1.0).astype(int)
        # Per row: it meets its SLOs at grid point a (or a = 0) and not at b; their margins and rates.
        a, b = np.zeros(len(rows), dtype=int), np.full(len(rows), GRID_CELLS)
        margin_a, margin_b = self.light_margin[rows], np.array(cap_margin, dtype=float)
        rate_a, rate_b = low_all.copy(), high_all.copy()
        active = np.arange(len(rows))
        while len(active):
            i, lo_k, hi_k = active, a[active], b[active]
            share = np.clip(np.nan_to_num(margin_a[i] / np.minimum(margin_a[i] - margin_b[i], -1e-12), nan=0.5),
                            0.0, 1.0)
            estimate = rate_a[i] + share * (rate_b[i] - rate_a[i])
            low, high = low_all[i], high_all[i]
            with np.errstate(divide="ignore", invalid="ignore"):  # a degenerate bracket: probe its midpoint
                k = np.nan_to_num(np.floor(GRID_CELLS * np.log(estimate / low) / np.log(high / low)), nan=-1.0,
                                  posinf=-1.0, neginf=-1.0).astype(int)
            near = np.maximum(1, (hi_k - lo_k) // 20)
            probes = np.stack([k, k + 1, k - near, k + 1 + near, (lo_k + hi_k) // 2])
            if guessed is not None:  # the first round only
                probes = np.concatenate([probes, np.stack([guessed[i], guessed[i] + 1])])
                guessed = None
            probes = np.sort(np.clip(probes, lo_k + 1, hi_k - 1), axis=0)
            fresh = np.concatenate([np.ones((1, len(i)), dtype=bool), np.diff(probes, axis=0) > 0])  # once each
            which, k_probe = np.broadcast_to(np.arange(len(i)), probes.shape)[fresh], probes[fresh]
            ok, margin, rate = self.evaluate(rows[i[which]], k_probe, low_all[i[which]], high_all[i[which]])
            # The lowest failing probe is the new upper end; the highest passing one below it the new lower end.
            new_b = hi_k.copy()
            np.minimum.at(new_b, which[~ok], k_probe[~ok])
            new_a = lo_k.copy()
            below = ok & (k_probe < new_b[which])
            np.maximum.at(new_a, which[below], k_probe[below])
            for end, end_margin, end_rate, moved in ((a, margin_a, rate_a, new_a), (b, margin_b, rate_b, new_b)):
                hit = k_probe == moved[which]  # the probe at the new end (probes are distinct per row)
                at = i[which[hit]]
                end[at], end_margin[at], end_rate[at] = k_probe[hit], margin[hit], rate[hit]
            active = i[b[i] - a[i] > 1]
        return rate_a


def union_rows(count: int, *indices: NDArray[np.intp]) -> NDArray[np.intp]:
    """`np.union1d` of row indices below `count` (the rows in any of `indices`, in order, each once), without
    np.unique's import of numpy.ma (5 ms of the first plan in a process)."""
    mask = np.zeros(count, dtype=bool)
    for index in indices:
        mask[index] = True
    return np.flatnonzero(mask)


@dataclass
class CountBounds:
    """The GPU needs a plan compared with the available counts (`PlanRequest.available_gpus`), and from them the
    counts within which its answer stays the same (`count_bounds`)."""

    needs: list[tuple[str, NDArray[np.int_], int]] = field(default_factory=list)  # (GPU key, needs, count)

    def note(self, key: str, gpus: NDArray[np.int_], available: float) -> None:
        if math.isfinite(available):
            self.needs.append((key, gpus, int(available)))

    def bounds(self) -> dict[str, tuple[int, int | None]]:
        """GPU key -> (lowest, highest) available count (None: no highest) with which every comparison made
        comes out as it did: each need at most the count stays within it, each need above it stays above."""
        out: dict[str, tuple[int, int | None]] = {}
        for key, gpus, count in self.needs:
            low, high = out.get(key, (0, None))
            fits = gpus[gpus <= count]
            short = gpus[gpus > count]
            if len(fits):
                low = max(low, int(fits.max()))
            if len(short):
                high = min(high if high is not None else math.inf, int(short.min()) - 1)
            out[key] = (low, high)
        return out


_COUNTED: ContextVar[CountBounds | None] = ContextVar("inferplan_count_bounds", default=None)
"""The recorder of the planning under way (`recording`), which `_limit_checks` and the suggestions note needs in."""


@contextmanager
def recording() -> Iterator[CountBounds]:
    """The recorder of the GPU needs the planning under way compares with an available count: the one an outer
    call opened (a plan's suggestions plan again; verification re-plans and adds replicas), else a new one for this
    call. Whoever opened it puts `bounds()` into its result (`PlanResult.count_bounds`)."""
    outer = _COUNTED.get()
    if outer is not None:
        yield outer
        return
    recorder = CountBounds()
    token = _COUNTED.set(recorder)
    try:
        yield recorder
    finally:
        _COUNTED.reset(token)


# Placement on the cluster's nodes (`PlanRequest.node_gpus`). What is assumed:
# - A replica is pods of equal size, each on one node: one pod of all its GPUs where they fit in a node (GPUs of one
#   pod are never split over nodes), else one pod per node it spans (`replica_pods`: TP over nodes or pipeline
#   stages, the grid's whole nodes of `gpus_per_node`, as the rendered LeaderWorkerSet runs them).
# - A node of n free GPUs holds floor(n / s) pods of s GPUs; any pods a replica needs may go on any nodes with room,
#   so the nodes hold floor(slots / k) replicas of k pods (`pod_slots`). Over nodes each pod is a whole node of the
#   most GPUs one has, so a node holds one at most. The nodes' network (racks, switches) is not looked at.
# - Pools that share a GPU type (a disaggregated pair's prefill and decode) are placed largest pods first: each pod
#   of s GPUs takes at most ceil(s / t) of the slots for pods of t <= s GPUs. Where one size divides the other (the
#   TP sizes are powers of two) that is exact; otherwise it may refuse a pair that would fit, never accept one that
#   would not (`pools_placed`).
# - The nodes' counts are the GPUs nothing else uses: the operator counts allocatable GPUs, so pods already running
#   on them (the deployment's own, when it runs) are not subtracted.
# The count ranges (`CountBounds`): where every node of the type has the same count p, as many nodes as a placement
# needs (times p) is compared with the available count, exact for any number of such nodes; where the nodes differ,
# nothing is noted, and the operator keeps an answer only while the nodes' counts stay the same (the status
# inventory's `nodeSizes`).


def replica_pods(gpus_per_replica: NDArray[np.int_], per_node: int) -> tuple[NDArray[np.int_], NDArray[np.int_]]:
    """(pods of one replica, GPUs of each pod) of replicas of `gpus_per_replica` GPUs on nodes of at most `per_node`
    (`PlanRequest.gpus_per_node`): one pod where a replica's GPUs fit in a node, else one per node it spans, each of
    an equal share (the grid's replicas over nodes are whole nodes of `per_node`: `Candidate.nodes_per_replica`)."""
    g = np.asarray(gpus_per_replica, dtype=int)
    per_node = max(int(per_node), 1)
    pods = np.where(g <= per_node, 1, -(-g // per_node))
    return pods, -(-g // pods)


def pod_slots(nodes: Sequence[int], size: NDArray[np.int_]) -> NDArray[np.int_]:
    """Per pod size in `size`: how many pods of that many GPUs the nodes (their free GPUs, `nodes`) hold, each node
    floor(n / size)."""
    sizes = np.maximum(np.asarray(size, dtype=int), 1)
    counts = np.asarray(nodes, dtype=int)
    if not len(sizes) or not len(counts):
        return np.zeros(len(sizes), dtype=int)
    unique, back = np.unique(sizes, return_inverse=True)
    return (counts[None, :] // unique[:, None]).sum(axis=1)[back.reshape(-1)]


def _uniform(nodes: Sequence[int]) -> bool:
    """Whether every node has the same count (the operator then records no `nodeSizes`)."""
    return len(nodes) > 0 and min(nodes) == max(nodes)


def _note_placement(key: str, nodes: Sequence[int], pods: NDArray[np.int_], size: NDArray[np.int_]) -> None:
    """Record placement comparisons (`pods` of `size` GPUs against the nodes' slots) for the count ranges: on nodes
    of one count p, as the GPUs of the nodes they need (ceil(pods / floor(p / size)) x p), against the nodes' GPUs;
    on nodes that differ, nothing (their counts must stay as they are for an answer to hold)."""
    recorder = _COUNTED.get()
    if recorder is None or not _uniform(nodes):
        return
    p = int(nodes[0])
    per = p // np.maximum(np.asarray(size, dtype=int), 1)
    fits_some = per > 0  # a pod larger than every node never fits, whatever the number of nodes
    needed = -(-np.asarray(pods, dtype=int)[fits_some] // per[fits_some])
    recorder.note(key, needed * p, p * len(nodes))


def placement(req: PlanRequest, key: str, replicas: NDArray[np.int_], gpus_per_replica: NDArray[np.int_]
              ) -> NDArray[np.bool_] | None:
    """Per row: whether `replicas` replicas of `gpus_per_replica` GPUs of `key` can be placed on the nodes of that
    type (`PlanRequest.node_gpus`; the assumptions above); None where their counts are not known."""
    nodes = (req.node_gpus or {}).get(key)
    if nodes is None:
        return None
    pods, size = replica_pods(gpus_per_replica, req.gpus_per_node.get(key, 8))
    need = np.asarray(replicas, dtype=int) * pods
    _note_placement(key, nodes, need, size)
    return need <= pod_slots(nodes, size)


def most_replicas_placed(req: PlanRequest, key: str, gpus_per_replica: int) -> int | None:
    """The most replicas of `gpus_per_replica` GPUs of `key` its nodes hold (`PlanRequest.node_gpus`; the assumptions
    above): `placement` accepts a count exactly up to it. None where their counts are not known. Notes no comparison
    in the count ranges: it is for what is derived from an answer after planning (an autoscaler's maxReplicas,
    `deploy.bounds.replica_bounds`) and for words, not for what the search decides."""
    nodes = (req.node_gpus or {}).get(key)
    if nodes is None:
        return None
    pods, size = (int(v[0]) for v in replica_pods(np.array([gpus_per_replica]), req.gpus_per_node.get(key, 8)))
    return int(pod_slots(nodes, np.array([size]))[0]) // pods


def pools_placed(req: PlanRequest, key: str, pools: Sequence[tuple[int, int]]) -> bool:
    """Whether pools of (replicas, GPUs per replica) of one GPU type `key` can be placed together on its nodes
    (`PlanRequest.node_gpus`; True where their counts are not known): the largest pods first, each pod of s GPUs
    taking at most ceil(s / t) slots of t GPUs from the smaller ones (exact where the sizes divide each other)."""
    nodes = (req.node_gpus or {}).get(key)
    if nodes is None:
        return True
    per_node = req.gpus_per_node.get(key, 8)
    counted: list[tuple[int, int]] = []  # (pod size, pods), largest first
    for replicas, gpus in pools:
        pods, size = (int(v[0]) for v in replica_pods(np.array([gpus]), per_node))
        counted.append((size, replicas * pods))
    counted.sort(reverse=True)
    for j, (size, _) in enumerate(counted):
        need = sum(pods * -(-larger // size) for larger, pods in counted[:j + 1])
        _note_placement(key, nodes, np.array([need]), np.array([size]))
        if need > int(pod_slots(nodes, np.array([size]))[0]):
            return False
    return True


def nodes_words(key: str, nodes: Sequence[int]) -> str:
    """The nodes of a GPU type by their counts, in words: "nodes of 8, 7 and 7 H100-SXM5-80GB"; over 6 nodes by
    count, "1990 nodes of 8 and 10 of 7 H100-SXM5-80GB"."""
    ordered = sorted((int(n) for n in nodes), reverse=True)
    if len(ordered) <= 6:
        listed = [str(n) for n in ordered]
        return f"nodes of {listed[0] if len(listed) == 1 else ', '.join(listed[:-1]) + ' and ' + listed[-1]} {key}"
    groups = [(size, ordered.count(size)) for size in sorted(set(ordered), reverse=True)]
    parts = [f"{count} nodes of {size}" if i == 0 else f"{count} of {size}" for i, (size, count) in enumerate(groups)]
    return f"{', '.join(parts[:-1]) + ' and ' + parts[-1] if len(parts) > 1 else parts[0]} {key}"


def placement_words(req: PlanRequest, key: str, replicas: int, gpus_per_replica: int) -> str:
    """Why `replicas` replicas of `gpus_per_replica` GPUs of `key` cannot be placed on its nodes, in words. On nodes
    of one count, what they need and never the nodes there are, which may change within the answer's count range
    (as `plan._limit_reason`'s words); on nodes that differ, their counts, which may not."""
    nodes = (req.node_gpus or {}).get(key) or ()
    pods, size = (int(v[0]) for v in replica_pods(np.array([gpus_per_replica]), req.gpus_per_node.get(key, 8)))
    spans = "each replica's GPUs on one node" if pods == 1 else f"each replica on {pods} nodes of {size} GPUs"
    if not nodes:
        return f"there is no node of {key}"
    if not _uniform(nodes):
        return f"only {most_replicas_placed(req, key, gpus_per_replica)} fit on {nodes_words(key, nodes)} ({spans})"
    p = int(nodes[0])
    per = p // size
    if per == 0:
        return f"a pod of {size} GPUs is more than a node of {p} {key} has ({spans})"
    needed = -(-replicas * pods // per)
    holds = (f"a node of {p} {key} holds {per} of them" if pods == 1 else
             f"each spans {pods} whole nodes of {p} {key}" if per == 1 else
             f"each is {pods} pods of {size} GPUs, {per} to a node of {p} {key}")
    return f"{holds}, so they need {needed} nodes, more than there are"


def _limit_checks(req: PlanRequest, gpu_types: Sequence[GpuSpec], gpu: NDArray[np.intp], replicas: NDArray[np.int_],
                  gpus: NDArray[np.int_], cost: NDArray[np.float64]) -> NDArray[np.intp]:
    """Per row (of GPU type `gpu_types[gpu]`): the first of `LIMIT_CHECKS` it breaks, -1 where it breaks none."""
    def cap(value: float | None) -> float:
        return math.inf if value is None else value

    available = req.available_gpus or {}
    recorder = _COUNTED.get()
    if recorder is not None and available:
        for t, g in enumerate(gpu_types):
            if g.key in available:
                recorder.note(g.key, gpus[gpu == t], available[g.key])
    placed = np.ones(len(replicas), dtype=bool)
    for t, g in enumerate(gpu_types):
        mine = np.flatnonzero(gpu == t)
        if len(mine) and req.node_gpus and g.key in req.node_gpus:
            fits = placement(req, g.key, replicas[mine], gpus[mine] // np.maximum(replicas[mine], 1))
            placed[mine] = True if fits is None else fits
    broken = [
        replicas > cap(req.max_replicas),
        gpus > np.array([available.get(g.key, math.inf) for g in gpu_types])[gpu],
        ~placed,
        gpus > np.array([req.max_gpus_per_type.get(g.key, math.inf) for g in gpu_types])[gpu],
        gpus > cap(req.max_gpus),
        over_budget(req, cost),
    ]
    first = np.full(len(replicas), -1)
    for k in reversed(range(len(broken))):
        first = np.where(broken[k], k, first)
    return first


def traffic_of(req: PlanRequest, prefill_fraction: float, replicas: ArrayLike = 1, stages: ArrayLike = 1
               ) -> Traffic:
    """What arrives at each of `replicas` replicas of `stages` pipeline stages of `req`'s deployments, the rate
    apart, with `prefill_fraction` of each prompt computed: the arrivals as variable as the rendered Service leaves
    one stream of a replica (`replica_arrival_cv2`; the plan's whole stream's at one replica of one stage)."""
    return Traffic(req.prompt_mean, req.output_mean, req.prompt_cv, req.output_cv,
                   replica_arrival_cv2(req.arrival_cv2, replicas, stages), service_cv2=req.service_cv2,
                   prefill_fraction=prefill_fraction)


def plan_evidence(req: PlanRequest, gpu: GpuSpec, scenario_metric: str, measured_lines: int) -> Evidence:
    """What the held-out error of `req`'s prediction of `scenario_metric` (a scenario metric) on `gpu` rests on: the
    model's kind, the engine's factor line on the GPU's family, and whether that pair has measured lines
    (`measured_lines`, as `provenance.measuredLines` cites them); plans predict Poisson traffic."""
    kind = "mla" if req.arch.is_mla else "moe" if req.arch.is_moe else "dense"
    line = factor_key(req.engine, None, gpu.vendor)
    return Evidence(scenario_metric, kind, line, gpu.family, "poisson", measured_lines > 0)


def interval_evidence(req: PlanRequest, gpu: GpuSpec, metric: str, quantile: float, measured_lines: int
                      ) -> Evidence:
    """`plan_evidence` of the latency (`metric`, `quantile`) a plan predicts (`intervals.PLAN_METRICS`)."""
    return plan_evidence(req, gpu, PLAN_METRICS[metric][quantile], measured_lines)


def measured_lines_on(req: PlanRequest, factors: FactorSet, gpu: GpuSpec) -> int:
    """The measured serving lines of `req`'s engine (its current release line) on `gpu`'s family."""
    return factors.lines_measured_on(req.engine, gpu.family).get(factor_key(req.engine, None, gpu.vendor), 0)


def slo_bound_ratios(req: PlanRequest, gpu: GpuSpec, measured_lines: int, confidence: float | None = None
                     ) -> tuple[float, ...]:
    """Per SLO of `req`: the one-sided bound of measured / predicted at `confidence` (default: the plan's
    `slo.confidence`) for a candidate on `gpu` whose engine line has `measured_lines` there (>= 1). A candidate meets
    an SLO at that confidence when its prediction times this ratio is within the target (`slo_limits`). 1 for each
    without a confidence: the plan is judged on its predictions."""
    confidence = req.confidence if confidence is None else confidence
    if confidence is None:
        return tuple(1.0 for _ in req.slos)
    table = load_intervals()
    return tuple(math.exp(table.upper_log_bound(interval_evidence(req, gpu, s.metric, s.quantile, measured_lines),
                                                confidence)) for s in req.slos)


PREFILL_LINES = "prefillMeasuredLines"
"""The provenance key of a disaggregated candidate's prefill pool's measured lines (`measuredLines` is its decode
pool's, as its top-level fields are)."""

BOTH_POOLS_METRICS = frozenset({"ttft", "e2e"})
"""The latencies of a disaggregated pair that add its prefill pool's time to its decode pool's: their held-out errors
are the wider of the two pools' (`evidence_pools`); TPOT is the decode pool's alone."""


def _gpu_and_lines(candidate: Candidate) -> tuple[GpuSpec, int]:
    return load_gpu_catalog().get(candidate.gpu_type), int(candidate.provenance.get("measuredLines", "0"))


def evidence_pools(candidate: Candidate, metric: str) -> list[tuple[GpuSpec, int]]:
    """The (GPU, measured lines) pairs the held-out errors of `candidate`'s latency `metric` ("ttft", "tpot", "e2e")
    rest on: its GPU type and `provenance.measuredLines`; for a disaggregated pair's TTFT and end-to-end time, its
    prefill pool's too (`BOTH_POOLS_METRICS`): a prompt is computed there, so an unmeasured prefill GPU makes them
    as uncertain as an unmeasured pair's."""
    pools = [_gpu_and_lines(candidate)]
    prefill = next((r for r in candidate.roles if r.role == "prefill"), None)
    if prefill is not None and metric in BOTH_POOLS_METRICS and PREFILL_LINES in candidate.provenance:
        pools.append((load_gpu_catalog().get(prefill.gpu_type), int(candidate.provenance[PREFILL_LINES])))
    return pools


def candidate_slo_ratios(req: PlanRequest, candidate: Candidate, confidence: float | None = None
                         ) -> tuple[float, ...]:
    """`slo_bound_ratios` of `candidate` (its GPU type, its `provenance.measuredLines`; the wider of both pools' for a
    disaggregated pair's TTFT and end-to-end time, `evidence_pools`) at `confidence` (default: the plan's)."""
    # Every pool an SLO may read, the candidate's own first: an SLO of one pool reads the first ratios alone.
    by_pool = [slo_bound_ratios(req, gpu, lines, confidence) for gpu, lines in evidence_pools(candidate, "ttft")]
    return tuple(max(ratios[i] for ratios in by_pool[:len(evidence_pools(candidate, slo.metric))])
                 for i, slo in enumerate(req.slos))


def slo_limits(req: PlanRequest, factors: FactorSet, gpus: Sequence[GpuSpec]) -> NDArray[np.float64]:
    """(SLO, GPU): the largest prediction [s] of each SLO's percentile a candidate on each of `gpus` may have: the
    target over the one-sided bound's ratio at the plan's confidence (`slo_bound_ratios`)."""
    targets = np.array([s.max_s for s in req.slos])
    ratios = [slo_bound_ratios(req, g, measured_lines_on(req, factors, g)) for g in gpus]
    return np.array([targets / np.array(r) for r in ratios]).T.reshape(len(req.slos), len(gpus))


def ms_text(seconds: float) -> str:
    """A latency in ms: whole above 100 ms, else three significant digits."""
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:.3g}"


def _limit_is_target(req: PlanRequest, slo: SloTarget, limit_s: float) -> bool:
    return req.confidence is None or limit_s >= slo.max_s * (1 - 1e-9)


def limit_words(req: PlanRequest, slo: SloTarget, limit_s: float) -> str:
    """'{target} ms target' where `limit_s` is the target itself, else '{limit} ms, what the {target} ms target
    allows at confidence {c} (held-out errors up to x{ratio})'."""
    if _limit_is_target(req, slo, limit_s):
        return f"{ms_text(slo.max_s)} ms target"
    return (f"{ms_text(limit_s)} ms, what the {ms_text(slo.max_s)} ms target allows at confidence "
            f"{req.confidence:g} (held-out errors up to x{slo.max_s / limit_s:.2f})")


def miss_ms_text(req: PlanRequest, slo: SloTarget, value_s: float, limit_s: float, text: str) -> str:
    """`text`, a latency `value_s` over the limit `limit_s` as a reason words it [ms], or where that rounds to the
    limit as `limit_words` states it or below, with the decimals it takes to read over it: "25.3 ms > 25 ms
    target", never "25 ms > 25 ms target"."""
    shown = float(ms_text(slo.max_s if _limit_is_target(req, slo, limit_s) else limit_s))
    ms = value_s * 1e3
    for digits in range(1, 5):
        if float(text) > shown:
            break
        text = f"{ms:.{digits}f}"
    return text


def slo_checks(req: PlanRequest, candidate: Candidate) -> list[SloCheck]:
    """Each SLO of `req` judged on `candidate`'s predictions: its bound at the plan's confidence (0.8 where the plan
    sets none: the confidence its intervals are stated at) and the confidence it holds with."""
    confidence = DEFAULT_CONFIDENCE if req.confidence is None else req.confidence
    ratios = candidate_slo_ratios(req, candidate, confidence)
    table, out = load_intervals(), []
    for slo, ratio in zip(req.slos, ratios, strict=True):
        name = QUANTILE_NAMES[slo.quantile]
        stats = getattr(candidate.predicted, f"{slo.metric}_ms")
        if stats is None:  # no TPOT: an observed workload whose every output is one token (`tpot_defined`)
            continue
        value = float(getattr(stats, name))
        target, bound = slo.max_s * 1e3, value * ratio
        holds = min(table.confidence_within(interval_evidence(req, gpu, slo.metric, slo.quantile, lines),
                                            math.log(target / value))
                    for gpu, lines in evidence_pools(candidate, slo.metric)) if value > 0 else CONFIDENCES[-1]
        out.append(SloCheck(metric=slo.metric, percentile=name, target_ms=rounded(target), predicted_ms=value,
                            bound_ms=rounded(bound), ratio=round(ratio, 3), margin=round(1.0 - bound / target, 3),
                            holds_with=holds))
    return out


def tpot_defined(req: PlanRequest) -> bool:
    """Whether some request of `req`'s workload generates a token after its first, so that TPOT (the time per output
    token after the first) is defined: not where every output is exactly one token (outputTokens mean 1 with no
    spread). Such a plan's candidates carry no TPOT (`Predicted.tpot_ms` None), and TPOT is no objective of theirs;
    the spec refuses a TPOT target on such outputs."""
    return req.output_cv > 0 or req.output_mean > 1


def output_tokens_per_hour(req: PlanRequest) -> float:
    """The output tokens the plan's rate generates an hour (what a cost per million tokens divides by)."""
    return req.rate_rps * req.output_mean * 3600.0


def _replicas(req: PlanRequest, rate: NDArray[np.float64]) -> NDArray[np.int_]:
    """Replicas of `rate` (> 0) requests/s each that serve the plan's rate with its minimum headroom left and
    no fewer than its minimum replicas."""
    usable = np.maximum(rate * (1.0 - req.min_headroom), 1e-12)
    return np.maximum(req.min_replicas, np.ceil(req.rate_rps / usable - 1e-9)).astype(int)


class _Rows:
    """The (shape, max batch) rows through the grid's gates, as arrays, and what the search learns of each.

    The queueing model's rate-free part depends on the shape, not on the batch cap: it is built once per shape
    (on each shape's first row), and each row gets its own slots and capacity when evaluated.

    A replica of pp pipeline stages keeps pp batches in flight (vLLM's virtual engines, SGLang's and
    TensorRT-LLM's micro-batches): pp streams (`PoissonModel`), each with 1/pp of the replica's slots and a step
    through every stage. Rates and capacities are per replica; `slots` are one stream's.

    How variable a replica's arrivals are depends on how many replicas share the plan's stream
    (`replica_arrival_cv2`), and how many it takes on the rate found: each row is searched for `assumed` replicas
    (first the plan's minimum) and searched again for more where its rate needs more (`settle`).
    """

    def __init__(self, req: PlanRequest, grid: _Grid) -> None:
        self.req, self.grid = req, grid
        self.shape = rows = grid.row_shape
        self.batch = grid.batch_sizes[grid.row_batch]
        self.tp, self.pp, self.price = grid.tp[rows], grid.pp[rows], grid.price[rows]
        self.gpus = self.tp * self.pp  # per replica
        self.chunk = grid.settings[0].chunk_tokens
        p, o = req.prompt_mean, req.output_mean
        context = running_context(p, o, req.output_cv)
        self.slots = np.maximum(np.minimum(self.batch, grid.row_kv_tokens / context) / self.pp, 1.0)
        self.fraction = 1.0 - req.prefix_hit_rate
        every = np.arange(len(rows))
        self.traffic = traffic_of(req, self.fraction)
        self.capacity = poisson_capacity(self.hardware(every), self.traffic, self.slots, self.chunk, self.pp)
        new_shape = np.r_[True, rows[1:] != rows[:-1]]
        first_row, self.shape_of_row = np.flatnonzero(new_shape), np.cumsum(new_shape) - 1
        self.first_row = first_row  # each shape's first row
        self.per_shape = poisson_model(
            self.hardware(first_row), self.traffic, self.slots[first_row], self.chunk,
            capacity=self.capacity[first_row], samples=SEARCH_SAMPLES, streams=self.pp[first_row])
        self.wanted = [(s.metric, s.quantile) for s in req.slos]
        self.targets = grid.slo_limits[:, grid.gpu[rows]]  # (SLO, rows): each row's GPU's limits
        # At light load nothing queues, so the batch cap does not matter: evaluate one row per shape.
        self.light = self.per_shape.quantiles(self.capacity[first_row] * 1e-4, self.wanted)[:, self.shape_of_row]
        self.slo_ok = np.all(self.light <= self.targets, axis=0)
        # No candidate can cost less than the replicas its utilisation cap alone requires.
        high = np.maximum(self.capacity * req.max_utilization, 1e-12)
        self.cost_floor = _replicas(req, high) * self.gpus * self.price
        self.best_rate = np.zeros(len(rows))
        self.assumed = np.full(len(rows), req.min_replicas)  # the replicas each row's arrivals are split over

    def hardware(self, index: NDArray[np.intp]) -> Hardware:
        return take_hardware(self.grid.hardware, self.shape[index])

    def arrival_cv2(self, index: NDArray[np.intp]) -> NDArray[np.float64]:
        """One stream's arrival CV^2 of rows `index`, at their `assumed` replicas."""
        return replica_arrival_cv2(self.req.arrival_cv2, self.assumed[index], self.pp[index])

    def model_of(self, index: NDArray[np.intp]) -> PoissonModel:
        return self.per_shape.take(self.shape_of_row[index], self.slots[index], self.capacity[index],
                                   self.arrival_cv2(index))

    def settle(self, rates: _RateSearch, index: NDArray[np.intp]) -> None:
        """Search rows `index` again, by `rates` (whose model reads `arrival_cv2`), until the replicas each one's
        best rate needs are no more than those its arrivals were split over (`assumed`).

        Where the plan's arrivals are steadier than Poisson, more replicas leave each one's burstier (towards
        Poisson): a row that needs more than it assumed is searched for those, and needs as many or more; the rows
        end where they need what they assumed. Where they are burstier, more replicas leave each one's steadier:
        one search for the replicas it needed is enough (it needs no more there), and the row keeps them (fewer
        might do, but would be burstier). Poisson arrivals are Poisson at any count: nothing to search again."""
        if self.req.arrival_cv2 == 1.0:
            return
        while True:
            index = index[self.best_rate[index] > 0]
            need = _replicas(self.req, self.best_rate[index])
            more = need > self.assumed[index]
            if not np.any(more):
                return
            index = index[more]
            self.assumed[index] = need[more]
            at_cap, cap_margin = rates.at_cap(index)
            self.best_rate[index[at_cap]] = self.capacity[index[at_cap]] * self.req.max_utilization
            pending = index[~at_cap]
            self.best_rate[pending] = rates.refine(pending, cap_margin[~at_cap], self.best_rate[pending])

    def limits(self, index: NDArray[np.intp]) -> tuple[NDArray[np.int_], NDArray[np.int_], NDArray[np.float64],
                                                       NDArray[np.intp]]:
        """(replicas, GPUs, cost, broken limit check or -1) of rows `index` at their best rates (> 0), and no fewer
        than their arrivals were split over (`settle`)."""
        replicas = np.maximum(_replicas(self.req, self.best_rate[index]), self.assumed[index])
        gpus = replicas * self.gpus[index]
        cost = gpus * self.price[index]
        gpu_type = self.grid.gpu[self.shape[index]]
        return replicas, gpus, cost, _limit_checks(self.req, self.grid.gpus, gpu_type, replicas, gpus, cost)

    def cheapest(self, index: NDArray[np.intp]) -> float:
        """The cheapest cost among rows `index` that pass every limit at their best rates (inf: none)."""
        index = index[self.best_rate[index] > 0]
        _, _, cost, check = self.limits(index)
        return float(np.min(cost[check < 0])) if np.any(check < 0) else math.inf


def gpu_price(req: PlanRequest, gpu: GpuSpec) -> float:
    """What one `gpu` costs the plan an hour [USD]: its `constraints.prices`, else the catalog's."""
    return req.prices.get(gpu.key, gpu.usd_per_hour)


def cost_per_hour(req: PlanRequest, c: Candidate) -> float:
    """What `c`'s GPUs (each pool's, for a disaggregated one) cost the plan an hour [USD], unrounded: what its limits
    are judged by, where `Candidate.cost` is `rounded` (to four significant digits: $1000/h for $1000.40/h)."""
    catalog = load_gpu_catalog()
    return dollars_per_hour([(pool.gpus, gpu_price(req, catalog.get(pool.gpu_type))) for pool in c.roles or [c]])


_PRICE_BASES = ("estimate", "catalog", "spec")  # the weakest first


def price_basis(req: PlanRequest, *gpus: GpuSpec) -> str:
    """Where the prices of `gpus` (each pool's) come from, a candidate's `provenance.cost`: `spec` (the plan's
    `constraints.prices`), `catalog` (the catalog's quote) or `estimate` (the catalog author's, no quote); of several
    the weakest, so that one pool priced from an estimate makes the whole cost one."""
    def basis(gpu: GpuSpec) -> str:
        return ("spec" if gpu.key in req.prices else "estimate" if "usd_per_hour" in gpu.unverified_fields
                else "catalog")
    return min((basis(gpu) for gpu in gpus), key=_PRICE_BASES.index)


def price_warning(req: PlanRequest, gpu: GpuSpec) -> str | None:
    """The warning of a candidate priced from the catalog's estimate for `gpu` (`price_basis`), None where the
    price is quoted or the plan's own: a cost is the answer's second half, so say where no quote stands behind it."""
    if price_basis(req, gpu) != "estimate":
        return None
    return (f"{gpu.key}: ${gpu_price(req, gpu):g} per GPU-hour is the catalog's estimate ({gpu.price_as_of}), no "
            "quoted price: give constraints.prices with yours (docs/catalogs-gpus.md#prices)")


BUDGET_TOLERANCE = 1e-9
"""A cost [$/h] over the budget by at most this share of it is within it: a sum of prices in floating point (3 x
$1.10 = $3.3000000000000003) may land a hair above the budget it equals."""


@overload
def over_budget(req: PlanRequest, cost: float) -> bool: ...
@overload
def over_budget(req: PlanRequest, cost: NDArray[np.float64]) -> NDArray[np.bool_]: ...
def over_budget(req: PlanRequest, cost: float | NDArray[np.float64]) -> bool | NDArray[np.bool_]:
    """Whether `cost` [$/h; a number or an array] breaks the plan's `constraints.budgetDollarsPerHour` (never where
    it sets none): over it by more than `BUDGET_TOLERANCE` of it."""
    budget = math.inf if req.budget_usd_per_hour is None else req.budget_usd_per_hour
    return cost > budget * (1.0 + BUDGET_TOLERANCE)


def _tail_warning(req: PlanRequest) -> str:
    """A warning when the traffic is too variable for the analytic tail to be trusted (else empty)."""
    if req.arrival_cv2 < HIGH_VARIANCE_CV2 and (req.service_cv2 or 0.0) < HIGH_VARIANCE_CV2:
        return ""
    service = "from the lengths" if req.service_cv2 is None else f"{req.service_cv2:g}"
    return (f"arrival CV^2 {req.arrival_cv2:g}, service CV^2 {service}: the analytic latency tail is optimistic "
            "for traffic this variable (TTFT p99 up to several times at high utilisation); unless the plan sets "
            "verify: false, the recommendation is checked in the simulator")


def _percentiles(samples: dict[float, NDArray[np.float64]], i: int) -> Percentiles:
    return Percentiles(**{name: rounded(float(samples[q][i]) * 1e3) for q, name in QUANTILE_NAMES.items()})


def _candidate(
    req: PlanRequest,
    engine: EngineProfile,
    shape: _Shape,
    batch: int,
    settings: EngineSettings,
    replicas: int,
    report: LoadResult,
    i: int,
    best_rate: float,
    capacity: float,
    slots: float,
    lines_on_family: dict[str, int],
    checkpoint: Checkpoint | str,
    kv_tokens: float,
) -> Candidate:
    assert isinstance(checkpoint, Checkpoint)  # the precision gate let no row without one through
    gpu = shape.gpu
    price = gpu_price(req, gpu)
    gpus = replicas * shape.gpus
    per_replica = req.rate_rps / replicas
    label_key, label = node_selector(gpu, req)
    warnings = [f"{gpu.key}: figures not yet verified against a datasheet: {', '.join(gpu.unverified_fields)}"
                ] if {"memory_bandwidth_gb_s", "fp16_tflops"} & set(gpu.unverified_fields) else []
    estimate = price_warning(req, gpu)
    if estimate:
        warnings.append(estimate)
    if _tail_warning(req):
        warnings.append(_tail_warning(req))
    if replicas > SANITY_REPLICAS:
        warnings.append(f"{replicas:,} replicas ({gpus:,} GPUs): more than the {SANITY_REPLICAS:,} that "
                        "constraints.maxReplicas and the rendered autoscaler allow; check workload.requestsPerSecond "
                        f"({req.rate_rps:g}/s) and the token lengths, or split the traffic over several plans")
    # What the step times rest on: kernels measured on this GPU, or a sibling's scaled, published figures, or none.
    basis = kernel_basis(gpu)  # (an unmeasured candidate's own warning comes first: `_unmeasured_warning`)
    if basis.kind != "measured":
        warnings.append(f"{gpu.key}: {basis.note}; step times are extrapolated (docs/model.md#kernel-basis)")
    if flex_attention(engine.name, req.engine_version, gpu.family):
        warnings.append(f"{engine.name} attends on {gpu.key} (compute capability below 8.0) with FlexAttention, whose "
                        "times the step model does not price: its attention is costed as FlashAttention's")
    # The measured serving runs behind the engine terms a plan (the current release) uses: its line on this stack.
    line = factor_key(engine.name, None, gpu.vendor)
    measured_lines = lines_on_family.get(line, 0)
    if not measured_lines:
        older = ", ".join(f"{other} {n}" for other, n in lines_on_family.items() if other != line)
        warnings.append(f"{engine.name} on {gpu.family} GPUs ({gpu.key}): no measured serving run of this release "
                        "line on this GPU family; its per-step overheads come from runs on other GPUs"
                        + (f" (measured on {gpu.family} only as other release lines, not used: {older}; "
                           "docs/engines.md#factor-lines-factor_key)" if older else ""))
    if checkpoint.note and checkpoint.source == "plan":
        warnings.append(checkpoint.note)
    measured = basis.kind in MEASURED_KERNELS or measured_lines > 0
    kv = resolve_kv_dtype(shape.kv_dtype, shape.precision, engine.name, kv_hint(checkpoint))
    launch = engine_launch(engine.name, req.engine_version, checkpoint.repo, checkpoint.launch_format, shape.precision,
                           shape.tp, batch, kv, settings, kv_tokens=int(kv_tokens), pp=shape.pp,
                           mtp_draft_tokens=req.mtp_draft_tokens, gpu_family=gpu.family,
                           prefix_caching=prefix_caching(req))
    # As the shape's hardware was built (`grid._shape_hardware`): the release's graphs at the plan's step budget.
    graphs = cuda_graph_max_batch(engine.name, req.engine_release, gpu.memory_bytes, shape.tp, settings.step_tokens) * (
        shape.tp if shape.dp_attention else 1)
    if batch > graphs:
        launch = replace(launch, notes=[*launch.notes, (
            f"max batch {batch} is above the {graphs:.0f} sequences {engine.name} captures CUDA graphs for at its "
            f"defaults: a step over {graphs:.0f} runs eagerly, which the plan prices (docs/engines.md, CUDA graphs)")])
    if shape.ep:
        launch = replace(launch, args=[*launch.args, *expert_parallel_args(req.engine_version, shape.tp)], notes=[
            *launch.notes, f"--ep-size {shape.tp} with DeepEP: each rank holds 1/{shape.tp} of the experts whole and "
            "sends its tokens to their experts' ranks and back (all-to-all) in place of the MoE all-reduces"])
    if shape.dp_attention:
        launch = replace(launch, args=[*launch.args, *dp_attention_args(shape.tp)], notes=[
            *launch.notes, f"--enable-dp-attention --dp-size {shape.tp}: each of the {shape.tp} ranks runs attention "
            "for its own requests and keeps only their KV (the MLA latent is not replicated); MoE layers span all"])
    candidate = Candidate(
        gpu_type=gpu.key,
        node_selector={label_key: label},
        gpus_per_replica=shape.gpus,
        nodes_per_replica=max(shape.pp, shape.tp // req.gpus_per_node.get(gpu.key, 8)),
        pipeline_parallel=shape.pp,
        replicas=replicas,
        gpus=gpus,
        max_batch=batch,
        precision=shape.precision,
        kv_cache_dtype=shape.kv_dtype,
        data_parallel_attention=shape.dp_attention,
        expert_parallel=shape.ep,
        predicted=Predicted(
            ttft_ms=_percentiles(report.ttft_q, i),
            tpot_ms=_percentiles(report.tpot_q, i) if tpot_defined(req) else None,
            e2e_ms=_percentiles(report.e2e_q, i),
            output_tokens_per_second=rounded(req.rate_rps * req.output_mean),
            utilization=rounded(per_replica / capacity),
            max_concurrency=rounded(slots),
            requests_per_second_per_replica=rounded(per_replica),
            max_requests_per_second_per_replica=rounded(best_rate),
        ),
        cost=cost_of([(gpus, price)], output_tokens_per_hour(req)),
        measured=measured,
        headroom=rounded(max(0.0, headroom(req.rate_rps, replicas * best_rate))),
        engine_args=launch.args,
        engine_command=launch.entry_point,
        engine_files=launch.files,
        engine_notes=launch.notes[:8],
        checkpoint=checkpoint.repo,
        provenance={
            "predicted": "calibrated" if measured_lines else "extrapolated",
            "measuredLines": str(measured_lines),
            "kernels": basis.kind,
            "cost": price_basis(req, gpu),
            "memory": "calibrated",
            "engineDefaults": "assumed",
            "engineVersion": launch.version_line or "unversioned",
            "checkpoint": ("online" if checkpoint.online else "plan" if checkpoint.source == "plan" else "catalog"),
        },
        warnings=warnings,
    )
    if measured:
        return candidate
    # The range is worked out for the recommendation only, once it is final (`with_upper_cost`): about 3 ms each,
    # which for every unmeasured row shown cost a third more CPU per plan.
    first = _unmeasured_warning(engine, gpu, basis.kind, None)
    return candidate.model_copy(update={"warnings": [first, *warnings][:16]})


MEASURED_KERNELS = frozenset({"measured", "scaled"})
"""Kernel bases (`kernels.kernel_basis`) that rest on measured kernel tables, the GPU's own or a sibling's scaled to
it. Held out (`python bench/held_out_by_kernel_basis.py --basis scaled`, 2026-12-04), the step-time rows of the
scaled GPUs (A100 PCIe and 40GB, A40, RTX A6000, RTX 6000 Ada, GeForce 30 and 40 series, H100 PCIe, GH200; 91 rows
of 6 sources) ran at a median 0.93 of the predicted time over the sources (0.78-1.04 by source), within the
README's held-out median error over all sources (13.5%). The `published` ones (MI300X) ran at 1.83
(UNMEASURED_STEP_SLOWDOWN)."""


UNMEASURED_STEP_SLOWDOWN = 1.83
"""How many times as long as predicted an unmeasured candidate's steps may take (`Candidate.upper_cost` plans it
again with every step this slow): the planner's held-out error where a GPU's kernels were not measured. On the
only such GPU that published serving runs measured, the MI300X (kernels from published microbenchmarks), each of
the four sources with such rows left out of the fit as the README's leave-one-source-out table leaves it, the median
measured / predicted time of their step-time rows (TPOT, ITL, end-to-end time; predicted / measured for
throughputs) was 2.38 (argonne-lcf, 19 rows), 2.49 (dstackai, 60), 0.71 (mlcommons, 4) and 1.29 (saienduri, 4):
1.83 over the sources, each one vote as the README summarises its table (`python bench/held_out_by_kernel_basis.py`,
2026-12-04). The runs disagree by more than 2x among themselves (docs/model.md#known-gaps): a median, not a bound."""


# What UNMEASURED_STEP_SLOWDOWN is, in words (the same for every unmeasured GPU, an NVIDIA one included).
UNMEASURED_EVIDENCE = ("the median held-out error where a GPU's kernels were not measured, read on MI300X serving "
                       "runs, the only such GPU published runs measured")


def _unmeasured_warning(engine: EngineProfile, gpu: GpuSpec, kernels: str, upper: UpperCost | None) -> str:
    """The first warning of a candidate that rests on no measurement: what is missing, and its upper cost (not its
    cost, which verification may raise with more replicas)."""
    missing = (f"unmeasured: no kernel of the {gpu.key} or a sibling was measured (kernels {kernels}) and no serving "
               f"run of {engine.name}'s current release line on {gpu.family} GPUs")
    if upper is None:  # a disaggregated pair: no range is computed for its pools
        return (f"{missing}; its latencies and cost may be off by as much as its steps, {UNMEASURED_STEP_SLOWDOWN:g}x "
                f"({UNMEASURED_EVIDENCE}; docs/planning.md#unmeasured-candidates)")
    return f"{missing}: {upper.words()} (docs/planning.md#unmeasured-candidates)"


def node_selector(gpu: GpuSpec, req: PlanRequest) -> tuple[str, str]:
    """The node label and value that select `gpu` (GPU Feature Discovery or the AMD labeller): the value the
    cluster's nodes of that type carry where the operator read them (`PlanRequest.product_labels`; the labeller's
    spellings of one product differ, `AMD_Instinct_MI300X` and `AMD_Instinct_MI300X_OAM`), else the catalog's."""
    return gpu.product_label_key, dict(req.product_labels).get(gpu.key, gpu.product_label)
