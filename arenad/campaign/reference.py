"""The campaign-file reference (``docs/campaign-file.md``), generated from the structs.

Every key of every table comes from the structs a campaign file decodes into
(:class:`arenad.campaign.load.CampaignFile`, walked with ``msgspec.inspect``): its type and
default are read from the code, so they cannot drift. What a key means comes from a
``Meta(description=...)`` on the field when it has one, else from :data:`KEYS` below,
keyed by struct and field name (so the structs stay small). A key with no meaning fails
``tests/campaign/test_reference.py``, as does a committed document that differs from what
:func:`render` makes now; ``scripts/campaign-doc`` writes it again.

Pure: structs in, text out (the script does the one write).
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import msgspec.inspect as mi

from arenad.campaign.load import (
    DEFAULT_LOOPS_REPO,
    DEFAULT_MAX_CELLS,
    MAX_ARM_NAME,
    MAX_CAMPAIGN_NAME,
    MAX_GRACE_S,
    MAX_INSTANCE_ID,
    MAX_TIMEOUT_S,
    CampaignFile,
    InstanceRow,
)
from events.specs import DEFAULT_EXCLUDES, SUPERVISOR_DEFAULT_ENV_KNOBS, WORKER_PROMPT_SUFFIX

DOC_PATH = "docs/campaign-file.md"
COMMAND = "scripts/campaign-doc"

# What each key means, by "<Struct>.<field>". One line each; the type and the default are
# printed from the struct, so they are not repeated here.
KEYS: dict[str, str] = {
    # -- the top level
    "CampaignFile.name": "The campaign's name: its directory and the first part of every cell id.",
    "CampaignFile.suite": "The benchmark suite, recorded in every ledger line.",
    "CampaignFile.split": "Which split of the suite the campaign evaluates, recorded in every "
    "ledger line.",
    "CampaignFile.reps": "Repetitions: cells per (instance, arm).",
    "CampaignFile.breaker_after": "The circuit breaker: this many consecutive infrastructure"
    " failures with the same cause (their stage) pause the campaign's unfinished cells, with"
    " one campaign.breaker-tripped naming it; `arenad resume --campaign` lets them go on."
    " 0: never.",
    "CampaignFile.max_parallel": "This campaign's cap on cells at once; unset, only the "
    "daemon's `--max-parallel` applies.",
    "CampaignFile.max_cells": "Refuse a campaign that expands to more cells (a typo in `reps` "
    "must not make millions).",
    "CampaignFile.experiment_id": "An experiment id carried into every ledger line.",
    "CampaignFile.instances": "Instance rows written inline, as `[[instances]]` tables (see "
    "[Instance rows](#instance-rows)); or use `instances_file`, not both.",
    "CampaignFile.instances_file": "Instance rows, relative to the campaign file: `.jsonl`, "
    "`.ndjson`, `.json` (an array), `.parquet`, a glob of parquet shards, or a directory "
    "(parquet shards, or a dataset saved by `datasets`' `save_to_disk`).",
    "CampaignFile.instance_ids": "Keep only these rows (each must exist; file order is kept). "
    "Applied first.",
    "CampaignFile.instance_filter": "Then keep only ids this Python regex matches (`re.search`).",
    "CampaignFile.limit": "Then keep only the first N rows of what is left.",
    "CampaignFile.budget": "A spend cap; see [`[budget]`](#budget).",
    "CampaignFile.verify_template": "The verify command of a row with no `verify_cmd`; "
    "`{field}` reads any field of the row (a non-string as JSON).",
    "CampaignFile.verify_timeout_s": "Seconds the verify command may run.",
    "CampaignFile.max_output_bytes": "Bytes kept of each of the agent's stdout and stderr "
    "files; later output is dropped and the cut recorded (`run.output-capped`).",
    "CampaignFile.excludes": "Glob patterns left out of the patch (the tests); unset: "
    "`DEFAULT_EXCLUDES` (below). `[]` is refused.",
    "CampaignFile.materializer": "How each workspace is made; see "
    "[`[materializer]`](#materializer).",
    "CampaignFile.secrets": "Where the model keys come from; see [`[secrets]`](#secrets).",
    "CampaignFile.judge": "A judge run after verify; see [`[judge]`](#judge).",
    "CampaignFile.sandbox": "What an agent run sees; see [`[sandbox]`](#sandbox).",
    "CampaignFile.candidate": "The improvement-loop candidate evaluated; see "
    "[`[candidate]`](#candidate).",
    "CampaignFile.executor": "Where the cells run; see [`[executor]`](#executor).",
    "CampaignFile.arms": "The agents compared, one `[[arms]]` table each (at least one); "
    "`kind` picks the table's keys below.",
    # -- [budget]
    "BudgetFile.max_usd": "The daemon starts no cell of the campaign once its spend reaches "
    "this (USD); `arenad set-budget` changes it.",
    "BudgetFile.abort_running": "Reaching the cap also aborts the cells running then.",
    "BudgetFile.expected_usd_per_attempt": "What an attempt is expected to cost (USD, finite, "
    "> 0) until one of its arm ended with a known cost: each running cell reserves it, so a "
    "fresh campaign starts several cells at once without overshooting the cap by more than "
    'their overruns (docs/operations.md, "Budget reservations"). Unset: one cell at a time '
    "until then.",
    # -- [materializer]
    "MaterializerFile.kind": "`image`: the instance's docker image (the default when a row "
    "names one); `git`: a clone of `source` at the row's `base_commit` (an explicit "
    "opt-in).",
    "MaterializerFile.source": "`git`: a local path (relative to the campaign file) or URL "
    "to clone; unset: the row's `repo`.",
    # -- [secrets]
    "SecretsFile.dir": "The directory holding the env files; model-touching children run "
    "with it as their cwd.",
    "SecretsFile.env_files": "Env file names in `dir`, each passed as `-f NAME` to the "
    "wrapper. arenad never opens them.",
    "SecretsFile.wrapper": "The command that loads the env files and runs the child: "
    "`<wrapper> -f F... -- bash -c SCRIPT`.",
    # -- [sandbox]
    "SandboxFile.kind": "`bwrap`: every agent run, verify and judge in a bubblewrap "
    "sandbox; `docker`: the agent runs in a container of the instance's image (verify and "
    "a command judge as with `bwrap`; see docs/sandbox.md); `none`: the explicit opt-out.",
    "SandboxFile.image": "`kind = \"docker\"`: the agent's image (unset: the instance's, "
    "as the image materializer names it).",
    "SandboxFile.workdir": '`kind = "docker"`: where the cell\'s workspace is mounted in '
    "the container (the agent's working directory).",
    "SandboxFile.read_only": "Paths shown read-only inside besides the system (an agent CLI "
    "installed somewhere unusual, a dataset).",
    "SandboxFile.memory": 'Memory each agent run, verify and judge may use (`"4GiB"`, bytes, '
    'or `"unlimited"`); past it the run\'s whole cgroup is killed and the outcome says '
    "`out of memory` (see docs/sandbox.md).",
    "SandboxFile.pids": 'Processes and threads each run may have at once (or `"unlimited"`); '
    "a fork flood ends only its own cell, as `pids limit`.",
    "SandboxFile.cpus": 'CPUs each run may use (a CFS quota; fractions allowed, or `"unlimited"`).',
    "SandboxFile.disk": "Bytes the cell's workspace may hold; past it the agent run is aborted "
    "with `disk limit`.",
    "SandboxFile.network": "`model`: the agent reaches its model endpoints and nothing else "
    "(its own network namespace); `none`: nothing; `host`: the machine's network. Unset: "
    "`model` for an arm that uses a model, else `none` (see docs/network.md).",
    # -- [judge]
    "JudgeFile.command": "A shell command run in the workspace after verify; it prints a "
    "verdict JSON.",
    "JudgeFile.name": "The judge's name, recorded with its verdict.",
    "JudgeFile.timeout_s": "Seconds the judge may run.",
    "JudgeFile.kind": "`command`: `command` on the grading checkout; `swebench`: the official "
    "SWE-bench grade in a fresh container of the instance image (see docs/swebench.md).",
    "JudgeFile.test_cmd": "kind = `swebench`: the test command, where swebench has no spec for "
    "the repository.",
    "JudgeFile.log_parser": "kind = `swebench`: the name of swebench's log parser for "
    "`test_cmd`'s output (e.g. `pytest`).",
    "JudgeFile.memory_mb": "kind = `swebench`: the judge container's memory, MiB.",
    "JudgeFile.pids": "kind = `swebench`: the judge container's process limit.",
    "JudgeFile.cpus": "kind = `swebench`: the judge container's CPUs (unset: no limit).",
    # -- [verify]
    "CampaignFile.verify": "Where verify and judge run; see [`[verify]`](#verify).",
    "VerifyFile.verify_in": "`checkout`: a fresh checkout of the base commit with the stored "
    "patch applied (the agent's workspace is never graded); `workspace`: the agent's own "
    "workspace, recorded as self-reported (see docs/grading.md).",
    # -- [gateway]
    "CampaignFile.gateway": "The model gateway; see [`[gateway]`](#gateway).",
    "GatewayFile.kind": "`gateway`: a solo, supervisor or model-using command cell's model "
    "calls go through the daemon's model "
    "gateway (recorded once, the provider key kept out of the cell, caps enforced per call); "
    "`none`: the agent reaches its provider itself (see docs/gateway.md).",
    "GatewayFile.max_usd": "Per-attempt spend cap enforced at the gateway before each call "
    "(overshoot at most one call).",
    "GatewayFile.max_tokens": "Per-attempt token cap enforced at the gateway before each call.",
    # -- [executor]
    "ExecutorFile.kind": "`local`: the daemon's machine; `ray`: a node of the daemon's Ray "
    "cluster (the daemon must run that executor).",
    "ExecutorFile.resources": "Ray: what each cell holds on its node; unset: "
    "`{ arenad_slot = 1 }`.",
    # -- [candidate]
    "CandidateFile.generation": "The candidate's generation (`-1` with `index = -1`: the "
    "baseline).",
    "CandidateFile.index": "The candidate's index in its generation.",
    "CandidateFile.id": "The ledger's `candidate_id`; unset: `gen<generation>-cand<index>` "
    "(or `baseline`).",
    # -- [[arms]] kind = "solo": one opencode run
    "SoloArmFile.name": "The arm's name: part of the cell id and of the run dir.",
    "SoloArmFile.model": "The opencode model, `provider/model` (`opencode run -m`).",
    "SoloArmFile.timeout_s": "Seconds the agent may run; then its process group is ended.",
    "SoloArmFile.prompt_suffix": "Appended to the problem statement to make the prompt.",
    "SoloArmFile.opencode_bin": "The opencode executable (a name on `PATH` or a path).",
    "SoloArmFile.extra_args": "More arguments for `opencode run`, after arenad's own.",
    "SoloArmFile.kill_grace_s": "Seconds between TERM and KILL when the run is ended.",
    # -- [[arms]] kind = "supervisor": the loops driver and its opencode workers
    "SupervisorArmFile.name": "The arm's name: part of the cell id and of the run dir.",
    "SupervisorArmFile.worker_model": "The model of the opencode workers the driver spawns.",
    "SupervisorArmFile.driver_model": "The model of the driver itself.",
    "SupervisorArmFile.model": "Accepted and not used (the two models above are).",
    "SupervisorArmFile.timeout_s": "Seconds the driver may run; then its process group is ended.",
    "SupervisorArmFile.budget": "The driver's `budget` parameter (its step budget).",
    "SupervisorArmFile.max_sandboxes": "The driver's `maxSandboxes`: workers at once.",
    "SupervisorArmFile.max_usd": "The driver's own spend cap, `maxUsd` (finite, > 0).",
    "SupervisorArmFile.max_depth": "The driver's `maxDepth`.",
    "SupervisorArmFile.env_knobs": "Environment for the driver, over "
    "`SUPERVISOR_DEFAULT_ENV_KNOBS` (below); `DRIVER_CANCEL_TIMEOUT_MS` (default 30000) + "
    "10 s is its kill grace.",
    "SupervisorArmFile.loops_repo": "The loops checkout (an existing directory): the driver's cwd.",
    "SupervisorArmFile.extension_path": "The driver's extension; unset: "
    "`<loops_repo>/extensions/pi/loops.ts`.",
    "SupervisorArmFile.shim_path": "The driver's shim; unset: "
    "`<loops_repo>/scripts/run-supervisor.mjs`.",
    "SupervisorArmFile.driver_cmd": "The driver's argv, with `{shim}` `{extension}` `{ws}` "
    "`{params}` `{run_dir}` `{loops_repo}`; unset: `node --import tsx {shim} {extension} "
    "{ws} {params}`.",
    "SupervisorArmFile.init_opencode_store": "Create and migrate the cell's opencode store "
    "once before the driver starts (workers starting at once would race to create it).",
    "SupervisorArmFile.opencode_bin": "The opencode executable that creates the store.",
    # -- [[arms]] kind = "command": any agent CLI
    "CommandArmFile.name": "The arm's name: part of the cell id and of the run dir.",
    "CommandArmFile.argv": "The command, with `{ws}` `{prompt_file}` `{run_dir}` `{model}` "
    "(a literal brace is `{{` or `}}`); run in the workspace.",
    "CommandArmFile.model": "What `{model}` becomes, and the ledger's model.",
    "CommandArmFile.timeout_s": "Seconds the agent may run; then its process group is ended.",
    "CommandArmFile.prompt_suffix": "Appended to the problem statement to make the prompt.",
    "CommandArmFile.env": "More environment for the command.",
    "CommandArmFile.uses_model": "Whether it touches a model: then it runs under the "
    "secrets wrapper, and a provider failure is an infrastructure failure.",
    "CommandArmFile.kill_grace_s": "Seconds between TERM and KILL when the run is ended.",
    "CommandArmFile.output": "`jsonl`: each stdout line is a JSON event (a bad line is recorded "
    "malformed); `text`: plain text, each line ingested as text.",
    # -- instance rows
    "InstanceRow.instance_id": "The instance's id: part of the cell id and of its paths.",
    "InstanceRow.repo": "The repository (`owner/name`); the `git` materializer's default source.",
    "InstanceRow.base_commit": "The commit the workspace starts from and the patch is taken "
    "against.",
    "InstanceRow.problem_statement": "The task: the prompt's first part.",
    "InstanceRow.image": "The docker image of the `image` materializer; unset: "
    '`swebench/sweb.eval.x86_64.<id>:latest` when `[materializer] kind = "image"`.',
    "InstanceRow.verify_cmd": "This row's verify command (also read from `verify`); unset: "
    "the campaign's `verify_template`.",
}

# What each table is for, by struct name (the heading says where it sits).
TABLES: dict[str, str] = {
    "CampaignFile": "The keys at the top of the file.",
    "BudgetFile": "Optional. A spend cap, checked by the daemon before each cell starts. "
    "Spend is what the log knows: the recovered cost of ended attempts plus the live cost of "
    "running ones. A command arm's cost is unknown and never counts as $0.",
    "MaterializerFile": "Optional. How each cell's workspace is made.",
    "SecretsFile": "Optional. How a model-touching child (a solo or supervisor agent, a "
    "command arm with `uses_model`) gets its keys; see [Credentials](#credentials).",
    "SandboxFile": "Optional. What every agent run, verify command and judge sees.",
    "JudgeFile": "Optional. A judge, run after verify.",
    "VerifyFile": "Optional. Where the grade is made.",
    "GatewayFile": "Optional. The model gateway (on by default for solo arms and command arms"
    " that use a model).",
    "ExecutorFile": "Optional. Where the cells run; a cell that asks for another executor "
    "than the daemon's fails at once.",
    "CandidateFile": "Optional. Which improvement-loop candidate the campaign evaluates (the "
    "ledger's `candidate_id`, `generation`, `candidate_index`).",
    "SoloArmFile": "One opencode run (`opencode run -m MODEL --format json`) in the workspace.",
    "SupervisorArmFile": "The loops driver, which spawns opencode workers in clone dirs.",
    "CommandArmFile": "Any agent CLI as an arm; its cost is unknown.",
    "InstanceRow": "One row of `instances_file` or of `[[instances]]`. Every other field of "
    "the row is kept verbatim (SWE-bench rows carry many) and `verify_template` can read it.",
}

# Defaults too long for a table cell, shown by name and spelled out at the end.
NAMED_DEFAULTS: dict[str, object] = {
    "WORKER_PROMPT_SUFFIX": WORKER_PROMPT_SUFFIX,
    "DEFAULT_EXCLUDES": list(DEFAULT_EXCLUDES),
    "SUPERVISOR_DEFAULT_ENV_KNOBS": SUPERVISOR_DEFAULT_ENV_KNOBS,
}
_LONG = 40


class Key(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the reference."""

    struct: str
    name: str
    type: str
    default: str
    meaning: str | None


