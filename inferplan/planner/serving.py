"""Latency and throughput of one model instance under a load: single stream, static batch, burst,
closed loop, Poisson arrivals and offline maximum load. Vectorised: every argument broadcasts.

Times are seconds; token counts are per request. `slots` is how many sequences the engine runs at
once (min of its max_num_seqs and what the KV pool holds at the workload's lengths); `chunk_tokens`
is the per-step token budget of chunked prefill (np.inf where prefill runs as whole steps).

Online loads (burst, closed loop, Poisson) add the engine's per-request overhead (HTTP, tokenising, the
first stream chunk) to TTFT; single-stream and static-batch runs are offline harnesses and do not.

Percentiles are computed from the distributions, not as multiples of the mean: prompt and output
lengths are lognormal (mean and CV), the prefill queue is M/G/1 with an exponential tail, the slot
queue follows the Allen-Cunneen two-moment M/G/c approximation, and the stall a request's decode
suffers from other requests' prefills is a compound Poisson sum. Quantiles of these are taken on a
fixed stratified sample, so results are deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.performance import (
    DecodeStep,
    Hardware,
    decode_step,
    decode_step_s,
    hardware_column,
    prefill_compute_s_per_token,
    prefill_s,
)

FloatArray = NDArray[np.float64]
QUANTILES = (0.5, 0.9, 0.95, 0.99)
_SAMPLES = 512


def normal_ppf(p: ArrayLike) -> FloatArray:
    """Inverse standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9)."""
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1 - 1e-12)
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    low = 0.02425
    q = np.sqrt(-2 * np.log(np.where(p < low, p, 1 - p)))
    tail = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
        (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
    )
    r = (p - 0.5) ** 2
    mid = (p - 0.5) * (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) / (
        ((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1
    )
    return np.where(p < low, tail, np.where(p > 1 - low, -tail, mid))


def _stratified(seed: int, samples: int = _SAMPLES) -> FloatArray:
    """A fixed, shuffled stratified sample of U(0,1) of `samples` points."""
    u = (np.arange(samples) + 0.5) / samples
    return np.random.default_rng(seed).permutation(u)


@cache
def _uniforms(samples: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Independent stratified samples for prompt length, output length, wait, stall and arrival order."""
    return tuple(_stratified(seed, samples) for seed in (11, 23, 37, 41, 53))  # type: ignore[return-value]


def lognormal_sample(mean: ArrayLike, cv: ArrayLike, u: FloatArray, cap: ArrayLike = np.inf) -> FloatArray:
    """Lognormal values of the given mean and coefficient of variation at uniform points `u`.

    Shape: broadcast(mean, cv) + (len(u),). CV 0 gives the mean itself. Values above `cap` are cut
    to it and the sample rescaled so that its mean stays `mean` (a length filter on a dataset).
    """
    m = np.asarray(mean, dtype=float)[..., None]
    s2 = np.log1p(np.asarray(cv, dtype=float) ** 2)[..., None]
    x = m * np.exp(np.sqrt(s2) * normal_ppf(u) - s2 / 2.0)
    c = np.asarray(cap, dtype=float)[..., None]
    for _ in range(3):  # rescaling after the cut moves values past the cap again; a few passes settle
        x = np.minimum(x, c)
        x = x * m / x.mean(axis=-1, keepdims=True)
    return np.minimum(x, np.maximum(c, m))


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


def _quantiles(samples: FloatArray) -> dict[float, FloatArray]:
    values = np.quantile(samples, QUANTILES, axis=-1)  # one partition for all four
    return {q: values[k] for k, q in enumerate(QUANTILES)}


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


