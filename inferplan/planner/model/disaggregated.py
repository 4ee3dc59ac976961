"""Disaggregated prefill and decode: two pools of replicas and the KV cache sent between them, in closed form.

A disaggregated deployment (vLLM with a KV connector behind a P/D proxy, SGLang's `--disaggregation-mode`,
TensorRT-LLM's disaggregated serving, NVIDIA Dynamo, llm-d) runs every prompt on a prefill replica, sends the
prompt's KV cache over the network to a decode replica, and decodes there. A request's life is three stages in
series, each modelled with what `serving` already has:

- **prefill pool**: a replica that only prefills is the aggregated model with one output token: the prefill
  queue (M/G/1, the prompts' lognormal lengths) and the prompt's own prefill. Nothing decodes beside it, so
  no decode step waits for a prompt and no prompt waits for decode steps.
- **KV transfer**: the prompt's KV bytes (what the prefill replica holds: every full-attention layer, the
  sliding windows up to their width) over the slower side's links, `min(tp_prefill, tp_decode)` of them, each
  `link_gbps` at `LINK_EFFICIENCY`, plus `TRANSFER_SETUP_S` (the connector's handshake and the proxy's hop).
- **decode pool**: the aggregated model whose prompts cost no compute (`prefill_fraction` 0: one token, the
  step that makes the first token on the decode replica): the KV pool and `max_num_seqs` bound the running
  sequences, the slot queue (M/G/c) is the wait for a free slot, and decode steps are not stretched by prompt
  work (the reason to disaggregate).

TTFT is the prefill pool's TTFT (with the request overhead, counted once) plus the transfer plus the decode
pool's wait and first step; TPOT is the decode pool's; end-to-end latency adds them per request. The three
stages are taken per sampled request (the same stratified sample of prompt and output lengths and of waits in
both pools), so a percentile of the sum is computed, not a sum of percentiles; the waits of the two pools are
taken as fully correlated (the same uniform draws), which errs on the slow side.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import ArrayLike, NDArray

from inferplan.planner.model.performance import Hardware
from inferplan.planner.model.serving import PoissonModel, Traffic, poisson_model, prompt_sample, sample_quantiles

FloatArray = NDArray[np.float64]

LINK_EFFICIENCY = 0.8      # share of a NIC's line rate a KV transfer achieves (large RDMA writes)
TRANSFER_SETUP_S = 0.002   # per request: the connector's metadata exchange and the proxy's extra hop [s]


def kv_transfer_bytes(hw: Hardware, prompt_tokens: ArrayLike) -> FloatArray:
    """Bytes of a prompt's KV cache on a prefill replica `hw`, all its ranks together [bytes]: every
    full-attention layer's, and the sliding-window layers' up to their window."""
    p = np.asarray(prompt_tokens, dtype=float)
    tp = np.asarray(hw.tp, dtype=float)
    full = np.asarray(hw.kv_full_bytes_per_token_per_gpu, dtype=float) * tp
    window = np.asarray(hw.kv_window_bytes_per_token_per_gpu, dtype=float) * tp
    return full * p + window * np.minimum(p, np.asarray(hw.window_tokens, dtype=float))


def transfer_s(hw_prefill: Hardware, tp_decode: ArrayLike, prompt_tokens: ArrayLike, link_gbps: float
               ) -> FloatArray:
    """Seconds to send a prompt's KV cache from a prefill replica (`hw_prefill`) to a decode replica of
    `tp_decode` GPUs: over min(TP) links (each rank sends or receives on its own NIC), plus the setup."""
    links = np.minimum(np.asarray(hw_prefill.tp, dtype=float), np.asarray(tp_decode, dtype=float))
    rate = links * link_gbps * 1e9 / 8.0 * LINK_EFFICIENCY
    return kv_transfer_bytes(hw_prefill, prompt_tokens) / rate + TRANSFER_SETUP_S


@dataclass(frozen=True)
class Pool:
    """One role's replicas: a `PoissonModel` whose TTFT samples get `shift` added per request (the prefill pool:
    the KV transfer; the decode pool: minus the request overhead, which the prefill pool's TTFT holds).

    Duck-types the parts of `PoissonModel` a rate search uses: `take`, `quantiles`, `capacity`.
    """

    model: PoissonModel
    shift: FloatArray  # broadcasts against (*shape, samples)

    @property
    def capacity(self) -> FloatArray:
        return self.model.capacity

    def take(self, index: ArrayLike, slots: ArrayLike | None = None, capacity: ArrayLike | None = None) -> Pool:
        idx = np.asarray(index)
        shift = self.shift if np.ndim(self.shift) < 2 or self.shift.shape[0] == 1 else self.shift[idx]
        return Pool(self.model.take(idx, slots, capacity), shift)

    def latency_samples(self, rate: ArrayLike, metrics: Collection[str]) -> dict[str, FloatArray]:
        out = self.model.latency_samples(rate, metrics)
        if "ttft" in out:
            out["ttft"] = out["ttft"] + self.shift
        if "e2e" in out:
            out["e2e"] = out["e2e"] + self.shift
        return out

    def quantiles(self, rate: ArrayLike, wanted: Sequence[tuple[str, float]]) -> FloatArray:
        samples = self.latency_samples(rate, {metric for metric, _ in wanted})
        return np.array([sample_quantiles(samples[metric], [q])[0] for metric, q in wanted]).reshape(
            (len(wanted), *self.model.shape))


def prefill_pool(hw: Hardware, tp_decode: ArrayLike, prompt_tokens: float, slots: ArrayLike, chunk_tokens: float,
                 prompt_cv: float, arrival_cv2: float, prefill_fraction: float, link_gbps: float, samples: int
                 ) -> Pool:
    """Prefill-only replicas `hw` (one row each) whose prompts go to decode replicas of `tp_decode` GPUs: the
    serving model with one output token, and the KV transfer of each sampled prompt added to its TTFT."""
    traffic = Traffic(prompt_tokens, 1.0, prompt_cv, 0.0, arrival_cv2, prefill_fraction=prefill_fraction)
    model = poisson_model(hw, traffic, slots, chunk_tokens, samples=samples)
    # Prompts share the GPU's compute one after another: the pool's prefill queue (M/G/1 on the sampled
    # prompts' prefill times) saturates at one prompt per mean prefill time, below what the slots would allow.
    model = replace(model, capacity=np.minimum(model.capacity, (1.0 - 1e-9) / model.es))
    prompts = prompt_sample(prompt_tokens, prompt_cv, samples)
    tp_d = np.asarray(tp_decode, dtype=float)
    shift = transfer_s(_column(hw), tp_d[..., None] if tp_d.ndim else tp_d, prompts, link_gbps)
    return Pool(model, np.broadcast_to(shift, (*model.shape, samples)))


def decode_pool(hw: Hardware, prompt_tokens: float, output_tokens: float, slots: ArrayLike, chunk_tokens: float,
                output_cv: float, arrival_cv2: float, service_cv2: float | None, samples: int) -> Pool:
    """Decode-only replicas `hw` (one row each): the prompt's KV arrives computed, so its prefill is one token
    (the first step on the replica), its KV holds the whole prompt (`slots` as for the aggregated replica), and
    no prompt work stretches the decode steps."""
    traffic = Traffic(prompt_tokens, output_tokens, 0.0, output_cv, arrival_cv2, service_cv2=service_cv2,
                      prefill_fraction=0.0)
    model = poisson_model(hw, traffic, slots, chunk_tokens, samples=samples)
    overhead = np.asarray(hw.request_overhead_s, dtype=float)
    return Pool(model, -(overhead[..., None] if np.ndim(overhead) else overhead))


def _column(hw: Hardware) -> Hardware:
    """`hw` with every per-row field as a column (rows, 1), to broadcast against a sample axis."""
    return Hardware(**{name: (np.asarray(v)[..., None] if np.ndim(v) else v) for name, v in vars(hw).items()})


def combined(prefill: dict[str, FloatArray], decode: dict[str, FloatArray], outputs: FloatArray
             ) -> dict[str, FloatArray]:
    """Per sampled request, the disaggregated latencies from the two pools' samples (prefill's TTFT with the
    transfer; decode's TTFT without the request overhead): TTFT adds, TPOT is the decode pool's, end-to-end
    latency is TTFT plus the decode of the other output tokens."""
    ttft = prefill["ttft"] + decode["ttft"]
    tpot = decode["tpot"]
    return {"ttft": ttft, "tpot": tpot, "e2e": ttft + (outputs - 1.0) * tpot}


__all__ = [
    "LINK_EFFICIENCY",
    "TRANSFER_SETUP_S",
    "Pool",
    "combined",
    "decode_pool",
    "kv_transfer_bytes",
    "prefill_pool",
    "transfer_s",
]
