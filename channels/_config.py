"""Config sections of the channels; gateway/config.py composes them into the whole file."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

ACCOUNT_NAME = r"^[A-Za-z0-9_]{1,64}$"
AGENT_NAME = r"^[A-Za-z0-9_-]{1,52}$"  # as agents' own rule; the gateway checks it is declared


class _Section(BaseModel):
    # TOML has inf and nan: a timeout of inf never fires, a rate of nan compares false to all.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


SECRET_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")


class TelegramBotConfig(_Section):
    name: str = Field(pattern=ACCOUNT_NAME)
    token: SecretStr
    secret_token: SecretStr
    starting_agent: str | None = Field(default=None, pattern=AGENT_NAME)  # else agents'
    agents: tuple[str, ...] = ()  # the agents its sessions may have; empty: every agent
    groups: Literal["addressed", "all"] = "addressed"  # which group messages are answered
    edited_messages: Literal["ignore", "new_turn"] = "ignore"

    @field_validator("token", "secret_token")
    @classmethod
    def _not_empty(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value():
            raise ValueError("must not be empty")
        return value

    @field_validator("secret_token")
    @classmethod
    def _telegram_alphabet(cls, value: SecretStr) -> SecretStr:
        # setWebhook's rule; the header is compared as sent, so no other character can match.
        if not SECRET_TOKEN.fullmatch(value.get_secret_value()):
            raise ValueError("must be 1 to 256 characters A-Z, a-z, 0-9, _ or - (Telegram's rule)")
        return value


class TelegramConfig(_Section):
    api_base_url: str = "https://api.telegram.org"
    request_timeout: float = Field(default=15.0, gt=0)
    bots: tuple[TelegramBotConfig, ...] = ()

    @field_validator("bots")
    @classmethod
    def _unique_names(cls, bots: tuple[TelegramBotConfig, ...]) -> tuple[TelegramBotConfig, ...]:
        names = [bot.name for bot in bots]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate bot name(s): {', '.join(duplicates)}")
        return bots


class WhatsAppNumberConfig(_Section):
    phone_number_id: str = Field(pattern=r"^[0-9]{1,32}$")
    access_token: SecretStr
    starting_agent: str | None = Field(default=None, pattern=AGENT_NAME)  # else agents'
    agents: tuple[str, ...] = ()  # the agents its sessions may have; empty: every agent


class WhatsAppTemplateConfig(_Section):
    """``[[whatsapp.templates]]``: an approved template operators and agents may send."""

    name: str = Field(pattern=r"^[a-z0-9_]{1,512}$")  # Meta's rule for template names
    language: str = Field(pattern=r"^[A-Za-z]{2,3}(_[A-Za-z0-9]{2,8})?$")  # e.g. en_US, pt_BR
    parameters: tuple[str, ...] = ()  # the body's {{1}}, {{2}}, ... in order, named for people
    description: str = ""  # when to use it: shown to agents and operators


class WhatsAppConfig(_Section):
    graph_base_url: str = "https://graph.facebook.com"
    api_version: str = Field(default="v21.0", pattern=r"^v[0-9]+\.[0-9]+$")
    app_secret: SecretStr = SecretStr("")
    verify_token: SecretStr = SecretStr("")
    request_timeout: float = Field(default=15.0, gt=0)
    numbers: tuple[WhatsAppNumberConfig, ...] = ()
    templates: tuple[WhatsAppTemplateConfig, ...] = ()

    def template(self, name: str, language: str) -> WhatsAppTemplateConfig | None:
        """The declared template of that name and language, if any."""
        found = (t for t in self.templates if (t.name, t.language) == (name, language))
        return next(found, None)

    @field_validator("templates")
    @classmethod
    def _unique_templates(
        cls, templates: tuple[WhatsAppTemplateConfig, ...]
    ) -> tuple[WhatsAppTemplateConfig, ...]:
        keys = [f"{t.name} ({t.language})" for t in templates]
        duplicates = sorted({key for key in keys if keys.count(key) > 1})
        if duplicates:
            raise ValueError(f"template declared more than once: {', '.join(duplicates)}")
        return templates

    @field_validator("numbers")
    @classmethod
    def _unique_ids(
        cls, numbers: tuple[WhatsAppNumberConfig, ...]
    ) -> tuple[WhatsAppNumberConfig, ...]:
        ids = [number.phone_number_id for number in numbers]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate phone_number_id(s): {', '.join(duplicates)}")
        return numbers
