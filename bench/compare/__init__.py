"""The gateway beside the peers a team would pick instead: ``python -m bench.compare``.

Parts (docs/benchmarks.md, "Beside the peers"): Telegram and WhatsApp ingest
(``ingest``), the session store and dedup (``store``), and scaling with sessions, history and
memory (``scaling``). ``report`` renders the tables into docs/benchmarks.md, ``plots`` the PNGs.
"""
