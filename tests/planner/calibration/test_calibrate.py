"""The engine-term fit (calibration/calibrate.py): it recovers the engine terms and harness times that made
the data, stays within its bounds, fits nothing of a GPU (the kernel times are measured), and keeps engines without
data at the prior."""

from __future__ import annotations

import json
import math
from dataclasses import fields, replace
from importlib import resources
from itertools import pairwise
from pathlib import Path

import pytest

from inferplan.planner.calibration.calibrate import (
    BOUNDS,
    CalibrationProgress,
    calibrate,
    engine_targets,
    harness_keys,
    row_line,
    source_weights,
    training_rows,
)
from inferplan.planner.calibration.predict import predict_scenarios
from inferplan.planner.calibration.scenarios import Scenario, read_scenarios
from inferplan.planner.catalog.engines import engine_profile
from inferplan.planner.catalog.gpus import resolve_gpu
from inferplan.planner.catalog.model_configs import resolve_model
from inferplan.planner.catalog.precisions import weight_precision
from inferplan.planner.model.factors import NO_SM_CAP_GB_S, FactorSet, harness_key, load_factors
from inferplan.planner.model.performance import build_hardware


def _prior() -> FactorSet:
    """The shipped factors without any fitted line or harness: every line starts from `default_engine`."""
    return replace(load_factors(), engines={}, harness_ms={})


def made_by(rows: list[Scenario], truth: FactorSet) -> list[Scenario]:
    """`rows` with their values replaced by `truth`'s predictions (those it predicts)."""
    predicted = predict_scenarios(rows, truth)
    return [r.model_copy(update={"value": p.predicted}) for r, p in zip(rows, predicted, strict=True) if p.predicted]


def synthetic(published: Path, truth: FactorSet) -> list[Scenario]:
    """Published vLLM single-stream and static-batch rows with values replaced by `truth`'s predictions."""
    rows = [r for r in read_scenarios(published).scenarios
            if r.engine == "vllm" and not r.suspect and r.load.kind in ("single", "static_batch")][:40]
    return made_by(rows, truth)


def test_fit_recovers_the_per_step_and_per_sequence_times_that_made_the_data(published_scenarios: Path) -> None:
    prior = _prior()
    made = replace(prior.default_engine, step_overhead_ms=4.0, sequence_overhead_ms=0.2)
    truth = replace(prior, engines={"vllm": made, "vllm-v0": made})  # both release lines of vLLM
    rows = synthetic(published_scenarios, truth)
    assert len(rows) >= 20
    fitted = calibrate(rows, prior, sweeps=4, prior_weight=0.0)
    assert fitted.loss_after < fitted.loss_before
    lines = [line for line, n in fitted.rows_by_engine.items() if n >= 10]
    assert lines
    for line in lines:
        assert fitted.factors.engine(line).step_overhead_ms == pytest.approx(4.0, rel=0.1), line
        assert fitted.factors.engine(line).sequence_overhead_ms == pytest.approx(0.2, rel=0.15), line


def test_the_prior_pulls_a_term_towards_it_and_no_further_than_the_data(published_scenarios: Path) -> None:
    """With the shipped prior weight a term the data sets lands between the prior and the value that made the data:
    closer to the data than to the prior where there are tens of rows."""
    prior = _prior()
    made = replace(prior.default_engine, step_overhead_ms=4.0)
    truth = replace(prior, engines={"vllm": made, "vllm-v0": made})
    rows = synthetic(published_scenarios, truth)
    fitted = calibrate(rows, prior, sweeps=4)
    assert fitted.factors.meta["prior_weight"] > 0
    line = max(fitted.rows_by_engine, key=lambda e: fitted.rows_by_engine[e])
    step = fitted.factors.engine(line).step_overhead_ms
    assert prior.default_engine.step_overhead_ms < step <= 4.0 * 1.02
    assert abs(math.log(step / 4.0)) < abs(math.log(step / prior.default_engine.step_overhead_ms))


def test_a_negative_prior_weight_is_refused(published_scenarios: Path) -> None:
    with pytest.raises(ValueError, match="prior_weight"):
        calibrate([], _prior(), prior_weight=-1.0)


