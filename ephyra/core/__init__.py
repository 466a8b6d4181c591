"""The pure domain: quests, events, effects, the lifecycle machine and the mission machines.

Nothing here does I/O, reads a clock or draws a random number: time and identifiers arrive in
events. Only the standard library and pydantic are imported (checked by import-linter).
"""
