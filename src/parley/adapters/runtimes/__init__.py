"""Runtimes: how an agent produces a turn (W9).

``scripted``, ``openai``, ``anthropic`` and ``command`` live here, each obeying the shared rules
in ``race``; ``factory`` builds them from an agent's config and keeps one per agent; ``guard``
keeps test suites away from real models. ``remote`` turns are handled by the service layer.
"""
