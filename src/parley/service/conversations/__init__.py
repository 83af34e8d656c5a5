"""Conversations: channels and their transcripts, the discussion tasks that give agents their
turns (and their recovery after a hub dies), remote agents' turns, discussions and invitations.

Owns channels, channel messages, logical sessions, tasks, invocations and pending turns. May call
the shared top-level services and :mod:`parley.service.mail`. Capabilities above it that react to
a task's start or end subscribe to :class:`~.task_hooks.TaskHooks` instead of being imported here.
"""
