"""The admin HTTP API under /api/*: its routes (``_routes``), the bodies of /api/* and /web/*
(``_api_models``), the OpenAPI document, operator writes, handoffs and a session's export.

Nothing is imported here: the modules are imported by name, so that ``_keys`` can reach
``_operator_writes`` without starting an import of the routes.
"""
