"""The ``parley`` command line: a client of a running hub over HTTP, plus ``parley serve``."""
