"""Meetings: rooms and their members, convened meetings and their voices, and the pulse that
checks on rooms.

Owns rooms, room members and meetings. May call the shared top-level services,
:mod:`parley.service.mail` and :mod:`parley.service.conversations` (a meeting speaks in a
channel and its turns run as tasks). Never calls :mod:`parley.service.workers`.
"""