def test_the_fit_moves_engine_terms_only_and_no_kernel_rate(published_scenarios: Path) -> None:
    """What the fit returns differs from the prior only in each fitted line's `engine_targets`; the rates every
    row's deployment gets from the kernel tables (bandwidths, FLOP rates, overlap, links) are the same under the
    prior and the fit, and the factors hold no GPU or GPU-family term to move."""
    prior = _prior()
    truth = replace(prior, engines={"vllm-v0": replace(prior.default_engine, step_overhead_ms=3.0,
                                                       non_torch_gib=1.0)})
    rows = synthetic(published_scenarios, truth)
    fitted = calibrate(rows, prior, sweeps=2).factors
    assert {f.name for f in fields(FactorSet)} == {"engines", "default_engine", "meta", "harness_ms", "overrides"}
    assert fitted.overrides == {}
    for line, engine in fitted.engines.items():
        moved = {f.name for f in fields(engine) if getattr(engine, f.name) != getattr(prior.default_engine, f.name)}
        assert moved <= set(engine_targets(line)), (line, moved)
    kernel_rates = ("bandwidth_bytes_s", "expert_bandwidth_bytes_s", "kv_bandwidth_bytes_s", "decode_flops_s",
                    "prefill_flops_s", "attention_flops_s", "overlap_penalty", "link_bytes_s", "link_latency_s")
    for row in rows[:10]:
        gpu, line = resolve_gpu(row.gpu), row_line(row)

        def hw(factors: FactorSet, row=row, gpu=gpu, line=line):
            return build_hardware(resolve_model(row.model), gpu, weight_precision(row.weights), 2.0,
                                  engine_profile(row.engine), factors.engine(line), row.tensor_parallel or 1)

        before, after = hw(prior), hw(fitted)
        assert all(getattr(before, name) == getattr(after, name) for name in kernel_rates), row.id
        assert after.step_overhead_s != before.step_overhead_s, row.id  # the engine term did move


def test_a_fitted_term_never_leaves_its_bounds(published_scenarios: Path) -> None:
    """Data made with a per-step time and a per-sequence time beyond any engine's (100 ms and 5 ms a step) pull
    the fit to the bounds and no further."""
    prior = _prior()
    absurd = replace(prior.default_engine, step_overhead_ms=100.0, sequence_overhead_ms=5.0)
    rows = synthetic(published_scenarios, replace(prior, engines={"vllm": absurd, "vllm-v0": absurd}))
    fitted = calibrate(rows, prior, sweeps=4, prior_weight=0.0).factors
    assert fitted.engines
    for line, engine in fitted.engines.items():
        assert engine.step_overhead_ms == BOUNDS["step_overhead_ms"][1], line
        assert engine.sequence_overhead_ms == BOUNDS["sequence_overhead_ms"][1], line
        for name in engine_targets(line):
            lo, hi = BOUNDS[name]
            assert lo <= getattr(engine, name) <= hi, (line, name)


def test_refitting_the_same_rows_gives_the_same_factors_whatever_the_start(published_scenarios: Path) -> None:
    """The fit is deterministic and starts every line with data from the prior, so fitting again, from the prior
    or from factors that already hold other values for those lines, reproduces the same terms."""
    prior = _prior()
    made = replace(prior.default_engine, step_overhead_ms=2.0)
    rows = synthetic(published_scenarios, replace(prior, engines={"vllm": made, "vllm-v0": made}))
    first, again = calibrate(rows, prior, sweeps=2), calibrate(rows, prior, sweeps=2)
    assert first.factors == again.factors and first.loss_after == again.loss_after
    odd = replace(prior.default_engine, step_overhead_ms=30.0, activation_scale=5.0)
    from_elsewhere = calibrate(rows, replace(prior, engines=dict.fromkeys(first.factors.engines, odd)), sweeps=2)
    assert from_elsewhere.factors.engines == first.factors.engines


def test_engines_without_rows_keep_their_factors(published_scenarios: Path) -> None:
    shipped = load_factors()
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "llama.cpp"][:10]
    fitted = calibrate(rows, shipped, sweeps=1)
    assert fitted.factors.engine("vllm") == shipped.engine("vllm")
    assert set(fitted.rows_by_engine) == {"llama.cpp"}


