"""The REST surface (FastAPI) with SSE streams."""
