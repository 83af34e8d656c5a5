"""The one service layer every surface (REST, MCP, CLI, web) calls. It owns transactions and
enforces every rule; surfaces only translate.

A package per capability, each importing only those below it (``tests/unit/test_import_graph.py``
checks this and that there is no import circle)::

    bridge/          chat-platform relays and slash commands          (through the Hub)
    hub.py           the Hub: every service built once, with its dependencies; the sweeps
    tools/           the agent tools MCP and tool-calling runtimes offer  (on a Services protocol)
    meetings/        rooms, convened meetings, their voices, the pulse
    workers/         workers, their children, results, control and views
    conversations/   channels and transcripts, discussion tasks and their recovery, remote
                     turns, discussions, invitations
    mail/            inboxes, delivery marks of broadcasts, the mailroom
    (shared)         context.py (ports + settings), events.py, identity.py, quotas.py,
                     metrics.py, chat_links.py, usage.py (token and cost records, totals,
                     budgets), search.py (mail and channel messages)

Meetings and workers sit side by side and never import each other. A capability that must react
to a lower one's events subscribes instead of being imported by it (a task's start and end:
``conversations.task_hooks.TaskHooks``). The service takes its settings as a value
(:class:`parley.core.settings.HubSettings`) and imports nothing from the adapters, the surfaces or
the composition root.
"""

from parley.service.hub import Hub

__all__ = ["Hub"]