def test_engines_without_rows_keep_the_measured_lines_their_factors_rest_on(published_scenarios: Path) -> None:
    """A team's fit on its own llama.cpp runs keeps SGLang's shipped factors, and with them the measured lines a plan
    cites for them: an SGLang plan on an H100 with the written file is not `extrapolated` (nor its intervals
    widened) because the team measured another engine."""
    shipped = load_factors()
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "llama.cpp"][:10]
    fitted = calibrate(rows, shipped, sweeps=1).factors
    assert fitted.lines_measured_on("sglang", "hopper") == shipped.lines_measured_on("sglang", "hopper") != {}
    assert fitted.lines_measured_on("vllm", "ampere") == shipped.lines_measured_on("vllm", "ampere") != {}


def test_a_rocm_lines_rows_move_that_line_only(published_scenarios: Path) -> None:
    """CDNA3 is measured with vLLM on ROCm (Argonne's 2024 runs, the V0 line). Made with a per-step time of 6 ms on
    that line and measured by two sources, its rows move that line towards it (the prior holds back some with this
    few rows) and leave vLLM's CUDA lines out of the fit: nothing of the GPU itself is fitted, its kernels are
    published figures. Measured by one source only, the line keeps its prior: a term one source sets is that
    source's harness and machines as much as the engine's."""
    prior = _prior()
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "vllm" and not r.suspect
            and r.gpu == "AMD-Instinct-MI300X" and r.load.kind == "static_batch" and r.published]
    assert len(rows) >= 10 and {row_line(r) for r in rows} == {"vllm-v0-rocm"}
    assert len({r.source_name for r in rows}) == 1
    truth = replace(prior, engines={"vllm-v0-rocm": replace(prior.default_engine, step_overhead_ms=6.0)})
    made = made_by(rows, truth)
    assert calibrate(made, prior, sweeps=2).factors.engines == {}
    elsewhere = [r.model_copy(update={"id": f"{r.id}-again", "source": "https://example.org/same-runs-again"})
                 for r in made]
    fitted = calibrate(made + elsewhere, prior, sweeps=2).factors
    assert set(fitted.engines) == {"vllm-v0-rocm"}
    assert 0.6 * 6.0 < fitted.engine("vllm-v0-rocm").step_overhead_ms <= 1.1 * 6.0


def test_a_stack_line_takes_its_engines_memory_factors(published_scenarios: Path) -> None:
    rows = [r for r in read_scenarios(published_scenarios).scenarios
            if r.engine == "vllm" and not r.suspect and r.gpu and r.load.kind == "static_batch"
            and r.gpu.startswith(("AMD", "NVIDIA-H100"))]
    rows += [r.model_copy(update={"id": f"{r.id}-again", "source": "https://example.org/same-runs-again"})
             for r in rows]  # a second source, so that both lines are fitted
    fitted = calibrate(rows, load_factors(), sweeps=1).factors
    rocm, cuda = fitted.engine("vllm-v0-rocm"), fitted.engine("vllm-v0")
    assert "vllm-v0-rocm" in fitted.engines and rocm != cuda
    assert (rocm.non_torch_gib, rocm.activation_scale) == (cuda.non_torch_gib, cuda.activation_scale)


def test_each_line_is_fitted_on_the_terms_it_can_have() -> None:
    """Every line gets its per-step and per-sequence times; a stack line (vllm-rocm) keeps its engine's memory
    terms; only engines that stream weights with their own kernels (llama.cpp, ExLlama, MLC) get a per-SM rate, and
    only lines that run some batches outside their CUDA graphs (vLLM V1, SGLang, TGI) an eager time per layer; vLLM
    V1, whose activation peak is its sampler profile read from its code, keeps its activation scale at 1.
    No efficiency or dequantisation term is left to fit: quantised rows move the same terms as 16-bit ones."""
    memory = ("non_torch_gib", "activation_scale")
    assert engine_targets("sglang") == ("step_overhead_ms", "sequence_overhead_ms", *memory, "eager_layer_ms")
    assert engine_targets("vllm") == ("step_overhead_ms", "sequence_overhead_ms", "non_torch_gib", "eager_layer_ms")
    assert engine_targets("vllm-rocm") == ("step_overhead_ms", "sequence_overhead_ms", "eager_layer_ms")
    assert engine_targets("vllm-v0") == engine_targets("tensorrt-llm") == (
        "step_overhead_ms", "sequence_overhead_ms", *memory)
    assert engine_targets("tgi-rocm") == ("step_overhead_ms", "sequence_overhead_ms", "eager_layer_ms")
    for line in ("llama.cpp", "exllama", "mlc-llm"):
        assert engine_targets(line) == ("step_overhead_ms", "sequence_overhead_ms", *memory, "sm_stream_gb_s")


