"""Config loading: environment references, key paths in errors, the example file."""

from __future__ import annotations

import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from webhook_bot_gateway.gateway.config import (
    Settings,
    load_settings,
    parse_settings,
    resolve_config_path,
)
from webhook_bot_gateway.gateway.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "config.example.toml"

BOT = """
[[telegram.bots]]
name = "support"
token = "${TELEGRAM_BOT_TOKEN}"
secret_token = "${TELEGRAM_SECRET_TOKEN:-fallback-secret}"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def error_of(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text), environ or {})
    return caught.value


def test_example_config_loads_offline_with_no_variables_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # its admin.token_file is relative: not the checkout's data/
    settings = load_settings(EXAMPLE, environ={})
    assert settings.agents.max_turns == 40
    assert settings.dedup.ttl_hours == 192
    assert settings.telegram.bots[0].name == "support"


def test_example_config_names_every_section_of_the_settings() -> None:
    raw = tomllib.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert set(raw) == set(Settings.model_fields)


def test_empty_file_gives_documented_defaults(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, ""), {})
    assert (settings.server.host, settings.server.port) == ("127.0.0.1", 8080)
    assert settings.store.url == "sqlite:///data/gateway.db"
    assert settings.dispatcher.double_texting == "merge"
    assert settings.agents.starting_agent == "triage"


def test_variable_is_read_from_the_environment(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, BOT), {"TELEGRAM_BOT_TOKEN": "42:abc"})
    bot = settings.telegram.bots[0]
    assert bot.token.get_secret_value() == "42:abc"
    assert bot.secret_token.get_secret_value() == "fallback-secret"


def test_default_is_overridden_by_a_set_variable(tmp_path: Path) -> None:
    environ = {"TELEGRAM_BOT_TOKEN": "42:abc", "TELEGRAM_SECRET_TOKEN": "from-env"}
    settings = load_settings(write(tmp_path, BOT), environ)
    assert settings.telegram.bots[0].secret_token.get_secret_value() == "from-env"


def test_missing_variable_names_the_key_and_the_variable(tmp_path: Path) -> None:
    error = error_of(tmp_path, BOT)
    assert error.key == "telegram.bots[0].token"
    assert "TELEGRAM_BOT_TOKEN" in str(error)


def test_malformed_reference_names_the_key(tmp_path: Path) -> None:
    error = error_of(tmp_path, '[admin]\ntoken = "${NOT VALID}"\n')
    assert error.key == "admin.token"


@pytest.mark.parametrize("value", ["${TELEGRAM_BOT_TOKEN", "42:abc${X", "${A}-${B", "pre-${"])
def test_a_reference_with_no_closing_brace_is_refused_naming_the_key(
    tmp_path: Path, value: str
) -> None:
    """It was taken as literal text: the token became "${TELEGRAM_BOT_TOKEN"."""
    text = f'[[telegram.bots]]\nname = "a"\ntoken = "{value}"\nsecret_token = "s"\n'
    error = error_of(tmp_path, text, {"TELEGRAM_BOT_TOKEN": "42:abc", "A": "a", "B": "b"})
    assert str(error) == "telegram.bots[0].token: malformed reference: a '${' with no closing '}'"


NOT_A_NAME = (
    "malformed reference: a '${' is not followed by a variable name and then '}' or ':-'"
    " (the forms are ${NAME} and ${NAME:-default})"
)
NESTED = "malformed reference: a '${' inside another reference (references do not nest)"


@pytest.mark.parametrize(
    ("key", "text", "secret"),
    [
        (
            "telegram.bots[0].token",
            '[[telegram.bots]]\nname = "a"\nsecret_token = "s"\n'
            'token = "${TELEGRAM_BOT_TOKEN-123456:AAHsuperSecretDefault}"\n',
            "AAHsuperSecretDefault",
        ),
        (
            "store.url",
            '[store]\nurl = "postgresql://gw:${PGPASS-Hunter2Secret}@db/gw"\n',
            "Hunter2",
        ),
        ("admin.token", '[admin]\ntoken = "${1BAD}"\n', "1BAD"),
        ("admin.token", '[admin]\ntoken = "x${NOT VALID}"\n', "VALID"),
        ("admin.token", '[admin]\ntoken = "${}"\n', "${}"),
    ],
    ids=["shell-style default", "in a url", "digit first", "a blank inside", "empty"],
)
def test_a_reference_that_does_not_start_with_a_name_is_refused_without_repeating_it(
    tmp_path: Path, key: str, text: str, secret: str
) -> None:
    """A shell-style ${NAME-default} was echoed whole, its default (maybe a secret) with it."""
    error = error_of(tmp_path, text, {"TELEGRAM_BOT_TOKEN": "42:abc", "PGPASS": "pw"})
    assert secret not in str(error)
    assert str(error) == f"{key}: {NOT_A_NAME}"


@pytest.mark.parametrize(
    "value", ["${X:-${Y:-data}}/media", "${X:-a${Y}}", "${X${Y}}", "${X:-pa${ss}-${Z}"]
)
@pytest.mark.parametrize("environ", [{}, {"X": "x", "Y": "y", "Z": "z"}])
def test_a_nested_reference_is_refused_naming_the_key(
    tmp_path: Path, value: str, environ: dict[str, str]
) -> None:
    """${X:-${Y:-data}} was read up to its first '}': X unset gave the literal ${Y:-data}."""
    error = error_of(tmp_path, f'[media]\nroot = "{value}"\n', environ)
    assert str(error) == f"media.root: {NESTED}"


def test_a_shell_style_reference_names_the_variable_that_is_set(tmp_path: Path) -> None:
    text = '[admin]\ntoken = "$GATEWAY_ADMIN_TOKEN"\n'
    error = error_of(tmp_path, text, {"GATEWAY_ADMIN_TOKEN": "a-long-enough-admin-token"})
    assert str(error) == (
        "admin.token: $GATEWAY_ADMIN_TOKEN is not read from the environment:"
        " write ${GATEWAY_ADMIN_TOKEN}"
    )


def test_a_shell_style_whole_value_is_refused_without_repeating_it(tmp_path: Path) -> None:
    """Unset, it may be a secret that happens to start with $: the message does not echo it."""
    error = error_of(tmp_path, '[admin]\ntoken = "$Hunter2secret"\n')
    assert str(error) == (
        "admin.token: a value of the form $NAME is not read from the environment: write ${NAME}"
    )


@pytest.mark.parametrize(
    "value", ["pa$$w$ord-16-chars", "$5-off-a-long-token", "a$B-long-admin-t", "$"]
)
def test_a_dollar_elsewhere_in_a_value_is_kept_as_it_is(tmp_path: Path, value: str) -> None:
    settings = load_settings(write(tmp_path, f'[admin]\ntoken = "{value}"\n'), {})
    assert settings.admin.token.get_secret_value() == value


def test_a_variables_content_is_not_read_as_a_reference(tmp_path: Path) -> None:
    environ = {"GATEWAY_ADMIN_TOKEN": "$OTHER", "T2": "x${y"}
    text = '[admin]\ntoken = "${GATEWAY_ADMIN_TOKEN}-${T2}"\n'
    settings = load_settings(write(tmp_path, text), environ)
    assert settings.admin.token.get_secret_value() == "$OTHER-x${y"


def test_max_turns_zero_names_agents_max_turns(tmp_path: Path) -> None:
    error = error_of(tmp_path, "[agents]\nmax_turns = 0\n")
    assert error.key == "agents.max_turns"


def test_unknown_key_is_rejected_with_its_path(tmp_path: Path) -> None:
    error = error_of(tmp_path, "[server]\nhots = 'x'\n")
    assert error.key == "server.hots"
    assert "unknown key" in str(error)


def test_unknown_section_is_rejected(tmp_path: Path) -> None:
    assert error_of(tmp_path, "[serverr]\n").key == "serverr"


AGENT_A = "[agents]\nstarting_agent = 'a'\n[[agents.list]]\nname = 'a'\nmodel = 'rules'\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[server]\nport = 'eighty'\n", "server.port: must be a whole number"),
        ("[server]\nport = 80.5\n", "server.port: must be a whole number"),
        ("[server]\nread_timeout = 'soon'\n", "server.read_timeout: must be a number"),
        ("[server]\nread_timeout = [1]\n", "server.read_timeout: must be a number"),
        ("[server]\nhost = 5\n", "server.host: must be a string"),
        ("[media]\nallowed_hosts = 'x.example'\n", "media.allowed_hosts: must be a list"),
        (AGENT_A + "handoffs = 'billing'\n", "agents.list[0].handoffs: must be a list"),
        ("server = 5\n", "server: must be a table"),
        ("[agents]\nmodels = 'gpt'\n", "agents.models: must be a table"),
        ("[agents]\nlist = [5]\n", "agents.list[0]: must be a table"),
        # other types keep pydantic's words
        ("[server]\nport = 70000\n", "server.port: Input should be less than or equal to 65535"),
        (
            "[whatsapp]\n[[whatsapp.numbers]]\n",
            "whatsapp.numbers[0].phone_number_id: Field required",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_named_in_plain_words(
    tmp_path: Path, text: str, message: str
) -> None:
    error = error_of(tmp_path, text)
    assert str(error).removesuffix(" (and 1 more error(s))") == message


def test_a_bad_value_from_the_environment_names_the_variable_not_the_value(
    tmp_path: Path,
) -> None:
    text = '[server]\nport = "${GATEWAY_PORT}"\n'
    error = error_of(tmp_path, text, {"GATEWAY_PORT": "80a-SECRET"})
    assert str(error) == (
        "server.port: must be a whole number (the value comes from ${GATEWAY_PORT})"
    )
    assert "80a" not in str(error)


@pytest.mark.parametrize(
    ("text", "environ", "message"),
    [
        (
            '[server]\nport = "${GATEWAY_PORT:-80a}"\n',
            {},
            "server.port: must be a whole number (the value comes from the default of"
            " ${GATEWAY_PORT}, as GATEWAY_PORT is not set)",
        ),
        (
            '[dispatcher]\napology = "${A}${B:-}${A}"\n',
            {"A": " "},
            'dispatcher.apology: must hold text, or be "" for none (the value comes from ${A}'
            " and the default of ${B}, as B is not set)",
        ),
        (
            '[server]\nport = "${P}"\nread_timeout = "${T}"\n',
            {"P": "x", "T": "y"},
            "server.port: must be a whole number (the value comes from ${P}) (and 1 more error(s))",
        ),
        (  # [agents] names the key itself
            AGENT_A + 'handoffs = ["${HANDOFF}"]\n[[agents.list.rules]]\nreply = "hi"\n',
            {"HANDOFF": "a"},
            "agents.list[0].handoffs[0]: agent 'a' cannot hand off to itself (the value comes"
            " from ${HANDOFF})",
        ),
        (  # a check of the whole file, after validation
            '[server]\nhost = "0.0.0.0"\n[admin]\ntoken = "${GATEWAY_ADMIN_TOKEN}"\n',
            {"GATEWAY_ADMIN_TOKEN": "short-SECRET"},
            "admin.token: is shorter than 16 characters, and server.host '0.0.0.0' is not a"
            " loopback address: anyone who reaches the server could guess it; use a long"
            " random one (python3 -c 'import secrets; print(secrets.token_urlsafe(32))') (the"
            " value comes from ${GATEWAY_ADMIN_TOKEN})",
        ),
        # the value is not what is wrong with an unknown key
        ('[server]\nhots = "${HOST}"\n', {"HOST": "x"}, "server.hots: unknown key"),
        # a value written in the file names no variable
        (
            '[server]\nport = "80a"\n',
            {"GATEWAY_PORT": "8080"},
            "server.port: must be a whole number",
        ),
    ],
    ids=[
        "default",
        "several",
        "more-errors",
        "agents-key",
        "whole-file-check",
        "unknown",
        "literal",
    ],
)
def test_an_error_at_a_reference_says_where_the_value_came_from(
    tmp_path: Path, text: str, environ: dict[str, str], message: str
) -> None:
    error = error_of(tmp_path, text, environ)
    assert str(error) == message
    assert "SECRET" not in str(error)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "+inf"])
@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("server", "read_timeout"),
        ("dedup", "ttl_hours"),
        ("web", "heartbeat_seconds"),
        ("sender", "telegram_bot_per_second"),
        ("telegram", "request_timeout"),
        ("agents", "turn_timeout"),
    ],
)
def test_a_number_that_is_not_finite_names_the_key(
    tmp_path: Path, value: str, section: str, key: str
) -> None:
    """TOML's inf and nan: a timeout of inf never fires, a rate of nan compares false."""
    error = error_of(tmp_path, f"[{section}]\n{key} = {value}\n")
    assert error.key == f"{section}.{key}"
    assert "finite number" in str(error)


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("dispatcher", "apology"),
        ("dispatcher", "apology_no_person"),
        ("agents", "refusal_reply"),
    ],
)
def test_a_users_text_of_only_blanks_names_the_key(tmp_path: Path, section: str, key: str) -> None:
    """It would be queued, then fail at the sender with nothing to send."""
    error = error_of(tmp_path, f'[{section}]\n{key} = "  \\n "\n')
    assert error.key == f"{section}.{key}"
    assert 'must hold text, or be "" for none' in str(error)


