"""Tolerant models of the webhook's leaf objects: unknown fields are ignored, known ones typed.

The envelope (entry / changes / value) is walked by hand in ``_parse`` so that one bad part
fails alone; these models validate one message, status, contact or error at a time.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class WireErrorData(_Wire):
    details: str | None = None


class WireError(_Wire):
    code: int | None = None
    title: str | None = None
    message: str | None = None
    error_data: WireErrorData | None = None


class WireProfile(_Wire):
    name: str | None = None
    username: str | None = None


class WireContact(_Wire):
    """An entry of ``value.contacts``: who sent the messages of this value."""

    profile: WireProfile | None = None
    wa_id: str | None = None
    user_id: str | None = None


# Seconds as Meta sends them (a string) or as a number; strict, so that true/false is not read as
# 1/0 (the dedup keys, taken before the 200, refuse it: both must agree on which parts count).
Timestamp = StrictStr | StrictInt


class WireReferredProduct(_Wire):
    catalog_id: str | None = None
    product_retailer_id: str = Field(min_length=1)


class WireContext(_Wire):
    id: str | None = None
    from_: str | None = Field(default=None, alias="from")
    referred_product: WireReferredProduct | None = None


class WireWelcome(_Wire):
    text: str | None = None


class WireReferral(_Wire):
    """A Click-to-WhatsApp ad's (or a post's) ``referral``: every field optional, as Meta leaves
    out what does not apply (``ctwa_clid`` on Status ads, the image or video URLs)."""

    source_url: str | None = None
    source_id: str | None = None
    source_type: str | None = None
    headline: str | None = None
    body: str | None = None
    media_type: str | None = None
    image_url: str | None = None
    video_url: str | None = None
    thumbnail_url: str | None = None
    ctwa_clid: str | None = None
    welcome_message: WireWelcome | None = None


class WireMessage(_Wire):
    """The fields every message has; the type's own object is validated separately."""

    id: str = Field(min_length=1)
    timestamp: Timestamp
    type: str = Field(min_length=1)
    from_: str | None = Field(default=None, alias="from")
    from_user_id: str | None = None
    context: WireContext | None = None
    referral: WireReferral | None = None


class WireStatus(_Wire):
    id: str = Field(min_length=1)
    status: str
    timestamp: Timestamp
    recipient_id: str | None = None
    recipient_user_id: str | None = None


class WireText(_Wire):
    body: str


class WireMedia(_Wire):
    id: str = Field(min_length=1)
    mime_type: str | None = None
    caption: str | None = None
    filename: str | None = None
    url: str | None = None
    voice: bool = False


class WireLocation(_Wire):
    latitude: float
    longitude: float
    name: str | None = None
    address: str | None = None
    url: str | None = None


class WireName(_Wire):
    formatted_name: str | None = None
    first_name: str | None = None
    last_name: str | None = None


class WirePhone(_Wire):
    phone: str | None = None
    wa_id: str | None = None


class WireContactCard(_Wire):
    name: WireName | None = None
    phones: tuple[WirePhone, ...] = ()


class WireReply(_Wire):
    id: str
    title: str | None = None
    description: str | None = None


class WireFlowReply(_Wire):
    name: str | None = None
    body: str | None = None
    response_json: str = "{}"


class WireInteractive(_Wire):
    type: str
    button_reply: WireReply | None = None
    list_reply: WireReply | None = None
    nfm_reply: WireFlowReply | None = None


class WireTemplateUpdate(_Wire):
    """The ``value`` of ``message_template_status_update`` / ``message_template_quality_update``."""

    message_template_id: int | str | None = None
    message_template_name: str | None = None
    message_template_language: str | None = None
    event: str | None = None
    reason: str | None = None
    previous_quality_score: str | None = None
    new_quality_score: str | None = None


class WireButton(_Wire):
    payload: str | None = None
    text: str | None = None


class WireReaction(_Wire):
    message_id: str = Field(min_length=1)
    emoji: str | None = None


class WireProductItem(_Wire):
    product_retailer_id: str
    quantity: int | None = None
    item_price: float | None = None
    currency: str | None = None


class WireOrder(_Wire):
    catalog_id: str | None = None
    text: str | None = None
    product_items: tuple[WireProductItem, ...] = ()


class WireSystem(_Wire):
    body: str | None = None
    type: str | None = None
    wa_id: str | None = None
    user_id: str | None = None


class WireUnsupported(_Wire):
    type: str | None = None
