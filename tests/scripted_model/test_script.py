"""Script parsing and the pure request -> reply mapping."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from arenad.errors import UserError
from arenad.scripted_model.script import (
    Script,
    ScriptError,
    assistant_count,
    first_user_text,
    is_title_request,
    load_script,
    parse_script,
    plan_reply,
    select_conversation,
)

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "scripted-model" / "fix-bug.toml"

BASIC = """
final_text = "All done."
[usage]
prompt_tokens = 500
completion_tokens = 40

[[models]]
id = "m1"
[[models]]
id = "m2"

[[conversations]]
name = "fix"
match = "fix the bug"
[[conversations.steps]]
text = "Looking."
[[conversations.steps.tool_calls]]
name = "read"
arguments = { filePath = "a.py" }
[[conversations.steps.tool_calls]]
name = "bash"
id = "call_custom"
arguments = { command = "ls", nested = { n = 1, list = [1, 2] } }
[conversations.steps.usage]
prompt_tokens = 1000
cached_tokens = 200
[[conversations.steps]]
text = "Fixed."
delay_s = 2.5
chunk_delay_s = 0.25

[[conversations]]
name = "regex-m2"
regex = "(?i)^REFACTOR\\\\b"
model = "m2"
final_text = "Refactored."
[[conversations.steps]]
text = "Refactoring."

