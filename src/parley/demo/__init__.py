"""``parley demo``: a hub on its embedded SQLite store and the story of real work through its
REST API.

- ``story`` starts the hub and tells the story: agents, mail, a discussion, then the scenes, then
  the event log. It is the only part that imports the others.
- ``meeting`` is the meeting scene, ``workers`` the worker-tree scene; each plays on a ``Stage``.
- ``stage`` is what the parts share: the ``Stage`` protocol ``story.Demo`` implements, each
  agent's scripted model route, held turns and bounded waits.
"""

from parley.demo.story import run_demo

__all__ = ["run_demo"]