def test_fit_finds_a_per_sm_cap_with_the_step_time_it_comes_with(published_scenarios: Path) -> None:
    """llama.cpp's rows span GDDR cards (few GB/s per SM) and HBM cards (many): data made with a cap of 9 GB/s per
    SM and 2 ms a step is fitted back to both; an engine that uses vendor kernels gets no cap fitted."""
    prior = _prior()
    rows = [r for r in read_scenarios(published_scenarios).scenarios if r.engine == "llama.cpp" and not r.suspect]
    assert {resolve_gpu(r.gpu).key for r in rows} >= {"A100-SXM4-80GB", "H100-PCIe-80GB", "RTX-3090", "RTX-4090"}
    truth = replace(prior, engines={"llama.cpp": replace(prior.default_engine, step_overhead_ms=2.0,
                                                         sm_stream_gb_s=9.0)})
    fitted = calibrate(made_by(rows, truth), prior, sweeps=2, prior_weight=0.0).factors.engine("llama.cpp")
    assert fitted.sm_stream_gb_s == pytest.approx(9.0, rel=0.15)
    assert fitted.step_overhead_ms == pytest.approx(2.0, rel=0.15)
    vllm_rows = synthetic(published_scenarios, prior)
    assert calibrate(vllm_rows, prior, sweeps=1).factors.engine("vllm-v0").sm_stream_gb_s == NO_SM_CAP_GB_S


def test_the_lines_with_their_own_weight_kernels_share_one_per_sm_rate(published_scenarios: Path) -> None:
    """The per-SM cap is a bound of hand-written kernels on the memory, fitted once on the rows of every line that
    has one: llama.cpp's HBM rows come from one source, whose leave-one-out fold had moved llama.cpp's own rate from
    8.9 GB/s to no cap. Data made with one cap of 9 GB/s per SM (and each line's own step time) is fitted back to one
    rate for both lines, and the fit without llama.cpp's HBM rows still caps it, from MLC-LLM's rows."""
    prior = _prior()
    rows = [r for r in read_scenarios(published_scenarios).scenarios
            if r.engine in ("llama.cpp", "mlc-llm") and not r.suspect]
    truth = replace(prior, engines={
        "llama.cpp": replace(prior.default_engine, step_overhead_ms=2.0, sm_stream_gb_s=9.0),
        "mlc-llm": replace(prior.default_engine, step_overhead_ms=1.0, sm_stream_gb_s=9.0)})
    made = made_by(rows, truth)
    fitted = calibrate(made, prior, sweeps=2, prior_weight=0.0).factors
    assert fitted.engine("llama.cpp").sm_stream_gb_s == fitted.engine("mlc-llm").sm_stream_gb_s
    assert fitted.engine("llama.cpp").sm_stream_gb_s == pytest.approx(9.0, rel=0.15)
    hbm = {"A100-SXM4-80GB", "A100-PCIe-80GB", "H100-PCIe-80GB"}
    without = [r for r in made if not (r.engine == "llama.cpp" and resolve_gpu(r.gpu).key in hbm)]
    assert len(without) < len(made)
    assert calibrate(without, prior, sweeps=2, prior_weight=0.0).factors.engine("llama.cpp").sm_stream_gb_s < 20.0


