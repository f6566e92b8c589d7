"""The web chat channel's public names (implementation in ``channels._web``)."""

from ._web import ACCOUNT, CHANNEL, WebAdapter, WebDelivery, web_body, web_dedup_key

__all__ = ["ACCOUNT", "CHANNEL", "WebAdapter", "WebDelivery", "web_body", "web_dedup_key"]
