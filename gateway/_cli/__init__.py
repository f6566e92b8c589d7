"""The offline commands of the ``gateway`` command line (``gateway/cli.py`` parses them): the
sessions, quarantine, migrate-store and Telegram commands, and the CLI's output stream."""