def burst(
    hw: Hardware,
    requests: ArrayLike,
    prompt_tokens: ArrayLike,
    output_tokens: ArrayLike,
    admit_slots: ArrayLike,
    run_slots: ArrayLike,
    chunk_tokens: ArrayLike,
) -> LoadResult:
    """N identical requests sent at t=0 and drained by a continuous-batching engine.

    The first `admit_slots` requests (what max_num_seqs and the KV pool admit by their prompts) are
    prefilled at once and get their first tokens over that prefill; the engine then decodes at
    `run_slots` sequences (what the KV pool holds at the requests' mean length; the excess is
    preempted and recomputed, as vLLM does). Later requests enter as earlier ones finish, spread
    evenly over the rest of the run. Prefill shares steps with decode, so the run's time is all
    prompt compute plus all decode steps.
    """
    shape = np.broadcast(np.asarray(requests), np.asarray(prompt_tokens), np.asarray(output_tokens),
                         np.asarray(admit_slots), np.asarray(run_slots), np.asarray(hw.bandwidth_bytes_s)).shape
    n, p, o, admit, run = (
        np.broadcast_to(np.asarray(x, dtype=float), shape)
        for x in (requests, prompt_tokens, output_tokens, admit_slots, run_slots)
    )
    n, o = np.maximum(n, 1.0), np.maximum(o, 1.0)
    slots = np.clip(np.minimum(run, n), 1.0, None)
    first = np.maximum(np.minimum(admit, n), slots)

    first_prefill = prefill_s(hw, p, first, chunk_tokens)
    rest = n - first
    # Requests preempted because the first wave outgrew the KV pool are prefilled again.
    redo = rest + np.maximum(first - slots, 0.0) * np.where(rest > 0, 1.0, 0.5)
    rest_prefill = np.where(redo > 0, prefill_s(hw, p, np.maximum(redo, 1e-9), chunk_tokens), 0.0)
    step = decode_step_s(hw, slots, p + o / 2.0)
    total = first_prefill + rest_prefill + np.ceil(n / slots) * o * step

    # First tokens: the first wave's are spread over its prefill; the rest enter evenly between the
    # first completions and the last admission (which must still decode its whole output).
    start_rest = first_prefill + o * step
    end_rest = np.maximum(total - o * step, start_rest)
    order = np.linspace(0.0, 1.0, _SAMPLES)[None, :] * n[..., None]  # each sampled request's place
    ttft_samples = np.where(
        order < first[..., None],
        first_prefill[..., None] * np.minimum((order + 0.5) / first[..., None], 1.0),
        start_rest[..., None]
        + (end_rest - start_rest)[..., None]
        * np.clip((order - first[..., None]) / np.maximum(rest, 1.0)[..., None], 0.0, 1.0),
    )
    ttft_samples = ttft_samples + np.asarray(hw.request_overhead_s)[..., None]
    ttft_mean = ttft_samples.mean(axis=-1)
    # Each request's decode phase. The first wave's: the rest of its wave's prefill plus `o` steps; those
    # of it the KV pool cannot keep (first - slots) are preempted and wait about one generation for a
    # slot before they resume; later requests decode in steps stretched by the prompt work around them.
    prefill_share = rest_prefill / np.maximum(total - first_prefill, 1e-9)
    gaps = np.maximum(o - 1.0, 1.0)
    tpot_first = (first_prefill / 2.0 + o * step) / gaps
    tpot_preempted = tpot_first + o * step / gaps
    tpot_rest = step / np.maximum(1.0 - prefill_share, 0.05)
    kept_share = (slots / n)[..., None]
    preempted_share = (np.maximum(first - slots, 0.0) / n)[..., None]
    place = (np.arange(_SAMPLES) + 0.5) / _SAMPLES
    tpot_samples = np.where(
        place < kept_share, tpot_first[..., None],
        np.where(place < kept_share + preempted_share, tpot_preempted[..., None], tpot_rest[..., None]),
    )
    tpot_mean = tpot_samples.mean(axis=-1)
    e2e = ttft_mean + (o - 1.0) * tpot_mean
    e2e_samples = ttft_samples + (o - 1.0)[..., None] * tpot_samples
    return LoadResult(
        ttft_mean, _quantiles(ttft_samples), tpot_mean, _quantiles(tpot_samples),
        e2e, n / total, n * o / total, slots, np.zeros_like(total, dtype=bool), _quantiles(e2e_samples),
    )


def _slot_wait_factor(utilisation: FloatArray, servers: FloatArray) -> FloatArray:
    """Probability of waiting in M/M/c, Sakasegawa's approximation rho^(sqrt(2(c+1)) - 1)."""
    rho = np.clip(utilisation, 0.0, 0.999)
    return rho ** (np.sqrt(2.0 * (servers + 1.0)) - 1.0)


def _busy_tpot(step: DecodeStep, n: FloatArray, x: FloatArray, prompt_work_s: FloatArray) -> FloatArray:
    """Mean TPOT at n running sequences and rate x: the decode step stretched by the prompt work sharing
    the GPU (busy share x times the compute seconds of one request's prompt)."""
    busy = np.clip(x * prompt_work_s, 0.0, 0.95)
    return step.at(n) / (1.0 - busy)


