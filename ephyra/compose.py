"""The composition root: which adapter serves which port. The only place that picks.

Effect adapters come from the built-in table below, overridden (or switched off, with an empty
path) by ``EPHYRA_EFFECT_ADAPTERS="type=dotted.path,…"``. An effect type with no adapter stays
pending in the ledger, visible in ``manage.py ledger status``, until one is configured.
"""

from __future__ import annotations

import functools

from django.conf import settings
from django.utils.module_loading import import_string

from ephyra.core.effects import EffectType
from ephyra.core.ports import EffectAdapter

BUILTIN_ADAPTERS: dict[str, str] = {
    EffectType.RUN_TRIAGE: "quests.effects.TriageAdapter",
    EffectType.NOTIFY_INBOX: "quests.effects.NotifyInboxAdapter",
    EffectType.MERGE_SIGNAL: "quests.effects.MergeSignalAdapter",
    EffectType.MUTE_FINGERPRINT: "quests.effects.MuteFingerprintAdapter",
    EffectType.DELIVER_CHILD_EVIDENCE: "quests.effects.DeliverChildEvidenceAdapter",
    EffectType.RESUME_DEPENDENTS: "quests.effects.ResumeDependentsAdapter",
}


@functools.cache
def effect_adapters() -> dict[EffectType, EffectAdapter]:
    paths = {**BUILTIN_ADAPTERS, **settings.EPHYRA_EFFECT_ADAPTERS}
    return {EffectType(name): import_string(path)() for name, path in paths.items() if path}
