"""Forges: GitHub, GitLab and Gitea/Forgejo.

``signatures`` checks that a webhook delivery came from the forge holding the hook's secret;
``payloads`` validates the parts of each forge's payloads Ephyra reads and turns them into
forge-neutral facts; ``webhooks`` maps a fact and the workspace's open quests to quest events.
Pure: the standard library, pydantic and ``ephyra.core``; no Django, no I/O, no clock.
"""
