"""Inbound forge webhooks: GitHub, GitLab and Gitea/Forgejo.

``signatures`` checks that a delivery came from the forge holding the hook's secret (and hashes
generated tokens); ``github``, ``gitlab`` and ``gitea`` validate the parts of each forge's
payloads Ephyra reads and turn them into forge-neutral facts (``facts``); ``webhooks`` maps a
fact and the workspace's open quests to quest events. These are pure: the standard library,
pydantic and ``ephyra.core``. ``ancestry`` is the exception: it asks the workspace's repository
mirror whether a deployed commit carries a landed one. Outbound writes to a forge (landing,
comments) are not here.
"""