def test_a_human_agents_blank_handoff_reply_names_the_key(tmp_path: Path) -> None:
    text = '[[agents.list]]\nname = "human"\nkind = "human"\nhandoff_reply = " "\n'
    error = error_of(tmp_path, text)
    assert error.key == "agents.list[0].handoff_reply"


def test_an_empty_apology_still_means_none(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[dispatcher]\napology = ""\n'), {})
    assert settings.dispatcher.apology == ""


def test_bad_double_texting_value_names_the_key(tmp_path: Path) -> None:
    error = error_of(tmp_path, "[dispatcher]\ndouble_texting = 'both'\n")
    assert error.key == "dispatcher.double_texting"


def test_bad_handoff_history_names_the_key(tmp_path: Path) -> None:
    agent = "[[agents.list]]\nname = 'a'\nmodel = 'rules'\nhandoff_history = 'some'\n"
    error = error_of(tmp_path, "[agents]\nstarting_agent = 'a'\n" + agent)
    assert error.key == "agents.list[0].handoff_history"


def test_empty_refusal_reply_names_the_key(tmp_path: Path) -> None:
    error = error_of(tmp_path, "[agents]\nrefusal_reply = ''\n")
    assert error.key == "agents.refusal_reply"


def test_duplicate_bot_names_are_rejected(tmp_path: Path) -> None:
    bot = '[[telegram.bots]]\nname = "a"\ntoken = "t"\nsecret_token = "s"\n'
    assert error_of(tmp_path, bot + bot).key == "telegram.bots"


def test_empty_bot_token_names_the_key(tmp_path: Path) -> None:
    text = '[[telegram.bots]]\nname = "a"\ntoken = ""\nsecret_token = "s"\n'
    assert error_of(tmp_path, text).key == "telegram.bots[0].token"


@pytest.mark.parametrize("secret", ["has space", "caf\u00e9", "a?b", "x" * 257])
def test_bot_secret_token_outside_telegrams_alphabet_names_the_key_not_the_value(
    tmp_path: Path, secret: str
) -> None:
    """Telegram accepts only A-Z a-z 0-9 _ - (1..256) for setWebhook's secret_token; the header is
    compared as sent, so any other secret could never match a real delivery."""
    text = f'[[telegram.bots]]\nname = "a"\ntoken = "t"\nsecret_token = "{secret}"\n'
    error = error_of(tmp_path, text)
    assert error.key == "telegram.bots[0].secret_token"
    assert secret not in str(error)


def test_non_numeric_phone_number_id_names_the_key(tmp_path: Path) -> None:
    text = '[[whatsapp.numbers]]\nphone_number_id = "abc"\naccess_token = "t"\n'
    assert error_of(tmp_path, text).key == "whatsapp.numbers[0].phone_number_id"


def test_not_toml_is_a_config_error(tmp_path: Path) -> None:
    error = error_of(tmp_path, "[server\n")
    assert "not valid TOML" in str(error)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "absent.toml", {})