class Table(msgspec.Struct, frozen=True, kw_only=True):
    """One table of the file: where it sits (``[budget]``), its struct and its keys."""

    heading: str
    anchor: str
    struct: str
    intro: str
    keys: list[Key]


def _unwrap(t: mi.Type) -> tuple[mi.Type, str | None]:
    description = None
    while isinstance(t, mi.Metadata):
        schema = t.extra_json_schema or {}
        description = description or schema.get("description")
        t = t.type
    return t, description


def type_name(t: mi.Type) -> str:
    """A TOML-flavoured name for a msgspec type (``list of string``, ``"a" | "b"``)."""
    t, _ = _unwrap(t)
    if isinstance(t, mi.UnionType):
        tags = {x.tag_field for x in t.types if isinstance(x, mi.StructType) and x.tag}
        if len(tags) == 1 and all(isinstance(x, mi.StructType) for x in t.types):
            return f"table, by `{tags.pop()}`"
        parts = [type_name(x) for x in t.types if not isinstance(x, mi.NoneType)]
        return " or ".join(parts)
    if isinstance(t, mi.LiteralType):
        return " | ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in t.values)
    if isinstance(t, mi.ListType):
        return f"list of {type_name(t.item_type)}"
    if isinstance(t, mi.DictType):
        if isinstance(_unwrap(t.value_type)[0], mi.AnyType):
            return "table"
        return f"table of {type_name(t.value_type)}"
    if isinstance(t, mi.StructType):
        return "table"
    names: dict[type, str] = {
        mi.StrType: "string",
        mi.IntType: "integer",
        mi.FloatType: "number",
        mi.BoolType: "boolean",
        mi.AnyType: "any",
    }
    return names.get(type(t), type(t).__name__)


