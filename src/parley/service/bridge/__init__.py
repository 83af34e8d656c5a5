"""The chat-platform bridge: relays between a platform's threads and the hub's channels and
workers, and the platform's slash commands.

May call everything below it, through the assembled :class:`~parley.service.hub.Hub`. Nothing in
the service layer calls the bridge; the chat links it acts through are
:mod:`parley.service.chat_links`, below the hub.
"""