def test_error_never_echoes_a_secret_value(tmp_path: Path) -> None:
    text = '[[telegram.bots]]\nname = "bad name!"\ntoken = "SECRET-TOKEN-1"\nsecret_token = "s"\n'
    assert "SECRET-TOKEN-1" not in str(error_of(tmp_path, text))


def test_substitution_applies_inside_longer_strings() -> None:
    raw = {"store": {"url": "sqlite:///${DIR:-data}/gateway.db"}}
    assert parse_settings(raw, {"DIR": "x"}).store.url == "sqlite:///x/gateway.db"


def test_config_path_prefers_flag_then_environment_then_default() -> None:
    assert resolve_config_path("a.toml", {"GATEWAY_CONFIG": "b.toml"}) == Path("a.toml")
    assert resolve_config_path(None, {"GATEWAY_CONFIG": "b.toml"}) == Path("b.toml")
    assert resolve_config_path(None, {}) == Path("config.toml")


def test_retention_days_default_keeps_forever_and_refuses_a_negative(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, ""), {}).store.retention_days == 0
    assert error_of(tmp_path, "[store]\nretention_days = -1\n").key == "store.retention_days"


def test_whatsapp_templates_are_checked_and_each_name_and_language_declared_once(
    tmp_path: Path,
) -> None:
    template = '[[whatsapp.templates]]\nname = "follow_up"\nlanguage = "en_US"\n'
    assert error_of(tmp_path, template + template).key == "whatsapp.templates"
    bad_name = '[[whatsapp.templates]]\nname = "Follow Up"\nlanguage = "en_US"\n'
    assert error_of(tmp_path, bad_name).key == "whatsapp.templates[0].name"
    bad_language = '[[whatsapp.templates]]\nname = "follow_up"\nlanguage = "english"\n'
    assert error_of(tmp_path, bad_language).key == "whatsapp.templates[0].language"
    other = template.replace("en_US", "pt_BR") + 'parameters = ["nome"]\n'
    settings = load_settings(write(tmp_path, template + other), {})
    found = settings.whatsapp.template("follow_up", "pt_BR")
    assert found is not None
    assert found.parameters == ("nome",)
    assert settings.whatsapp.template("follow_up", "de_DE") is None