def toml_value(value: object) -> str:
    """``value`` as it would be written in the file."""
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, str):
        return msgspec.json.encode(value).decode()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    return repr(value)


def default_of(field: mi.Field) -> str:
    if field.required:
        return "required"
    if field.default_factory is not msgspec.NODEFAULT:
        value: object = field.default_factory()
    else:
        value = field.default
    if value is None:
        return "unset"
    for name, named in NAMED_DEFAULTS.items():
        if value == named:
            return f"`{name}`"
    if isinstance(value, str) and value == DEFAULT_LOOPS_REPO:
        return f"`{toml_value(value)}`"
    shown = toml_value(value)
    return f"`{shown}`" if len(shown) <= _LONG else f"`{shown[:_LONG]}...`"


def _keys(struct: mi.StructType) -> list[Key]:
    name = struct.cls.__name__
    rows = []
    for field in struct.fields:
        _, described = _unwrap(field.type)
        rows.append(
            Key(
                struct=name,
                name=field.encode_name,
                type=type_name(field.type),
                default=default_of(field),
                meaning=described or KEYS.get(f"{name}.{field.name}"),
            )
        )
    return rows


def _structs_in(t: mi.Type) -> Iterator[mi.StructType]:
    t, _ = _unwrap(t)
    if isinstance(t, mi.StructType):
        yield t
    elif isinstance(t, mi.UnionType):
        for x in t.types:
            yield from _structs_in(x)
    elif isinstance(t, mi.ListType):
        yield from _structs_in(t.item_type)
    elif isinstance(t, mi.DictType):
        yield from _structs_in(t.value_type)


