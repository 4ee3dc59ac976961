"""Latency and throughput of one model instance under a load, in closed form: single stream, static batch
and Poisson arrivals (the capacity search's model). Vectorised: every argument broadcasts. Bursts, closed
loops and the scored Poisson runs of scenario files are served in the simulator (`simulate`), step by step
as the engine schedules them.

Times are seconds; token counts are per request. `slots` is how many sequences the engine runs at
once (min of its max_num_seqs and what the KV pool holds at the workload's lengths); `chunk_tokens`
is the per-step token budget of chunked prefill (np.inf where prefill runs as whole steps).

Online loads (Poisson) add the engine's per-request overhead (HTTP, tokenising, the
first stream chunk) to TTFT; single-stream and static-batch runs are offline harnesses and do not.

Percentiles are computed from the distributions, not as multiples of the mean: prompt and output
lengths are lognormal (mean and CV), the prefill queue is M/G/1 with an exponential tail, the slot
queue follows the Allen-Cunneen two-moment M/G/c approximation, and the stall a request's decode
suffers from other requests' prefills is a compound Poisson sum. Quantiles of these are taken on a
fixed stratified sample, so results are deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache, cached_property

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.model.performance import (
    DecodeStep,
    Hardware,
    decode_step,
    decode_step_s,
    hardware_column,
    prefill_s,
    prompt_token_s,
    take_hardware,
)
from inferplan.planner.quantiles import QUANTILES, normal_ppf

FloatArray = NDArray[np.float64]
_SAMPLES = 512


def _stratified(seed: int, samples: int = _SAMPLES) -> FloatArray:
    """A fixed, shuffled stratified sample of U(0,1) of `samples` points."""
    u = (np.arange(samples) + 0.5) / samples
    return np.random.default_rng(seed).permutation(u)


@cache
def _uniforms(samples: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Independent stratified samples for prompt length, output length, wait, stall and arrival order."""
    return tuple(_stratified(seed, samples) for seed in (11, 23, 37, 41, 53))  # type: ignore[return-value]


@cache
def _no_wait_floor(samples: int) -> FloatArray:
    """1 - u (at least 1e-9) of the wait sample's uniforms: what the exponential wait tail divides by."""
    return np.maximum(1.0 - _uniforms(samples)[2], 1e-9)


@cache
def _wait_order(samples: int) -> tuple[FloatArray, NDArray[np.intp]]:
    """The wait sample's uniforms in increasing order, and the position each came from."""
    u = _uniforms(samples)[2]
    order = np.argsort(u, kind="stable")
    return u[order], order


def _waiting(samples: int, threshold: FloatArray) -> tuple[tuple[NDArray[np.intp], ...], NDArray[np.intp]]:
    """Where the wait sample's uniform u exceeds threshold[row], as (row index, sample index): what
    np.nonzero(u > threshold[..., None]) finds, from the sorted sample, without comparing every pair."""
    ascending, order = _wait_order(samples)
    flat = np.ravel(threshold)
    count = samples - np.searchsorted(ascending, flat, side="right")  # per row: how many exceed it
    row = np.repeat(np.arange(flat.size), count)
    start = np.repeat(samples - count - (np.cumsum(count) - count), count)  # each row's run in `order`
    sample = order[start + np.arange(len(row))]
    return (np.unravel_index(row, np.shape(threshold)) if np.ndim(threshold) else ()), sample


@cache
def _normal_scores(samples: int) -> FloatArray:
    """Standard normal scores of the stall sample's uniforms (fixed, so computed once per sample size)."""
    return normal_ppf(_uniforms(samples)[3])


@cache
def _batch_scores(samples: int) -> FloatArray:
    """Standard normal scores, independent of the others, for how far the running batch over a sampled request's
    decode lies from its mean."""
    return normal_ppf(_stratified(59, samples))


def lognormal_sample(mean: ArrayLike, cv: ArrayLike, u: FloatArray, cap: ArrayLike = np.inf) -> FloatArray:
    """Lognormal values of the given mean and coefficient of variation at uniform points `u`.

    Shape: broadcast(mean, cv) + (len(u),). CV 0 gives the mean itself. Values above `cap` are cut
    to it and the sample rescaled so that its mean stays `mean` (a length filter on a dataset).
    """
    return _lognormal_at(mean, cv, normal_ppf(u), cap)


@cache
def _length_scores(samples: int) -> tuple[FloatArray, FloatArray]:
    """Standard normal scores of the prompt and output length samples' uniforms (`lognormal_sample` at them)."""
    u = _uniforms(samples)
    scores = normal_ppf(u[0]), normal_ppf(u[1])
    for z in scores:
        z.flags.writeable = False  # shared by every model of this sample size
    return scores


def _lognormal_at(mean: ArrayLike, cv: ArrayLike, z: FloatArray, cap: ArrayLike = np.inf) -> FloatArray:
    """`lognormal_sample` at the standard normal scores `z` of its uniforms."""
    m = np.asarray(mean, dtype=float)[..., None]
    s2 = np.log1p(np.asarray(cv, dtype=float) ** 2)[..., None]
    x = m * np.exp(np.sqrt(s2) * z - s2 / 2.0)
    c = np.asarray(cap, dtype=float)[..., None]
    for _ in range(3):  # rescaling after the cut moves values past the cap again; a few passes settle
        x = np.minimum(x, c)
        x = x * m / x.mean(axis=-1, keepdims=True)
    return np.minimum(x, np.maximum(c, m))


def prompt_sample(prompt_tokens: ArrayLike, prompt_cv: ArrayLike, samples: int = _SAMPLES) -> FloatArray:
    """The prompt lengths of the stratified sample `poisson_model` draws of `samples` requests (no length cap):
    request k of the sample has the k-th length, in every model of that sample size."""
    return _lognormal_at(prompt_tokens, prompt_cv, _length_scores(samples)[0])


