"""Which recommendation `inferplan render` and `inferplan diff` turn into objects: the one in the reviewed status
of a plan read back from the cluster, never a new plan made in its place.

A plan read back (`kubectl get inferencecapacityplan NAME -o yaml`) carries what the operator answered for the
cluster's GPUs. Planning it again offline would answer another question (the whole GPU catalog, no inventory):
for a plan the cluster cannot serve it recommends GPUs the cluster does not have. So a read-back plan is rendered
from its status or refused (`StatusRefused`), and a plan file (no status, no server-set metadata) is planned as
`inferplan plan` plans it. Pure: plain mappings in, a candidate or an exception out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from inferplan.planner.results import Candidate

SERVER_SET_METADATA = ("uid", "resourceVersion", "creationTimestamp")
"""metadata only the API server sets: an object that has one was read back from a cluster."""

_MAX_QUOTED = 600  # characters of a condition message quoted in a refusal


class StatusRefused(Exception):
    """A plan read back from the cluster whose status cannot be rendered; the message says why and what to do, and
    `suggestions` are the status's own (the smallest changes that make the plan feasible), if it has any."""

    def __init__(self, message: str, suggestions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.suggestions = suggestions


@dataclass(frozen=True)
class Reviewed:
    """The recommendation in the status of a plan read back from the cluster."""

    plan: str  # namespace/name, as the status is about
    observed_generation: int | None  # the spec generation the status answers
    generation: int | None  # the spec's generation now
    candidate: Candidate

    @property
    def stale(self) -> bool:
        """Whether the spec changed since the status was written (the status answers an earlier generation)."""
        return (self.observed_generation is not None and self.generation is not None
                and self.observed_generation != self.generation)

    def describe(self) -> str:
        """"the reviewed status of serving/chat (observedGeneration 1)"."""
        seen = "no observedGeneration" if self.observed_generation is None else \
            f"observedGeneration {self.observed_generation}"
        return f"the reviewed status of {self.plan} ({seen})"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def is_read_back(raw: Any) -> bool:
    """Whether `raw` (a parsed manifest) was read back from a cluster: it has a `status`, or metadata that only the
    API server sets (a plan the operator has not answered yet has no status)."""
    if not isinstance(raw, Mapping):
        return False
    metadata = _mapping(raw.get("metadata"))
    return "status" in raw or any(metadata.get(key) for key in SERVER_SET_METADATA)


def plan_name(raw: Any) -> str:
    """"namespace/name" of a manifest ("name" without a namespace, "(unnamed)" without a name)."""
    metadata = _mapping(_mapping(raw).get("metadata"))
    name = str(metadata.get("name") or "(unnamed)")
    return f"{metadata['namespace']}/{name}" if metadata.get("namespace") else name


def status_candidate(raw: Any) -> Candidate | None:
    """status.recommendation of a manifest as the Candidate it holds (the status's own keys, such as its manifests
    reference, left out); None when there is none. Raises ValueError when it is not a recommendation."""
    recommendation = _mapping(_mapping(raw).get("status")).get("recommendation")
    if recommendation is None:
        return None
    if not isinstance(recommendation, Mapping):
        raise ValueError(f"status.recommendation is not a recommendation: a {type(recommendation).__name__}, not a "
                         "mapping")
    fields = {field.alias or name for name, field in Candidate.model_fields.items()}
    try:
        return Candidate.model_validate({k: v for k, v in recommendation.items() if k in fields})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"status.recommendation is not a recommendation: {first['msg']} at {where}") from None


def _quoted(text: Any) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= _MAX_QUOTED else text[: _MAX_QUOTED - 3] + "..."


def _why_no_recommendation(status: Mapping[str, Any]) -> str:
    """Why a status holds no recommendation, from its conditions."""
    conditions = {c.get("type"): c for c in status.get("conditions") or () if isinstance(c, Mapping)}
    ready, feasible = _mapping(conditions.get("Ready")), _mapping(conditions.get("Feasible"))
    if feasible.get("status") == "False":
        return (f"no deployment on the GPUs the operator planned with meets the plan (Feasible=False, "
                f"{feasible.get('reason')}: {_quoted(feasible.get('message'))})")
    if ready.get("status") == "False":
        return f"the spec could not be planned (Ready=False, {ready.get('reason')}: {_quoted(ready.get('message'))})"
    return "the operator has not answered it yet"