def _intro(struct: mi.StructType) -> str:
    name = struct.cls.__name__
    if name in TABLES:
        return TABLES[name]
    doc = (struct.cls.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split())


def tables() -> list[Table]:
    """Every table of a campaign file, in the order of its struct's fields."""
    top = mi.type_info(CampaignFile)
    assert isinstance(top, mi.StructType)
    found = [
        Table(
            heading="The top level",
            anchor="top-level",
            struct="CampaignFile",
            intro=_intro(top),
            keys=_keys(top),
        )
    ]
    for field in top.fields:
        for struct in _structs_in(field.type):
            if struct.tag is not None:
                heading = f'[[{field.encode_name}]] {struct.tag_field} = "{struct.tag}"'
                anchor = f"{field.encode_name}-{struct.tag}"
            else:
                heading = f"[{field.encode_name}]"
                anchor = field.encode_name
            found.append(
                Table(
                    heading=heading,
                    anchor=anchor,
                    struct=struct.cls.__name__,
                    intro=_intro(struct),
                    keys=_keys(struct),
                )
            )
    rows = mi.type_info(InstanceRow)
    assert isinstance(rows, mi.StructType)
    found.append(
        Table(
            heading="Instance rows",
            anchor="instance-rows",
            struct="InstanceRow",
            intro=_intro(rows),
            keys=_keys(rows),
        )
    )
    return found


