"""The ``landing`` section of the policy: how an approved patch is written to the base branch.

- ``style``: ``fast-forward`` (the reviewed commits land unchanged; possible when the patch
  descends from the base it was proven on), ``merge`` (a merge commit of the patch into the
  base, even when a fast-forward was possible, like ``git merge --no-ff``) or ``rebase`` (the
  patch's commits replayed onto the base, the last one carrying Ephyra's trailers);
- ``allow``: the other styles tried, in order, when the style cannot land the patch (it does
  not fast-forward; a merge or a replay conflicts). Empty by default: a patch that cannot land
  as the style says parks the quest for a person.

Every push is a compare-and-swap on the base's expected commit, whatever the style
(docs/work.md, "Landing").
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

Style = Literal["fast-forward", "merge", "rebase"]


class LandingPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    style: Style = "fast-forward"
    allow: tuple[Literal["merge", "rebase"], ...] = ()

    @model_validator(mode="after")
    def _each_style_once(self) -> LandingPolicy:
        seen: set[str] = set()
        for name in self.allow:
            if name == self.style:
                raise ValueError(f"allow lists {name}, which is already the style")
            if name in seen:
                raise ValueError(f"allow lists {name} twice")
            seen.add(name)
        return self

    def styles(self) -> tuple[Style, ...]:
        """The styles to try, in order: the style, then the allowed fallbacks."""
        return (self.style, *self.allow)
