"""Evidence for a mission's transitions: text, a link, an uploaded file, or a quest's record.

A transition of the machines names one evidence item (``TransitionRule.evidence``); a person
gives it as one of these kinds, and the journal keeps the item whole (``request.json``) while
the machine takes its ``text``:

- ``text``: what the person wrote;
- ``link``: an http(s) URL;
- ``file``: an uploaded file, at most ``EPHYRA_EVIDENCE_MAX_BYTES``, stored under the data
  directory by its SHA-256 (``evidence/<workspace>/<sha[:2]>/<sha>``) and served only to people
  of that workspace; the journal keeps its digest, name and size, never its bytes;
- ``proof``: the proof bundle of the quest carrying the work package, by the digest its journal
  records (for IN_PROGRESS -> CHECKING: the quest's proof is the result);
- ``quest``: the state of the quest carrying the work package, as its projection says now (an
  abandoned quest is evidence for a failure; it never moves a work package by itself).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadhandler import FileUploadHandler, SkipFile
from django.core.validators import URLValidator

from journal.format import PROOF_DIR, PROOF_FILE
from quests.actions import Invalid
from quests.models import Quest, Workspace
from quests.workspaces import workspace_journal

KINDS = ("text", "link", "file", "proof", "quest")
TEXT_LIMIT = 4000  # characters, as a quest's comment
LINK_LIMIT = 2000
NAME_LIMIT = 200
_SHA = re.compile(r"^[0-9a-f]{64}$")
_http = URLValidator(schemes=["http", "https"])


@dataclass(frozen=True)
class Evidence:
    """One evidence item as a person gives it: its ``kind`` and the field of that kind."""

    kind: str
    text: str = ""
    link: str = ""
    upload: Any = None  # an UploadedFile: anything with .name, .size and .chunks()


class Staged:
    """An uploaded file written under a temporary name in the workspace's evidence folder,
    with its digest: ``keep`` moves it to its place once the decision is journaled,
    ``discard`` removes it when the decision is refused."""

    def __init__(self, temp: Path, final: Path) -> None:
        self.temp, self.final = temp, final

    def keep(self) -> None:
        self.final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.temp, self.final)  # the same bytes as any file already there

    def discard(self) -> None:
        self.temp.unlink(missing_ok=True)


def evidence_dir(workspace: Workspace) -> Path:
    return Path(settings.DATA_DIR) / "evidence" / workspace.slug


def evidence_path(workspace: Workspace, sha256: str) -> Path | None:
    """Where the workspace keeps the file with this digest; None for a digest that is not one
    or a file it does not have."""
    if not _SHA.match(sha256):
        return None
    path = evidence_dir(workspace) / sha256[:2] / sha256
    return path if path.is_file() else None


def resolve(
    workspace: Workspace, evidence: Evidence, *, quest_id: str = ""
) -> tuple[dict[str, Any], Staged | None]:
    """The journal's item for ``evidence`` (``kind``, ``text`` and what the kind adds), and
    the staged file of an upload. ``quest_id``: the quest carrying the work package, for the
    ``proof`` and ``quest`` kinds. ``Invalid`` (in words for the person) for bad input."""
    kind = evidence.kind
    if kind == "text":
        text = (evidence.text or "").strip()
        if not text:
            raise Invalid("the evidence text is empty")
        if len(text) > TEXT_LIMIT:
            raise Invalid(f"the evidence text is {len(text)} characters; at most {TEXT_LIMIT}")
        return {"kind": "text", "text": text}, None
    if kind == "link":
        url = (evidence.link or "").strip()
        try:
            if len(url) > LINK_LIMIT:
                raise ValidationError("too long")
            _http(url)
        except ValidationError:
            raise Invalid(
                f"the evidence link must be an http or https URL of at most {LINK_LIMIT} characters"
            ) from None
        return {"kind": "link", "url": url, "text": url}, None
    if kind == "file":
        return _stage(workspace, evidence.upload)
    if kind in {"proof", "quest"}:
        if not quest_id:
            raise Invalid("no quest carries this work package yet; link one first")
        return (_proof if kind == "proof" else _quest)(workspace, quest_id), None
    raise Invalid(f"evidence is one of {', '.join(KINDS)}, not {kind!r}")


def _stage(workspace: Workspace, upload: Any) -> tuple[dict[str, Any], Staged]:
    cap = settings.EPHYRA_EVIDENCE_MAX_BYTES
    if upload is None:
        raise Invalid("no file was uploaded")
    if upload.size is not None and upload.size > cap:
        raise Invalid(too_large(upload.size))
    folder = evidence_dir(workspace)
    folder.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    handle, temp = tempfile.mkstemp(dir=folder, prefix=".upload-")
    try:
        with os.fdopen(handle, "wb") as out:
            for chunk in upload.chunks():
                size += len(chunk)
                if size > cap:
                    raise Invalid(too_large(size, at_least=True))
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    sha = digest.hexdigest()
    name = file_name(upload.name)
    item = {
        "kind": "file",
        "sha256": sha,
        "name": name,
        "size": size,
        "text": f"file sha256:{sha} {name} ({size} bytes)",
    }
    return item, Staged(Path(temp), folder / sha[:2] / sha)


def too_large(size: int, *, at_least: bool = False) -> str:
    cap = settings.EPHYRA_EVIDENCE_MAX_BYTES
    more = "more than " if at_least else ""
    return f"the file is {more}{size:,} bytes; evidence files are at most {cap:,} bytes"


def file_name(name: str | None) -> str:
    """The uploaded file's name as recorded: its last path part, without control characters,
    at most ``NAME_LIMIT`` characters ("evidence" when nothing is left)."""
    base = os.path.basename((name or "").replace("\\", "/"))
    base = "".join(ch for ch in base if ch.isprintable()).strip()
    return base[:NAME_LIMIT] or "evidence"


def _proof(workspace: Workspace, quest_id: str) -> dict[str, Any]:
    """The quest's proof bundle digest, as the quest's journal records it."""
    raw = workspace_journal(workspace).read(quest_id, f"{PROOF_DIR}/{PROOF_FILE}")
    if raw is None:
        raise Invalid(f"quest {quest_id} has no proof bundle yet")
    stored = json.loads(raw)
    digest = str(stored.get("digest", ""))
    revision = stored.get("bundle", {}).get("revision")
    return {
        "kind": "proof",
        "quest": quest_id,
        "digest": digest,
        "revision": revision,
        "text": f"quest {quest_id} proof {digest} (revision {revision})",
    }


def _quest(workspace: Workspace, quest_id: str) -> dict[str, Any]:
    row = (
        Quest.objects.filter(workspace=workspace, quest_id=quest_id)
        .values("state", "revision", "journal_head")
        .first()
    )
    if row is None:
        raise Invalid(f"quest {quest_id} is not in {workspace.slug} yet (is it still queued?)")
    return {
        "kind": "quest",
        "quest": quest_id,
        "state": row["state"],
        "revision": row["revision"],
        "head": row["journal_head"],
        "text": f"quest {quest_id} is {row['state']} at revision {row['revision']}",
    }


class CappedUpload(FileUploadHandler):
    """An upload handler that stops taking a file past ``EPHYRA_EVIDENCE_MAX_BYTES``: the rest
    of it is read and dropped (nothing more is kept in memory or on disk), and the file's name
    is put in ``too_large``, so the view refuses it in words instead of storing it.

    Installed first by the view, before anything reads the request's body."""

    def __init__(self, request=None) -> None:
        super().__init__(request)
        self.cap = settings.EPHYRA_EVIDENCE_MAX_BYTES
        self.too_large: str | None = None

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        if start + len(raw_data) > self.cap:
            self.too_large = self.file_name
            raise SkipFile
        return raw_data  # on to the next handler, which keeps it

    def file_complete(self, file_size: int) -> None:
        return None
