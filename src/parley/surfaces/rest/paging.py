"""Pages of lists. A list stops at its ``limit`` or its byte budget, whichever comes first; a page
that does not end the list says where the rest begins, in a ``Link: <…>; rel="next"`` header
(RFC 8288) with the same query and the cursor moved past its last row."""

from __future__ import annotations

from typing import Any

from fastapi import Request, Response

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
