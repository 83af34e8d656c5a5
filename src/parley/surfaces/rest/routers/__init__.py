"""REST routers, one per area."""