def _concurrency(curve: DecodeStep, x: FloatArray, own_prefill: FloatArray, o: FloatArray,
                 prompt_work: FloatArray, slots: FloatArray, steps: int = 12) -> FloatArray:
    """Running sequences n solving Little's law n = x (TTFT + O TPOT(n)), at most `slots`.

    Below one sequence in flight the step runs at batch 1, so n = x L(1) there. Above it, h(n) = n -
    x L(n) rises from h(1) < 0 to h(slots) >= 0 (x never exceeds capacity); the step time is piecewise
    linear in n, so Newton steps kept inside the bracket (bisection when they leave it) converge in a
    few iterations.
    """
    def latency(n: FloatArray) -> FloatArray:
        return own_prefill + o * _busy_tpot(curve, n, x, prompt_work)

    light = x * latency(np.ones_like(x))
    lo, hi = np.ones_like(x), np.maximum(slots, 1.0)
    n = np.clip(light, lo, hi)
    for _ in range(steps):
        h = n - x * latency(n)
        lo, hi = np.where(h < 0, n, lo), np.where(h < 0, hi, n)
        delta = 1e-3 * n
        slope = 1.0 - x * (latency(n + delta) - latency(n)) / delta
        newton = n - h / np.where(slope > 0, slope, 1.0)
        n = np.where((slope > 0) & (newton > lo) & (newton < hi), newton, 0.5 * (lo + hi))
    return np.where(light <= 1.0, light, np.minimum(n, slots))


def poisson_capacity(
    hw: Hardware,
    prompt_tokens: ArrayLike,
    output_tokens: ArrayLike,
    slots: ArrayLike,
    chunk_tokens: ArrayLike,
    prefill_fraction: ArrayLike = 1.0,
) -> FloatArray:
    """Requests/s one instance sustains with every slot busy: X solving X (TTFT + O TPOT(slots, X)) = slots.

    `prefill_fraction` is the share of each prompt that must be computed (1 - prefix-cache hit rate).
    """
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    c = np.maximum(np.asarray(slots, dtype=float), 1.0)
    shape = np.broadcast(p, o, c, np.asarray(hw.bandwidth_bytes_s)).shape
    p, o, c = (np.broadcast_to(v, shape).astype(float) for v in (p, o, c))
    computed = p * np.asarray(prefill_fraction, dtype=float)
    ctx = p + o / 2.0
    prompt_work = computed * prefill_compute_s_per_token(hw, p)
    own_prefill = prefill_s(hw, np.maximum(computed, 1.0), 1.0, chunk_tokens)
    curve = decode_step(hw, ctx)
    step_full = curve.at(c)
    lo, hi = np.zeros(shape), c / np.maximum(o * step_full * 0.5, 1e-9)
    for _ in range(40):
        mid = (lo + hi) / 2.0
        fits = mid * (own_prefill + o * _busy_tpot(curve, c, mid, prompt_work)) <= c
        lo, hi = np.where(fits, mid, lo), np.where(fits, hi, mid)
    return lo


