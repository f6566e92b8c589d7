"""The normalized model every platform's webhooks and replies are translated to and from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

MessageKind = Literal[
    "text",
    "command",
    "image",
    "audio",
    "video",
    "voice",
    "document",
    "sticker",
    "location",
    "contacts",
    "interactive",
    "flow",
    "reaction",
    "edited",
    "order",
    "system",
    "unsupported",
]
DeliveryState = Literal["sent", "delivered", "read", "failed"]
MembershipState = Literal["blocked", "unblocked"]


class _Model(BaseModel):
    # Stored events and replies are read back with these models, and during a rolling deploy a
    # process may read a row a newer release wrote: fields it does not know are left aside.
    model_config = ConfigDict(extra="ignore", frozen=True)


class PlatformError(_Model):
    """An error the platform reported inside a webhook (WhatsApp ``errors[]``)."""

    code: int | None = None
    title: str | None = None
    message: str | None = None
    details: str | None = None


class Media(_Model):
    id: str
    mime_type: str | None = None
    caption: str | None = None
    file_name: str | None = None
    size: int | None = None
    url: str | None = None


class Location(_Model):
    latitude: float
    longitude: float
    name: str | None = None
    address: str | None = None
    url: str | None = None


class Contact(_Model):
    name: str | None = None
    phones: tuple[str, ...] = ()
    user_id: str | None = None


class InteractiveReply(_Model):
    """A button or list choice: ``id`` is the payload we sent, ``title`` what the user saw."""

    id: str
    title: str | None = None
    description: str | None = None


class FlowReply(_Model):
    """A completed WhatsApp Flow (``interactive.nfm_reply``): ``response`` is its parsed JSON."""

    name: str | None = None  # "flow" for Flows
    body: str | None = None  # what the user's chat shows, e.g. "Sent"
    flow_token: str | None = None  # the token we sent with the Flow, if it came back
    response: dict[str, Any] = Field(default_factory=dict)


class Reaction(_Model):
    message_id: str
    emoji: str | None = None  # None: the reaction was removed


class OrderItem(_Model):
    product_id: str
    quantity: int | None = None
    item_price: float | None = None
    currency: str | None = None


class Order(_Model):
    """A cart the user sent from the business's catalog (WhatsApp ``order``)."""

    catalog_id: str | None = None
    items: tuple[OrderItem, ...] = ()


class SystemNotice(_Model):
    """A platform notice about the user, e.g. WhatsApp ``user_changed_number``."""

    type: str | None = None
    body: str | None = None
    new_user_id: str | None = None  # the user's new id, where the notice gives one


class Referral(_Model):
    """The ad or post a user came from: a Click-to-WhatsApp ad, or a post's WhatsApp button
    (WhatsApp ``referral``, on the first message the user sends from it)."""

    source_type: str | None = None  # "ad" or "post"
    source_id: str | None = None  # the ad's or post's id
    source_url: str | None = None
    headline: str | None = None
    body: str | None = None  # the ad's primary text
    media_type: str | None = None  # "image" or "video"
    image_url: str | None = None  # image ads
    video_url: str | None = None  # video ads
    thumbnail_url: str | None = None  # video ads
    ctwa_clid: str | None = None  # the ad click id (for Meta's Conversions API); none on Status ads
    welcome_message: str | None = None  # the greeting the ad showed the user (``.text``)


class ReferredProduct(_Model):
    """The catalog product a user asks about (WhatsApp ``context.referred_product``: the user
    tapped "Message business" on a product)."""

    product_id: str  # product_retailer_id, as in OrderItem
    catalog_id: str | None = None


class Command(_Model):
    name: str  # without the leading slash or the @botname suffix
    args: str = ""