def undescribed() -> list[str]:
    """Keys with no meaning, as ``<Struct>.<field>`` (each must be added to :data:`KEYS`)."""
    return [f"{k.struct}.{k.name}" for t in tables() for k in t.keys if not k.meaning]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


PREAMBLE = f"""\
# The campaign file

<!-- Generated by {COMMAND} from arenad/campaign/reference.py and the structs of
arenad/campaign/load.py: do not edit by hand. -->

A campaign file is TOML. `arenad submit FILE` reads it whole and checks every key and every
instance row before anything is written: an unknown key, a wrong type or a value out of
bounds is exit 2 with one line naming the file and the key (or the row), and nothing is
appended. `arenad submit --dry-run FILE` prints what it would create. Relative paths are
relative to the campaign file. `examples/` has one file per arm kind.

A minimal campaign:

```toml
name = "try-solo"
instances_file = "instances.jsonl"
verify_template = "python -m pytest -x -q {{test_file}}"

[[arms]]
name = "SOLO"
kind = "solo"
model = "zai-coding-plan/glm-5.2"
```

It makes one cell per (instance row, arm, rep), named `<campaign>:<instance_id>:<arm>:<rep>`.
Each cell's `cell.submitted` event records its resolved spec (`events/specs.py`: defaults
applied, paths absolute, the verify command rendered, the image named), so a cell runs again
the same way whatever happens to the file afterwards.
"""

