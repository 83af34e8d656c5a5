"""Fakes the tests talk to: local model servers speaking each wire protocol, and fake CLIs."""
