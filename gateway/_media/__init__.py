"""Inbound media: fetching platform files safely to the session's attachment folder."""

from .fetch import FetchPolicy, FetchResult, MediaRefused, fetch_to_file

__all__ = ["FetchPolicy", "FetchResult", "MediaRefused", "fetch_to_file"]