AGENTS = """
[agents]
starting_agent = "triage"
[[agents.list]]
name = "triage"
kind = "human"
[[agents.list]]
name = "sales"
kind = "human"
"""


def test_account_starting_agents_are_read(tmp_path: Path) -> None:
    bots = (
        '[[telegram.bots]]\nname = "a"\ntoken = "t"\nsecret_token = "s"\n'
        '[[telegram.bots]]\nname = "b"\ntoken = "t2"\nsecret_token = "s2"\n'
        'starting_agent = "sales"\n'
        '[[whatsapp.numbers]]\nphone_number_id = "1"\naccess_token = "t"\n'
        'starting_agent = "sales"\n'
    )
    settings = load_settings(write(tmp_path, bots + AGENTS), {})
    assert [bot.starting_agent for bot in settings.telegram.bots] == [None, "sales"]
    assert settings.whatsapp.numbers[0].starting_agent == "sales"


def test_undeclared_bot_starting_agent_names_the_key(tmp_path: Path) -> None:
    bots = (
        '[[telegram.bots]]\nname = "a"\ntoken = "t"\nsecret_token = "s"\n'
        '[[telegram.bots]]\nname = "b"\ntoken = "t2"\nsecret_token = "s2"\n'
        'starting_agent = "nobody"\n'
    )
    error = error_of(tmp_path, bots + AGENTS)
    assert error.key == "telegram.bots[1].starting_agent"
    assert "nobody" in str(error)