CREDENTIALS = """\
## Credentials

A solo arm's opencode, a supervisor's driver and workers, and a command arm with
`uses_model = true` need model keys. arenad handles names, never values: it never opens an
env file or the auth file, and no key reaches the log, the ledger or its own logs.

- **`[secrets]`**: the child runs as `<wrapper> -f <env_file>... -- bash -c SCRIPT` with
  `dir` as its cwd (the wrapper is `dotenvx run` unless `wrapper` says otherwise), so the
  keys in the env files reach the agent's environment only.
- **opencode's own login** (`opencode auth login`), with or without `[secrets]`: the auth
  file (`$XDG_DATA_HOME/opencode/auth.json`, or the path in
  `SWE_ARENA_OPENCODE_AUTH_FILE`) is read by that bash, outside the sandbox, and handed in
  as `OPENCODE_AUTH_CONTENT`; the file itself stays hidden from the agent, and each cell's
  `HOME` is private.
- The verify command and the judge never see provider keys (`*_API_KEY`, `ANTHROPIC_*`,
  `OPENAI_*`, ...: stripped by name).
"""


def _limits() -> str:
    days = MAX_TIMEOUT_S / 86_400
    grace_days = MAX_GRACE_S / 86_400
    patch_bytes = MAX_INSTANCE_ID + 1 + MAX_ARM_NAME + len(".patch.partial")
    rows = [
        (
            "cells per campaign",
            f"`max_cells`, default {DEFAULT_MAX_CELLS}",
            "a typo in `reps` must not expand to millions of cells",
        ),
        ("campaign name", f"1-{MAX_CAMPAIGN_NAME} of `[A-Za-z0-9._-]`", "a directory name"),
        ("`instance_id`", f"1-{MAX_INSTANCE_ID} of `[A-Za-z0-9._-]`", "a directory name"),
        (
            "arm name",
            f"1-{MAX_ARM_NAME} of `[A-Za-z0-9._-]`",
            f"with the instance id in `<iid>.<arm>.patch.partial`: {patch_bytes} of 255 bytes",
        ),
        (
            "`timeout_s`, `verify_timeout_s`, `[judge] timeout_s`",
            f"finite, > 0, <= {days:g} days",
            "a run that ends at once, or never, is a mistake",
        ),
        ("`kill_grace_s`", f"finite, >= 0, <= {grace_days:g} day", ""),
        ("`reps`, `max_parallel`, `limit`, `max_output_bytes`, `max_cells`", ">= 1", ""),
        (
            "`[budget] max_usd`, `expected_usd_per_attempt`, `set-budget`, `--max-usd`",
            "finite, > 0",
            "",
        ),
        ("`instance_filter`", "a Python regex (`re.search` on the id)", ""),
        ("`excludes`", "at least one pattern", "`[]` would put the tests in the patch"),
        (
            "supervisor `loops_repo`; `shim_path`, `extension_path` (given, or named by "
            "`driver_cmd`)",
            "an existing directory; existing files",
            "a driver that cannot start is found before a paid run",
        ),
        (
            "`[sandbox] read_only`",
            "existing paths, none that shows what must stay hidden "
            "(the arenad home, the secrets dir, a user's home, `/`, `/tmp`)",
            "",
        ),
        (
            "instance files",
            "`.jsonl`, `.ndjson`, `.json`, `.parquet`; UTF-8",
            "a bad row names its file and line or row",
        ),
    ]
    out = [
        "## Limits",
        "",
        "Checked at submit, before anything is expanded or written.",
        "",
        "| what | limit | why |",
        "|---|---|---|",
    ]
    out += [f"| {_cell(a)} | {_cell(b)} | {_cell(c)} |" for a, b, c in rows]
    return "\n".join(out) + "\n"


