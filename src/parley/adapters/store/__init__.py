"""Stores on SQLAlchemy Core: SQLite (embedded default) and PostgreSQL (scale-out)."""
