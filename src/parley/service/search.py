"""Search over mail and channel messages (``core/search.py``): one call, the caller's read
rules applied by the store's statement itself."""

from __future__ import annotations

from parley.core.identity import Principal
from parley.core.search import SearchHit, SearchQuery, check_kind, terms
from parley.service.context import ServiceContext


class Search:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    async def find(self, caller: Principal, query: SearchQuery) -> list[SearchHit]:
        """The newest messages that hold every word of ``query.text`` and pass its filters,
        among those ``caller`` may read: its own mail (received, or sent as an original) and
        the channels it belongs to, created or owns; every one for the operator."""
        words = terms(query.text)
        check_kind(query.kind)
        viewer = None if caller.is_operator else caller.id
        await self.ctx.store.refresh_search_index()
        async with self.ctx.store.read() as tx:
            return await tx.search(query, words, viewer)