def poisson(
    hw: Hardware,
    rate: ArrayLike,
    prompt_tokens: ArrayLike,
    output_tokens: ArrayLike,
    slots: ArrayLike,
    chunk_tokens: ArrayLike,
    prompt_cv: ArrayLike = 0.0,
    output_cv: ArrayLike = 0.0,
    arrival_cv2: ArrayLike = 1.0,
    num_prompts: ArrayLike = 1000.0,
    max_prompt_tokens: ArrayLike = np.inf,
    *,
    service_cv2: ArrayLike | None = None,
    prefill_fraction: ArrayLike = 1.0,
    capacity: ArrayLike | None = None,
    samples: int = _SAMPLES,
    metrics: tuple[str, ...] = ("ttft", "tpot", "e2e"),
) -> LoadResult:
    """Open-loop arrivals at `rate` requests/s to one instance (Poisson when arrival_cv2 = 1).

    Below capacity, the running concurrency n solves Little's law n = rate x (TTFT + O x TPOT(n)),
    where TPOT(n) is the decode step at batch n stretched by the prompt work that shares the GPU
    (busy share rho_p = rate x P x prefill seconds per token). TTFT is the request's own prefill plus
    the wait in the prefill queue (M/G/1) and, near the slot limit, the slot queue (M/G/c).
    Above capacity the finite run of `num_prompts` requests queues: the i-th waits i x (1/X - 1/rate).

    `service_cv2` overrides the request service-time CV^2 derived from the output lengths;
    `prefill_fraction` is the share of each prompt computed (1 - prefix-cache hit rate); `capacity`
    may be passed when already known (`poisson_capacity`); `samples` sets the size of the stratified
    sample the percentiles come from (fewer is faster and coarser); `metrics` names the percentiles
    wanted (the others come back empty).
    """
    u_prompt, u_output, u_wait, u_stall, u_arrival = _uniforms(samples)
    lam = np.asarray(rate, dtype=float)
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    c = np.maximum(np.asarray(slots, dtype=float), 1.0)
    shape = np.broadcast(lam, p, o, c, np.asarray(hw.bandwidth_bytes_s)).shape
    lam, p, o, c = (np.broadcast_to(x, shape).astype(float) for x in (lam, p, o, c))
    o_cv = np.broadcast_to(np.asarray(output_cv, dtype=float), shape)
    fraction = np.broadcast_to(np.asarray(prefill_fraction, dtype=float), shape)
    ctx = p + o / 2.0

    prompt_work = p * fraction * prefill_compute_s_per_token(hw, p)
    own_prefill = prefill_s(hw, np.maximum(p * fraction, 1.0), 1.0, chunk_tokens)
    if capacity is None:
        capacity = poisson_capacity(hw, p, o, c, chunk_tokens, fraction)
    capacity = np.broadcast_to(np.asarray(capacity, dtype=float), shape)
    overloaded = lam >= capacity * 0.995
    x = np.minimum(lam, capacity)

    curve = decode_step(hw, ctx)
    n = _concurrency(curve, x, own_prefill, o, prompt_work, c)
    n = np.maximum(n, np.minimum(x * own_prefill, c))
    tpot_bar = _busy_tpot(curve, np.maximum(n, 1.0), x, prompt_work)
    step = curve.at(np.maximum(n, 1.0))

    # Prompt and output lengths of individual requests (sampled once when every row shares them).
    def lengths(mean: ArrayLike, cv: ArrayLike, u: FloatArray, cap: ArrayLike = np.inf) -> FloatArray:
        if np.ndim(mean) == np.ndim(cv) == np.ndim(cap) == 0:
            return np.broadcast_to(lognormal_sample(mean, cv, u, cap), (*shape, samples))
        return lognormal_sample(np.broadcast_to(mean, shape), np.broadcast_to(cv, shape), u, cap)

    prompts = lengths(prompt_tokens, prompt_cv, u_prompt, max_prompt_tokens)
    outputs = np.maximum(lengths(output_tokens, output_cv, u_output), 1.0)
    chunk_col = np.asarray(chunk_tokens, dtype=float)[..., None] if np.ndim(chunk_tokens) else chunk_tokens
    service_pf = prefill_s(hardware_column(hw), np.maximum(prompts * fraction[..., None], 1.0), 1.0, chunk_col)
    es = service_pf.mean(axis=-1)
    es2 = (service_pf**2).mean(axis=-1)
    rho_pf = np.clip(x * es, 0.0, 0.95)
    ca2 = np.asarray(arrival_cv2, dtype=float)
    wait_pf = x * es2 * (1.0 + ca2) / 2.0 / (1.0 - rho_pf)
    # A new request also waits for the running step to end: half a step, if the engine is busy
    # (probability 1 - exp(-n) with n requests in flight on average).
    residual = step / 2.0 * -np.expm1(-n)
    service_req = own_prefill + o * tpot_bar
    if service_cv2 is None:
        cs2 = (o_cv**2 * (o * tpot_bar) ** 2) / np.maximum(service_req**2, 1e-12)
    else:
        cs2 = np.broadcast_to(np.asarray(service_cv2, dtype=float), shape)
    util = n / c
    slot_queue = service_req / (c * np.maximum(1.0 - util, 1e-3)) * (ca2 + cs2) / 2.0
    wait_slot = _slot_wait_factor(util, c) * slot_queue
    wait_mean = wait_pf + wait_slot
    p_wait = np.clip(np.maximum(rho_pf, _slot_wait_factor(util, c)), 1e-6, 1.0)
    tail = np.where(u_wait > 1.0 - p_wait[..., None],
                    np.log(p_wait[..., None] / np.maximum(1.0 - u_wait, 1e-9)), 0.0)
    waits = tail * (wait_mean / p_wait)[..., None]
    # A finite run cannot build the steady-state queue of a nearly saturated server: after the k-th of m
    # arrivals the queue has grown like a reflected random walk, about sqrt(k (ca2 + cs2)) requests,
    # which the instance drains at its capacity. A request's wait is capped by that at its arrival.
    m_runs = np.asarray(num_prompts, dtype=float)
    m_runs = m_runs[..., None] if np.ndim(m_runs) else m_runs
    transient = np.sqrt(u_arrival * m_runs * (ca2 + cs2)[..., None]) / np.maximum(capacity, 1e-9)[..., None]
    waits = np.minimum(waits, transient)
    ttft_samples = service_pf + residual[..., None] + waits + np.asarray(hw.request_overhead_s)[..., None]

    # Decode stalls from other requests' prompt work during this request's decode phase.
    life = outputs * tpot_bar[..., None]
    stall_mean = x[..., None] * life * es[..., None]
    stall_sd = np.sqrt(x[..., None] * life * es2[..., None])
    stalls = np.maximum(stall_mean + stall_sd * normal_ppf(u_stall), 0.0)
    tpot_samples = step[..., None] + stalls / np.maximum(outputs - 1.0, 1.0)

    # Overload: a finite run's queue grows linearly with the request's place in it.
    m = np.asarray(num_prompts, dtype=float)
    backlog = np.maximum(1.0 / np.maximum(capacity, 1e-9) - 1.0 / np.maximum(lam, 1e-9), 0.0)
    rank = (np.arange(samples) + 0.5) / samples
    queue = (m[..., None] if np.ndim(m) else m) * rank * backlog[..., None]
    ttft_samples = np.where(overloaded[..., None], ttft_samples + queue, ttft_samples)

    ttft_mean = ttft_samples.mean(axis=-1)
    tpot_mean = tpot_samples.mean(axis=-1)
    e2e = ttft_mean + (o - 1.0) * tpot_bar
    e2e_q = _quantiles(ttft_samples + (outputs - 1.0) * tpot_samples) if "e2e" in metrics else {}
    return LoadResult(ttft_mean, _quantiles(ttft_samples) if "ttft" in metrics else {}, tpot_mean,
                      _quantiles(tpot_samples) if "tpot" in metrics else {}, e2e, x, x * o, n, overloaded,
                      e2e_q, capacity)


