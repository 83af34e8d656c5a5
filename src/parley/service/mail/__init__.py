"""Mail: the inbox every principal has (send, read, acknowledge, expire), the delivery marks of
broadcasts, and the mailroom's per-kind views.

Owns the ``mail``, ``delivery_marks`` and mailroom records. May call only the shared top-level
services (context, events, identity, quotas, metrics).
"""
