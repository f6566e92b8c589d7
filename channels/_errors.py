"""Channel exception hierarchy.

* ChannelError(channel, reason)          the delivery or reply could not be handled
  + WebhookRejected                      -> 401, the body was never parsed
    - BadSignature                       WhatsApp X-Hub-Signature-256
    - BadSecretToken                     Telegram X-Telegram-Bot-Api-Secret-Token
    - BadVerifyToken                     -> 403, WhatsApp GET subscription handshake
  + UnknownAccount                       -> 404 (Telegram bot name in the URL)
  + SendError(disposition)               a reply did not go out
    - RetryableSendError(retry_after)    rate limit, 5xx, network: try again later; ``growth``
                                         set: the platform's own schedule, retry_after x
                                         growth ** (tries - 1) (WhatsApp 131056: 4^X s)
    - PermanentSendError                 the platform refused this message for good
      · ChatMigrated(new_chat_id)        Telegram group became a supergroup
    - FatalSendError                     the account's credentials are bad: stop sending for it
    - UncertainDelivery                  timed out after the request was sent: may have arrived
"""

from __future__ import annotations

from typing import Literal

Disposition = Literal["retryable", "permanent", "fatal", "uncertain"]


class ChannelError(Exception):
    def __init__(self, channel: str, reason: str) -> None:
        super().__init__(f"{channel}: {reason}")
        self.channel = channel
        self.reason = reason


class WebhookRejected(ChannelError):
    status = 401
    code = "webhook_rejected"


class BadSignature(WebhookRejected):
    code = "bad_signature"


class BadSecretToken(WebhookRejected):
    code = "bad_secret_token"


class BadVerifyToken(WebhookRejected):
    status = 403
    code = "bad_verify_token"


class UnknownAccount(ChannelError):
    status = 404
    code = "unknown_account"


class SendError(ChannelError):
    disposition: Disposition = "permanent"

    def __init__(
        self,
        channel: str,
        reason: str,
        *,
        error_code: int | str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(channel, reason)
        self.error_code = error_code
        self.status = status
        # Parts of a split reply that this try delivered before the failure: the next try
        # skips them (OutboundMessage.skip_parts), so the user never sees them twice.
        self.sent_ids: tuple[str, ...] = ()


class RetryableSendError(SendError):
    disposition: Disposition = "retryable"

    def __init__(
        self,
        channel: str,
        reason: str,
        *,
        retry_after: float | None = None,
        error_code: int | str | None = None,
        status: int | None = None,
        growth: float | None = None,
    ) -> None:
        super().__init__(channel, reason, error_code=error_code, status=status)
        self.retry_after = retry_after
        # The platform documents a schedule: the n-th try waits retry_after * growth ** (n - 1).
        self.growth = growth


class PermanentSendError(SendError):
    disposition: Disposition = "permanent"


class ChatMigrated(PermanentSendError):
    def __init__(self, channel: str, new_chat_id: str) -> None:
        super().__init__(channel, f"chat migrated to {new_chat_id}")
        self.new_chat_id = new_chat_id


class FatalSendError(SendError):
    disposition: Disposition = "fatal"


class UncertainDelivery(SendError):
    disposition: Disposition = "uncertain"