def test_each_release_line_is_fitted_on_its_own_rows(published_scenarios: Path) -> None:
    """vLLM's V0 and V1 lines have terms of their own: QwenLM's V0 single-stream rows made with 3 ms a step and
    V1's single-stream rows made with 0.4 ms, each measured again by a second source, move each line its own way
    (V1 has few rows: the prior holds it back, but not up to V0's)."""
    prior = _prior()
    scenarios = read_scenarios(published_scenarios).scenarios
    v0 = [r for r in scenarios if not r.suspect and row_line(r) == "vllm-v0" and r.load.kind == "single"
          and "qwen" in r.id.lower()]
    v1 = [r for r in scenarios if not r.suspect and row_line(r) == "vllm" and r.metric == "decode_tps_single"]
    assert len(v0) >= 20 and len(v1) >= 3
    truth = replace(prior, engines={"vllm-v0": replace(prior.default_engine, step_overhead_ms=3.0),
                                    "vllm": replace(prior.default_engine, step_overhead_ms=0.4)})
    made = made_by(v0 + v1, truth)
    made += [r.model_copy(update={"id": f"{r.id}-again", "source": "https://example.org/same-runs-again"})
             for r in made]  # a second source, so that both lines are fitted
    fitted = calibrate(made, prior, sweeps=3).factors
    assert fitted.engine("vllm-v0").step_overhead_ms == pytest.approx(3.0, rel=0.15)
    assert fitted.engine("vllm").step_overhead_ms < prior.default_engine.step_overhead_ms


def test_a_harness_time_is_fitted_for_sources_with_online_runs_only(published_scenarios: Path) -> None:
    """zhjunqin's vLLM rows are Poisson runs through a server: data made with 80 ms of harness on their TTFT gets
    that back (within the prior's pull) for that source and engine line alone; Argonne's offline single-stream and
    static-batch rows have no harness, and the engine terms stay where the data put them (at the prior)."""
    prior = _prior()
    scenarios = training_rows(read_scenarios(published_scenarios).scenarios)
    online = [r for r in scenarios if r.source_name == "zhjunqin" and r.metric.startswith("ttft")
              and r.engine == "vllm"]
    offline = [r for r in scenarios if r.load.kind in ("single", "static_batch")
               and row_line(r) in ("vllm", "vllm-v0")][:12]
    assert len(online) >= 4 and offline and {r.source_name for r in offline}.isdisjoint({"zhjunqin"})
    (line,) = {row_line(r) for r in online}
    key = harness_key("zhjunqin", line)
    rows = made_by(online + offline, replace(prior, harness_ms={key: 80.0}))
    assert set(harness_keys(rows)) == {key}
    fitted = calibrate(rows, prior, sweeps=2).factors
    assert set(fitted.harness_ms) == {key}
    assert fitted.harness_ms[key] == pytest.approx(80.0, rel=0.2)
    for name, engine in fitted.engines.items():
        assert engine.step_overhead_ms == pytest.approx(prior.default_engine.step_overhead_ms, rel=1e-6), name
    # The harness is part of that source's online measurements: their predictions carry it, offline ones do not.
    with_harness = predict_scenarios(online[:3] + offline[:3], fitted)
    without = predict_scenarios(online[:3] + offline[:3], replace(fitted, harness_ms={}))
    assert all(a.predicted > b.predicted for a, b in zip(with_harness[:3], without[:3], strict=True))
    assert all(a.predicted == b.predicted for a, b in zip(with_harness[3:], without[3:], strict=True))


def test_a_source_counts_by_the_square_root_of_its_rows() -> None:
    """The loss weighs each row 1 / sqrt(rows of its source), scaled to average 1: a source with four times the
    rows counts twice as much in all, not four times, and a one-source fit weighs every row 1."""
    rows = _weight_rows({"https://github.com/big/a/blob/c/x.md": 8, "https://github.com/small/b/blob/c/y.md": 2})
    weights = source_weights(rows)
    assert sum(weights.values()) == pytest.approx(len(rows))
    big = [weights[r.id] for r in rows if r.source_name == "big"]
    small = [weights[r.id] for r in rows if r.source_name == "small"]
    assert sum(big) == pytest.approx(2 * sum(small))
    assert list(source_weights(rows[:8]).values()) == pytest.approx([1.0] * 8)


