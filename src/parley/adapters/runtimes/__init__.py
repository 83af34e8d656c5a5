"""Runtimes: how an agent produces a turn."""
