"""`gateway check-config`: "OK" only once every check passed (the agents' imports and names
included), errors naming the key without pydantic's "Value error, ", and nothing written: the
admin token file is left to the first `gateway serve`, which prints its token."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook_bot_gateway.gateway import app
from webhook_bot_gateway.gateway.config import Settings

from .test_cli import EXAMPLE, cli, run_cli

HUMAN = '[[agents.list]]\nname = "a"\nkind = "human"\n'
RULES_AGENT = '[[agents.list]]\nname = "{name}"\nmodel = "rules"\ntools = [{tools}]\n'
DEMO_TOOL = '"webhook_bot_gateway.agents.demo.lookup_invoice"'


def check_config(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    """check-config of a file holding ``text``: its exit code, stdout and stderr."""
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    code, out = cli("check-config", "--config", str(path))
    return code, out, capsys.readouterr().err


def config_error(tmp_path: Path, problem: str) -> str:
    return f"error: {tmp_path / 'c.toml'}: {problem}\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "",
            "agents.starting_agent: agent 'triage' is not declared, and no agent is: declare"
            " them in [[agents.list]] or agents.module",
        ),
        (
            '[agents]\nstarting_agent = "nobody"\n' + HUMAN,
            "agents.starting_agent: agent 'nobody' is not declared (declared: a)",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools='"nope.mod.fn"'),
            "agents.list[0].tools[0]: cannot import 'nope.mod.fn': No module named 'nope'",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools=DEMO_TOOL)
            + RULES_AGENT.format(name="b", tools=f'{DEMO_TOOL}, "json.nothing_here"'),
            "agents.list[1].tools[1]: cannot import 'json.nothing_here': json has no callable"
            " 'nothing_here'",
        ),
        (
            '[agents]\nstarting_agent = "a"\nmodule = "nope.mod"\n',
            "agents.module: cannot import 'nope.mod': No module named 'nope': put the folder that"
            " holds it on PYTHONPATH (the working directory is not searched: PYTHONPATH=. gateway"
            " ...)",
        ),
        (
            '[agents]\nstarting_agent = "a"\nmodule = "json"\n',
            "agents.module: 'json' must define AGENTS, a list of Agent objects",
        ),
        (
            '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\nmodel = "gpt"\n',
            "agents.list[0].model: model 'gpt' is not declared",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + HUMAN
            + RULES_AGENT.format(name="b", tools="")
            + HUMAN,
            "agents.list[2].name: agent 'a' is declared more than once",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools="")
            + 'handoffs = ["b", "ghost"]\n'
            + RULES_AGENT.format(name="b", tools=""),
            "agents.list[0].handoffs[1]: handoff target 'ghost' is not declared (declared: a, b)",
        ),
        (
            '[agents.models.gpt]\nmodel = "gpt-4o"\napi_key_env = "NO_SUCH_KEY_VARIABLE_XYZ"\n'
            '[agents]\nstarting_agent = "a"\n' + HUMAN,
            "agents.models.gpt.api_key_env: environment variable NO_SUCH_KEY_VARIABLE_XYZ (its API"
            " key) is not set",
        ),
        (
            "[ingest]\nbacklog_refuse = 10\n",
            "ingest.backlog_refuse: must be greater than ingest.backlog_ready (5000)",
        ),
        (
            '[agents]\nstarting_agent = "a"\n[[agents.list]]\nname = "a"\n',
            "agents.list[0]: agent 'a': needs a model ('rules' or a name under [agents.models])",
        ),
        ('[sandbox]\nenabled = "yes"\n', "sandbox.enabled: must be true or false"),
        ("[sandbox]\nenabled = 1\n", "sandbox.enabled: must be true or false"),
        ('[sandbox]\nenabled = "flase"\n', "sandbox.enabled: must be true or false"),
        (
            '[agents.models.gpt]\nmodel = "gpt-4o"\nvision = "on"\n',
            "agents.models.gpt.vision: must be true or false",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools=DEMO_TOOL)
            + '[[agents.list.rules]]\nmatch = "hi"\nreply = "hello"\n'
            + '[[agents.list.rules]]\nmatch = "inv"\ntool = "lookup_order"\n',
            "agents.list[0].rules[1].tool: tool 'lookup_order' is not among the agent's tools"
            " ('lookup_invoice')",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools=DEMO_TOOL)
            + '[[agents.list.rules]]\nmatch = "(?P<n>\\\\d+)"\ntool = "lookup_invoice"\n'
            + 'arguments = { wrong = "{n}" }\n',
            "agents.list[0].rules[0].arguments.wrong: agent 'a': argument 'wrong' is not a"
            " parameter of tool 'lookup_invoice' (its parameters: 'number')",
        ),
        (
            '[agents.models.fake]\nmodel = "m"\n[agents]\nstarting_agent = "a"\n'
            '[[agents.list]]\nname = "a"\nmodel = "fakee"\n[[agents.list.rules]]\nreply = "hi"\n',
            "agents.list[0].model: model 'fakee' is not declared",
        ),
        (
            '[agents.models.rules]\nmodel = "x"\n[agents]\nstarting_agent = "a"\n' + HUMAN,
            "agents.models.rules: 'rules' is the built-in rules backend's name: choose another",
        ),
        (
            "[sender]\nmax_attempts = true\n",
            "sender.max_attempts: must be a number, not true or false",
        ),
        (
            "[telegram]\nrequest_timeout = false\n",
            "telegram.request_timeout: must be a number, not true or false",
        ),
        (
            '[agents.models.gpt]\nmodel = "gpt-4o"\ntimeout = true\n',
            "agents.models.gpt.timeout: must be a number, not true or false",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools="")
            + 'handoffs = "b"\n',
            "agents.list[0].handoffs: must be a list",
        ),
        (
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools="")
            + 'handoffs = ["a"]\n',
            "agents.list[0].handoffs[0]: agent 'a' cannot hand off to itself",
        ),
        (  # a copy of the first entry that was not renamed: the name is the mistake
            '[agents]\nstarting_agent = "a"\n'
            + RULES_AGENT.format(name="a", tools="")
            + RULES_AGENT.format(name="a", tools="")
            + 'handoffs = ["a"]\n',
            "agents.list[1].name: agent 'a' is declared more than once",
        ),
    ],
    ids=[
        "empty-file",
        "unknown-starting-agent",
        "tool-not-importable",
        "second-agent-second-tool",
        "module-not-importable",
        "module-without-agents",
        "undeclared-model",
        "duplicate-name",
        "undeclared-handoff",
        "api-key-unset",
        "value-error-prefix",
        "agent-value-error-prefix",
        "boolean-yes",
        "boolean-number",
        "boolean-typo",
        "agent-boolean-on",
        "rule-tool-not-among-tools",
        "rule-argument-not-a-parameter",
        "rules-agent-misspelled-model",
        "model-named-rules",
        "boolean-for-a-number",
        "boolean-for-a-channel-number",
        "boolean-for-a-model-number",
        "handoffs-not-a-list",
        "handoff-to-itself",
        "duplicate-name-handing-off-to-itself",
    ],
)
def test_check_config_fails_naming_the_key_and_never_says_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, problem: str
) -> None:
    code, out, err = check_config(tmp_path, text, capsys)
    assert (code, out) == (1, "")  # no "config ...: OK" line, no summary
    assert err == config_error(tmp_path, problem)
    assert "Value error" not in err


def test_check_config_warns_of_a_request_timeout_that_uses_up_the_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        '[agents.models.gpt]\nmodel = "gpt-4o"\ntimeout = 60\n'
        '[agents]\nstarting_agent = "a"\nturn_timeout = 60\n' + HUMAN
    )
    code, out, _ = check_config(tmp_path, text, capsys)
    assert code == 0
    assert (
        "  warning: agents.models.gpt.timeout (60s) is not below half of agents.turn_timeout"
        " (60s): a request that hangs uses up the turn before it can be tried again"
        " (max_retries)\n"
    ) in out


def test_serve_names_the_key_of_a_tool_it_cannot_import(tmp_path: Path) -> None:
    """The same error at serve's start, as a real process: before the store is opened, with no
    traceback of a half-started application."""
    path = tmp_path / "c.toml"
    store = f'[server]\nport = 0\n[store]\nurl = "sqlite:///{tmp_path}/gw.db"\n'
    agents = '[agents]\nstarting_agent = "a"\n' + RULES_AGENT.format(name="a", tools='"nope.x.f"')
    path.write_text(store + agents, encoding="utf-8")
    result = run_cli("serve", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 1
    expected = f"error: {path}: agents.list[0].tools[0]: cannot import 'nope.x.f': "
    assert result.stderr.splitlines()[-1] == expected + "No module named 'nope'"
    assert "Traceback" not in result.stderr
    assert '"level": "ERROR"' not in result.stderr
    assert not (tmp_path / "gw.db").exists()


@pytest.mark.parametrize("command", ["check-config", "serve"])
def test_a_bad_value_from_the_environment_names_the_variable_never_the_value(
    tmp_path: Path, command: str
) -> None:
    """config.example.toml's port = "${GATEWAY_PORT:-8080}", as a real process: pydantic's
    "Input should be a valid integer" said neither where the value came from nor what it is."""
    result = run_cli(command, "--config", str(EXAMPLE), env={"GATEWAY_PORT": "80a"}, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"error: {EXAMPLE}: server.port: must be a whole number (the value comes from"
        " ${GATEWAY_PORT})\n"
    )
    assert list(tmp_path.iterdir()) == []  # serve stopped before the store or the token file


def test_serve_prints_a_config_error_without_pydantics_prefix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[agents]\nstarting_agent = "nobody"\n' + HUMAN, encoding="utf-8")
    code, _ = cli("serve", "--config", str(path))
    assert code == 1
    expected = "agents.starting_agent: agent 'nobody' is not declared (declared: a)"
    assert capsys.readouterr().err == config_error(tmp_path, expected)


def test_check_config_before_the_first_start_leaves_the_token_to_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's path: check-config on a fresh checkout writes nothing and says where the
    token will be; `make run` (serve) makes data/admin-token and prints the token once it has
    started (tests/e2e/test_first_start.py), so loading its config makes nothing either."""
    monkeypatch.chdir(tmp_path)
    code, out = cli("check-config", "--config", str(EXAMPLE))
    captured = capsys.readouterr()
    assert code == 0
    assert list(tmp_path.iterdir()) == []  # no data/, no data/admin-token
    assert "Admin token" not in captured.out + captured.err
    assert (
        "  admin token: none yet: the first start of `gateway serve` makes one in"
        " data/admin-token (mode 0600) and prints it once\n"
    ) in out

    served: list[tuple[Settings, str | None]] = []

    def serve(settings: Settings, token_source: str | None) -> None:
        served.append((settings, token_source))  # what serve would run with

    monkeypatch.setattr(app, "serve", serve)
    assert cli("serve", "--config", str(EXAMPLE))[0] == 0
    assert list(tmp_path.iterdir()) == []  # serve makes it, once bound and started
    assert served[0][0].admin.token.get_secret_value() == ""
    assert served[0][1] == "the admin token in data/admin-token"
    assert "Admin token" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("${WHATSAPP_ACCESS_TOKEN", "malformed reference: a '${' with no closing '}'"),
        (
            "$WHATSAPP_ACCESS_TOKEN",
            "a value of the form $NAME is not read from the environment: write ${NAME}",
        ),
        (
            "${WHATSAPP_ACCESS_TOKEN-EAAsecretDefault}",
            "malformed reference: a '${' is not followed by a variable name and then '}' or"
            " ':-' (the forms are ${NAME} and ${NAME:-default})",
        ),
        (
            "${WHATSAPP_ACCESS_TOKEN:-${DEMO_TOKEN:-demo}}",
            "malformed reference: a '${' inside another reference (references do not nest)",
        ),
    ],
)
def test_check_config_refuses_a_mistyped_reference_it_took_as_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, problem: str
) -> None:
    """All but ${NAME-default} passed as OK, with the reference's text used as the access
    token; that one was refused with its default, maybe a secret, quoted."""
    number = f'[[whatsapp.numbers]]\nphone_number_id = "1"\naccess_token = "{value}"\n'
    code, out, err = check_config(
        tmp_path, HUMAN + '[agents]\nstarting_agent = "a"\n' + number, capsys
    )
    assert (code, out) == (1, "")
    assert err == config_error(tmp_path, f"whatsapp.numbers[0].access_token: {problem}")


