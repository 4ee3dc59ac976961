"""The `inferplan` command line: a thin layer over the planner. Imports are lazy so `--help` is fast."""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

FACTORS_HELP = "engine factors to use (default: the fitted ones shipped; docs/calibration.md)"
EXAMPLE_PLAN = "inferplan/planner/data/example-plan.yaml, the same as examples/plans/chat-assistant-8b.yaml"
EXAMPLE = "bundled example (inferplan/planner/data/example-scenarios.jsonl)"
SIMULATED_ROUTERS = ("random", "round_robin", "least_outstanding")  # simulate.ROUTERS, without importing numpy here


@contextmanager
def _importing() -> Iterator[None]:
    """Around a command's imports of numpy, pydantic and the planner, half of what `inferplan plan` takes.

    They leave some 30,000 objects for the cyclic garbage collector and next to no garbage, so it would only
    walk them (about 90 collections, 15-40 ms of a 0.25 s `plan`): it is paused, and what the imports made is
    then left out of later collections (gc.freeze) for the rest of the process. numpy starts OpenBLAS with a
    thread per core when it is first imported, and the others cost CPU time (0.1 s of a `plan` here); the planner
    makes no BLAS call (no matrix products), so one thread is enough unless OPENBLAS_NUM_THREADS says
    otherwise. pydantic looks for plugins (a scan of every installed package's entry points, about 13 ms) when
    the first model is built; the command line uses none, so they are off unless PYDANTIC_DISABLE_PLUGINS says
    otherwise. Nothing changes for a process that has imported the planner already (a second command)."""
    if "inferplan.planner.search.plan" in sys.modules:
        yield
        return
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _example_path() -> Path:
    from importlib import resources

    return Path(str(resources.files("inferplan.planner").joinpath("data/example-scenarios.jsonl")))


def _read(paths: Sequence[str] | None) -> tuple[list, list]:
    """The rows of `paths` pooled (none: the bundled example), each bad line reported on stderr and left out; a line
    whose id an earlier file gave is one (`read_scenario_files`), so a file given twice is not counted twice. A file
that cannot be read is a CliError naming it."""
    from inferplan.planner.calibration.scenarios import read_pooled

    try:
        scenarios, bad = read_pooled([Path(p) for p in paths] if paths else [_example_path()])
    except OSError as exc:  # no read permission, or a file gone since the arguments were checked
        raise CliError(f"cannot read scenario file {exc.filename}: {exc.strerror or exc}") from None
    for message in bad:
        print(f"{message} (line skipped)", file=sys.stderr)
    return scenarios, bad


def _read_some(paths: Sequence[str] | None, verb: str) -> tuple[list, list]:
    """`_read`, refusing files without a valid line: an empty file, or one whose every line is bad, has nothing to
    `verb`, which an empty table (or a fit on nothing) would not say."""
    scenarios, errors = _read(paths)
    if not scenarios:
        named = ", ".join(paths) if paths else str(_example_path())
        holds = "the files hold" if paths and len(paths) > 1 else "the file holds"
        raise CliError(f"no scenario line to {verb} in {named} ({holds} no valid line"
                       + (f"; {len(errors)} bad line(s) reported above)" if errors else ")"))
    return scenarios, errors


class CliError(Exception):
    """A problem with what the command was given, printed as `inferplan: error: ...` (exit 2)."""


