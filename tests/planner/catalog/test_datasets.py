"""Dataset length presets: named, sampled at the stated means, cut where the benchmark cuts."""

from __future__ import annotations

import numpy as np
import pytest

from inferplan.planner.catalog.datasets import DATASETS, dataset_lengths, eos_lengths, sample_lengths
from inferplan.planner.names import CatalogLookupError


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_a_sample_keeps_the_means_and_the_benchmark_filters(name: str) -> None:
    preset = dataset_lengths(name)
    prompts, outputs = sample_lengths(1000, preset.prompt_mean, preset.output_mean, preset)
    assert prompts.mean() == pytest.approx(preset.prompt_mean, rel=0.02)
    assert outputs.mean() == pytest.approx(preset.output_mean, rel=0.05)
    assert prompts.max() <= max(preset.max_prompt, preset.prompt_mean)
    assert (prompts + outputs).max() <= preset.max_total + 1
    assert prompts.min() >= preset.min_tokens and outputs.min() >= 1


def test_sharegpt_is_spread_and_random_is_fixed() -> None:
    prompts, outputs = sample_lengths(1000, 230, 210, dataset_lengths("sharegpt"))
    assert np.std(outputs) / outputs.mean() > 0.6
    assert np.std(prompts) / prompts.mean() > 0.7  # heavy-tailed chat lengths, not a constant
    assert np.median(prompts) < prompts.mean()
    fixed_p, fixed_o = sample_lengths(10, 1024, 128, dataset_lengths("random"))
    assert set(fixed_p.tolist()) == {1024} and set(fixed_o.tolist()) == {128}
    none_p, _ = sample_lengths(3, 100, 10, None)
    assert none_p.tolist() == [100, 100, 100]


def test_a_mean_of_zero_tokens_samples_the_shortest_lengths() -> None:
    preset = dataset_lengths("sharegpt")
    prompts, outputs = sample_lengths(100, 0, 200, preset)  # an empty prompt has no spread, and no NaN
    assert set(prompts.tolist()) == {preset.min_tokens} and outputs.mean() == pytest.approx(200, rel=0.05)


def test_samples_are_deterministic() -> None:
    a = sample_lengths(500, 230, 210, dataset_lengths("ShareGPT"))
    b = sample_lengths(500, 230, 210, dataset_lengths("sharegpt"))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_an_unknown_dataset_names_the_closest() -> None:
    with pytest.raises(CatalogLookupError, match="sharegpt"):
        dataset_lengths("sharegtp")


@pytest.mark.parametrize("n", [16, 64, 256])
def test_completions_that_end_at_eos_keep_their_mean_and_the_longest_reaches_the_cap(n: int) -> None:
    lengths = eos_lengths(n, 58.0, 150)
    assert abs(lengths.mean() - 58.0) < 1.0
    assert lengths.min() >= 1 and lengths.max() == 150  # a burst lasts as long as its longest completion
    assert np.array_equal(lengths, eos_lengths(n, 58.0, 150))  # deterministic
    assert (eos_lengths(n, 150.0, 150) == 150).all()  # a mean at the cap: every request runs to it