@dataclass(frozen=True)
class LoadResult:
    """Per-request latency statistics [s] and deployment throughput under a load."""

    ttft_mean: FloatArray
    ttft_q: dict[float, FloatArray]
    tpot_mean: FloatArray
    tpot_q: dict[float, FloatArray]
    e2e_mean: FloatArray
    requests_per_s: FloatArray
    output_tokens_per_s: FloatArray
    concurrency: FloatArray   # mean running sequences
    overloaded: NDArray[np.bool_]
    e2e_q: dict[float, FloatArray] = field(default_factory=dict)
    capacity: FloatArray | None = None  # requests/s at which every slot is busy (open-loop loads)


def sample_quantiles(samples: FloatArray, quantiles: Sequence[float]) -> list[FloatArray]:
    """`np.quantile(samples, q, axis=-1)` for each q (its default, linear method, the same arithmetic), with one
    partition for all and without np.quantile's per-call overhead, which the search would pay thousands of
    times on small arrays."""
    n = samples.shape[-1]
    virtual = [(n - 1) * q for q in quantiles]
    below = [min(math.floor(v), n - 1) for v in virtual]
    above = [min(k + 1, n - 1) for k in below]
    ordered = np.partition(samples, sorted({*below, *above}), axis=-1)
    values = []
    for v, k, j in zip(virtual, below, above, strict=True):
        a, b, t = ordered[..., k], ordered[..., j], v - k
        # numpy's _lerp: from the nearer end, so that t = 0 and t = 1 give the order statistics exactly
        values.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    return values


def _quantiles(samples: FloatArray) -> dict[float, FloatArray]:
    return dict(zip(QUANTILES, sample_quantiles(samples, QUANTILES), strict=True))  # one partition for all four


def _const_quantiles(value: FloatArray) -> dict[float, FloatArray]:
    return dict.fromkeys(QUANTILES, value)


def single_stream(hw: Hardware, prompt_tokens: ArrayLike, output_tokens: ArrayLike) -> LoadResult:
    """One request at a time: prefill, then decode at batch 1 with the context growing."""
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    ttft = prefill_s(hw, p)
    tpot = decode_step_s(hw, 1.0, p + o / 2.0)
    e2e = ttft + (o - 1.0) * tpot
    one = np.ones_like(e2e)
    return LoadResult(ttft, _const_quantiles(ttft), tpot, _const_quantiles(tpot), e2e, one / e2e, o / e2e,
                      one, np.zeros_like(e2e, dtype=bool), _const_quantiles(e2e))


def static_batch(hw: Hardware, batch: ArrayLike, prompt_tokens: ArrayLike, output_tokens: ArrayLike) -> LoadResult:
    """N requests padded into one batch: one prefill of N prompts, then `output_tokens` steps at batch N."""
    n = np.asarray(batch, dtype=float)
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    ttft = prefill_s(hw, p, n)
    tpot = decode_step_s(hw, n, p + o / 2.0)
    e2e = ttft + (o - 1.0) * tpot
    return LoadResult(ttft, _const_quantiles(ttft), tpot, _const_quantiles(tpot), e2e, n / e2e, n * o / e2e,
                      n, np.zeros_like(e2e, dtype=bool), _const_quantiles(e2e))


def _slot_wait_factor(utilisation: FloatArray, servers: FloatArray) -> FloatArray:
    """Probability of waiting in M/M/c, Sakasegawa's approximation rho^(sqrt(2(c+1)) - 1)."""
    rho = np.clip(utilisation, 0.0, 0.999)
    return rho ** (np.sqrt(2.0 * (servers + 1.0)) - 1.0)


def _prompt_stretch(x: FloatArray, prompt_work_s: FloatArray) -> FloatArray:
    """What decode steps are stretched by (divided by) at rate x: the share of the GPU left by the prompt
    work sharing it (busy share x times the compute seconds of one request's prompt, at most 0.95)."""
    return 1.0 - np.clip(x * prompt_work_s, 0.0, 0.95)


CONCURRENCY_STEPS = 40  # at most; the Newton steps stop once every row has converged (usually in under ten)


def _concurrency(curve: DecodeStep, x: FloatArray, own_prefill: FloatArray, o: FloatArray,
                 stretch: FloatArray, slots: FloatArray) -> FloatArray:
    """Running sequences n solving Little's law n = x (TTFT + O TPOT(n)), at most `slots`.

    Below one sequence in flight the step runs at batch 1, so n = x L(1) there. Above it, h(n) = n -
    x L(n) rises from h(1) < 0 to h(slots) >= 0 (x never exceeds capacity); the step time is piecewise
    linear in n (`DecodeStep.mean_at`), so Newton steps kept inside the bracket (bisection when they leave it)
    converge in a few iterations. A row stays put once converged (h = 0, or a step below 1e-12 of n): stepping on from
    there would only move it off the root to the bracket's midpoint.
    """
    def latency(n: FloatArray) -> FloatArray:
        return own_prefill + o * (curve.mean_at(n) / stretch)

    light = x * latency(np.ones_like(x))
    if np.all(light <= 1.0):
        return light  # under one sequence in flight everywhere (light load): no fixed point to solve
    lo, hi = np.ones_like(x), np.maximum(slots, 1.0)
    n = np.clip(light, lo, hi)
    done = light <= 1.0  # rows settled stay as they are, so a row's answer does not depend on the others'
    for _ in range(CONCURRENCY_STEPS):
        delta = 1e-3 * n
        at_n, at_next = latency(np.stack([n, n + delta]))  # one evaluation for the value and the slope
        h = n - x * at_n
        lo, hi = np.where(h < 0, n, lo), np.where(h > 0, n, hi)
        slope = 1.0 - x * (at_next - at_n) / delta
        newton = n - h / np.where(slope > 0, slope, 1.0)
        step = np.where((slope > 0) & (newton >= lo) & (newton <= hi), newton, 0.5 * (lo + hi))
        step = np.where(h == 0, n, step)
        converged = np.abs(step - n) <= 1e-12 * n
        n = np.where(done, n, step)
        done = done | converged
        if np.all(done):
            break
    return np.where(light <= 1.0, light, np.minimum(n, slots))


