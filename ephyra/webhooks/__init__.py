"""Inbound forge webhooks: GitHub, GitLab and Gitea/Forgejo, as pure parsing.

``signatures`` checks that a delivery came from the forge holding the hook's secret (and hashes
generated tokens); ``github``, ``gitlab`` and ``gitea`` validate the parts of each forge's
payloads Ephyra reads and turn them into forge-neutral facts (``facts``); ``webhooks`` maps a
fact and the workspace's open quests to quest events. The standard library, pydantic and
``ephyra.core``: no Django, no I/O. Whether a deployed commit carries a landed one is asked of
the workspace's mirror by the caller (``intake.deployments``, through ``deployed_landing``).
Writes to a forge (landing, comments) are not here: they are outbound, another package's.
"""
