"""Ephyra: production signals into reviewed, proven, reversible code changes."""
