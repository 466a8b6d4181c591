"""Forge webhooks: the hooks of a workspace, their secrets, and the deliveries they take
(docs/webhooks.md)."""
