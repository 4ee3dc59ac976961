"""Named request-length distributions of the datasets serving benchmarks draw from.

A preset gives the shape of a dataset's prompt and output lengths as a benchmark samples them: the mean
(used when a plan or a scenario line names the dataset but gives no lengths), the coefficient of variation,
and the length filters the benchmark applies. Lengths are lognormal with that mean and CV, cut at the
filters and rescaled to keep the mean (`sample_lengths`); a scenario's stated means replace the preset's.

The means are tokenizer dependent (ShareGPT's first turns average about 215-250 prompt tokens with the
Llama and Qwen tokenizers under vLLM's filter); the CVs are read off the length histograms these
benchmarks print and are approximate. docs/model.md lists the sources and what is assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from numpy.typing import NDArray

from inferplan.planner.names import CatalogLookupError, closest_names, normalize_name
from inferplan.planner.quantiles import normal_ppf

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class DatasetLengths:
    """Prompt and output lengths of one benchmark dataset as its benchmark samples them [tokens]."""

    name: str
    prompt_mean: float
    prompt_cv: float
    output_mean: float
    output_cv: float
    max_prompt: float        # prompts longer than this are dropped by the sampler
    max_total: float         # prompt + output longer than this are dropped
    min_tokens: int          # prompts and outputs shorter than this are dropped
    source: str


DATASETS: dict[str, DatasetLengths] = {
    d.name: d
    for d in (
        DatasetLengths(
            "sharegpt", 220.0, 1.1, 200.0, 1.0, 1024.0, 2048.0, 4,
            "vLLM benchmark_serving / `vllm bench serve --dataset-name sharegpt`: first conversation turn of "
            "ShareGPT_V3_unfiltered_cleaned_split, output length = the reply's token count, pairs dropped when "
            "prompt or output < 4 tokens, prompt > 1024 or prompt + output > 2048 (sample_sharegpt_requests). "
            "Means 217-247 / 194-233 tokens in the published runs of latency-under-load.jsonl; CVs assumed.",
        ),
        DatasetLengths(
            "openorca", 294.0, 0.9, 284.0, 0.9, 1024.0, 2048.0, 1,
            "MLPerf Inference Llama-2-70B (OpenOrca GPT-4 subset, 24,576 samples, inputs and outputs cut at "
            "1024 tokens); means from the MLPerf dataset description, CVs assumed.",
        ),
        DatasetLengths(
            "sonnet", 550.0, 0.02, 150.0, 0.0, 550.0, math.inf, 1,
            "vLLM benchmark sonnet dataset: lines of Shakespeare's sonnets added to a fixed prefix until the "
            "prompt reaches --sonnet-input-len (default 550), --sonnet-output-len tokens out (default 150).",
        ),
        DatasetLengths(
            "random", 1024.0, 0.0, 128.0, 0.0, math.inf, math.inf, 1,
            "vLLM benchmark random dataset: --random-input-len (default 1024) and --random-output-len "
            "(default 128) with --random-range-ratio 0, i.e. fixed lengths.",
        ),
    )
}


def dataset_lengths(name: str) -> DatasetLengths:
    """The preset named `name` (case and separators ignored)."""
    key = normalize_name(name)
    for dataset in DATASETS.values():
        if normalize_name(dataset.name) == key:
            return dataset
    raise CatalogLookupError("dataset", name, closest_names(name, DATASETS))


@cache
def _uniform_points(n: int, seed: int) -> NDArray[np.float64]:
    return np.random.default_rng(seed).permutation((np.arange(n) + 0.5) / n)


def _lognormal(mean: float, cv: float, u: NDArray[np.float64], cap: float) -> NDArray[np.float64]:
    if cv <= 0 or mean <= 0:  # a mean of 0 (an empty prompt) has no spread to scale
        return np.full(len(u), min(max(mean, 0.0), cap))
    s2 = math.log1p(cv * cv)
    x = mean * np.exp(math.sqrt(s2) * normal_ppf(u) - s2 / 2.0)
    for _ in range(4):  # a cut moves the mean; rescaling moves values past the cut again: a few passes settle
        x = np.minimum(x, cap)
        x = x * mean / x.mean()
    return np.minimum(x, max(cap, mean))


def sample_lengths(n: int, prompt_mean: float, output_mean: float, dataset: DatasetLengths | None,
                   seed: int = 0) -> tuple[IntArray, IntArray]:
    """`n` (prompt, output) lengths of a dataset at the given means (fixed lengths when `dataset` is None).

    Deterministic: a stratified sample (one point per 1/n quantile, shuffled with `seed`), so a run of n
    requests sees the dataset's spread without sampling noise in its mean.
    """
    if dataset is None or n < 1:
        return (np.full(n, max(round(prompt_mean), 1), dtype=np.int64),
                np.full(n, max(round(output_mean), 1), dtype=np.int64))
    prompts = _lognormal(prompt_mean, dataset.prompt_cv, _uniform_points(n, seed), dataset.max_prompt)
    outputs = _lognormal(output_mean, dataset.output_cv, _uniform_points(n, seed + 1), dataset.max_total)
    outputs = np.minimum(outputs, np.maximum(dataset.max_total - prompts, dataset.min_tokens))
    low = dataset.min_tokens
    return (np.maximum(np.rint(prompts), low).astype(np.int64), np.maximum(np.rint(outputs), low).astype(np.int64))


def eos_lengths(n: int, mean: float, cap: int, seed: int = 1) -> IntArray:
    """`n` output lengths of requests that end at EOS or at `cap` tokens (max_tokens), whichever comes first, with
    mean `mean`: a constant chance p of EOS at each token (a geometric length, the memoryless assumption, as nothing
    else is known of where a completion ends), cut at the cap, p solving E[min(G, cap)] = (1 - (1 - p)^cap) / p =
    mean. Stratified like `sample_lengths` (one point per 1/n quantile, shuffled with `seed`). A mean at the cap or
    above gives every request the cap."""
    if n < 1:
        return np.zeros(0, dtype=np.int64)
    if mean >= cap - 0.5:
        return np.full(n, cap, dtype=np.int64)
    low, high = 1e-9, 1.0  # the censored mean falls as p rises: from cap (p -> 0) to 1 (p = 1)
    for _ in range(100):
        p = 0.5 * (low + high)
        if (1.0 - (1.0 - p) ** cap) / p > mean:
            low = p
        else:
            high = p
    u = _uniform_points(n, seed)
    lengths = np.ceil(np.log1p(-u) / math.log1p(-p)) if p < 1.0 else np.ones(n)
    return np.clip(lengths, 1, cap).astype(np.int64)