def refuse_stale(raw: Any) -> None:
    """Raise StatusRefused where the manifest `raw`, read back from the cluster, has a status that answers an
    earlier generation of its spec (`status.observedGeneration` behind `metadata.generation`): what was reviewed is
    not the answer to this spec. Nothing for a plan file or a current status."""
    if not is_read_back(raw):
        return
    metadata, status = _mapping(raw.get("metadata")), _mapping(raw.get("status"))
    reviewed_generation, generation = _int(status.get("observedGeneration")), _int(metadata.get("generation"))
    if reviewed_generation is not None and generation is not None and reviewed_generation != generation:
        raise StatusRefused(
            f"{plan_name(raw)}: the status answers generation {reviewed_generation} of the spec, which is at "
            f"generation {generation} now: it was not reviewed for this spec. Wait for the operator (kubectl wait "
            f"inferencecapacityplan/{metadata.get('name')} --for=jsonpath='{{.status.observedGeneration}}'="
            f"{generation}), read the plan again, or pass --allow-stale-status to use the earlier answer")


def reviewed_recommendation(raw: Any, *, allow_stale: bool = False) -> Reviewed | None:
    """The recommendation to render for the manifest `raw`: None for a plan file (not read back: plan it), else the
    one in its status.

    Raises StatusRefused for a plan read back whose status has no recommendation (infeasible on the cluster's GPUs,
    a spec the operator could not plan, or not answered yet), and, unless `allow_stale`, for one whose status
    answers an earlier generation of its spec (`status.observedGeneration` behind `metadata.generation`: what was
    reviewed is not the answer to this spec). Raises ValueError when status.recommendation is malformed."""
    if not is_read_back(raw):
        return None
    metadata, status = _mapping(raw.get("metadata")), _mapping(raw.get("status"))
    reviewed_generation, generation = _int(status.get("observedGeneration")), _int(metadata.get("generation"))
    plan = plan_name(raw)
    if not allow_stale:
        refuse_stale(raw)
    candidate = status_candidate(raw)
    if candidate is None:
        raise StatusRefused(
            f"{plan}: the status has no recommendation, so there is nothing to render: "
            f"{_why_no_recommendation(status)}. Not planning again over GPUs the cluster may not have "
            "(`inferplan plan` of the file plans its spec offline, over the whole GPU catalog)",
            tuple(str(line) for line in status.get("suggestions") or () if line)[:8])
    return Reviewed(plan, reviewed_generation, generation, candidate)


def manifests_difference(raw: Any, objects: Sequence[Mapping[str, Any]], digest: str) -> str | None:
    """How `objects` (with `digest`), rendered here from the status of the plan `raw` read back from the cluster,
    differ from what that status lists (`status.recommendation.manifests`: what the operator rendered of the same
    recommendation when it wrote the status), in words; None where the digests agree or the status lists nothing.
    They differ where the status was written by an operator of another release, which rendered otherwise."""
    if not is_read_back(raw):
        return None
    listed = _mapping(_mapping(_mapping(raw.get("status")).get("recommendation")).get("manifests"))
    if not listed.get("digest") or listed.get("digest") == digest:
        return None
    before = [str(name) for name in listed.get("objects") or ()]
    after = [f"{o.get('kind')}/{_mapping(o.get('metadata')).get('name')}" for o in objects]
    changes = [f"{name} added" for name in after if name not in before]
    changes += [f"{name} left out" for name in before if name not in after]
    return (f"the status lists {len(before)} objects ({', '.join(before) or 'none'}; {listed['digest']}), rendered "
            f"here {len(after)} ({digest}): {', '.join(changes) or 'the same objects, with other contents'}")