def _weight_rows(counts: dict[str, int]) -> list[Scenario]:
    """Copies of the bundled example's first line, `n` from each source URL."""
    text = resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl").read_text(encoding="utf-8")
    base = json.loads(next(line for line in text.splitlines() if line.strip()))
    return [Scenario.model_validate({**base, "id": f"{source.split('/')[3]}-{i}", "source": source})
            for source, n in counts.items() for i in range(n)]


def test_a_progress_callback_only_observes_and_can_stop_the_fit(published_scenarios: Path) -> None:
    """`progress` is called after every term's walk, with the rows walked so far growing to the total and the loss
    of the factors as they stand; the fit is the same with it as without, and what it raises ends the fit."""
    prior = _prior()
    made = replace(prior.default_engine, step_overhead_ms=2.0)
    rows = synthetic(published_scenarios, replace(prior, engines={"vllm": made, "vllm-v0": made}))
    seen: list[CalibrationProgress] = []
    watched = calibrate(rows, prior, sweeps=2, progress=seen.append)
    assert watched == calibrate(rows, prior, sweeps=2)
    terms = seen[0].terms
    assert terms > 1
    assert [(s.sweep, s.sweeps, s.term) for s in seen] == [(w, 2, t) for w in (1, 2) for t in range(1, terms + 1)]
    assert all(a.done < b.done for a, b in pairwise(seen)) and seen[-1].done == seen[-1].total
    assert seen[-1].loss == watched.loss_after
    assert seen[0].loss <= watched.loss_before

    def stop(_: CalibrationProgress) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate(rows, prior, sweeps=2, progress=stop)


def test_a_memory_term_moves_with_what_a_server_reports_at_startup_only(published_scenarios: Path) -> None:
    """dennislee22's vLLM rows made with 4 GiB outside the allocator: its speed rows alone (their concurrency
    depends on the KV cache) leave the memory terms at the prior, so that a speed miss is never pushed into the
    memory a line is measured to have; so do startup rows (KV cache, weights, concurrency) of one source; startup
    rows of two move them until the KV cache those rows report is predicted within a tenth of the prior's miss
    (3.5 GiB)."""
    prior = _prior()
    rows = [r for r in read_scenarios(published_scenarios).scenarios
            if not r.suspect and row_line(r) == "vllm" and r.source_name == "dennislee22"]
    startup = made_by([r for r in rows if r.load.kind == "startup"], truth := replace(
        prior, engines={"vllm": replace(prior.default_engine, non_torch_gib=4.0)}))
    speed = made_by([r for r in rows if r.load.kind != "startup"], truth)
    assert len(startup) >= 10 and len(speed) >= 20
    assert any(m.value < 0.8 * p.predicted for m, p in zip(speed, predict_scenarios(speed, prior), strict=True))

    def again(made: list[Scenario]) -> list[Scenario]:  # a second source, so that the line is fitted
        return [r.model_copy(update={"id": f"{r.id}-again", "source": "https://example.org/same-runs-again"})
                for r in made]

    unmoved = (prior.default_engine.non_torch_gib, prior.default_engine.activation_scale)
    from_speed = calibrate(speed + again(speed), prior, sweeps=2).factors.engine("vllm")
    assert (from_speed.non_torch_gib, from_speed.activation_scale) == unmoved
    one_source = calibrate(startup + speed + again(speed), prior, sweeps=2).factors.engine("vllm")
    assert (one_source.non_torch_gib, one_source.activation_scale) == unmoved
    made = startup + speed + again(startup + speed)
    seen: list[CalibrationProgress] = []
    one_sweep = calibrate(made, prior, sweeps=1, progress=seen.append)
    # The progress loss counts the speed rows a memory term's walk moved without evaluating them.
    assert seen[-1].loss == pytest.approx(one_sweep.loss_after, rel=1e-12)
    fitted = calibrate(made, prior, sweeps=2).factors
    assert fitted.engine("vllm").non_torch_gib > 2.0
    kv = [r for r in startup if r.metric == "kv_cache_gib"]
    assert len(kv) >= 5
    for row, out, before in zip(kv, predict_scenarios(kv, fitted), predict_scenarios(kv, prior), strict=True):
        assert abs(out.predicted - row.value) < 0.1 * abs(before.predicted - row.value), row.id