class InboundMessage(_Model):
    type: Literal["message"] = "message"
    channel: str
    account: str
    chat_id: str
    sender_id: str
    sender_name: str | None = None
    sender_user_id: str | None = None  # a second stable user id, e.g. the WhatsApp BSUID
    message_id: str
    dedup_key: str
    timestamp: AwareDatetime
    kind: MessageKind
    text: str | None = None
    command: Command | None = None
    media: Media | None = None
    location: Location | None = None
    contacts: tuple[Contact, ...] = ()
    interactive: InteractiveReply | None = None
    flow: FlowReply | None = None
    reaction: Reaction | None = None
    order: Order | None = None
    system: SystemNotice | None = None
    referral: Referral | None = None  # the ad or post the user came from
    referred_product: ReferredProduct | None = None  # the product the user asks about
    media_group: str | None = None  # Telegram: the album (media_group_id) the message is part of
    reply_to: str | None = None
    thread_id: str | None = None  # Telegram forum topic; replies go back to it
    edited_message_id: str | None = None
    platform_type: str | None = None  # the platform's own type name, kept for unsupported kinds
    errors: tuple[PlatformError, ...] = ()
    callback_query_id: str | None = None  # Telegram: answer it with answerCallbackQuery
    attachments: tuple[str, ...] = ()  # web: ids of files the user uploaded to the session

    def stored(self) -> dict[str, Any]:
        """The event as the inbox keeps it (JSON). The fields added since the release before,
        while unset, are left out: a process of that release refuses a field it does not know,
        and runs beside this one during a rolling deploy."""
        dumped = self.model_dump(mode="json")
        for name in ADDED_SINCE_LAST_RELEASE:
            if dumped.get(name) is None:
                del dumped[name]
        return dumped


ADDED_SINCE_LAST_RELEASE = ("referral", "referred_product", "media_group")


class DeliveryStatus(_Model):
    """What the platform says became of one of our outbound messages."""

    type: Literal["status"] = "status"
    channel: str
    account: str
    chat_id: str
    message_id: str
    dedup_key: str
    timestamp: AwareDatetime
    state: DeliveryState
    errors: tuple[PlatformError, ...] = ()


class MembershipEvent(_Model):
    """The user blocked or unblocked the bot."""

    type: Literal["membership"] = "membership"
    channel: str
    account: str
    chat_id: str
    sender_id: str
    dedup_key: str
    timestamp: AwareDatetime
    state: MembershipState


class TemplateUpdate(_Model):
    """Meta's news about one of the account's message templates: a review or status change
    (``message_template_status_update``) or a quality rating (``..._quality_update``)."""

    type: Literal["template_update"] = "template_update"
    channel: str
    account: str  # the WhatsApp Business Account id (entry.id)
    dedup_key: str
    field: str  # the webhook field it came in
    template_id: str | None = None
    name: str | None = None
    language: str | None = None
    event: str | None = None  # status: APPROVED, REJECTED, PAUSED, DISABLED, ...
    reason: str | None = None
    previous_quality: str | None = None  # quality: GREEN, YELLOW, RED, UNKNOWN
    new_quality: str | None = None


InboundEvent = Annotated[
    InboundMessage | DeliveryStatus | MembershipEvent | TemplateUpdate,
    Field(discriminator="type"),
]


class Button(_Model):
    id: str = Field(min_length=1, max_length=256)
    title: str = Field(min_length=1)
    description: str | None = None


class OutboundMedia(_Model):
    kind: Literal["image", "audio", "video", "document", "sticker"]
    url: str | None = None
    id: str | None = None
    caption: str | None = None
    file_name: str | None = None


class OutboundTemplate(_Model):
    """An approved WhatsApp template: its name, language code and body parameters in order."""

    name: str = Field(min_length=1, max_length=512)
    language: str = Field(min_length=1, max_length=32)
    parameters: tuple[str, ...] = ()


class OutboundMessage(_Model):
    channel: str
    account: str
    chat_id: str
    text: str | None = None
    template: OutboundTemplate | None = None  # WhatsApp: sent instead of text, buttons, media
    buttons: tuple[Button, ...] = ()
    media: OutboundMedia | None = None
    reply_to: str | None = None
    thread_id: str | None = None  # Telegram forum topic to post in
    skip_parts: int = Field(default=0, ge=0)  # parts an earlier try already delivered
    # Parts this try may send (the chat's rate limit); the rest go in later tries. None: all.
    max_parts: int | None = Field(default=None, ge=1)


class SendResult(_Model):
    """The platform ids of what one OutboundMessage became (several when text was split)."""

    message_ids: tuple[str, ...]
    remaining: int = Field(default=0, ge=0)  # parts left for a later try (``max_parts``)


class ParseResult(_Model):
    """Events of one delivery, plus what could not be parsed or was deliberately skipped."""

    events: tuple[InboundEvent, ...] = ()
    failures: tuple[str, ...] = ()  # reasons, one per part of the delivery that did not parse
    ignored: tuple[str, ...] = ()  # update types acknowledged but not handled