def _factors(path: str | None):  # -> FactorSet | None
    if not path:
        return None
    from inferplan.planner.model.factors import parse_factors

    try:
        factors = parse_factors(json.loads(Path(path).read_text(encoding="utf-8")))
    except json.JSONDecodeError as exc:
        raise CliError(f"factors file {path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
                       ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CliError(f"factors file {path}: {exc}") from None
    unknown = factors.unknown_lines()
    if unknown:
        print(f"inferplan: warning: factors file {path}: no engine is predicted with the line(s) "
              f"{', '.join(unknown)}, whose factors are not used (a line is an engine's name, its older release "
              "line's or either with -rocm: docs/engines.md#factor-lines-factor_key)", file=sys.stderr)
    return factors


def _cmd_predict(args: argparse.Namespace) -> int:
    from inferplan.planner.calibration.predict import predict_scenarios

    scenarios, _ = _read_some(args.scenarios, "predict")
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
        elif p.measured == 0 and p.predicted != 0:  # as `accuracy` skips it: no relative error
            print(f"{p.metric:18s} {p.measured:11.4g} {p.predicted:11.4g} {'-':>7s}  {p.id}  "
                  "[measured 0: no relative error]")
        else:
            err = (p.predicted - p.measured) / p.measured if p.measured else 0.0
            print(f"{p.metric:18s} {p.measured:11.4g} {p.predicted:11.4g} {err:+7.1%}  {p.id}")
    return 0


def _cmd_accuracy(args: argparse.Namespace) -> int:
    from inferplan.planner.calibration.accuracy import format_report, score
    from inferplan.planner.calibration.predict import predict_scenarios

    scenarios, errors = _read_some(args.scenarios, "score")
    from inferplan.planner.model.factors import load_factors

    factors = _factors(args.factors) or load_factors()
    report = score(scenarios, predict_scenarios(scenarios, factors), factors)
    if args.json:
        data = report.to_json()
        data["badLines"] = len(errors)
        print(json.dumps(data, indent=2))
    else:
        print(format_report(report))
        if errors:
            print(f"\n{len(errors)} bad line(s) skipped (see stderr)")
    return 0


def _not_a_file_to_write(target: Path) -> str | None:
    """Why `target` cannot be written as a file (a folder, or in a folder that is not there), or None: checked
    before the work that makes what is written (a fit, a report's plan and simulation), not after it."""
    if target.is_dir():
        return "is a directory"
    if not target.parent.is_dir():
        return (f"{target.parent} is not a folder" if target.parent.exists()
                else f"its folder {target.parent} does not exist")
    return None


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """The fit with its progress on stderr; Ctrl-C ends it with exit status 130 and `--write`'s file as it was."""
    from inferplan.progress import ProgressLine, write_atomically

    written = False
    if args.write:  # before the fit, which takes minutes on the published files
        target = Path(args.write)
        why = _not_a_file_to_write(target)
        if why:
            print(f"inferplan: error: --write {args.write}: {why}", file=sys.stderr)
            return 2
        if any(Path(p).resolve() == target.resolve() for p in args.scenarios):
            print(f"inferplan: error: --write {args.write}: is a --scenarios file; the factors would replace its "
                  "measurements", file=sys.stderr)
            return 2
    try:
        from inferplan.planner.calibration.calibrate import (
            CalibrationProgress,
            calibrate,
            format_calibration,
            training_rows,
        )

        scenarios, _ = _read_some(args.scenarios, "fit")  # an id an earlier file gave is a bad line
        if not training_rows(scenarios):
            print(f"inferplan: error: no scenario line to fit: none of the {len(scenarios)} valid line(s) is one a "
                  "fit uses (each is suspect, lacks a GPU or an engine, has no positive value, or is of an "
                  "architecture the model does not represent: docs/calibration.md, Procedure)", file=sys.stderr)
            return 2
        with ProgressLine(sys.stderr) as bar:
            def show(step: CalibrationProgress) -> None:
                bar.update(step.done, step.total,
                           f"sweep {step.sweep}/{step.sweeps} term {step.term}/{step.terms}  loss {step.loss:.2f}")

            result = calibrate(scenarios, _factors(args.factors), progress=show)
        print(format_calibration(result))
        if args.write:
            write_atomically(args.write, json.dumps(result.factors.to_json(), indent=2) + "\n")
            written = True
            print(f"wrote {args.write}")
    except KeyboardInterrupt:
        kept = f"; {args.write} left as it was" if args.write and not written else ""
        print(f"inferplan calibrate: interrupted{kept}", file=sys.stderr)
        return 130
    return 0


def _example_plan() -> Path:
    from importlib import resources

    return Path(str(resources.files("inferplan.planner").joinpath("data/example-plan.yaml")))


def _load_plan(file: str | None):  # -> PlanRequest | None
    """The plan in `file` (default: the bundled example) resolved; None after printing every problem."""
    read = _read_manifest(file)
    return None if read is None else read[1]


def _cmd_plan(args: argparse.Namespace) -> int:
    with _importing():
        from inferplan.planner.simulation.verification import planned

    request = _load_plan(args.file)
    if request is None:
        return 2
    result = planned(request, _factors(args.factors), verify_default=args.verify)
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
        from inferplan.planner.catalog.gpus import load_gpu_catalog
        from inferplan.tables import format_gpus

        gpus = list(load_gpu_catalog())
        if args.output == "json":
            import dataclasses

            print(json.dumps([dataclasses.asdict(g) | {"productLabelKey": g.product_label_key} for g in gpus],
                             indent=2))
        else:
            print(format_gpus(gpus))
        return 0
    from inferplan.planner.catalog.model_configs import load_model_catalog
    from inferplan.tables import format_models

    catalog = load_model_catalog()
    models = list(catalog)
    if args.output == "json":
        import dataclasses

        print(json.dumps([dataclasses.asdict(m) | {"paramCount": m.param_count(),
                                                   "activeParamCount": m.active_param_count(),
                                                   "derivatives": [a for a in m.aliases if catalog.is_derivative(a)]}
                          for m in models], indent=2))
    else:
        print(format_models(models))
    return 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    from inferplan.planner.catalog.engine_args import ROUTER_REPLICAS
    from inferplan.planner.results import replica_shape
    from inferplan.planner.simulation.simulate import read_trace
    from inferplan.planner.simulation.verification import (
        AGGREGATED_ROUTER,
        compare,
        planned,
        scaled_words,
        served_max_len,
        simulate_candidate,
        simulated_rate,
        simulated_replicas,
    )

    request = _load_plan(args.file)
    if request is None:
        return 2
    try:
        trace = read_trace(args.trace) if args.trace else None
    except (OSError, ValueError) as exc:
        print(f"inferplan: error: {exc}", file=sys.stderr)
        return 2
    if trace is not None and not len(trace):
        print(f"inferplan: error: {args.trace}: the trace holds no requests", file=sys.stderr)
        return 2
    if trace is not None and (args.requests is not None or args.seed is not None):
        print(f"inferplan: --requests and --seed shape a generated workload: the trace's {len(trace)} requests are "
              "replayed as they are", file=sys.stderr)
    if trace is not None:
        # The planned column is the plan's workload: say how the trace's arrivals compare (seconds read as
        # milliseconds show here as a rate 1000x off).
        span = float(trace.arrival_s[-1] - trace.arrival_s[0])
        pace = (f"at {(len(trace) - 1) / span:.4g} requests/s over {span:.4g} s" if span > 0
                else "all at one instant")
        count = f"{len(trace)} requests arrive" if len(trace) > 1 else "1 request arrives"
        print(f"inferplan: the trace's {count} {pace}; the planned column is the plan's workload "
              f"at {request.rate_rps:g} requests/s", file=sys.stderr)
    requests = 20_000 if args.requests is None else args.requests
    seed = 0 if args.seed is None else args.seed
    factors = _factors(args.factors)
    # the recommendation `inferplan plan` prints with the same option
    candidate = planned(request, factors, verify_default=args.verify).recommendation
    if candidate is None:
        print("inferplan: the plan has no feasible deployment to simulate (see inferplan plan)", file=sys.stderr)
        return 1
    if candidate.roles and args.router is not None:
        print(f"inferplan: the prefill and decode pools are simulated as the rendered sglang-router spreads them "
              f"({ROUTER_REPLICAS} routers behind a Service, each round robin), not {args.router}: --router applies "
              "to aggregated replicas", file=sys.stderr)
    if trace is not None:
        max_len = served_max_len(request, candidate, factors)
        over = int(((trace.prompt_tokens + trace.output_tokens) > max_len).sum())
        if over:
            print(f"inferplan: {over} of the trace's {len(trace)} requests exceed the deployment's max_model_len "
                  f"{max_len}: the engine would reject them; the simulator serves them shortened to fit",
                  file=sys.stderr)
    result = simulate_candidate(request, candidate, requests=requests, seed=seed,
                                router=args.router or AGGREGATED_ROUTER, workload=trace, factors=factors)
    rows = compare(candidate, result)
    # What the plan predicted: the analytic model, or its own shorter simulation for a verified plan.
    planned_by = candidate.provenance.get("predicted", "analytic")
    pools = candidate.pools()
    shape = pools or replica_shape(candidate.replicas, candidate.gpus_per_replica, candidate.gpu_type)
    summary = {"deployment": f"{shape}"
                             f", {'decode ' if pools else ''}max batch {candidate.max_batch}, {candidate.precision}",
               "plannedBy": "simulated" if planned_by == "simulated" else "analytic",
               "requests": len(result.ttft_s), "outputTokensPerSecond": round(result.output_tokens_per_s, 1),
               "preemptions": result.preemptions, "source": "trace" if trace else f"generated (seed {seed})"}
    # Above MAX_SIMULATED_REPLICAS a generated workload is served on fewer replicas at the plan's rate per replica:
    # its output rate is theirs, not the deployment's, so say so (a trace is served on all of them).
    scaled = "" if trace else scaled_words(request, candidate)
    if not trace:
        summary |= {"simulatedReplicas": simulated_replicas(candidate),
                    "requestsPerSecond": round(simulated_rate(request, candidate), 4)}
    if args.output == "json":
        print(json.dumps({**summary, "percentiles": [
            {"metric": r.metric, "quantile": r.quantile, "analyticMs": round(r.analytic_ms, 3),
             "simulatedMs": round(r.simulated_ms, 3)} for r in rows]}, indent=2))
        return 0
    print(f"{summary['deployment']}: {summary['requests']} requests ({summary['source']}), "
          f"{summary['outputTokensPerSecond']:g} output tokens/s, {summary['preemptions']} preemptions"
          + (f"; simulated on {scaled}" if scaled else ""))
    planned_label = "planned (sim)" if summary["plannedBy"] == "simulated" else "analytic"
    print(f"{'metric':8s} {'quantile':>8s} {planned_label:>13s} {'simulated':>11s} {'ratio':>8s}")
    for r in rows:
        print(f"{r.metric:8s} {r.quantile:>8s} {r.analytic_ms:11.1f}ms {r.simulated_ms:9.1f}ms {r.ratio:8.2f}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    """Plan (as `inferplan plan`), simulate the recommendation (as `inferplan simulate`) and write the HTML report."""
    from inferplan.deploy.reviewed import StatusRefused, is_read_back, plan_name, refuse_stale
    from inferplan.planner.simulation.verification import planned, simulate_candidate
    from inferplan.progress import write_atomically
    from inferplan.report import render_report

    if args.output is not None and not args.output.strip():  # `-o "$UNSET"` wrote to standard output unasked
        print("inferplan: error: -o names no file (leave it out to write to standard output)", file=sys.stderr)
        return 2
    why = _not_a_file_to_write(Path(args.output)) if args.output not in (None, "-") else None
    if why:
        print(f"inferplan: error: -o {args.output}: {why}", file=sys.stderr)
        return 2
    read = _read_manifest(args.file)
    if read is None:
        return 2
    raw, request = read
    try:
        refuse_stale(raw)
    except StatusRefused as exc:
        if not args.allow_stale_status:
            return _refused(exc)
        print("inferplan: warning: the status answers an earlier generation of the spec (--allow-stale-status)",
              file=sys.stderr)
    try:
        result = _status_result(raw)
    except ValueError as exc:
        print(f"inferplan: error: {exc}", file=sys.stderr)
        return 2
    if result is not None:
        print("inferplan: reporting the answer in the manifest's status (not planning again)", file=sys.stderr)
    elif is_read_back(raw):
        # Planning it here would answer another question (the whole GPU catalog, not the cluster's GPUs).
        print(f"inferplan: error: {plan_name(raw)} was read back from the cluster and its status holds no answer yet; "
              "wait for the operator's status, or report the plan file", file=sys.stderr)
        return 2
    else:
        result = planned(request, _factors(args.factors), verify_default=args.verify)
    simulation = None
    if result.recommendation is not None:
        simulation = simulate_candidate(request, result.recommendation, requests=args.requests, seed=args.seed,
                                        factors=_factors(args.factors))
    source = "standard input" if args.file == "-" else Path(args.file).name if args.file else "bundled example plan"
    title = args.title or f"inferplan report: {source}"
    page = render_report(request, result, simulation, title=title)
    if args.output in (None, "-"):
        sys.stdout.write(page)
        return 0
    target = Path(args.output)
    try:
        if target.exists() and not target.is_file():  # a device or pipe (/dev/stdout): written as it is
            target.write_text(page, encoding="ascii")
        else:  # whole or not at all: a full disk leaves the last report, not half of this one
            write_atomically(target, page, encoding="ascii")
    except OSError as exc:
        print(f"inferplan: error: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


def _stdin_given() -> bool:
    """Whether standard input is a pipe or a file (something given to read), not a terminal or /dev/null. It is read
    only as `-`: a pipe a caller leaves open would hang a command that read it unasked."""
    import stat

    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (AttributeError, OSError, ValueError):  # no stdin, or one without a file (pytest's capture)
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _read_manifest(file: str | None, stdin_read: bool = False):  # -> (raw mapping, PlanRequest) | None
    """The plan file (`-`: standard input, YAML or JSON; none: the bundled example) as read, and its spec resolved;
    None after printing every problem, each `FILE: field: message` (the file's own problems `FILE: message`).
    `stdin_read`: standard input is another input's (`diff --deployment -`), not a plan given unread."""
    from inferplan.planner.request import resolve_plan
    from inferplan.planner.spec_parsing import PlanError, decode_plan, parse_plan, read_plan_document

    if file is None and not stdin_read and _stdin_given():
        print("inferplan: warning: standard input is not read without `-` (`inferplan COMMAND -` reads the plan "
              "from it): the bundled example plan is planned", file=sys.stderr)

    path = Path(file) if file and file != "-" else _example_plan()
    source = "<stdin>" if file == "-" else str(path)
    try:
        if file == "-":
            raw = decode_plan(sys.stdin.read(), source, as_json=None)
            return raw, resolve_plan(parse_plan(raw), Path.cwd())
        raw = read_plan_document(path)
        return raw, resolve_plan(parse_plan(raw), path.parent)
    except PlanError as exc:
        for field, message in exc.problems:  # a problem of the whole file names the file as its field
            print(f"{source}: {field}: {message}" if field and field != source else f"{source}: {message}",
                  file=sys.stderr)
    return None


def _first_error(exc) -> str:  # exc: pydantic.ValidationError
    """The first problem of a validation error, as 'message at field.path'."""
    first = exc.errors()[0]
    return f"{first['msg']} at {'.'.join(str(p) for p in first['loc'])}"


def _status_recommendation(raw: dict):  # -> Candidate | None
    """status.recommendation of a manifest read back from the cluster, as the Candidate it holds; None when there is
    none. Raises ValueError."""
    from inferplan.deploy.reviewed import status_candidate

    return status_candidate(raw)


def _status_result(raw: dict):  # -> PlanResult | None
    """The answer in the status of a manifest read back from the cluster (recommendation, alternatives, infeasible
    candidates, warnings, assumptions, suggestions) as a PlanResult; None when the status holds no answer.
    Raises ValueError."""
    from pydantic import ValidationError

    from inferplan.planner.results import PlanResult

    status = raw.get("status") if isinstance(raw, dict) else None
    if not isinstance(status, dict) or not ("recommendation" in status or status.get("infeasible")):
        return None
    try:
        return PlanResult.model_validate({
            "recommendation": _status_recommendation(raw),
            **{key: status.get(key) or [] for key in ("alternatives", "infeasible", "warnings", "assumptions",
                                                      "suggestions")}})
    except ValidationError as exc:
        raise ValueError(f"the status holds no plan answer: {_first_error(exc)}") from None


def _render_candidate(args: argparse.Namespace, raw, request):  # -> Candidate | None
    """The recommendation to render (or compare): for a plan read back from the cluster, the one in its reviewed
    status, never a new plan (inferplan/deploy/reviewed.py); for a plan file, a new plan, as `inferplan plan` makes
    it. Which one is said on stderr. Raises StatusRefused for a read-back plan whose status has no recommendation or
    answers an earlier generation of its spec (unless --allow-stale-status); None (reasons printed) for a plan file
    without a feasible deployment."""
    from inferplan.deploy.reviewed import reviewed_recommendation
    from inferplan.planner.simulation.verification import planned

    reviewed = reviewed_recommendation(raw, allow_stale=args.allow_stale_status)
    if reviewed is not None:
        print(f"inferplan: rendering the recommendation in {reviewed.describe()}, not planning again",
              file=sys.stderr)
        if reviewed.stale:
            print(f"inferplan: warning: the status answers generation {reviewed.observed_generation} of the spec, "
                  f"which is at generation {reviewed.generation} now (--allow-stale-status)", file=sys.stderr)
        return reviewed.candidate
    source = "the bundled example plan" if not args.file else "standard input" if args.file == "-" else args.file
    print(f"inferplan: planning {source} (a plan file, not read back from a cluster)", file=sys.stderr)
    result = planned(request, _factors(args.factors), verify_default=args.verify)
    if result.recommendation is None:
        print("inferplan: the plan has no feasible deployment to render", file=sys.stderr)
        for item in result.infeasible[:5]:
            layout = f" ({item.layout()})" if item.layout() else ""
            print(f"  {item.gpu_type} x{item.gpus_per_replica} {item.precision}{layout}: {item.gate}: {item.reason}",
                  file=sys.stderr)
        for line in result.suggestions:
            print(f"  suggestion: {line}", file=sys.stderr)
    return result.recommendation


def _refused(exc) -> int:  # exc: reviewed.StatusRefused
    """Exit 2 after saying why a read-back plan's status is not rendered, with the status's suggestions."""
    print(f"inferplan: error: {_ascii(str(exc))}", file=sys.stderr)
    for line in exc.suggestions:
        print(f"  suggestion: {_ascii(line)}", file=sys.stderr)
    return 2


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1123 label, as Kubernetes requires


_REPOSITORY = re.compile(r"[\w.-]+/[\w.-]+")


def _unservable(checkpoint: str) -> str | None:
    """Why the engine could not load `checkpoint` (what the plan's model names), or None for a repository id."""
    if _REPOSITORY.fullmatch(checkpoint) and not checkpoint.endswith(".json"):  # not a configFile's own path
        return None
    return (f"the plan's model names no repository for the engine to load ({checkpoint!r}): plan it by model.name, "
            "or give the repository in its config (\"_name_or_path\" of a configFile, \"repoId\" of an inline "
            "architecture)")


def _render_target_problem(namespace: object, image: str | None) -> str | None:
    """What the API server or the kubelet would refuse in the namespace or the image the objects get, or None."""
    from inferplan.planner.spec import IMAGE_REFERENCE

    if namespace is not None and (not isinstance(namespace, str) or not _NAMESPACE.match(namespace)):
        return (f"namespace {namespace!r} is not a DNS-1123 label (lowercase letters, digits and '-', starting and "
                "ending with a letter or digit, at most 63 characters)")
    if image is not None and (len(image) > 256 or not re.match(IMAGE_REFERENCE, image)):
        return f"image {image!r} is not a container image reference (e.g. vllm/vllm-openai:v0.11.0)"
    return None


def _autoscaler_option_problem(args: argparse.Namespace) -> str | None:
    """An autoscaler option without the autoscaler it sets (it would be dropped without a word), or a Prometheus URL
    KEDA cannot query; None when the options agree."""
    if args.scale_on and not args.autoscaling:
        return f"--scale-on {args.scale_on} sets the autoscaler's target: add --autoscaling hpa or keda"
    if args.prometheus_url is not None and args.autoscaling != "keda":
        return ("--prometheus-url is the Prometheus the KEDA ScaledObject queries: add --autoscaling keda (an HPA "
                "reads the Prometheus adapter's metrics)")
    if args.prometheus_url is not None and not re.fullmatch(r"https?://[^\s/?#]+(/\S*)?", args.prometheus_url):
        from inferplan.deploy.diff import redacted

        return (f"--prometheus-url {redacted(args.prometheus_url)!r} is not an http(s) URL "
                "(e.g. http://prometheus.monitoring.svc:9090)")
    return None


def _cmd_render(args: argparse.Namespace) -> int:
    """Render the recommendation as Kubernetes objects (and an autoscaler), as multi-document YAML or a v1 List."""
    from urllib.parse import urlsplit

    from inferplan.deploy.autoscaling import PROMETHEUS_URL, autoscaling, hand_replicas_to_autoscaler, replica_bounds
    from inferplan.deploy.manifests import dns_label, manifests_digest, render, to_yaml
    from inferplan.deploy.reviewed import StatusRefused, manifests_difference

    problem = _autoscaler_option_problem(args)
    if problem:
        print(f"inferplan: error: {problem}", file=sys.stderr)
        return 2
    if args.file is None and _stdin_given():
        # `kubectl get icp NAME -o yaml | inferplan render | kubectl apply -f -` would apply the bundled example.
        print("inferplan: error: a plan is piped in but render reads standard input only as `-`: write `inferplan "
              "render -` (or give the plan file); with neither it renders the bundled example plan", file=sys.stderr)
        return 2
    read = _read_manifest(args.file)
    if read is None:
        return 2
    raw, request = read
    try:
        candidate = _render_candidate(args, raw, request)
    except StatusRefused as exc:
        return _refused(exc)
    except ValueError as exc:
        print(f"inferplan: error: {exc}", file=sys.stderr)
        return 2
    if candidate is None:
        return 1
    meta = (raw.get("metadata") if isinstance(raw, dict) else None) or {}
    name = args.name or meta.get("name") or dns_label(request.served_model)
    namespace = args.namespace or meta.get("namespace")
    problem = _render_target_problem(namespace, args.image) or _unservable(candidate.checkpoint or
                                                                           request.served_model)
    if problem:
        print(f"inferplan: error: {problem}", file=sys.stderr)
        return 2
    try:
        objects = render(request, candidate, name=name, namespace=namespace, target=args.target, image=args.image)
        if args.autoscaling:
            objects = hand_replicas_to_autoscaler(objects, replica_bounds(request, candidate))
            objects += autoscaling(request, candidate, name=name, namespace=namespace, kind=args.autoscaling,
                                   target=args.target, metric=args.scale_on or "requests",
                                   prometheus_url=args.prometheus_url or PROMETHEUS_URL)
    except ValueError as exc:
        print(f"inferplan: error: {exc}", file=sys.stderr)
        return 2
    if args.autoscaling == "keda" and not args.prometheus_url:
        print(f"inferplan: the ScaledObject's serverAddress is a placeholder ({PROMETHEUS_URL}): set it with "
              "--prometheus-url", file=sys.stderr)
    if args.autoscaling == "keda" and args.prometheus_url and "@" in urlsplit(args.prometheus_url).netloc:
        print("inferplan: warning: --prometheus-url holds credentials (user:password@), which the ScaledObject's "
              "serverAddress carries to whoever reads it (and to Git with it): give them to KEDA with a "
              "TriggerAuthentication that reads a Secret (authModes: basic) and a URL without them", file=sys.stderr)
    if args.autoscaling == "keda" and not namespace:
        print("inferplan: the ScaledObject's query matches the pods by name in every namespace (no namespace "
              "given): set --namespace, or pods of the same name elsewhere count too", file=sys.stderr)
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(to_yaml(objects), end="")
    digest = manifests_digest(objects)
    if (args.target == "deployment" and not args.autoscaling and args.image is None
            and name == meta.get("name") and namespace == meta.get("namespace")):  # the rendering the status lists
        difference = manifests_difference(raw, objects, digest)
        if difference:
            print(f"inferplan: warning: not the objects the status lists: {difference}. The status was written by an "
                  "operator of another inferplan release, which rendered otherwise: review the objects printed here; "
                  "the operator lists its own when it plans the plan again", file=sys.stderr)
    print(f"inferplan: {len(objects)} objects, {digest}", file=sys.stderr)
    return 0


def _read_deployment(file: str):  # -> dict | None
    """The one Deployment in `file` (`-`: standard input): a manifest, a multi-document file or a v1 List, as
    `kubectl get deployment NAME -o yaml` prints it; None after saying what is wrong."""
    import yaml

    where = "<stdin>" if file == "-" else file
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
        documents = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except (OSError, UnicodeDecodeError) as exc:
        print(f"inferplan: error: cannot read {where}: {exc}", file=sys.stderr)
        return None
    except yaml.YAMLError as exc:
        print(f"{where}: malformed YAML: {exc}", file=sys.stderr)
        return None
    items = [i for d in documents for i in (d.get("items") or [] if d.get("kind") == "List" else [d])]
    found = [i for i in items if isinstance(i, dict) and i.get("kind") == "Deployment"]
    if len(found) != 1:
        names = ", ".join(str((d.get("metadata") or {}).get("name")) for d in found) or "none"
        print(f"inferplan: error: {where} must hold exactly one Deployment (found: {names})", file=sys.stderr)
        return None
    return found[0]


def _cmd_diff(args: argparse.Namespace) -> int:
    """What applying the recommendation changes in a running Deployment: one line per difference and a strategic
    merge patch. Exit 0 when in sync, 1 when it differs, 2 on trouble (as diff does)."""
    from inferplan.deploy.diff import asks_for_a_gpu, deployment_change, desired_deployment, pool_role
    from inferplan.deploy.manifests import dns_label
    from inferplan.deploy.reviewed import StatusRefused
    from inferplan.planner.results import replica_shape

    if args.file == "-" and args.deployment == "-":
        print("inferplan: error: the plan and the Deployment cannot both come from standard input", file=sys.stderr)
        return 2
    problem = _render_target_problem(None, args.image)  # the image the patch would set
    if problem:
        print(f"inferplan: error: {problem}", file=sys.stderr)
        return 2
    current = _read_deployment(args.deployment)
    if current is None:
        return 2
    read = _read_manifest(args.file, stdin_read=args.deployment == "-")
    if read is None:
        return 2
    raw, request = read
    try:
        candidate = _render_candidate(args, raw, request)
        if candidate is None:
            print("inferplan: error: the plan has no feasible deployment to compare with", file=sys.stderr)
            return 2
        unservable = _unservable(candidate.checkpoint or request.served_model)
        if unservable:
            print(f"inferplan: error: {unservable}", file=sys.stderr)
            return 2
        meta = (raw.get("metadata") if isinstance(raw, dict) else None) or {}
        plan_name = meta.get("name") or dns_label(request.served_model)
        desired = desired_deployment(request, candidate, current, name=plan_name, image=args.image)
        role = pool_role(current) if candidate.roles else None
        change = deployment_change(current, desired)
        if not asks_for_a_gpu(current):
            print(f"inferplan: no container of {args.deployment} asks for a GPU: the diff reads the first "
                  "container whose command or image names an engine, else its first, as the engine's; check that this "
                  "is the engine's Deployment", file=sys.stderr)
    except StatusRefused as exc:
        return _refused(exc)
    except ValueError as exc:
        print(f"inferplan: error: {exc}", file=sys.stderr)
        return 2
    name = (current.get("metadata") or {}).get("name", "DEPLOYMENT")
    if args.output == "json":
        print(json.dumps({"deployment": name, "inSync": change.in_sync, "summary": list(change.summary),
                          "patch": change.patch}, indent=2, sort_keys=True))
    elif args.output == "patch":
        print(change.patch_json())
    elif change.in_sync:
        print(f"Deployment {name} already runs the recommendation")
    else:
        pool = next((r for r in candidate.roles if r.role == role), None)
        shown = pool or candidate
        shape = replica_shape(shown.replicas, shown.gpus_per_replica, shown.gpu_type)
        print(f"Deployment {name} -> {shape} ({candidate.precision}, max batch {shown.max_batch}"
              f"{f', the {role} pool' if pool else ''}):")
        print("\n".join(f"  {line}" for line in change.summary))
        print(f"patch (kubectl patch deployment {name} --type strategic --patch-file PATCH.json):")
        print(change.patch_json())
    return 0 if change.in_sync else 1


def _cmd_operator(args: argparse.Namespace) -> int:
    from inferplan.operator.main import run

    return run()


def _ascii(text: str) -> str:
    return text.encode("ascii", "backslashreplace").decode("ascii")


def _cmd_cleanup_kopf_state(args: argparse.Namespace) -> int:
    """Remove kopf's finalizer and annotations that earlier builds left on plans (docs/operator.md, "Upgrading from
    builds that used kopf's finalizer"). Exit 0 when no plan failed, 1 when one did or the plans could not be
    listed, 2 without a Kubernetes configuration."""
    from inferplan.operator import cleanup, kube

    try:
        source = kube.load_configuration()
    except kube.NoClusterConfiguration as exc:
        print(f"inferplan cleanup-kopf-state: error: {_ascii(str(exc))}", file=sys.stderr)
        return 2
    where = ", ".join(f"namespace {ns}" for ns in args.namespace) if args.namespace else "all namespaces"
    print(f"inferplan cleanup-kopf-state: {where} ({source} configuration)"
          f"{': dry run, nothing is changed' if args.dry_run else ''}", flush=True)

    def report(outcome: cleanup.PlanOutcome) -> None:
        if outcome.outcome != cleanup.CLEAN or args.verbose:
            print(_ascii(outcome.line()), flush=True)

    summary = cleanup.clean_plans(args.namespace or (), dry_run=args.dry_run, report=report)
    for problem in summary.unlisted:
        print(f"FAILED {_ascii(problem)}", flush=True)
    print(summary.text())
    return 0 if summary.ok else 1


def _cmd_crd(args: argparse.Namespace) -> int:
    from inferplan.operator.crd import crd_yaml

    print(crd_yaml(), end="")
    return 0


def _at_least(low: int):  # -> Callable[[str], int]
    """An argparse type: a whole number no smaller than `low`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value
    return parse


class _Parser(argparse.ArgumentParser):
    """A parser whose unknown arguments are its own usage error, naming the closest option it has: argparse leaves a
    command's unknown arguments to the top-level parser, whose usage and message name neither the command nor its
    options."""

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}{self._closest(extras)}")
        return parsed, extras

    def _closest(self, extras: Sequence[str]) -> str:
        """' (did you mean --option?)' for the first unknown option with a close one, else ''."""
        import difflib

        known = [option for action in self._actions for option in action.option_strings]
        for extra in extras:
            if extra.startswith("-"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], known, n=1, cutoff=0.6)
                if close:
                    return f" (did you mean {close[0]}?)"
        return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="inferplan",
        description="Capacity planning for LLM serving: recommend GPU type, replicas, tensor parallelism and "
        "batch for a workload and its latency SLOs; predict and score the serving model on measurements.",
    )
    parser.add_argument("--version", action="store_true",
                        help="print the planner version (as status.plannerVersion records it) and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    pl = sub.add_parser("plan", help="recommend a deployment for a plan (YAML or JSON; a bare spec or a manifest)")
    pl.add_argument("file", nargs="?", metavar="FILE",
                    help="plan file, or - for standard input (default: the bundled example plan)")
    pl.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table", help="output format")
    pl.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    pl.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                    help="simulate the leading candidates and recommend the cheapest that meets every SLO there "
                    "(default on; --no-verify prints the analytic answer, except for arrival CV^2 >= 4; a plan's "
                    "verify field wins)")
    pl.set_defaults(func=_cmd_plan)

    sim = sub.add_parser("simulate", help="simulate a plan's recommended deployment; simulated vs analytic latency")
    sim.add_argument("file", nargs="?", metavar="FILE",
                     help="plan file, or - for standard input (default: the bundled example plan)")
    sim.add_argument("--requests", type=_at_least(1),
                     help="requests to simulate (default 20000; a --trace replays its own)")
    sim.add_argument("--seed", type=_at_least(0), help="random seed of the generated workload (default 0)")
    sim.add_argument("--trace", metavar="TRACE.jsonl",
                     help='replay a trace instead: JSON lines {"t": seconds, "prompt": tokens, "output": tokens}')
    sim.add_argument("--router", choices=SIMULATED_ROUTERS,
                     help="how requests are spread over aggregated replicas (default random, as the rendered "
                          "Service's kube-proxy spreads them)")
    sim.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    sim.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    sim.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                     help="simulate the recommendation inferplan plan prints with the same option (default on)")
    sim.set_defaults(func=_cmd_simulate)

    rep = sub.add_parser("report", help="plan, simulate the recommendation and write a self-contained HTML report")
    rep.add_argument("file", nargs="?", metavar="PLAN",
                     help="plan file, or - for standard input; a manifest read back with kubectl get -o yaml reports "
                     "the answer in its status (default: the bundled example plan)")
    rep.add_argument("-o", "--output", metavar="REPORT.html",
                     help="file to write, or - for standard output (default: standard output)")
    rep.add_argument("--title", help="the page's title (default: from the plan file's name)")
    rep.add_argument("--requests", type=_at_least(1), default=20_000,
                     help="requests to simulate for the latency distributions (default 20000)")
    rep.add_argument("--seed", type=_at_least(0), default=0, help="random seed of the simulated workload (default 0)")
    rep.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    rep.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                     help="report the recommendation inferplan plan prints with the same option (default on)")
    rep.add_argument("--allow-stale-status", action="store_true",
                     help="report a read-back plan whose status answers an earlier generation of its spec "
                          "(refused without it)")
    rep.set_defaults(func=_cmd_report)

    ren = sub.add_parser("render", help="the recommendation as Kubernetes manifests (and autoscaling), multi-document "
                         "YAML for kubectl apply (docs/deploy.md)")
    ren.add_argument("file", nargs="?", metavar="PLAN",
                     help="plan file, or - for standard input; a plan read back with kubectl get -o yaml renders "
                     "its reviewed status.recommendation as it is, or is refused (exit 2) when the status has none or "
                     "answers an earlier generation; never planned again (default: the bundled example plan)")
    ren.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml",
                     help="yaml (documents separated by ---) or json (a v1 List)")
    ren.add_argument("--target", choices=("deployment", "kserve"), default="deployment",
                     help="deployment: Deployment (LeaderWorkerSet when a replica spans nodes) + Service; kserve: a "
                     "KServe InferenceService (default deployment)")
    ren.add_argument("--autoscaling", choices=("hpa", "keda"),
                     help="add an autoscaler between the plan's replica bounds at the per-replica target: an HPA on a "
                     "Prometheus-adapter metric, or a KEDA ScaledObject")
    ren.add_argument("--scale-on", choices=("requests", "concurrency"),
                     help="the autoscaler's per-replica target: requests/s at the SLO, or running sequences "
                     "(default requests)")
    ren.add_argument("--prometheus-url", metavar="URL", help="Prometheus the KEDA trigger queries")
    ren.add_argument("--name", help="name of the objects (default: the manifest's metadata.name, else the model's)")
    ren.add_argument("--namespace", help="namespace of the objects (default: the manifest's, else none)")
    ren.add_argument("--image", help="the engine's container image (default: spec.engine.image, else the engine's "
                     "published image)")
    ren.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    ren.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                     help="render the recommendation inferplan plan prints with the same option (default on)")
    ren.add_argument("--allow-stale-status", action="store_true",
                     help="render a read-back plan's status even when it answers an earlier generation of the spec "
                     "(status.observedGeneration behind metadata.generation); refused by default")
    ren.set_defaults(func=_cmd_render)

    dif = sub.add_parser("diff", help="what applying the recommendation changes in a running Deployment: lines and a "
                         "strategic merge patch; exit 0 in sync, 1 different, 2 trouble (docs/deploy.md)")
    dif.add_argument("file", nargs="?", metavar="PLAN",
                     help="plan file, or - for standard input; a plan read back with kubectl get -o yaml compares "
                     "its reviewed status.recommendation, as render does (default: the bundled example plan)")
    dif.add_argument("--deployment", required=True, metavar="FILE",
                     help="the running Deployment, e.g. from kubectl get deployment NAME -o yaml (- for standard "
                     "input)")
    dif.add_argument("-o", "--output", choices=("text", "json", "patch"), default="text",
                     help="text (lines and the patch), json, or patch (the patch alone, for kubectl patch)")
    dif.add_argument("--image", help="the engine's container image (default: spec.engine.image, else the engine's "
                     "published image)")
    dif.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    dif.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                     help="compare with the recommendation inferplan plan prints with the same option (default on)")
    dif.add_argument("--allow-stale-status", action="store_true",
                     help="compare with a read-back plan's status even when it answers an earlier generation of the "
                     "spec; refused by default")
    dif.set_defaults(func=_cmd_diff)

    op = sub.add_parser("operator", help="run the Kubernetes operator (settings: INFERPLAN_* variables, see docs)")
    op.set_defaults(func=_cmd_operator)

    cks = sub.add_parser(
        "cleanup-kopf-state",
        help="remove kopf's finalizer and annotations that earlier builds of the operator left on plans (once, "
        "after upgrading; the Helm chart runs it as a hook)",
        description="Remove what builds of the operator before its controller left on InferenceCapacityPlans: kopf's "
        "finalizer kopf.zalando.org/KopfFinalizerMarker (a deleted plan that carries it stays Terminating, and the "
        "operator's kopf retries in vain to remove it) and kopf's annotations (inferplan.io/last-handled-"
        "configuration, inferplan.io/kopf-managed, kopf's progress, anything under kopf.zalando.org/). Other "
        "finalizers and annotations are kept. Each patch is guarded by test operations: a plan changed meanwhile is "
        "read again. Running it again changes nothing. Uses the operator's Kubernetes configuration: in a pod its "
        "ServiceAccount, else the kubeconfig (KUBECONFIG or ~/.kube/config). Needs get, list and patch on "
        "inferencecapacityplans.inferplan.io. Exit code 0: no plan failed; 1: a plan failed or the plans could not "
        "be listed; 2: no Kubernetes configuration.")
    cks.add_argument("-n", "--namespace", action="append", metavar="NS",
                     help="only plans in this namespace (repeat for more; default: all namespaces)")
    cks.add_argument("--dry-run", action="store_true",
                     help="send every patch as a server-side dry run: permissions, guards and validation are "
                     "checked, nothing is stored")
    cks.add_argument("-v", "--verbose", action="store_true", help="also list the plans that are already clean")
    cks.set_defaults(func=_cmd_cleanup_kopf_state)

    crd = sub.add_parser("crd", help="print the InferenceCapacityPlan CustomResourceDefinition (YAML)")
    crd.set_defaults(func=_cmd_crd)

    cat = sub.add_parser("catalog", help="list the GPUs or models the planner knows")
    cat.add_argument("kind", choices=("gpus", "models"))
    cat.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    cat.set_defaults(func=_cmd_catalog)

    p = sub.add_parser("predict", help="predict every scenario of a scenario file (JSON lines)")
    p.add_argument("--scenarios", metavar="FILE.jsonl", nargs="+", action="extend",
                   help=f"scenario files, their rows pooled; the option may be repeated (default: the {EXAMPLE})")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    p.set_defaults(func=_cmd_predict)

    a = sub.add_parser("accuracy", help="score the predictions of a scenario file against its measurements")
    a.add_argument("--scenarios", metavar="FILE.jsonl", nargs="+", action="extend",
                   help="scenario files, their rows pooled and scored together; the option may be repeated "
                   f"(default: the {EXAMPLE})")
    a.add_argument("--json", action="store_true", help="print the scores as JSON")
    a.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    a.set_defaults(func=_cmd_accuracy)

    c = sub.add_parser("calibrate",
                       help="fit the engine terms and harness times on scenario files (docs/calibration.md)")
    c.add_argument("--scenarios", metavar="FILE.jsonl", required=True, nargs="+", action="extend",
                   help="scenario files to fit on (their rows pooled); the option may be repeated")
    c.add_argument("--write", metavar="FACTORS.json", help="write the fitted factors to this file")
    c.add_argument("--factors", metavar="FACTORS.json", help=FACTORS_HELP)
    c.set_defaults(func=_cmd_calibrate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from inferplan.version import planner_version

        print(planner_version())
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    for option, what in (("scenarios", "scenario file"), ("factors", "factors file"), ("file", "plan file"),
                         ("trace", "trace file")):
        given = getattr(args, option, None)
        for path in given if isinstance(given, list) else [given]:
            if path == "-" and option != "file":  # a plan file may be read from standard input, nothing else
                print(f"inferplan: error: a {what} cannot be read from standard input: give its path",
                      file=sys.stderr)
                return 2
            if path and path != "-" and not Path(path).is_file():
                why = "is a directory" if Path(path).is_dir() else "not found"
                print(f"inferplan: error: {what} {why}: {path}" if why == "not found" else
                      f"inferplan: error: {what} {path} {why}", file=sys.stderr)
                return 2
    try:
        return int(args.func(args))
    except CliError as exc:
        print(f"inferplan: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the status a shell gives a command ended by SIGINT (128 + 2), no traceback
        output = getattr(args, "output", None) if args.command == "report" else None
        kept = f"; {output} left as it was" if output and output != "-" else ""  # written whole or not at all
        print(f"inferplan {args.command}: interrupted{kept}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
