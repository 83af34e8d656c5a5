"""Live fan-out buses."""