MODULE_AGENTS = """from webhook_bot_gateway.agents import Agent, RulesModel, tool

@tool
def t_ok(text: str) -> str:
    \"\"\"Say it back.\"\"\"
    return text

AGENTS = [Agent("a", kind="human"), {agent}]
"""


def module_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> str:
    """A config whose ``agents.module`` is ``name``, a module of ``source`` in ``tmp_path``."""
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(tmp_path)
    return f'[agents]\nstarting_agent = "a"\nmodule = "{name}"\n'


@pytest.mark.parametrize(
    ("agent", "problem"),
    [
        (
            'Agent("x1", tools=["mod_str_tool.t_ok"], model=RulesModel([]))',
            "agent 'x1': tools[0] is a str, not a function decorated with @tool (a dotted path"
            " names a tool only in [[agents.list]]: import the function)",
        ),
        (
            'Agent("x1", tools=[t_ok, print], model=RulesModel([]))',
            "agent 'x1': tools[1] is a builtin_function_or_method, not a function decorated"
            " with @tool",
        ),
        (
            'Agent("x1", kind="robot")',
            "agent 'x1': kind: Input should be 'bot' or 'human'",
        ),
        (
            'Agent("x1", model=RulesModel([]), handoff_history="summery")',
            "agent 'x1': handoff_history: Input should be 'full', 'messages' or 'summary'",
        ),
        (
            'Agent("x1", kind="human", handoff_reply="  ")',
            "agent 'x1': handoff_reply: must hold text, or be \"\" for none",
        ),
        ('Agent("x1", model="nope")', "agent 'x1': model 'nope' is not declared"),
        (
            'Agent("x1", kind="human", model=RulesModel([]))',
            "agent 'x1': a human agent has no model or tools",
        ),
        (
            'Agent("x 1", model=RulesModel([]))',
            "agent 'x 1': name: String should match pattern '^[A-Za-z0-9_-]{1,52}$'",
        ),
    ],
    ids=[
        "tool-as-dotted-path",
        "tool-not-decorated",
        "unknown-kind",
        "unknown-handoff-history",
        "blank-handoff-reply",
        "undeclared-model",
        "human-with-model",
        "bad-name",
    ],
)
def test_check_config_refuses_a_module_agent_as_a_list_entry_naming_agents_module(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    agent: str,
    problem: str,
) -> None:
    """The module's agents are validated as ``[[agents.list]]`` entries are: one error line
    naming the key, not a traceback, and no "OK" for a value the list would refuse."""
    name = "mod_" + request.node.callspec.id.replace("-", "_")
    text = module_config(tmp_path, monkeypatch, name, MODULE_AGENTS.format(agent=agent))
    code, out, err = check_config(tmp_path, text, capsys)
    assert (code, out) == (1, "")
    assert err == config_error(tmp_path, f"agents.module: {problem}")