# A running count that reaches past the largest CUDA graph feeds itself: a step above it runs eagerly (the CPU launches
# every kernel), so the sequences decode slower, stay longer, and more of them run, which keeps the steps above it. TGI
# captures graphs up to 32 sequences: CodeLlama-34B in FP8 on an MI355X at 10 requests/s of 2,000-token prompts had a
# mean-field TPOT p50 of 20.5 ms (19.9 sequences on average, the eager time weighted by P(N > 32) of a Poisson count
# about that mean, 0.3%), and the simulator ran it at 37.7 ms (random routing), its batch mostly above 32. Where the
# count can reach the graphs (mean + GRAPH_REACH_SIGMAS standard deviations past them) and the eager time would hold it
# there (`_reaches_graphs`), it is taken from the running count's own stationary distribution: the batch as a
# birth-death chain, arrivals at x and each of N sequences done at 1 / L(N) with L(N) the lifetime at a step of N (its
# prefill, then O tokens at that step over the prompt work's stretch), so that P(N) / P(N - 1) = x L(N) / N up to the
# slots. All sequences slow down alike (a processor-sharing
# queue with a rate that depends on the count), so the distribution does not depend on the output lengths' spread
# beyond their mean. Over the sample the step a token waits for is the count-weighted mean, E[N step(N)] / E[N].
GRAPH_REACH_SIGMAS = 6.0


def _reaches_graphs(model: PoissonModel, n: FloatArray, x: FloatArray, stretch: FloatArray
                    ) -> NDArray[np.bool_] | None:
    """The rows whose running count reaches past their largest CUDA graph at a cost (`GRAPH_REACH_SIGMAS`), below
    their slots, where the eager steps would keep it there: one more sequence than the graphs hold stays long enough
    for more than that many to run (x L(G + 1) > G + 1, a second, upper fixed point), and only its eager time does
    (without it x L(G + 1) < G + 1: else the count is past the graphs anyway). Without one the count comes
    back below the graphs as a Poisson count about its mean does (`DecodeStep.mean_at`'s share), as the simulator
    has it: the example of GRAPH_REACH_SIGMAS at 9 requests/s, TPOT p50 17.1 ms either way. None where no row is."""
    if not model.curve.has_eager:
        return None
    hw = model.hw
    graphs = np.broadcast_to(np.asarray(hw.graph_max_batch, dtype=float), n.shape)
    reach = (x > 0.0) & (np.asarray(hw.eager_step_s) > 0.0) & (model.c > graphs) & (
        n + GRAPH_REACH_SIGMAS * np.sqrt(np.maximum(n, 1.0)) > graphs)
    if not np.any(reach):
        return None
    o = model.o
    with np.errstate(invalid="ignore"):
        held = x * (model.own_prefill + o * model.graph_steps[0] / stretch)  # the count G + 1 sequences bring
        # ... and without its eager time: where that too is above, the count is there anyway, as the mean-field count
        # has it (its ramp's share then one), and only the eager time makes the upper state in between.
        graphed = held - x * o * np.asarray(hw.eager_step_s) / stretch
        reach &= (held > graphs + 1.0) & (graphed < graphs + 1.0)
    return reach if np.any(reach) else None


def _curve_rows(curve: DecodeStep, shape: tuple[int, ...], at: tuple[NDArray[np.intp], ...]) -> DecodeStep:
    """The rows `at` of `curve` over deployments of `shape` (its fields broadcast to it first: a field may be one
    value for all, or leave out the rate axes), as a one-dimensional curve."""
    def rows(value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, np.ndarray | float | int):
            return value
        if isinstance(value, np.ndarray) and value.shape == shape:
            return value[at]
        return np.broadcast_to(np.asarray(value), shape)[at]

    hw = Hardware(**{f.name: rows(getattr(curve.hw, f.name)) for f in fields(Hardware)})
    return replace(curve, hw=hw, **{f.name: rows(getattr(curve, f.name)) for f in fields(DecodeStep)
                                    if f.name != "hw"})