def test_undeclared_number_starting_agent_names_the_key(tmp_path: Path) -> None:
    number = '[[whatsapp.numbers]]\nphone_number_id = "1"\naccess_token = "t"\n'
    error = error_of(tmp_path, number + 'starting_agent = "nobody"\n' + AGENTS)
    assert error.key == "whatsapp.numbers[0].starting_agent"


def test_bot_group_and_edit_policies_name_the_key(tmp_path: Path) -> None:
    bot = '[[telegram.bots]]\nname = "a"\ntoken = "t"\nsecret_token = "s"\n'
    assert error_of(tmp_path, bot + 'groups = "some"\n').key == "telegram.bots[0].groups"
    edited = error_of(tmp_path, bot + 'edited_messages = "merge"\n')
    assert edited.key == "telegram.bots[0].edited_messages"
    settings = load_settings(write(tmp_path, bot + 'groups = "all"\n'), {})
    assert (settings.telegram.bots[0].groups, settings.telegram.bots[0].edited_messages) == (
        "all",
        "ignore",
    )


def test_account_agents_must_be_declared_and_hold_its_starting_agent(tmp_path: Path) -> None:
    bot = '[[telegram.bots]]\nname = "a"\ntoken = "t"\nsecret_token = "s"\n'
    unknown = error_of(tmp_path, bot + 'agents = ["sales", "nobody"]\n' + AGENTS)
    assert unknown.key == "telegram.bots[0].agents[1]"
    # The global starting agent (triage) is not among them: the list names the problem.
    missing = error_of(tmp_path, bot + 'agents = ["sales"]\n' + AGENTS)
    assert missing.key == "telegram.bots[0].agents"
    own = error_of(tmp_path, bot + 'starting_agent = "triage"\nagents = ["sales"]\n' + AGENTS)
    assert own.key == "telegram.bots[0].starting_agent"
    fine = bot + 'starting_agent = "sales"\nagents = ["sales"]\n'
    assert load_settings(write(tmp_path, fine + AGENTS), {}).telegram.bots[0].agents == ("sales",)


