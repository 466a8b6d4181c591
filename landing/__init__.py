"""The landing app: the effect adapters that write to a workspace's Git remote (``land``,
``rebase``, ``rollback``) and feed their outcomes back as quest events. The Git work itself is
``ephyra.landing``'s; this app reads the workspace and the quest it needs. No models."""