def _running_count(curve: DecodeStep, x: FloatArray, own_prefill: FloatArray, o: FloatArray, stretch: FloatArray,
                   slots: FloatArray, past: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The mean and variance of the running count of one-dimensional rows (`curve` theirs), and the count-weighted
    mean step, from its birth-death chain (see GRAPH_REACH_SIGMAS). The chain is summed up to where its terms are
    negligible: past the largest count at which x L(N) = N (the upper of the two) each ratio is under one, and a
    Poisson tail about that count is gone within 10 of its standard deviations. `past`: the steps of one and two
    sequences more than the graphs hold (`PoissonModel.graph_steps`, these rows')."""
    # The upper fixed point of the step's line through the two counts past the graphs (the step bends upwards, so
    # the line's root is at most the curve's; a bound found short is widened to the slots below).
    over = np.asarray(curve.hw.graph_max_batch, dtype=float) + 1.0
    first, second = own_prefill + o * past[0] / stretch, own_prefill + o * past[1] / stretch
    rise = x * (second - first)  # per sequence, under one below the slots' count where the count is stable
    with np.errstate(divide="ignore", invalid="ignore"):
        top = np.where(rise < 1.0, x * (first - (second - first) * over) / (1.0 - rise), slots)
    top = np.clip(top, over, slots)
    limit = int(np.max(np.minimum(slots, np.ceil(top + 10.0 * np.sqrt(top) + 10.0))))
    while True:
        counts = np.arange(1, limit + 1, dtype=float)[:, None]  # (counts, rows)
        steps = curve.at(counts)
        ratio = x * (own_prefill + o * steps / stretch) / counts
        # A row whose chain still grows at the bound (its ratio there one or more) and has slots beyond: all of them.
        if limit >= np.max(slots) or not np.any((ratio[-1] >= 1.0) & (slots > limit)):
            break
        limit = int(np.max(slots))
    log_weight = np.cumsum(np.log(np.maximum(ratio, 1e-300)), axis=0)
    log_weight = np.where(counts <= slots, log_weight, -np.inf)
    log_weight = np.vstack([np.zeros((1, log_weight.shape[1])), log_weight])  # the empty batch
    weight = np.exp(log_weight - log_weight.max(axis=0))
    weight /= weight.sum(axis=0)
    every = np.vstack([np.zeros((1, counts.shape[1] if counts.ndim > 1 else 1)), counts])
    mean = (weight * every).sum(axis=0)
    variance = (weight * every * every).sum(axis=0) - mean * mean
    step = (weight[1:] * counts * steps).sum(axis=0) / np.maximum(mean, 1e-12)
    return mean, np.maximum(variance, 0.0), step


def running_context(prompt_tokens: ArrayLike, output_tokens: ArrayLike, output_cv: ArrayLike = 0.0) -> FloatArray:
    """The mean context [tokens] of a sequence in the running batch: its prompt and the tokens it has generated.
    A sequence stays in the batch for as many steps as it generates, so the batch holds long outputs longer than
    short ones: averaged over the batch's steps the generated part is E[O^2] / (2 E[O]) = o (1 + cv^2) / 2 for
    outputs of mean o and coefficient of variation cv (length-biased), not o / 2. The KV cache it fills and the
    attention each decode step reads grow with it."""
    o = np.asarray(output_tokens, dtype=float)
    cv = np.asarray(output_cv, dtype=float)
    return np.asarray(prompt_tokens, dtype=float) + o * (1.0 + cv * cv) / 2.0


@dataclass(frozen=True)
class Traffic:
    """What arrives at an instance, its rate apart: the mean prompt and output lengths [tokens] and their CVs, the
    arrivals' burstiness (CV^2 of the gaps: 1 is Poisson), the requests of a finite run, the longest prompt a
    request may have, a service-time CV^2 that overrides the one of the output lengths, and the share of each
    prompt computed (1 - the prefix cache's hit rate). Numbers or arrays (one per deployment)."""

    prompt_tokens: ArrayLike
    output_tokens: ArrayLike
    prompt_cv: ArrayLike = 0.0
    output_cv: ArrayLike = 0.0
    arrival_cv2: ArrayLike = 1.0
    num_prompts: ArrayLike = 1000.0
    max_prompt_tokens: ArrayLike = np.inf
    service_cv2: ArrayLike | None = None
    prefill_fraction: ArrayLike = 1.0


def replica_arrival_cv2(arrival_cv2: ArrayLike, replicas: ArrayLike, stages: ArrayLike = 1) -> FloatArray:
    """The CV^2 of the gaps between the requests one stream of a replica gets, when a stream of gaps of CV^2
    `arrival_cv2` is split at random over `replicas` replicas (a plain Service's kube-proxy picks one per request,
    docs/model.md "Routing as deployed") and each replica's `stages` pipeline stages take its requests in turn.

    A random split keeps each request with probability p = 1 / n, so a replica's gap is a sum of N of the stream's
    gaps, N geometric (mean 1 / p, variance (1 - p) / p^2): its CV^2 is p c + 1 - p = 1 + (c - 1) / n (a Poisson
    stream stays Poisson; a steadier one tends to it, a burstier one too). A stage's gap is `stages` of its replica's
    in turn, whose CV^2 is that over `stages`. Exact for gamma (renewal) gaps, as the simulator draws them."""
    c = np.asarray(arrival_cv2, dtype=float)
    return (1.0 + (c - 1.0) / np.asarray(replicas, dtype=float)) / np.asarray(stages, dtype=float)


def pool_arrival_cv2(arrival_cv2: float, routers: int) -> float:
    """A bound on the CV^2 of the gaps between the requests one replica of a disaggregated pool gets, when a stream
    of CV^2 `arrival_cv2` reaches one of `routers` routers at random and each router sends its requests to the
    pool's replicas in turn (the rendered sglang-router, docs/model.md "Routing as deployed").

    One replica gets the whole stream. Many get from each router a nearly even stream (every m-th of its requests),
    out of phase with the others': the gaps of `routers` points at random on a circle, CV^2 (r - 1) / (r + 1) (1/3
    for two routers). In between, simulated (`simulate.routed`, gamma gaps of CV^2 0 to 8, 1 to 64 replicas, two
    routers), the CV^2 lies within the larger of the two: the stream's for bursty and Poisson arrivals, more than it
    for a stream steadier than (r - 1) / (r + 1)."""
    return max(float(arrival_cv2), (routers - 1.0) / (routers + 1.0))


def poisson_capacity(hw: Hardware, traffic: Traffic, slots: ArrayLike, chunk_tokens: ArrayLike,
                     streams: ArrayLike = 1.0) -> FloatArray:
    """Requests/s one instance sustains with every slot busy: X solving X (TTFT + O TPOT(slots, X)) = slots.

    `streams`: batches the instance runs at once, each with `slots` slots and steps of `hw` (a replica of `pp`
    pipeline stages keeps `pp` in flight, one per stage): the instance sustains that many times one's rate.

    It reads `traffic`'s lengths, output CV and prefill share (the share of each prompt that must be computed).
    With a the request's own prefill, b its O decode steps at full batch and w its prompt's compute seconds,
    TPOT is stretched by the prompt work sharing the GPU (`_prompt_stretch`), so X (a + b / (1 - X w)) = c
    while X w <= 0.95: the smaller root of a w X^2 - (a + b + c w) X + c = 0 (the other lies beyond 1 / w),
    taken in the form that does not cancel; beyond, the stretch is capped and X (a + b / 0.05) = c. Never above
    what the step budget lets through: chunk_tokens / computed prompts a step, a step as long as one of the
    prompt's own chunks.
    """
    prefill_fraction, output_cv = traffic.prefill_fraction, traffic.output_cv
    p = np.asarray(traffic.prompt_tokens, dtype=float)
    o = np.maximum(np.asarray(traffic.output_tokens, dtype=float), 1.0)
    c = np.maximum(np.asarray(slots, dtype=float), 1.0)
    shape = np.broadcast(p, o, c, np.asarray(hw.bandwidth_bytes_s)).shape
    p, o, c = (np.broadcast_to(v, shape).astype(float) for v in (p, o, c))
    computed = p * np.asarray(prefill_fraction, dtype=float)
    w = computed * prompt_token_s(hw, p)
    a = prefill_s(hw, np.maximum(computed, 1.0), 1.0, chunk_tokens)
    b = o * decode_step(hw, running_context(p, o, output_cv)).at(c)
    linear = a + b + c * w
    x = 2.0 * c / (linear + np.sqrt(linear * linear - 4.0 * a * w * c))
    x = np.where(x * w <= 0.95, x, c / (a + b / (1.0 - 0.95)))
    # The step budget caps the prompt tokens of a step, every prompt's together: chunk / computed prompts a step at
    # most, each step no shorter than one of this prompt's own chunks (`a` over its steps), whose weights and routed
    # experts are read once a step, which w (the prompt's compute alone) leaves out. It binds where prompts are long
    # against the budget and those reads dominate a chunk (a MoE's experts at a few hundred tokens a step).
    chunk = np.asarray(chunk_tokens, dtype=float)
    tokens = np.maximum(computed, 1.0)
    x = np.minimum(x, chunk / tokens * np.maximum(np.ceil(tokens / chunk), 1.0) / a)
    # A hair below the root, so that X (a + b / (1 - X w)) <= c holds in floats too.
    return x * (1.0 - 1e-12) * np.asarray(streams, dtype=float)


@dataclass(frozen=True)
class _Load:
    """The rate-dependent state of a `PoissonModel` at one rate, before any sampling."""

    lam: FloatArray
    x: FloatArray            # throughput: the rate, capped at capacity
    overloaded: NDArray[np.bool_]
    n: FloatArray            # mean running sequences
    tpot_bar: FloatArray     # mean TPOT, prompt work included
    step: FloatArray         # the decode step a token waits for on average: at n, or count-weighted past the graphs
    step_at_n: FloatArray    # the decode step at max(n, 1) (`DecodeStep.mean_at`)
    count_variance: FloatArray  # of the running count: n (Poisson), or its chain's past the graphs


@dataclass(frozen=True)
class PoissonModel:
    """`poisson` up to the arrival rate: deployments, workload and everything that does not depend on the
    rate (capacity, prefill service times and output lengths of the sampled requests).

    Built by `poisson_model`. `at(rate)` is `poisson` at that rate; `quantiles(rate, wanted)` computes only
    the percentiles asked for. A search evaluates one model at many rates, so the rate-free work is done once;
    `take(index)` keeps some rows of a one-dimensional model.

    A replica of `streams` streams (pipeline parallelism: one batch in flight per stage) splits its arrivals
    evenly over them, each a queue of its own with `c` slots: rates, capacities and throughputs in and out are
    the replica's, everything inside one stream's.
    """

    hw: Hardware
    curve: DecodeStep
    shape: tuple[int, ...]
    p: FloatArray
    o: FloatArray
    c: FloatArray
    o_cv: FloatArray
    context_cv2: FloatArray  # squared CV of the context of a sequence in the running batch
    batch_spread: FloatArray  # (*shape, samples): sqrt(g(T / d)) z of each sampled request (`_batch_spread`)
    prompt_work: FloatArray  # compute seconds of one request's prompt (the share not served from cache)
    own_prefill: FloatArray  # prefill time of a mean prompt on its own
    capacity: FloatArray     # one stream's
    outputs: FloatArray      # (*shape, samples): output lengths of the sampled requests
    gaps: FloatArray         # (*shape, samples): the token gaps TPOT averages over, max(outputs - 1, 1)
    service_pf: FloatArray   # (*shape, samples): their prefill service times
    extra_steps: FloatArray  # (*shape, samples), or 0 where none: the steps their prefill spans beyond one
    chunk_share: FloatArray  # mean computed prompt tokens / the step budget (0: whole prompts)
    es: FloatArray           # mean prefill service time
    es2: FloatArray          # ... and its second moment
    arrival_cv2: FloatArray
    service_cv2: FloatArray | None
    num_prompts: FloatArray  # one stream's share of the run
    streams: FloatArray
    samples: int

    @cached_property
    def graph_steps(self) -> FloatArray:
        """The decode steps of one and two sequences more than the largest CUDA graph holds, (2, *shape): the same at
        every rate (`_reaches_graphs`, `_running_count`); worked out the first time a row's count comes near them."""
        graphs = np.asarray(self.hw.graph_max_batch, dtype=float)
        past = np.where(np.isfinite(graphs), graphs, 0.0) + 1.0  # (rows without graphs: unused, `_reaches_graphs`)
        return np.stack([np.broadcast_to(self.curve.at(past + k), self.shape) for k in (0.0, 1.0)])

    def take(self, index: ArrayLike, slots: ArrayLike | None = None, capacity: ArrayLike | None = None,
             arrival_cv2: ArrayLike | None = None) -> PoissonModel:
        """Rows `index` of a one-dimensional model (repeat a row to evaluate it at several rates at once), with
        other slot counts (max_num_seqs, or what the KV pool holds) and their capacity (`poisson_capacity`) if
        given (a replica's capacity; slots of one stream): nothing else the model holds depends on the slots. With
        `arrival_cv2`, one stream's (`replica_arrival_cv2`), in place of the model's: only the waits read it."""
        idx = np.asarray(index)
        hw = take_hardware(self.hw, idx)

        def rows(a: FloatArray) -> FloatArray:
            if a.ndim == 2 and a.strides[0] == 0:  # one row shared by all (the lengths): keep it shared
                return np.broadcast_to(a[0], (*idx.shape, a.shape[1]))
            return a[idx]

        c = rows(self.c) if slots is None else np.maximum(np.asarray(slots, dtype=float), 1.0)
        streams = rows(self.streams)
        return PoissonModel(
            hw=hw, curve=self.curve.take(idx, hw), shape=idx.shape, p=rows(self.p), o=rows(self.o), c=c,
            o_cv=rows(self.o_cv), context_cv2=rows(self.context_cv2), batch_spread=rows(self.batch_spread),
            prompt_work=rows(self.prompt_work),
            own_prefill=rows(self.own_prefill),
            capacity=rows(self.capacity) if capacity is None else np.asarray(capacity, dtype=float) / streams,
            outputs=rows(self.outputs), gaps=rows(self.gaps), service_pf=rows(self.service_pf),
            extra_steps=rows(self.extra_steps) if np.ndim(self.extra_steps) else self.extra_steps,
            chunk_share=rows(self.chunk_share), es=rows(self.es),
            es2=rows(self.es2),
            arrival_cv2=rows(self.arrival_cv2) if arrival_cv2 is None else np.broadcast_to(
                np.asarray(arrival_cv2, dtype=float), idx.shape),
            service_cv2=None if self.service_cv2 is None else rows(self.service_cv2),
            num_prompts=rows(self.num_prompts), streams=streams, samples=self.samples,
        )

    def at(self, rate: ArrayLike, metrics: tuple[str, ...] = ("ttft", "tpot", "e2e")) -> LoadResult:
        """The load result at `rate` requests/s (see `poisson`)."""
        load = self._load(rate)
        ttft_samples = self._ttft_samples(load)
        tpot_samples = self._tpot_samples(load)
        ttft_mean = ttft_samples.mean(axis=-1)
        tpot_mean = tpot_samples.mean(axis=-1)
        e2e = ttft_mean + (self.o - 1.0) * load.tpot_bar
        e2e_q = _quantiles(ttft_samples + (self.outputs - 1.0) * tpot_samples) if "e2e" in metrics else {}
        k = self.streams
        return LoadResult(ttft_mean, _quantiles(ttft_samples) if "ttft" in metrics else {}, tpot_mean,
                          _quantiles(tpot_samples) if "tpot" in metrics else {}, e2e, load.x * k, load.x * self.o * k,
                          load.n * k, load.overloaded, e2e_q, self.capacity * k)

    def quantiles(self, rate: ArrayLike, wanted: Sequence[tuple[str, float]]) -> FloatArray:
        """Only the latencies `wanted` at `rate`, as (metric, quantile) pairs: shape (len(wanted), *shape) [s].

        The same numbers as `at(rate)` gives, without the sample sets and statistics nobody asked for.
        """
        samples = self.latency_samples(rate, {metric for metric, _ in wanted})
        return np.array([sample_quantiles(samples[metric], [q])[0] for metric, q in wanted]).reshape(
            (len(wanted), *self.shape))

    def latency_samples(self, rate: ArrayLike, metrics: Collection[str]) -> dict[str, FloatArray]:
        """The sampled requests' latencies at `rate` for each of `metrics` ("ttft", "tpot", "e2e"): arrays of
        shape (*shape, samples) [s], request k of every row being the k-th of the stratified sample (the same
        prompt and output lengths in every row that shares them)."""
        load = self._load(rate)
        samples: dict[str, FloatArray] = {}
        if {"ttft", "e2e"} & set(metrics):
            samples["ttft"] = self._ttft_samples(load)
        if {"tpot", "e2e"} & set(metrics):
            samples["tpot"] = self._tpot_samples(load)
        if "e2e" in metrics:
            samples["e2e"] = samples["ttft"] + (self.outputs - 1.0) * samples["tpot"]
        return samples

    def _load(self, rate: ArrayLike) -> _Load:
        lam = np.broadcast_to(np.asarray(rate, dtype=float), self.shape) / self.streams  # one stream's
        overloaded = lam >= self.capacity * 0.995
        x = np.minimum(lam, self.capacity)
        stretch = _prompt_stretch(x, self.prompt_work)
        n = _concurrency(self.curve, x, self.own_prefill, self.o, stretch, self.c)
        n = np.maximum(n, np.minimum(x * self.own_prefill, self.c))
        step_at_n = step = self.curve.mean_at(np.maximum(n, 1.0))
        variance = n
        rows = _reaches_graphs(self, n, x, stretch)
        if rows is not None:  # their count from its own distribution (GRAPH_REACH_SIGMAS)
            shape = n.shape or (1,)  # a model of one deployment at one rate: one row
            at = np.nonzero(np.broadcast_to(rows, shape))

            def pick(a: ArrayLike) -> FloatArray:
                return np.broadcast_to(np.asarray(a, dtype=float), shape)[at]

            past = np.stack([pick(self.graph_steps[0]), pick(self.graph_steps[1])])
            mean, spread, weighted = _running_count(_curve_rows(self.curve, shape, at), pick(x), pick(self.own_prefill),
                                                    pick(self.o), pick(stretch), pick(self.c), past)
            n, step, variance = (np.array(np.broadcast_to(a, shape), dtype=float) for a in (n, step, n))
            n[at], step[at], variance[at] = mean, weighted, spread
            n, step, variance = (a.reshape(x.shape) for a in (n, step, variance))
            step_at_n = self.curve.mean_at(np.maximum(n, 1.0))
        tpot_bar = step / stretch  # the mean TPOT: the step stretched by the prompt work
        return _Load(lam, x, overloaded, n, tpot_bar, step, step_at_n, variance)

    def _ttft_samples(self, load: _Load) -> FloatArray:
        u_arrival = _uniforms(self.samples)[4]
        x, n, c, ca2 = load.x, load.n, self.c, self.arrival_cv2
        # Where sequences are decoding (n_dec of them on average, busy with probability 1 - exp(-n_dec)), a new
        # prompt also waits for the running step to end (half a step), and each step its prefill spans carries
        # their decode tokens too. A replica that only prefills has none. The prompt queue's server is busy for
        # those decode tokens too: a step's decode part for each step budget of prompt tokens it works through.
        decoding = x * (self.o - 1.0) * load.tpot_bar  # Little's law over the decode phase
        carried = load.step * -np.expm1(-decoding)
        scale = 1.0 + carried * self.chunk_share / self.es
        es, es2 = self.es * scale, self.es2 * (scale * scale)
        rho_pf = np.clip(x * es, 0.0, 0.95)
        # The prompt queue: Kingman's G/G/1 wait, (ca2 + cs2) / 2 x rho / (1 - rho) x E[S] with cs2 = E[S^2] /
        # E[S]^2 - 1 (for Poisson arrivals Pollaczek-Khinchine's x E[S^2] / (2 (1 - rho)) exactly), plus the
        # prompts that arrive during the rest of the step in progress (x E[S^2] / 2 on average): the engine
        # prefills every waiting prompt in the next step, theirs too, so they delay its first token: rho times that.
        wait_pf = 0.5 * x * (es2 + (ca2 - 1.0) * (es * es)) * (1.0 / (1.0 - rho_pf) + rho_pf)
        service_req = self.own_prefill + self.o * load.tpot_bar
        if self.service_cv2 is None:
            cs2 = (self.o_cv**2 * (self.o * load.tpot_bar) ** 2) / np.maximum(service_req**2, 1e-12)
        else:
            cs2 = self.service_cv2
        util = n / c
        variability = ca2 + cs2
        slot_queue = service_req / (c * np.maximum(1.0 - util, 1e-3)) * variability / 2.0
        slot_wait = _slot_wait_factor(util, c)
        wait_mean = wait_pf + slot_wait * slot_queue
        p_wait = np.clip(np.maximum(rho_pf, slot_wait), 1e-6, 1.0)
        # Its own prefill, the engine's per-request overhead, and the steps it waits for and spans.
        ttft_samples = self.service_pf + (1.5 * carried + self.hw.request_overhead_s)[..., None]
        if np.ndim(self.extra_steps):
            ttft_samples += carried[..., None] * self.extra_steps
        # A sampled request waits with probability p_wait, exponentially (its uniform above 1 - p_wait gives
        # the tail); the others, usually most, do not wait at all, so only the waits of these are computed.
        row, sample = _waiting(self.samples, 1.0 - p_wait)
        waiting = (*row, sample)
        tail = np.log(p_wait[row] / _no_wait_floor(self.samples)[sample])
        waits = tail * (wait_mean / p_wait)[row]
        # A finite run cannot build the steady-state queue of a nearly saturated server: after the k-th of m
        # arrivals the queue has grown like a reflected random walk, about sqrt(k (ca2 + cs2)) requests,
        # which the instance drains at its capacity. A request's wait is capped by that at its arrival.
        transient = np.sqrt(u_arrival[sample] * self.num_prompts[row] * variability[row]) / np.maximum(
            self.capacity, 1e-9)[row]
        ttft_samples[waiting] += np.minimum(waits, transient)
        if not np.any(load.overloaded):
            return ttft_samples
        # Overload: a finite run's queue grows linearly with the request's place in it.
        m_runs = self.num_prompts[..., None] if np.ndim(self.num_prompts) else self.num_prompts
        backlog = np.maximum(1.0 / np.maximum(self.capacity, 1e-9) - 1.0 / np.maximum(load.lam, 1e-9), 0.0)
        rank = (np.arange(self.samples) + 0.5) / self.samples
        queue = m_runs * rank * backlog[..., None]
        return np.where(load.overloaded[..., None], ttft_samples + queue, ttft_samples)

    def _tpot_samples(self, load: _Load) -> FloatArray:
        # Decode stalls from other requests' prompt work during this request's decode phase.
        # stalls = max(mean + sd z, 0): mean = x life E[S], sd = sqrt(x life E[S^2]) (compound Poisson), with life
        # the decode phase O TPOT; worked in place on one array (the products are the same in either order).
        busy_life = self.outputs * load.tpot_bar[..., None]
        busy_life *= load.x[..., None]
        stall_mean = busy_life * self.es[..., None]
        stalls = busy_life
        stalls *= self.es2[..., None]
        np.sqrt(stalls, out=stalls)
        stalls *= _normal_scores(self.samples)
        stalls += stall_mean
        np.maximum(stalls, 0.0, out=stalls)
        stalls /= self.gaps
        stalls += load.step[..., None]
        stalls += self._batch_spread(load)
        return stalls

    def _batch_spread(self, load: _Load) -> FloatArray:
        """How much a sampled request's mean step lies above (or below) the step at the mean batch, because the batch
        it decodes beside is not the mean one [s]. The other sequences come and go as in an M/G/inf system: n on
        average with variance n, correlated over the mean residual life d = o (1 + cv^2) / 2 TPOT of a running
        sequence. Averaged over this request's decode of length T, the batch varies by n g(T / d) with
        g(x) = 2 (x - 1 + e^-x) / x^2 (1 for a short decode, 2 d / T for a long one); it stays within 1 and the
        slots. The step grows by the curve's slope per sequence; the KV-read share of it with the batch's total
        context, whose variance is (1 + cv^2) times the count's for contexts of squared CV cv^2 (compound
        Poisson)."""
        n = np.maximum(load.n, 1.0)
        slope = self.curve.mean_at(n + 1.0) - load.step_at_n
        kv_share = np.clip(self.curve.kv_s_per_sequence / np.maximum(slope, 1e-15), 0.0, 1.0)
        variance = load.count_variance * (1.0 + kv_share * self.context_cv2)
        g = np.sqrt(variance)[..., None] * self.batch_spread  # sqrt(n g(T / d)) z: T / d does not depend on the rate
        g += n[..., None]
        np.clip(g, 1.0, np.maximum(self.c, 1.0)[..., None], out=g)
        g -= n[..., None]
        g *= slope[..., None]
        return g


def poisson_model(
    hw: Hardware,
    traffic: Traffic,
    slots: ArrayLike,
    chunk_tokens: ArrayLike,
    *,
    capacity: ArrayLike | None = None,
    samples: int = _SAMPLES,
    rate_shape: tuple[int, ...] = (),
    streams: ArrayLike = 1.0,
) -> PoissonModel:
    """The rate-free part of `poisson`: the same arguments less the rate, whose array shape (when it has more
    dimensions than the deployments) is `rate_shape`."""
    t = traffic
    prompt_tokens, output_tokens, prompt_cv, output_cv = t.prompt_tokens, t.output_tokens, t.prompt_cv, t.output_cv
    arrival_cv2, num_prompts, max_prompt_tokens = t.arrival_cv2, t.num_prompts, t.max_prompt_tokens
    service_cv2, prefill_fraction = t.service_cv2, t.prefill_fraction
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    c = np.maximum(np.asarray(slots, dtype=float), 1.0)
    ca2 = np.asarray(arrival_cv2, dtype=float)
    m = np.asarray(num_prompts, dtype=float)
    k = np.asarray(streams, dtype=float)
    shape = np.broadcast_shapes(tuple(rate_shape), p.shape, o.shape, c.shape, np.shape(hw.bandwidth_bytes_s),
                                ca2.shape, m.shape, k.shape)
    p, o, c = (np.broadcast_to(x, shape).astype(float) for x in (p, o, c))
    o_cv = np.broadcast_to(np.asarray(output_cv, dtype=float), shape)
    fraction = np.broadcast_to(np.asarray(prefill_fraction, dtype=float), shape)
    ctx = running_context(p, o, o_cv)

    prompt_work = p * fraction * prompt_token_s(hw, p)
    own_prefill = prefill_s(hw, np.maximum(p * fraction, 1.0), 1.0, chunk_tokens)
    if capacity is None:
        capacity = poisson_capacity(hw, Traffic(p, o, output_cv=o_cv, prefill_fraction=fraction), c, chunk_tokens, k)
    k = np.broadcast_to(k, shape)
    capacity = np.broadcast_to(np.asarray(capacity, dtype=float), shape) / k  # one stream's

    # Prompt and output lengths of individual requests: sampled once, and kept as one row seen by every row
    # (a broadcast view), when every row shares them.
    def lengths(mean: ArrayLike, cv: ArrayLike, z: FloatArray, cap: ArrayLike = np.inf) -> FloatArray:
        if np.ndim(mean) == np.ndim(cv) == np.ndim(cap) == 0:
            return _lognormal_at(mean, cv, z, cap)
        return _lognormal_at(np.broadcast_to(mean, shape), np.broadcast_to(cv, shape), z, cap)

    def every_row(values: FloatArray) -> FloatArray:
        return np.broadcast_to(values, (*shape, samples))

    z_prompt, z_output = _length_scores(samples)
    prompts = lengths(prompt_tokens, prompt_cv, z_prompt, max_prompt_tokens)
    outputs = np.maximum(lengths(output_tokens, output_cv, z_output), 1.0)
    gaps = np.maximum(outputs - 1.0, 1.0)
    chunk_col = np.asarray(chunk_tokens, dtype=float)[..., None] if np.ndim(chunk_tokens) else chunk_tokens
    # The computed share of each sampled prompt: per sample only when rows share the lengths and the fraction
    # (then only what depends on the hardware is worked out for every row and sample).
    share = prefill_fraction if np.ndim(prefill_fraction) == 0 else fraction[..., None]
    computed = np.maximum(prompts * share if prompts.ndim == 1 else every_row(prompts) * fraction[..., None], 1.0)
    service_pf = np.broadcast_to(prefill_s(hardware_column(hw), computed, 1.0, chunk_col), (*shape, samples))
    extra = np.maximum(np.ceil(computed / chunk_col) - 1.0, 0.0)
    extra_steps = np.broadcast_to(extra, (*shape, samples)) if np.any(extra) else np.zeros(())
    # A running sequence's context: its prompt and the K tokens it has generated, K uniform over its output O drawn
    # length-biased (E[K] = E[O^2] / 2 E[O], E[K^2] = E[O^3] / 3 E[O]; lognormal O: E[O^k] = o^k (1 + cv^2)^(k(k-1)/2)).
    q = 1.0 + o_cv * o_cv
    p1 = np.broadcast_to(prompts.mean(axis=-1), shape)
    p2 = np.broadcast_to((prompts * prompts).mean(axis=-1), shape)
    k1, k2 = o * q / 2.0, o * o * q**3 / 3.0
    context_cv2 = np.maximum((p2 + 2.0 * p1 * k1 + k2) / np.maximum((p1 + k1) ** 2, 1e-12) - 1.0, 0.0)
    # T / d of each sampled request: its output over the others' mean residual life, both in steps (`_batch_spread`).
    x = np.maximum(every_row(outputs) / np.maximum(o * q / 2.0, 1e-12)[..., None], 1e-3)
    g = 2.0 * (x + np.expm1(-x)) / (x * x)  # 1 for x -> 0 (within 0.1% at the floor of 1e-3)
    batch_spread = np.sqrt(g) * _batch_scores(samples)
    return PoissonModel(
        hw=hw, curve=decode_step(hw, ctx), shape=shape, p=p, o=o, c=c, o_cv=o_cv, context_cv2=context_cv2,
        batch_spread=batch_spread,
        prompt_work=prompt_work,
        own_prefill=own_prefill, capacity=capacity, outputs=every_row(outputs), gaps=every_row(gaps),
        service_pf=service_pf, extra_steps=extra_steps,
        chunk_share=np.broadcast_to(np.mean(computed / chunk_col, axis=-1), shape),
        es=service_pf.mean(axis=-1), es2=(service_pf**2).mean(axis=-1), arrival_cv2=np.broadcast_to(ca2, shape),
        service_cv2=None if service_cv2 is None else np.broadcast_to(np.asarray(service_cv2, dtype=float), shape),
        num_prompts=np.broadcast_to(m, shape) / k, streams=k, samples=samples,
    )


def poisson(
    hw: Hardware,
    rate: ArrayLike,
    traffic: Traffic,
    slots: ArrayLike,
    chunk_tokens: ArrayLike,
    *,
    capacity: ArrayLike | None = None,
    samples: int = _SAMPLES,
    metrics: tuple[str, ...] = ("ttft", "tpot", "e2e"),
    streams: ArrayLike = 1.0,
) -> LoadResult:
    """Open-loop arrivals at `rate` requests/s to one instance (Poisson when arrival_cv2 = 1).

    Below capacity, the running concurrency n solves Little's law n = rate x (TTFT + O x TPOT(n)),
    where TPOT(n) is the decode step at batch n stretched by the prompt work that shares the GPU
    (busy share rho_p = rate x P x prefill seconds per token). TTFT is the request's own prefill plus
    the wait in the prefill queue (M/G/1) and, near the slot limit, the slot queue (M/G/c).
    Above capacity the finite run of `num_prompts` requests queues: the i-th waits i x (1/X - 1/rate).

    `traffic` (`Traffic`) is what arrives, the rate apart; `capacity`
    may be passed when already known (`poisson_capacity`); `samples` sets the size of the stratified
    sample the percentiles come from (fewer is faster and coarser); `metrics` names the percentiles
    wanted (the others come back empty). To evaluate the same deployments at many rates, build their
    `poisson_model` once. `streams`: see `PoissonModel` (rates, capacity and throughputs the replica's).
    """
    model = poisson_model(hw, traffic, slots, chunk_tokens, capacity=capacity, samples=samples,
                          rate_shape=np.shape(rate), streams=streams)
    return model.at(rate, metrics)
