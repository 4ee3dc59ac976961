"""The `inferplan` command line: a thin layer over the planner. Imports are lazy so `--help` is fast."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

FACTORS_HELP = "efficiency factors to use (default: the fitted ones shipped)"
EXAMPLE_PLAN = "inferplan/planner/data/example-plan.yaml, the same as examples/plans/chat-assistant-8b.yaml"
EXAMPLE = "bundled example (inferplan/planner/data/example-scenarios.jsonl)"


def _example_path() -> Path:
    from importlib import resources

    return Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))


def _read(path: str | None) -> tuple[list, list]:
    from inferplan.planner.scenarios import read_scenarios

    source = Path(path) if path else _example_path()
    parsed = read_scenarios(source)
    for error in parsed.errors:
        print(f"{source}: {error} (line skipped)", file=sys.stderr)
    return list(parsed.scenarios), list(parsed.errors)


def _factors(path: str | None):  # -> FactorSet | None
    if not path:
        return None
    from inferplan.planner.factors import parse_factors

    return parse_factors(json.loads(Path(path).read_text(encoding="utf-8")))


def _cmd_predict(args: argparse.Namespace) -> int:
    from inferplan.planner.predict import predict_scenarios

    scenarios, _ = _read(args.scenarios)
    predictions = predict_scenarios(scenarios, _factors(args.factors))
    if args.output == "json":
        print(json.dumps([
            {"id": p.id, "metric": p.metric, "measured": p.measured,
             "predicted": None if p.predicted is None else round(p.predicted, 6), "skipped": p.skipped}
            for p in predictions
        ], indent=2))
        return 0
    if not args.scenarios:
        print(f"# {EXAMPLE}")
    print(f"{'metric':18s} {'measured':>11s} {'predicted':>11s} {'error':>7s}  id")
    for p in predictions:
        if p.predicted is None:
            print(f"{p.metric:18s} {p.measured:11.4g} {'-':>11s} {'-':>7s}  {p.id}  [skipped: {p.skipped}]")
        else:
            err = (p.predicted - p.measured) / p.measured if p.measured else 0.0
            print(f"{p.metric:18s} {p.measured:11.4g} {p.predicted:11.4g} {err:+7.1%}  {p.id}")
    return 0


def _cmd_accuracy(args: argparse.Namespace) -> int:
    from inferplan.planner.accuracy import format_report, score
    from inferplan.planner.predict import predict_scenarios

    scenarios, errors = _read(args.scenarios)
    report = score(scenarios, predict_scenarios(scenarios, _factors(args.factors)))
    if args.json:
        data = report.to_json()
        data["badLines"] = len(errors)
        print(json.dumps(data, indent=2))
    else:
        print(format_report(report))
        if errors:
            print(f"\n{len(errors)} bad line(s) skipped (see stderr)")
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from inferplan.planner.calibrate import calibrate, format_calibration

    scenarios = [row for path in args.scenarios for row in _read(path)[0]]
    result = calibrate(scenarios, _factors(args.factors))
    print(format_calibration(result))
    if args.write:
        Path(args.write).write_text(json.dumps(result.factors.to_json(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.write}")
    return 0


def _example_plan() -> Path:
    from importlib import resources

    return Path(str(resources.files("inferplan.planner").joinpath("data/example-plan.yaml")))


def _load_plan(file: str | None):  # -> PlanRequest | None
    """The plan in `file` (default: the bundled example) resolved; None after printing every problem."""
    from inferplan.planner.spec import PlanError, load_plan_file, resolve_plan

    path = Path(file) if file else _example_plan()
    try:
        return resolve_plan(load_plan_file(path), path.parent)
    except PlanError as exc:
        for field, message in exc.problems:
            print(f"{path}: {field}: {message}" if field else f"{path}: {message}", file=sys.stderr)
        return None


def _cmd_plan(args: argparse.Namespace) -> int:
    from inferplan.planner.search import plan
    from inferplan.planner.verification import should_verify, verify_plan

    request = _load_plan(args.file)
    if request is None:
        return 2
    result = plan(request, _factors(args.factors))
    if should_verify(request, args.verify):
        result = verify_plan(request, result, factors=_factors(args.factors))
    if args.output == "table":
        from inferplan.tables import format_plan

        if not args.file:
            print(f"# bundled example plan ({EXAMPLE_PLAN})")
        print(format_plan(result, request))
        return 0
    data = result.model_dump(by_alias=True, mode="json")
    if args.output == "json":
        print(json.dumps(data, indent=2))
    else:
        import yaml

        print(yaml.safe_dump(data, sort_keys=False), end="")
    return 0


def _cmd_catalog(args: argparse.Namespace) -> int:
    if args.kind == "gpus":
        from inferplan.planner.gpus import load_gpu_catalog
        from inferplan.tables import format_gpus

        gpus = list(load_gpu_catalog())
        if args.output == "json":
            import dataclasses

            print(json.dumps([dataclasses.asdict(g) | {"productLabelKey": g.product_label_key} for g in gpus],
                             indent=2))
        else:
            print(format_gpus(gpus))
        return 0
    from inferplan.planner.architectures import load_model_catalog
    from inferplan.tables import format_models

    models = list(load_model_catalog())
    if args.output == "json":
        import dataclasses

        print(json.dumps([dataclasses.asdict(m) | {"paramCount": m.param_count(),
                                                   "activeParamCount": m.active_param_count()} for m in models],
                         indent=2))
    else:
        print(format_models(models))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from inferplan.planner.search import plan
    from inferplan.planner.simulate import read_trace
    from inferplan.planner.verification import compare, should_verify, simulate_candidate, verify_plan

    request = _load_plan(args.file)
    if request is None:
        return 2
    try:
        trace = read_trace(args.trace) if args.trace else None
    except (OSError, ValueError) as exc:
        print(f"inferplan: error: {exc}", file=sys.stderr)
        return 2
    planned = plan(request, _factors(args.factors))
    if should_verify(request, args.verify):  # the recommendation `inferplan plan` prints with the same option
        planned = verify_plan(request, planned, factors=_factors(args.factors))
    candidate = planned.recommendation
    if candidate is None:
        print("inferplan: the plan has no feasible deployment to simulate (see inferplan plan)", file=sys.stderr)
        return 1
    result = simulate_candidate(request, candidate, requests=args.requests, seed=args.seed, router=args.router,
                                workload=trace, factors=_factors(args.factors))
    rows = compare(candidate, result)
    # What the plan predicted: the analytic model, or its own shorter simulation for a verified plan.
    planned_by = candidate.provenance.get("predicted", "analytic")
    summary = {"deployment": f"{candidate.replicas} x {candidate.gpus_per_replica} {candidate.gpu_type}, "
                             f"max batch {candidate.max_batch}, {candidate.precision}",
               "plannedBy": "simulated" if planned_by == "simulated" else "analytic",
               "requests": len(result.ttft_s), "outputTokensPerSecond": round(result.output_tokens_per_s, 1),
               "preemptions": result.preemptions, "source": "trace" if trace else f"generated (seed {args.seed})"}
    if args.output == "json":
        print(json.dumps({**summary, "percentiles": [
            {"metric": r.metric, "quantile": r.quantile, "analyticMs": round(r.analytic_ms, 3),
             "simulatedMs": round(r.simulated_ms, 3)} for r in rows]}, indent=2))
        return 0
    print(f"{summary['deployment']}: {summary['requests']} requests ({summary['source']}), "
          f"{summary['outputTokensPerSecond']:g} output tokens/s, {summary['preemptions']} preemptions")
    planned_label = "planned (sim)" if summary["plannedBy"] == "simulated" else "analytic"
    print(f"{'metric':8s} {'quantile':>8s} {planned_label:>13s} {'simulated':>11s} {'ratio':>8s}")
    for r in rows:
        print(f"{r.metric:8s} {r.quantile:>8s} {r.analytic_ms:11.1f}ms {r.simulated_ms:9.1f}ms {r.ratio:8.2f}")
    return 0


def _cmd_operator(args: argparse.Namespace) -> int:
    from inferplan.operator.main import run

    return run()


def _cmd_crd(args: argparse.Namespace) -> int:
    from inferplan.operator.crd import crd_yaml

    print(crd_yaml(), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferplan",
        description="Capacity planning for LLM serving: recommend GPU type, replicas, tensor parallelism and "
        "batch for a workload and its latency SLOs; predict and score the serving model on measurements.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    pl = sub.add_parser("plan", help="recommend a deployment for a plan (YAML or JSON; a bare spec or a manifest)")
    pl.add_argument("file", nargs="?", metavar="FILE", help="plan file (default: the bundled example plan)")
    pl.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table", help="output format")
    pl.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    pl.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="simulate the leading candidates and recommend the cheapest that meets every SLO there "
                    "(default on; --no-verify prints the analytic answer, except for arrival CV^2 >= 4; a plan's "
                    "verify field wins)")
    pl.set_defaults(func=_cmd_plan)

    sim = sub.add_parser("simulate", help="simulate a plan's recommended deployment; simulated vs analytic latency")
    sim.add_argument("file", nargs="?", metavar="FILE", help="plan file (default: the bundled example plan)")
    sim.add_argument("--requests", type=int, default=20_000, help="requests to simulate (default 20000)")
    sim.add_argument("--seed", type=int, default=0, help="random seed of the generated workload (default 0)")
    sim.add_argument("--trace", metavar="TRACE.jsonl",
                     help='replay a trace instead: JSON lines {"t": seconds, "prompt": tokens, "output": tokens}')
    sim.add_argument("--router", choices=("round_robin", "least_outstanding"), default="round_robin",
                     help="how requests are spread over replicas (default round_robin)")
    sim.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    sim.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    sim.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                     help="simulate the recommendation inferplan plan prints with the same option (default on)")
    sim.set_defaults(func=_cmd_simulate)

    op = sub.add_parser("operator", help="run the Kubernetes operator (settings: INFERPLAN_* variables, see docs)")
    op.set_defaults(func=_cmd_operator)

    crd = sub.add_parser("crd", help="print the InferenceCapacityPlan CustomResourceDefinition (YAML)")
    crd.set_defaults(func=_cmd_crd)

    cat = sub.add_parser("catalog", help="list the GPUs or models the planner knows")
    cat.add_argument("kind", choices=("gpus", "models"))
    cat.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    cat.set_defaults(func=_cmd_catalog)

    p = sub.add_parser("predict", help="predict every scenario of a scenario file (JSON lines)")
    p.add_argument("--scenarios", metavar="FILE.jsonl", help=f"scenario file (default: the {EXAMPLE})")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    p.set_defaults(func=_cmd_predict)

    a = sub.add_parser("accuracy", help="score the predictions of a scenario file against its measurements")
    a.add_argument("--scenarios", metavar="FILE.jsonl", help=f"scenario file (default: the {EXAMPLE})")
    a.add_argument("--json", action="store_true", help="print the scores as JSON")
    a.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    a.set_defaults(func=_cmd_accuracy)

    c = sub.add_parser("calibrate", help="fit the efficiency factors on scenario files (docs/calibration.md)")
    c.add_argument("--scenarios", metavar="FILE.jsonl", required=True, nargs="+",
                   help="scenario files to fit on (their rows pooled)")
    c.add_argument("--write", metavar="FACTORS.json", help="write the fitted factors to this file")
    c.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    c.set_defaults(func=_cmd_calibrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from inferplan import __version__

        print(__version__)
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    for option, what in (("scenarios", "scenario file"), ("factors", "factors file"), ("file", "plan file"),
                         ("trace", "trace file")):
        given = getattr(args, option, None)
        for path in given if isinstance(given, list) else [given]:
            if path and not Path(path).is_file():
                print(f"inferplan: error: {what} not found: {path}", file=sys.stderr)
                return 2
    try:
        return int(args.func(args))
    except BrokenPipeError:  # e.g. piped into head
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