# Every boolean of the file: a TOML template with {} for the value, and the key errors name.
BOOLEANS = [
    ("[sandbox]\nenabled = {}\n", "sandbox.enabled"),
    ('[agents.models.gpt]\nmodel = "m"\nvision = {}\n', "agents.models.gpt.vision"),
]
# What pydantic's lax mode would read as a boolean, and typos it would not: all refused.
NOT_BOOLEANS = ['"yes"', '"on"', '"1"', '"t"', '"y"', '"no"', '"off"', '"flase"', '""', "1", "0"]


@pytest.mark.parametrize(("template", "key"), BOOLEANS, ids=[key for _, key in BOOLEANS])
@pytest.mark.parametrize("value", NOT_BOOLEANS)
def test_boolean_refuses_anything_but_true_or_false_naming_the_key(
    tmp_path: Path, template: str, key: str, value: str
) -> None:
    error = error_of(tmp_path, template.format(value))
    assert (error.key, error.problem) == (key, "must be true or false")


def value_at(settings: Settings, key: str) -> Any:
    """``agents.models.gpt.vision`` of ``settings``."""
    found: Any = settings
    for part in key.split("."):
        found = found[part] if isinstance(found, dict) else getattr(found, part)
    return found


@pytest.mark.parametrize(("template", "key"), BOOLEANS, ids=[key for _, key in BOOLEANS])
@pytest.mark.parametrize(
    ("value", "environ", "expected"),
    [
        ("true", {}, True),
        ("false", {}, False),
        ('"${FLAG}"', {"FLAG": "true"}, True),
        ('"${FLAG}"', {"FLAG": "False"}, False),
        ('"${FLAG}"', {"FLAG": " TRUE "}, True),
        ('"${FLAG:-false}"', {}, False),
    ],
)
def test_boolean_takes_toml_booleans_and_true_or_false_from_a_variable(
    tmp_path: Path,
    template: str,
    key: str,
    value: str,
    environ: dict[str, str],
    expected: bool,
) -> None:
    settings = load_settings(write(tmp_path, template.format(value)), environ)
    assert value_at(settings, key) is expected


def config_models(annotation: Any) -> Iterator[type[BaseModel]]:
    """The models inside a field's type: ``tuple[X, ...]``, ``dict[str, X]``, ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for inner in get_args(annotation):
        yield from config_models(inner)


def is_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    return get_origin(annotation) in (Union, types.UnionType) and bool in get_args(annotation)


def bool_fields(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, FieldInfo]]:
    for name, field in model.model_fields.items():
        key = f"{path}.{field.alias or name}".lstrip(".")
        if is_bool(field.annotation):
            yield key, field
        for inner in config_models(field.annotation):
            yield from bool_fields(inner, key + ("[]" if inner is not field.annotation else ""))


def refuses(adapter: TypeAdapter[Any], value: object) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return True
    return False


def test_every_boolean_of_every_section_is_true_or_false_only() -> None:
    """gateway's, channels' and agents' sections alike, and any boolean added later."""
    found = dict(bool_fields(Settings))
    assert {"sandbox.enabled", "agents.models[].vision"} <= set(found)
    lax, unread = [], []
    for key, field in found.items():
        annotated = Annotated[(field.annotation, *field.metadata)] if field.metadata else bool
        adapter: TypeAdapter[Any] = TypeAdapter(annotated)
        lax += [(key, v) for v in ("yes", "on", "1", 1, 0) if not refuses(adapter, v)]
        if refuses(adapter, " True ") or adapter.validate_python(" True ") is not True:
            unread.append(key)
    assert (lax, unread) == ([], [])