def _named_defaults() -> str:
    out = ["## Defaults spelled out", ""]
    for name, value in NAMED_DEFAULTS.items():
        out += [f"`{name}` (`events/specs.py`):", "", "```toml", f"{toml_value(value)}", "```", ""]
    return "\n".join(out)


def render() -> str:
    """The whole document."""
    out = [PREAMBLE]
    found = tables()
    out.append("## Tables\n")
    out += [
        f"- [`{t.heading}`](#{t.anchor})"
        if t.heading.startswith("[")
        else f"- [{t.heading}](#{t.anchor})"
        for t in found
    ]
    out.append("")
    for t in found:
        out += [
            f'<a id="{t.anchor}"></a>',
            "",
            f"### `{t.heading}`" if t.heading.startswith("[") else f"### {t.heading}",
            "",
            t.intro,
            "",
            "| key | type | default | meaning |",
            "|---|---|---|---|",
        ]
        for k in t.keys:
            meaning = k.meaning or "(undescribed: add it to arenad/campaign/reference.py)"
            out.append(f"| `{k.name}` | {_cell(k.type)} | {_cell(k.default)} | {_cell(meaning)} |")
        out.append("")
    out.append(CREDENTIALS)
    out.append(_limits())
    out.append(_named_defaults())
    return "\n".join(out).rstrip("\n") + "\n"
