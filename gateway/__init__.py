"""The aiohttp application and CLI that wire channels, agents and the store."""
