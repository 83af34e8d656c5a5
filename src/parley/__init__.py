"""parley: a coordination hub for long-running AI agent sessions."""

__version__ = "0.1.0"