[[conversations]]
name = "catch-all"
[[conversations.steps]]
text = "Default answer."
"""


def body(*messages: tuple[str, Any], model: str = "m1") -> dict[str, Any]:
    return {
        "model": model,
        "stream": True,
        "messages": [{"role": role, "content": content} for role, content in messages],
    }


SYSTEM = ("system", "You are opencode, an interactive CLI tool.")


@pytest.fixture
def script() -> Script:
    return parse_script(BASIC, "basic.toml")


# -- parsing ----------------------------------------------------------------------------------


def test_parses_the_basic_script(script: Script) -> None:
    assert script.model_ids == ["m1", "m2"]
    assert [c.name for c in script.conversations] == ["fix", "regex-m2", "catch-all"]
    assert script.conversations[2].is_default
    usage = script.default_usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (500, 40, 0)


def test_the_example_script_parses() -> None:
    script = load_script(EXAMPLE)
    assert script.model_ids == ["fixer"]
    assert len(script.conversations[0].steps) == 4


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('bogus = 1\n[[models]]\nid = "m"\n', "unknown field `bogus`"),
        ('[[models]]\nid = "m"\ncolour = "red"\n', "unknown field `colour` - at `models[0]`"),
        (
            '[[models]]\nid = "m"\n[[conversations]]\n[[conversations.steps]]\ntext = "x"\n'
            "delay = 3\n",
            "unknown field `delay` - at `conversations[0].steps[0]`",
        ),
        (
            '[[models]]\nid = "m"\n[[conversations]]\n[[conversations.steps]]\n'
            '[[conversations.steps.tool_calls]]\nname = "x"\nargs = {}\n',
            "unknown field `args` - at `conversations[0].steps[0].tool_calls[0]`",
        ),
        (
            '[usage]\nprompt = 3\n[[models]]\nid = "m"\n',
            "unknown field `prompt` - at `usage`",
        ),
    ],
)
def test_an_unknown_key_is_an_error_naming_it(text: str, needle: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(text, "s.toml")
    message = str(info.value)
    assert message.startswith("s.toml: ")
    assert needle in message


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "missing required field `models`"),
        ("models = []\n", "at least one [[models]]"),
        ('[[models]]\nid = "m"\n[[models]]\nid = "m"\n', "duplicate id(s) m"),
        ('[[models]]\nid = "a/b"\n', "without '/'"),
        (
            '[[models]]\nid = "m"\n[[conversations]]\nmatch = "a"\nregex = "b"\n',
            "`match` or `regex`, not both - at `conversations[0]`",
        ),
        ('[[models]]\nid = "m"\n[[conversations]]\nregex = "("\n', "does not compile"),
        ('[[models]]\nid = "m"\n[[conversations]]\nmodel = "zz"\n', "'zz' is not one of"),
        (
            '[[models]]\nid = "m"\n[[conversations]]\n[[conversations.steps]]\ndelay_s = 1\n',
            "a step needs a non-empty `text`",
        ),
        (
            '[[models]]\nid = "m"\n[[conversations]]\n[[conversations.steps]]\ntext = "x"\n'
            "error = { status = 500 }\n",
            "cannot also have text",
        ),
        (
            '[[models]]\nid = "m"\n[[conversations]]\n[[conversations.steps]]\n'
            "error = { status = 200 }\n",
            "HTTP error status",
        ),
        (
            '[[models]]\nid = "m"\n[[conversations]]\n[[conversations.steps]]\ntext = "x"\n'
            "delay_s = -1\n",
            "delay_s must be >= 0",
        ),
        (
            '[usage]\nprompt_tokens = 10\ncached_tokens = 11\n[[models]]\nid = "m"\n',
            "cached_tokens (11) exceeds prompt_tokens (10) - at `usage`",
        ),
        (
            '[[models]]\nid = "m"\n[[conversations]]\n[[conversations.steps]]\ntext = "x"\n'
            "[conversations.steps.usage]\nreasoning_tokens = 999\n",
            "at `conversations[0].steps[0].usage`",
        ),
        ('chunk_chars = 0\n[[models]]\nid = "m"\n', "chunk_chars must be > 0"),
        ('final_text = 3\n[[models]]\nid = "m"\n', "Expected `str`, got `int` - at `final_text`"),
        ("[[models]\n", "not valid TOML"),
    ],
)
def test_invalid_scripts_say_what_and_where(text: str, needle: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(text, "s.toml")
    assert needle in str(info.value)


def test_script_error_is_a_user_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(UserError, match=r"nope\.toml: cannot read the script"):
        load_script(missing)


# -- conversation selection -------------------------------------------------------------------


def test_conversation_is_chosen_by_the_first_user_message(script: Script) -> None:
    chosen = select_conversation(script, "please fix the bug in a.py\n", "m1")
    assert chosen is not None and chosen[1].name == "fix"
    # A later user message does not change the choice: only the first one counts.
    request = body(SYSTEM, ("user", "hello"), ("assistant", "hi"), ("user", "fix the bug"))
    reply = plan_reply(script, request)
    assert reply.conversation == "catch-all"


def test_regex_and_model_restrict_the_choice(script: Script) -> None:
    assert plan_reply(script, body(("user", "refactor this"), model="m2")).conversation == (
        "regex-m2"
    )
    # Same prompt, other model: the regex conversation is m2-only.
    assert plan_reply(script, body(("user", "refactor this"), model="m1")).conversation == (
        "catch-all"
    )
    # \b in the regex: "refactoring" does not match.
    assert plan_reply(script, body(("user", "refactoring"), model="m2")).conversation == (
        "catch-all"
    )


def test_content_parts_are_read_as_text() -> None:
    request = {
        "messages": [
            {"role": "system", "content": "sys"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "fix"}, {"type": "text", "text": "the bug"}],
            },
        ]
    }
    assert first_user_text(request) == "fix\nthe bug"


def test_no_match_and_no_default_answers_final_text() -> None:
    script = parse_script(
        '[[models]]\nid = "m"\n[[conversations]]\nmatch = "x"\n'
        '[[conversations.steps]]\ntext = "t"\n'
    )
    reply = plan_reply(script, body(("user", "something else"), model="m"))
    assert (reply.kind, reply.text, reply.finish_reason) == ("fallback", "Done.", "stop")


# -- stateless step walking -------------------------------------------------------------------


def test_steps_are_walked_by_counting_assistant_messages(script: Script) -> None:
    history: list[tuple[str, Any]] = [SYSTEM, ("user", "fix the bug please")]
    first = plan_reply(script, body(*history))
    assert (first.kind, first.step, first.finish_reason) == ("step", 0, "tool_calls")
    assert first.text == "Looking."
    assert [(c.id, c.name) for c in first.tool_calls] == [
        ("call_1_1", "read"),
        ("call_custom", "bash"),
    ]
    assert msgspec.json.decode(first.tool_calls[0].arguments) == {"filePath": "a.py"}
    assert msgspec.json.decode(first.tool_calls[1].arguments) == {
        "command": "ls",
        "nested": {"n": 1, "list": [1, 2]},
    }
    # Step usage overrides the defaults field by field.
    assert first.usage.prompt_tokens == 1000
    assert first.usage.cached_tokens == 200
    assert first.usage.completion_tokens == 40

    history += [("assistant", "Looking."), ("tool", "a.py contents"), ("tool", "ls output")]
    second = plan_reply(script, body(*history))
    assert (second.step, second.text, second.finish_reason) == (1, "Fixed.", "stop")
    assert (second.delay_s, second.chunk_delay_s) == (2.5, 0.25)
    assert second.usage.prompt_tokens == 500  # back to the defaults

    history += [("assistant", "Fixed."), ("user", "anything else?")]
    third = plan_reply(script, body(*history))
    assert (third.kind, third.conversation, third.text) == ("final", "fix", "All done.")
    # The same request always gets the same answer: no state in the server.
    assert plan_reply(script, body(*history)) == third


def test_conversation_final_text_overrides_the_scripts(script: Script) -> None:
    history = [("user", "refactor it"), ("assistant", "Refactoring.")]
    assert plan_reply(script, body(*history, model="m2")).text == "Refactored."


def test_assistant_count_ignores_other_roles() -> None:
    request = body(SYSTEM, ("user", "a"), ("assistant", None), ("tool", "x"), ("assistant", "b"))
    assert assistant_count(request) == 2


# -- title generation ------------------------------------------------------------------------


def test_title_request_gets_the_title_and_never_a_step(script: Script) -> None:
    # The shape opencode 1.18.33 sends when `run` has no --title (observed).
    request = {
        "model": "m1",
        "stream": True,
        "messages": [
            {"role": "system", "content": "You are a title generator. You output ONLY..."},
            {"role": "user", "content": "Generate a title for this conversation:\n"},
            {"role": "user", "content": "fix the bug please\n"},
        ],
    }
    assert is_title_request(request)
    reply = plan_reply(script, request)
    assert (reply.kind, reply.text, reply.tool_calls) == ("title", "Scripted session", ())


def test_title_is_recognised_by_the_system_prompt_too() -> None:
    request = body(("system", "You are a title generator."), ("user", "fix the bug"))
    assert is_title_request(request)
    assert not is_title_request(body(SYSTEM, ("user", "fix the bug")))
