"""A scripted model server: the LLM test double and a dry-run model.

``arenad scripted-model --script FILE`` serves a TOML script (format: ``script``) on
``/v1/chat/completions``, ``/v1/responses`` (OpenAI) and ``/v1/messages`` (Anthropic);
``opencode_config`` points opencode at it.
"""

from arenad.scripted_model.opencode_config import opencode_config, opencode_config_for_script
from arenad.scripted_model.script import (
    Conversation,
    Cost,
    ErrorReply,
    Model,
    Reply,
    Script,
    ScriptError,
    Step,
    ToolCall,
    Usage,
    load_script,
    parse_script,
    plan_reply,
)
from arenad.scripted_model.server import (
    ScriptedModelServer,
    ThreadedScriptedModel,
    run_in_thread,
    serve,
)

__all__ = [
    "Conversation",
    "Cost",
    "ErrorReply",
    "Model",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptedModelServer",
    "Step",
    "ThreadedScriptedModel",
    "ToolCall",
    "Usage",
    "load_script",
    "opencode_config",
    "opencode_config_for_script",
    "parse_script",
    "plan_reply",
    "run_in_thread",
    "serve",
]
