"""Statements built once, compiled once by SQLAlchemy's dialect and run on the driver directly.

Through SQLAlchemy's async layer every statement pays a greenlet switch, an execution context and
a result object: 40–60 µs of Python on a busy machine, more than SQLite's own work for a small
statement and about twice asyncpg's. The writers of both stores run their hot statements (those
built once at import: ``prepared.py`` and the generic insert, get and update of ``sql.py``)
through a ``DirectStatement`` instead: SQL text and bind order from the dialect's compiler, and
the bind and result processors SQLAlchemy itself would apply (timestamps, JSON, booleans), so that
rows are stored and read back exactly as through SQLAlchemy (``sqlite_direct``,
``postgres_direct``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import NoResultFound

Processor = Callable[[Any], Any] | None


class DirectStatement:
    """One statement compiled to SQL text, its binds in order and its result columns."""

    __slots__ = ("binds", "keys", "result_processors", "result_types", "source", "sql")

    def __init__(
        self,
        source: Any,
        dialect: Dialect,
        column_keys: Sequence[str] | None,
        *,
        resolve: bool = True,
        bind_processor: Callable[[Any], Processor] | None = None,
    ) -> None:
        """``bind_processor`` may replace the processor of a bind of a given type (its
        dialect implementation) with a faster equivalent; without ``resolve``, the result
        processors wait for ``resolve``."""
        # Keeps the statement alive so that its id, the cache key, is never reused.
        self.source = source
        compiled = source.compile(dialect=dialect, column_keys=column_keys)
        required = {name: None for name, bind in compiled.binds.items() if bind.required}
        # Expanding binds (``IN`` of a constant tuple) are rendered once with their values.
        state = compiled.construct_expanded_state(required)
        processors = {**compiled._bind_processors, **state.processors}
        if bind_processor is not None:
            for name, bind in compiled.binds.items():
                faster = bind_processor(bind.type.dialect_impl(dialect))
                if name in processors and faster is not None:
                    processors[name] = faster
        self.sql: str = state.statement
        self.binds: tuple[tuple[str, bool, Any, Processor], ...] = tuple(
            (name, name in required, state.parameters.get(name), processors.get(name))
            for name in state.positiontup or ()
        )
        columns = compiled._result_columns
        self.keys: tuple[str, ...] = tuple(col[0] for col in columns)
        self.result_types: tuple[Any, ...] = tuple(col[3] for col in columns)
        self.result_processors: tuple[Processor, ...] = ()
        if resolve:
            self.resolve(dialect, [None] * len(columns))

    def resolve(self, dialect: Dialect, column_types: Sequence[Any]) -> None:
        """Choose the result processors, given the driver's type codes of the result columns
        (asyncpg's numbers need them, as SQLAlchemy reads them from a cursor's description;
        SQLite has none)."""
        self.result_processors = tuple(
            type_.dialect_impl(dialect).result_processor(dialect, code)
            for type_, code in zip(self.result_types, column_types, strict=True)
        )

    def arguments(self, params: Mapping[str, Any] | None) -> list[Any]:
        """The positional arguments for ``params``, each through its bind processor."""
        args: list[Any] = []
        for name, required, default, process in self.binds:
            if required:
                value = params[name]  # type: ignore[index]
            elif params is not None:
                value = params.get(name, default)
            else:
                value = default
            args.append(value if process is None else process(value))
        return args

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(
            value if process is None else process(value)
            for value, process in zip(raw, self.result_processors, strict=True)
        )


class DirectResult:
    """The subset of SQLAlchemy's result interface the store uses, over fetched rows."""

    __slots__ = ("_keys", "_rows", "rowcount")

    def __init__(self, keys: tuple[str, ...], rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self._keys = keys
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[tuple[Any, ...]]:
        return self._rows

    def first(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        if len(self._rows) != 1:
            raise NoResultFound(f"expected one row, got {len(self._rows)}")
        return self._rows[0][0]

    def mappings(self) -> DirectMappings:
        return DirectMappings(self._keys, self._rows)


class DirectMappings:
    """Rows as dictionaries of column name to value, like ``Result.mappings()``."""

    __slots__ = ("_keys", "_rows")

    def __init__(self, keys: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
        self._keys = keys
        self._rows = rows

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (dict(zip(self._keys, row, strict=True)) for row in self._rows)

    def all(self) -> list[dict[str, Any]]:
        return list(self)

    def first(self) -> dict[str, Any] | None:
        return dict(zip(self._keys, self._rows[0], strict=True)) if self._rows else None
