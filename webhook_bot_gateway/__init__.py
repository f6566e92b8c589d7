"""The webhook bot gateway's one import package.

The repository keeps ``gateway/``, ``channels/``, ``agents/`` and ``store/`` at its top; the
distribution installs them as ``webhook_bot_gateway.gateway`` and so on (pyproject's
``package-dir``), so that none of those generic names is taken from the libraries a user brings,
such as the OpenAI Agents SDK's own ``agents``. In a checkout, this folder's links to the four
folders give the same names to the tests and to mypy.
"""
