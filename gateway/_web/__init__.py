"""The web surfaces: the ``/ws`` chat channel and the per-session attachments."""
