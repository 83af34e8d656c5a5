"""Pages of lists. A list stops at its ``limit`` or its byte budget, whichever comes first; a page
that does not end the list says where the rest begins, in a ``Link: <…>; rel="next"`` header
(RFC 8288) with the same query and the cursor moved past its last row."""

from __future__ import annotations

from typing import Annotated, Any, Protocol, TypeVar

from fastapi import Query, Request, Response

from parley.core.limits import MAX_SEQ
from parley.core.ports import Page

NEXT_DESCRIPTION = (
    'More rows follow: `Link: <url>; rel="next"` gives the same query from after the last row. '
    "A page may hold fewer than `limit` rows when they are large."
)


def link_next(request: Request, response: Response, more: bool, **cursor: Any) -> None:
    """Point at the next page when there is one."""
    if not more:
        return
    # A token never travels in a link: the client sends its own, as it did for this page.
    url = request.url.remove_query_params("token").include_query_params(**cursor)
    response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'


class _SeqRow(Protocol):
    seq: int


class _IdRow(Protocol):
    id: str


Row = TypeVar("Row", bound=_SeqRow)
IdRow = TypeVar("IdRow", bound=_IdRow)


class SeqWindow:
    """The query of a transcript read in order (a channel's, a meeting's): from after a
    position (``after_seq``) one page at a time, or the newest that fit one page (``latest``)."""

    def __init__(
        self,
        after_seq: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
        latest: Annotated[int | None, Query(ge=1, le=1000)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> None:
        self.after_seq = after_seq
        self.latest = latest
        self.limit = limit

    def rows(self, request: Request, response: Response, rows: list[Row], more: bool) -> list[Row]:
        """The page's rows, with a ``Link`` to the next page when reading forward."""
        if rows and self.latest is None:
            link_next(request, response, more, after_seq=rows[-1].seq)
        return rows


class IdWindow:
    """The query of a list in id order (rooms, channels, a room's meetings, a channel's tasks):
    from after an id (``after``) one page at a time."""

    def __init__(
        self,
        after: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> None:
        self.after = after
        self.limit = limit

    def rows(self, request: Request, response: Response, page: Page[IdRow]) -> list[IdRow]:
        """The page's rows, with a ``Link`` to the next page when more follow."""
        if page.rows:
            link_next(request, response, page.more, after=page.rows[-1].id)
        return page.rows