def test_check_config_names_where_a_module_raised_never_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exception's message is the module's own and may hold a secret."""
    source = 'x = 1\nraise RuntimeError("boom with postgres://u:pw@h/db")\n'
    text = module_config(tmp_path, monkeypatch, "mod_raises", source)
    code, out, err = check_config(tmp_path, text, capsys)
    assert (code, out) == (1, "")
    raised_at = f"{tmp_path / 'mod_raises.py'}:2"
    expected = f"agents.module: cannot import 'mod_raises': RuntimeError raised at {raised_at}"
    assert err == config_error(tmp_path, expected)
    assert "pw@h" not in err


def test_serve_refuses_a_module_agent_whose_tool_is_a_dotted_path(tmp_path: Path) -> None:
    """As a real process (``python -m`` finds the module in the working directory): one
    line, no traceback, before the store is opened."""
    agent = 'Agent("x1", tools=["my_agents.t_ok"], model=RulesModel([]))'
    (tmp_path / "my_agents.py").write_text(MODULE_AGENTS.format(agent=agent), encoding="utf-8")
    path = tmp_path / "c.toml"
    store = f'[server]\nport = 0\n[store]\nurl = "sqlite:///{tmp_path}/gw.db"\n'
    path.write_text(store + '[agents]\nstarting_agent = "a"\nmodule = "my_agents"\n')
    result = run_cli("serve", "--config", str(path), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: {path}: agents.module: agent 'x1': tools[0] is a str, not a function decorated"
        " with @tool (a dotted path names a tool only in [[agents.list]]: import the function)"
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "gw.db").exists()


@pytest.mark.parametrize(
    ("store", "shown"),
    [
        ("sqlite:///data/gw.db", "store: sqlite:///data/gw.db; lease 40 s"),
        (
            "postgresql://gw@db.internal/gw",
            "store: postgresql://gw@db.internal/gw; up to 5 connections; lease 40 s",
        ),
    ],
)
def test_check_config_shows_the_stores_lease_and_pool(
    tmp_path: Path, store: str, shown: str
) -> None:
    """The lease is what a failover must not outlast (docs/deployment.md): the summary says it."""
    path = tmp_path / "c.toml"
    path.write_text(
        f'[store]\nurl = "{store}"\nlease_seconds = 40\npool_size = 5\n'
        '[agents]\nstarting_agent = "a"\n' + HUMAN,
        encoding="utf-8",
    )
    code, out = cli("check-config", "--config", str(path))
    assert code == 0
    assert f"  {shown}\n" in out


def test_check_config_says_the_admin_api_is_off_without_a_token_or_a_token_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It printed only `admin token: (empty)`, as if a token were merely unset; the console and
    the sandbox's simulator then refuse every sign-in."""
    code, out, _ = check_config(tmp_path, '[agents]\nstarting_agent = "a"\n' + HUMAN, capsys)
    assert code == 0
    assert (
        "  admin token: (empty): admin.token and admin.token_file are empty, so the admin API"
        " and the console are off (403 admin_disabled)\n"
    ) in out
