"""The checkpoint catalog read the other way round: which precision a repository holds, for a running Deployment
whose engine is given a repository and no precision flag (a pre-quantised checkpoint carries its method in its
own config, so `inferplan render` writes none: `--model nvidia/Llama-3.1-70B-Instruct-FP8` serves FP8 weights).

Built only on the public lookups of `checkpoints.py` (`known_precisions`) over every model of the catalog.
"""

from __future__ import annotations

from functools import cache

from inferplan.planner.catalog.checkpoints import Checkpoint, known_precisions
from inferplan.planner.catalog.model_configs import load_model_catalog


@cache
def _by_repo() -> dict[str, Checkpoint]:
    found: dict[str, Checkpoint] = {}
    for model in load_model_catalog():
        for rows in known_precisions(model.repo_id).values():
            for checkpoint in rows:
                found.setdefault(checkpoint.repo.lower(), checkpoint)
    return found


def checkpoint_of_repo(repo: str) -> Checkpoint | None:
    """The catalog's checkpoint published as the repository `repo` (a Hugging Face id as an engine is given it,
    case ignored): its precision, format and KV cache. None for a repository the catalog does not list."""
    return _by_repo().get(repo.strip().lower())
