"""Implementations of the core ports: stores, buses, runtimes, workspace checks."""
