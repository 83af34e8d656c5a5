"""REST routes for turns (filled in as the feature lands)."""

from __future__ import annotations

from fastapi import APIRouter

from parley.surfaces.rest.errors import ERROR_RESPONSES

router = APIRouter(tags=["turns"], responses=ERROR_RESPONSES)