def closed_loop(
    hw: Hardware,
    clients: ArrayLike,
    prompt_tokens: ArrayLike,
    output_tokens: ArrayLike,
    slots: ArrayLike,
    chunk_tokens: ArrayLike,
) -> LoadResult:
    """N clients each sending the next request when the last one finishes (steady state).

    At most `slots` run; the rest wait. Throughput X = running / (TTFT + O x TPOT) with TPOT stretched
    by the prompt work that shares the GPU; waiting clients add (N - running) / X to TTFT.
    """
    clients_ = np.maximum(np.asarray(clients, dtype=float), 1.0)
    p = np.asarray(prompt_tokens, dtype=float)
    o = np.maximum(np.asarray(output_tokens, dtype=float), 1.0)
    running = np.minimum(clients_, np.maximum(np.asarray(slots, dtype=float), 1.0))
    per_token = prefill_compute_s_per_token(hw, p)
    own_prefill = prefill_s(hw, p, 1.0, chunk_tokens)
    step = decode_step_s(hw, running, p + o / 2.0)
    x = running / (own_prefill + o * step)
    for _ in range(30):
        busy = np.clip(x * p * per_token, 0.0, 0.95)
        tpot = step / (1.0 - busy)
        ttft_service = own_prefill + step / 2.0 + hw.request_overhead_s
        x = running / (ttft_service + (o - 1.0) * tpot)
    wait = (clients_ - running) / x
    ttft = ttft_service + wait
    e2e = ttft + (o - 1.0) * tpot
    return LoadResult(ttft, _const_quantiles(ttft), tpot, _const_quantiles(tpot), e2e, x, x * o, running,
                      np.zeros_like(e2e, dtype=bool), _const_quantiles(e2e))
