"""``manage.py demo``: a generated shop, its production, a real regression, and the quest that
fixes it from signal to closed (or rolls its fix back). See docs/demo.md."""
