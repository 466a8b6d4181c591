"""The composition root: which adapter serves which port, built with what it needs. The only
place that picks.

Effect adapters come from the built-in table below, overridden (or switched off, with an empty
path) by ``EPHYRA_EFFECT_ADAPTERS="type=dotted.path,…"``. An adapter class declares what it
needs as keyword parameters of its constructor, named after the fields of ``Dependencies``
(``data_dir``, ``git_credentials_file``); this module builds each one with exactly those, so
an adapter that needs the data directory, a runner or a credential gets it from here and never
reads settings itself. A parameter that names nothing known stops the worker at start with the
adapter's name.

An effect type with no adapter stays pending in the ledger until one is configured:
``manage.py ledger status`` and the worker's log at start name those types and count what waits.

Adapters are named by dotted path, not imported here, so the project package imports no app.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ephyra.core.effects import EffectType
from ephyra.core.ports import EffectAdapter, Runner
from ephyra.runner import LocalRunner, SandboxRunner

BUILTIN_ADAPTERS: dict[str, str] = {
    EffectType.RUN_TRIAGE: "intake.effects.TriageAdapter",
    EffectType.MUTE_FINGERPRINT: "intake.effects.MuteFingerprintAdapter",
    EffectType.NOTIFY_INBOX: "quests.effects.NotifyInboxAdapter",
    EffectType.REQUEST_CHECKPOINT: "quests.effects.RequestCheckpointAdapter",
    EffectType.MERGE_SIGNAL: "quests.effects.MergeSignalAdapter",
    EffectType.DELIVER_CHILD_EVIDENCE: "quests.effects.DeliverChildEvidenceAdapter",
    EffectType.RESUME_DEPENDENTS: "quests.effects.ResumeDependentsAdapter",
    EffectType.START_AGENT: "work.steps.StartAgentAdapter",
    EffectType.STOP_AGENT: "worker.jobs.StopAgentAdapter",
    EffectType.LAND: "landing.adapters.LandAdapter",
    EffectType.REBASE: "landing.adapters.RebaseAdapter",
    EffectType.ROLLBACK: "landing.adapters.RollbackAdapter",
    EffectType.RUN_PROOF: "work.proof.RunProofAdapter",
    EffectType.REGISTER_REGRESSION_PROBE: "work.probes.RegisterRegressionProbeAdapter",
    EffectType.START_WATCH: "work.watch.StartWatchAdapter",
}


@dataclass(frozen=True)
class Dependencies:
    """What the composition root can hand an adapter, by constructor parameter name."""

    data_dir: Path
    # The runners a workspace's policy may name (``work.runner``): every command of every
    # step goes through one of them.
    runners: Mapping[str, Runner]
    # A git-credentials file for pushing to remotes (EPHYRA_GIT_CREDENTIALS_FILE), or None
    # for git's own credential helper.
    git_credentials_file: Path | None = None


def dependencies() -> Dependencies:
    credentials = settings.EPHYRA_GIT_CREDENTIALS_FILE
    if credentials is not None and not (credentials.is_file() and os.access(credentials, os.R_OK)):
        raise ImproperlyConfigured(
            f"EPHYRA_GIT_CREDENTIALS_FILE: {credentials} is not a file this worker can read"
        )
    sandbox = SandboxRunner(
        bwrap=settings.EPHYRA_BWRAP, read_only_paths=tuple(settings.EPHYRA_SANDBOX_PATHS)
    )
    return Dependencies(
        data_dir=Path(settings.DATA_DIR),
        runners=MappingProxyType({"local": LocalRunner(), "sandbox": sandbox}),
        git_credentials_file=credentials,
    )


def build(path: str, deps: Dependencies) -> EffectAdapter:
    """Import the adapter class at ``path`` and construct it with the dependencies it names."""
    factory = import_string(path)
    known = {f.name for f in fields(deps)}
    arguments = {}
    for name, parameter in inspect.signature(factory).parameters.items():
        if name in known:
            arguments[name] = getattr(deps, name)
        elif parameter.default is inspect.Parameter.empty and parameter.kind not in (
            inspect.Parameter.VAR_POSITIONAL,
            inspect.Parameter.VAR_KEYWORD,
        ):
            raise ImproperlyConfigured(
                f"effect adapter {path} needs {name!r}, which the composition root does not "
                f"provide (it provides: {', '.join(sorted(known))})"
            )
    return factory(**arguments)


@functools.cache
def effect_adapters() -> dict[EffectType, EffectAdapter]:
    paths = {**BUILTIN_ADAPTERS, **settings.EPHYRA_EFFECT_ADAPTERS}
    deps = dependencies()
    return {EffectType(name): build(path, deps) for name, path in paths.items() if path}


def unserved_effect_types() -> list[EffectType]:
    """The effect types no adapter delivers: their operations wait in the ledger."""
    served = effect_adapters()
    return [effect_type for effect_type in EffectType if effect_type not in served]
