"""Campaign files: the user's TOML, validated completely before anything is written.

A campaign file decodes (msgspec, unknown keys forbidden) into ``CampaignFile``,
then resolves into one ``events.specs.CellSpec`` per (instance, arm, rep): paths
made absolute relative to the file, defaults applied, verify templates rendered.
Every error names the file and the key or row it is about.

    name = "demo"                     # [A-Za-z0-9._-]+, becomes a path component
    suite = "swe-bench-verified"      # default
    split = "search"                  # search | dev | holdout | canary
    reps = 2
    max_parallel = 4                  # optional cap for this campaign (else the daemon's)
    breaker_after = 5                 # consecutive infrastructure failures with one cause
                                      # that pause the campaign (default 5; 0: never)
    max_cells = 100000                # refuse a campaign expanding to more cells (default)
    instances_file = "instances.jsonl"  # .jsonl, .json (an array), .parquet, a saved HF
                                      # dataset dir, parquet shards (dir or glob); or [[instances]]
    instance_ids = ["a__b-1", "c__d-2"] # optional: only these rows (file order is kept)
    instance_filter = "^django__"     # optional: then only ids this regex matches (re.search)
    limit = 50                        # optional: then only the first N of what is left
    verify_template = "python -m pytest -q {test_path}"   # optional; {field} of the row,
                                      # shell-quoted (never write it inside quotes)
    excludes = [...]                  # default: the reference's test-file list; [] is refused
    max_output_bytes = 67108864       # per agent stdout / stderr file; the rest is dropped

    [verify]                          # optional
    verify_in = "checkout"            # default: verify and judge run on a fresh checkout of
                                      # base + the stored patch; "workspace": in the agent's
                                      # ws, recorded as self-reported (docs/grading.md)

    [budget]                          # optional spend cap (USD), checked by the daemon
    max_usd = 50.0                    # before each cell starts; raise it with set-budget
    abort_running = false             # true: reaching it also aborts the running cells
    expected_usd_per_attempt = 0.5    # optional: an attempt's expected cost before one ended

    [materializer]                    # default: image when an instance names one
    kind = "git"                      # explicit opt-in
    source = "./repo"                 # local path or URL

    [secrets]                         # optional
    dir = "~/secrets"
    env_files = [".env.models"]

    [sandbox]                         # optional; every agent run, verify and judge
    kind = "bwrap"                    # default; "none" is an explicit opt-out
    read_only = ["./data"]            # shown read-only besides the system (an agent CLI
                                      # installed somewhere unusual, a dataset)
    memory = "4GiB"                   # per run (agent, verify, judge); "unlimited" lifts it
    pids = 1024                       # processes per run
    cpus = 2                          # CPUs per run (a quota, not a pinning)
    disk = "10GiB"                    # the workspace; past it the run ends: "disk limit"

    [judge]                           # optional: run after verify on a scored run
    command = "python judge.py"       # kind = "command" (default): prints a verdict JSON
    # or the official SWE-bench grade in the instance's image (arenad.verdict.swebench):
    # kind = "swebench", test_cmd = "...", log_parser = "pytest",
    # memory_mb = 4096, pids = 4096, cpus = 2.0; timeout_s and name for both kinds

    [executor]                        # optional: where the cells run
    kind = "ray"                      # local | ray (the daemon must run that executor)
    resources = { arenad_slot = 1 }   # ray: what each cell holds on its node

    [candidate]                       # optional: the improvement-loop candidate evaluated
    generation = 0                    # -1 with index = -1: the baseline
    index = 3
    id = "gen0-cand3"                 # default: gen<generation>-cand<index> (or baseline)

    [[arms]]
    name = "SOLO"
    kind = "solo"                     # solo | supervisor | command
    model = "scripted/fixer"

Instance files. ``.jsonl``: one JSON object per line (blank lines skipped). ``.json``: an
array of objects (a file of JSON lines under a .json name, as ``datasets.to_json`` writes
it, is read as JSON lines). ``.parquet``: the form benchmark datasets are stored in on the
Hugging Face hub, read with pyarrow a few hundred rows at a time. Each is read twice, once
to validate and count, once to write, so memory stays flat whatever the file's size
(``.json`` is the exception: an array is parsed whole). A bad row is an error naming the
file and its line (``.jsonl``) or row number (``.json``, ``.parquet``); every row is
validated, selected or not.

Selection keys apply in this order: ``instance_ids`` (each must exist), then
``instance_filter``, then ``limit``; a selection that keeps nothing is an error. What was
selected is recorded in the campaign's ``campaign.submitted`` event.

Limits (checked at submit, before anything is expanded or written; docs/campaign-file.md has
the same table, with every key, generated by arenad.campaign.reference):

    what                          limit                      why
    cells per campaign            max_cells, default 100000  a typo in reps must not
                                  (raise it in the file)     expand to millions of cells
    campaign name                 1..128 of [A-Za-z0-9._-]   a directory name
    instance_id                   1..128 of [A-Za-z0-9._-]   a directory name, and with
    arm name                      1..64 of [A-Za-z0-9._-]    the arm in <iid>.<arm>.patch
                                                             .partial: 207 <= 255 bytes
    timeout_s, verify_timeout_s,  finite, > 0, <= 30 days    a run that ends at once, or
    judge timeout_s                                          never, is a mistake
    kill_grace_s                  finite, >= 0, <= 1 day
    reps, max_parallel, limit,    >= 1
    max_output_bytes, max_cells
    [budget] max_usd,             finite, > 0
    expected_usd_per_attempt
    instance_filter               a valid Python regex
    excludes                      at least one pattern       [] would ship the tests
    supervisor loops_repo         an existing directory      a driver that cannot start
    shim_path, extension_path     existing files (when given is found before a paid
                                  or in driver_cmd)          run, not during it
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import shlex
import string
import tomllib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from arenad.campaign import limits
from arenad.campaign.instances import Row, read_rows
from arenad.cell.kinds import kind_of, kind_of_arm
from arenad.errors import CampaignError
from arenad.materialize.image import default_image_name
from arenad.proposer.layout import candidate_id
from arenad.sandbox.confine import share_problem, user_homes
from arenad.sandbox.network import Network, default_network, uses_model
from arenad.verdict.swebench import (
    GradingError,
    check_gradable,
    grading_of,
    log_parser_problem,
)
from events.control import InstanceSelection
from events.specs import (
    DEFAULT_EXCLUDES,
    DEFAULT_MAX_OUTPUT_BYTES,
    SUPERVISOR_DEFAULT_ENV_KNOBS,
    WORKER_PROMPT_SUFFIX,
    ArmSpec,
    CandidateSpec,
    CellSpec,
    CommandArm,
    ExecutorSpec,
    GatewaySpec,
    InstanceSpec,
    JudgeSpec,
    MaterializerSpec,
    SandboxSpec,
    SecretsSpec,
    SoloArm,
    SupervisorArm,
    cell_id,
)

PATH_COMPONENT = re.compile(r"^[A-Za-z0-9._-]+$")
ENV_KNOB = re.compile(r"^[A-Z_][A-Z0-9_]*$")
DEFAULT_LOOPS_REPO = "~/code/loops"

# The limits of the module docstring's table.
DEFAULT_MAX_CELLS = 100_000
# Consecutive infrastructure failures with one cause that pause a campaign (the circuit
# breaker, arenad.daemon.breaker): small, so a systematic cause burns a handful of cells.
DEFAULT_BREAKER_AFTER = 5
# A file name is at most 255 bytes (NAME_MAX). The longest one arenad makes of these names
# is the patch being written, <iid>.<arm>.patch.partial: 128 + 1 + 64 + 14 = 207 bytes.
NAME_MAX_BYTES = 255
MAX_CAMPAIGN_NAME = 128
MAX_INSTANCE_ID = 128
MAX_ARM_NAME = 64
LONGEST_SUFFIX = ".patch.partial"
MAX_TIMEOUT_S = 30 * 86_400.0
MAX_GRACE_S = 86_400.0
# Cell ids shown by a dry run.
PREVIEW_CELLS = 5


class _Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    pass


class InstanceRow(_Strict, frozen=True, kw_only=True):
    instance_id: str
    repo: str = ""
    base_commit: str
    problem_statement: str
    image: str | None = None
    verify_cmd: str | None = None


class SoloArmFile(_Strict, tag="solo", tag_field="kind", frozen=True, kw_only=True):
    name: str
    model: str
    timeout_s: float = 1000.0
    prompt_suffix: str = WORKER_PROMPT_SUFFIX
    opencode_bin: str = "opencode"
    extra_args: list[str] = []
    kill_grace_s: float = 1.0

    def spec(self, base: Path, where: str) -> ArmSpec:
        return _solo_arm(self, where)


class SupervisorArmFile(_Strict, tag="supervisor", tag_field="kind", frozen=True, kw_only=True):
    name: str
    worker_model: str
    driver_model: str
    model: str | None = None
    timeout_s: float = 2800.0
    budget: int = 40
    max_sandboxes: int = 4
    max_usd: float = 8.0
    max_depth: int = 3
    env_knobs: dict[str, str] = {}
    loops_repo: str = DEFAULT_LOOPS_REPO
    extension_path: str | None = None
    shim_path: str | None = None
    driver_cmd: list[str] | None = None
    init_opencode_store: bool = True
    opencode_bin: str = "opencode"

    def spec(self, base: Path, where: str) -> ArmSpec:
        return _supervisor_arm(self, base, where)


class CommandArmFile(_Strict, tag="command", tag_field="kind", frozen=True, kw_only=True):
    name: str
    argv: list[str]
    model: str | None = None
    timeout_s: float = 1000.0
    prompt_suffix: str = WORKER_PROMPT_SUFFIX
    env: dict[str, str] = {}
    uses_model: bool = True
    kill_grace_s: float = 1.0
    output: Literal["jsonl", "text"] = "jsonl"

    def spec(self, base: Path, where: str) -> ArmSpec:
        return _command_arm(self, where)


# Each arm table turns itself into its spec (``spec``): a new kind is a new table here,
# and no branch on the kind's name.
ArmFile = SoloArmFile | SupervisorArmFile | CommandArmFile


class MaterializerFile(_Strict, frozen=True, kw_only=True):
    kind: Literal["image", "git"]
    source: str | None = None


class SecretsFile(_Strict, frozen=True, kw_only=True):
    dir: str
    env_files: list[str]
    wrapper: list[str] = msgspec.field(default_factory=lambda: ["dotenvx", "run"])


class SandboxFile(_Strict, frozen=True, kw_only=True):
    kind: Literal["bwrap", "none", "docker"] = "bwrap"
    read_only: list[str] = []
    # -- per-run limits (arenad.campaign.limits): sizes as "4GiB", or "unlimited".
    memory: int | str = limits.DEFAULT_MEMORY
    pids: int | str = limits.DEFAULT_PIDS
    cpus: float | str = limits.DEFAULT_CPUS
    disk: int | str = limits.DEFAULT_DISK
    # None: per arm, "model" when it uses a model, else "none" (arenad.sandbox.network).
    network: Literal["model", "none", "host"] | None = None
    # kind = "docker" (arenad.sandbox.container).
    image: str | None = None
    workdir: str = "/testbed"


class GatewayFile(_Strict, frozen=True, kw_only=True):
    kind: Literal["gateway", "none"] = "gateway"
    max_usd: float | None = None
    max_tokens: int | None = None


class JudgeFile(_Strict, frozen=True, kw_only=True):
    kind: Literal["command", "swebench"] = "command"
    command: str = ""
    name: str = "swe-arena-official-judge"
    timeout_s: float = 600.0
    # kind = "swebench": the grade's test command and swebench's log parser, and the
    # judge container's limits.
    test_cmd: str | None = None
    log_parser: str | None = None
    memory_mb: int = 4096
    pids: int = 4096
    cpus: float | None = None


class ExecutorFile(_Strict, frozen=True, kw_only=True):
    kind: Literal["local", "ray"]
    resources: dict[str, float] | None = None


class CandidateFile(_Strict, frozen=True, kw_only=True):
    generation: int
    index: int
    id: str | None = None


class VerifyFile(_Strict, frozen=True, kw_only=True):
    verify_in: Literal["checkout", "workspace"] = "checkout"


class BudgetFile(_Strict, frozen=True, kw_only=True):
    max_usd: float
    abort_running: bool = False
    expected_usd_per_attempt: float | None = None


class CampaignFile(_Strict, frozen=True, kw_only=True):
    name: str
    suite: str = "swe-bench-verified"
    split: Literal["search", "dev", "holdout", "canary"] = "search"
    reps: int = 1
    # This campaign's cap on cells at once; unset, only the daemon's --max-parallel applies.
    max_parallel: int | None = None
    breaker_after: int = DEFAULT_BREAKER_AFTER
    max_cells: int = DEFAULT_MAX_CELLS
    experiment_id: str | None = None
    instances: list[dict[str, Any]] = []
    instances_file: str | None = None
    instance_ids: list[str] | None = None
    instance_filter: str | None = None
    limit: int | None = None
    budget: BudgetFile | None = None
    verify_template: str | None = None
    verify_timeout_s: float = 600.0
    verify: VerifyFile | None = None
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    excludes: list[str] | None = None
    materializer: MaterializerFile | None = None
    secrets: SecretsFile | None = None
    judge: JudgeFile | None = None
    sandbox: SandboxFile | None = None
    gateway: GatewayFile | None = None
    candidate: CandidateFile | None = None
    executor: ExecutorFile | None = None
    arms: list[ArmFile]


class Budget(msgspec.Struct, frozen=True, kw_only=True):
    max_usd: float
    abort_running: bool = False
    # The reservations' prior (arenad.budget.spend): an attempt's expected cost until one
    # of its arm ended with a known cost.
    expected_usd_per_attempt: float | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Campaign:
    """A validated campaign. Its cells are not held: :meth:`iter_cells` makes them one at a
    time (reading the instances file again), so a campaign of any size costs the memory of
    one cell; ``cell_count`` and the preview fields were found by the validating pass."""

    name: str
    source_path: str
    spec_sha256: str
    max_parallel: int | None
    budget: Budget | None
    selection: InstanceSelection
    reps: int
    arms: list[ArmSpec]
    # Shared by every cell: what submit checks this machine can run.
    sandbox: SandboxSpec
    secrets: SecretsSpec | None
    instance_count: int
    cell_count: int
    # The first few cell ids, and the distinct verify commands of the first instances.
    preview_cell_ids: list[str]
    preview_verify: list[str]
    _cells: Callable[[], Iterator[CellSpec]] = dataclasses.field(repr=False)
    # Each container image the cells need -> the first instance needing it (submit checks
    # the engine holds them all).
    images: dict[str, str] = dataclasses.field(default_factory=dict)
    breaker_after: int = DEFAULT_BREAKER_AFTER
    # Found by the validating pass for submit's preflight, so it needs no pass of its own:
    # each local git source -> each base commit the instances need -> the first instance
    # needing it, and the first selected instance's cells (each arm's first cell).
    local_sources: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    first_cells: list[CellSpec] = dataclasses.field(default_factory=list)

    def iter_cells(self) -> Iterator[CellSpec]:
        """The campaign's cells in order (instance, arm, rep); raises CampaignError if the
        instances file changed since it was validated."""
        return self._cells()

    @property
    def cells(self) -> list[CellSpec]:
        """Every cell at once (for small campaigns and tests)."""
        return list(self.iter_cells())

    @property
    def arm_kinds(self) -> dict[str, str]:
        return {a.name: str(type(a).__struct_config__.tag) for a in self.arms}

    @property
    def cost_unknown_arms(self) -> list[str]:
        """Arms whose cost cannot be known (their spend never counts against a cap)."""
        return [n for n, k in self.arm_kinds.items() if not kind_of(k).reports_cost]


_INSTANCE_FIELDS = set(InstanceRow.__struct_fields__)


def _where(exc: msgspec.ValidationError) -> str:
    # msgspec says "... - at `$.arms[0]`": turn the JSON path into the TOML key path.
    return str(exc).replace("`$.", "`").replace("`$`", "the top level")


def _shown(value: str) -> str:
    return repr(value) if len(value) <= 60 else f"{value[:40]!r}... ({len(value)} characters)"


def check_path_component(value: str, what: str, where: str, max_len: int = NAME_MAX_BYTES) -> None:
    if value in (".", "..") or not PATH_COMPONENT.match(value):
        raise CampaignError(
            f"{where}: {what} {_shown(value)} must match [A-Za-z0-9._-]+ and not be '.' or"
            " '..' (it becomes a directory name)"
        )
    if len(value) > max_len:
        raise CampaignError(
            f"{where}: {what} {_shown(value)} is longer than {max_len} characters (it becomes"
            " part of a file name)"
        )


def check_seconds(value: float, what: str, where: str, *, zero_ok: bool = False) -> None:
    """A finite duration: > 0 (``zero_ok``: >= 0), at most the table's bound."""
    bound = MAX_GRACE_S if zero_ok else MAX_TIMEOUT_S
    low_ok = value >= 0 if zero_ok else value > 0
    if not (math.isfinite(value) and low_ok and value <= bound):
        need = "a finite number >= 0" if zero_ok else "a finite number > 0"
        raise CampaignError(f"{where}: {what} = {value} must be {need} and at most {bound:.0f}")


def _resolve_path(base: Path, raw: str) -> str:
    path = Path(raw).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


@functools.lru_cache(maxsize=1024)
def _resolve_source(base: Path, raw: str) -> str:
    # Every instance of a campaign names the same source, or one of a few: resolving it
    # (system calls) once per instance was a sixth of a large submit's time.
    return _resolve_path(base, raw)


def _looks_like_url(raw: str) -> bool:
    return "://" in raw or raw.startswith("git@")


def render_verify_template(template: str, row: dict[str, Any], where: str) -> str:
    """Fill {field} placeholders from the instance row, each shell-quoted (``shlex.quote``:
    a row's value is one word of the command, never shell syntax); unknown or malformed
    -> error."""
    fields = template_fields(template, where)
    for field in fields:
        if field not in row:
            raise CampaignError(
                f"{where}: verify_template uses {{{field}}}, but instance"
                f" {row.get('instance_id')!r} has no field {field!r}"
            )
    # Only the fields it names are quoted (a row's other fields may be large: patches).
    values = {}
    for k in fields:
        v = row[k]
        values[k] = shlex.quote(v if isinstance(v, str) else json.dumps(v))
    return template.format(**values)


def template_fields(template: str, where: str) -> list[str]:
    """The template's {field} names; CampaignError (naming ``where`` and verify_template)
    for a malformed template, a placeholder that is not a plain field name, or one written
    inside quotes (its value is quoted already: quoting it again would unquote it)."""
    fields, problem = _parse_template(template)
    if problem is not None:
        raise CampaignError(f"{where}: {problem}")
    return list(fields)


@functools.lru_cache(maxsize=16)
def _parse_template(template: str) -> tuple[tuple[str, ...], str | None]:
    """:func:`template_fields` without the place (one parse per template, not per row)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return (), f"verify_template is malformed: {exc}"
    fields = []
    quote: str | None = None
    for literal, field, spec, conversion in parsed:
        quote = _quote_after(literal, quote)
        if field is None:
            continue
        if not field.isidentifier() or spec or conversion:
            return (), f"verify_template placeholder {{{field}}} is not a plain field name"
        if quote is not None:
            return (), (
                f"verify_template puts {{{field}}} inside {quote}quotes{quote}: write"
                f" {{{field}}} bare, arenad shell-quotes each value"
            )
        fields.append(field)
    return tuple(fields), None


def _quote_after(text: str, quote: str | None) -> str | None:
    """The shell's quoting state after ``text``, starting in ``quote`` (None, ' or ")."""
    escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif quote == "'":
            quote = None if ch == "'" else quote
        elif ch == "\\":
            escaped = True
        elif quote == '"':
            quote = None if ch == '"' else quote
        elif ch in "'\"":
            quote = ch
    return quote


def _instance(row: dict[str, Any], template: str | None, where: str) -> InstanceSpec:
    known = {k: v for k, v in row.items() if k in _INSTANCE_FIELDS}
    extra = {k: v for k, v in row.items() if k not in _INSTANCE_FIELDS}
    if "verify" in extra and "verify_cmd" not in known:
        known["verify_cmd"] = extra.pop("verify")
    try:
        parsed = msgspec.convert(known, InstanceRow)
    except msgspec.ValidationError as exc:
        raise CampaignError(f"{where}: instance: {_where(exc)}") from None
    check_path_component(parsed.instance_id, "instance_id", where, MAX_INSTANCE_ID)
    verify = parsed.verify_cmd
    if verify is None:
        if template is None:
            raise CampaignError(
                f"{where}: instance {parsed.instance_id!r} has no verify_cmd and the campaign"
                " has no verify_template"
            )
        verify = render_verify_template(template, row, where)
    return InstanceSpec(
        instance_id=parsed.instance_id,
        repo=parsed.repo,
        base_commit=parsed.base_commit,
        problem_statement=parsed.problem_statement,
        image=parsed.image,
        verify_cmd=verify,
        extra=extra,
    )


# What each argv may name; str.format syntax, so a literal brace is written {{ or }}.
COMMAND_PLACEHOLDERS = frozenset({"ws", "prompt_file", "run_dir", "model"})
DRIVER_PLACEHOLDERS = frozenset({"shim", "extension", "ws", "params", "run_dir", "loops_repo"})


def check_argv_placeholders(
    argv: list[str], allowed: frozenset[str], where: str, what: str
) -> None:
    """Every {placeholder} in ``argv`` is well-formed and one of ``allowed``."""
    for arg in argv:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(arg) if f is not None]
        except ValueError as exc:
            raise CampaignError(
                f"{where}: {what} argument {arg!r} is malformed ({exc}); write a literal"
                " brace as {{ or }}"
            ) from None
        for field in fields:
            if field not in allowed:
                raise CampaignError(
                    f"{where}: {what} argument {arg!r} uses {{{field}}}; the placeholders are"
                    f" {', '.join('{' + p + '}' for p in sorted(allowed))} (a literal brace is"
                    " written {{ or }})"
                )


def _check_exists(path: str, key: str, where: str, arm: str, *, directory: bool) -> None:
    exists = os.path.isdir(path) if directory else os.path.isfile(path)
    if not exists:
        kind = "directory" if directory else "file"
        raise CampaignError(f"{where}: arm {arm!r}: {key} {path}: no such {kind}")


def _arm(arm: ArmFile, base: Path, where: str) -> ArmSpec:
    check_path_component(arm.name, "arm name", where, MAX_ARM_NAME)
    check_seconds(arm.timeout_s, "timeout_s", where)
    return arm.spec(base, where)


def _solo_arm(arm: SoloArmFile, where: str) -> SoloArm:
    check_seconds(arm.kill_grace_s, "kill_grace_s", where, zero_ok=True)
    return SoloArm(
        name=arm.name,
        model=arm.model,
        timeout_s=arm.timeout_s,
        prompt_suffix=arm.prompt_suffix,
        opencode_bin=arm.opencode_bin,
        extra_args=arm.extra_args,
        kill_grace_s=arm.kill_grace_s,
    )


def _command_arm(arm: CommandArmFile, where: str) -> CommandArm:
    check_seconds(arm.kill_grace_s, "kill_grace_s", where, zero_ok=True)
    if not arm.argv:
        raise CampaignError(f"{where}: arm {arm.name!r}: argv must not be empty")
    check_argv_placeholders(arm.argv, COMMAND_PLACEHOLDERS, where, f"arm {arm.name!r}: argv")
    return CommandArm(
        name=arm.name,
        argv=arm.argv,
        model=arm.model,
        timeout_s=arm.timeout_s,
        prompt_suffix=arm.prompt_suffix,
        env=arm.env,
        uses_model=arm.uses_model,
        kill_grace_s=arm.kill_grace_s,
        output=arm.output,
    )


def _supervisor_arm(arm: SupervisorArmFile, base: Path, where: str) -> SupervisorArm:
    knobs = {**SUPERVISOR_DEFAULT_ENV_KNOBS, **arm.env_knobs}
    for name in knobs:
        if not ENV_KNOB.match(name):
            raise CampaignError(
                f"{where}: arm {arm.name!r}: env knob name {name!r} must match ^[A-Z_][A-Z0-9_]*$"
            )
    cancel = knobs.get("DRIVER_CANCEL_TIMEOUT_MS", "30000")
    try:
        cancel_ms = float(cancel)
    except ValueError:
        cancel_ms = float("nan")
    if not (cancel_ms > 0 and cancel_ms / 1000 <= MAX_GRACE_S):
        raise CampaignError(
            f"{where}: arm {arm.name!r}: DRIVER_CANCEL_TIMEOUT_MS must be a positive number"
        )
    if not (math.isfinite(arm.max_usd) and arm.max_usd > 0):
        raise CampaignError(f"{where}: max_usd = {arm.max_usd} must be a finite number > 0")
    loops = _resolve_path(base, arm.loops_repo)
    extension = _resolve_path(base, arm.extension_path or f"{loops}/extensions/pi/loops.ts")
    shim = _resolve_path(base, arm.shim_path or f"{loops}/scripts/run-supervisor.mjs")
    driver = arm.driver_cmd or [
        "node",
        "--import",
        "tsx",
        "{shim}",
        "{extension}",
        "{ws}",
        "{params}",
    ]
    check_argv_placeholders(driver, DRIVER_PLACEHOLDERS, where, f"arm {arm.name!r}: driver_cmd")
    # Checked now, not when the driver fails in a paid run: the checkout (cwd and
    # provenance), and the shim and extension when given or when the driver names them.
    _check_exists(loops, "loops_repo", where, arm.name, directory=True)
    for key, given, path, placeholder in (
        ("shim_path", arm.shim_path, shim, "{shim}"),
        ("extension_path", arm.extension_path, extension, "{extension}"),
    ):
        if given is not None or any(placeholder in a for a in driver):
            _check_exists(path, key, where, arm.name, directory=False)
    return SupervisorArm(
        name=arm.name,
        worker_model=arm.worker_model,
        driver_model=arm.driver_model,
        timeout_s=arm.timeout_s,
        budget=arm.budget,
        max_sandboxes=arm.max_sandboxes,
        max_usd=arm.max_usd,
        max_depth=arm.max_depth,
        env_knobs=knobs,
        loops_repo=loops,
        extension_path=extension,
        shim_path=shim,
        driver_cmd=driver,
        # The driver gets its own cancellation deadline plus a settlement buffer.
        kill_grace_s=cancel_ms / 1000 + 10.0,
        init_opencode_store=arm.init_opencode_store,
        opencode_bin=arm.opencode_bin,
    )


def _materializer(
    spec: MaterializerFile | None, instance: InstanceSpec, base: Path, where: str
) -> MaterializerSpec:
    if spec is None:
        if instance.image is None:
            raise CampaignError(
                f"{where}: instance {instance.instance_id!r} names no image; set [materializer]"
                ' kind = "git" with a source to clone (an explicit opt-in)'
            )
        return MaterializerSpec(kind="image")
    if spec.kind == "git":
        source = spec.source or instance.repo
        if not source:
            raise CampaignError(f'{where}: [materializer] kind = "git" needs a source')
        if not _looks_like_url(source):
            source = _resolve_source(base, source)
        return MaterializerSpec(kind="git", source=source)
    return MaterializerSpec(kind="image")


def _decode_toml(raw: bytes, where: str) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise CampaignError(
            f"{where}:{line}: not UTF-8 (byte 0x{raw[exc.start]:02x}: {exc.reason})"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CampaignError(f"{where}: not valid TOML: {exc}") from None
    except RecursionError:
        raise CampaignError(f"{where}: not valid TOML: nested too deeply") from None


def _check_file(parsed: CampaignFile, where: str) -> None:
    """The campaign's own keys (the rows and arms are checked as they resolve)."""
    check_path_component(parsed.name, "campaign name", where, MAX_CAMPAIGN_NAME)
    if parsed.reps < 1:
        raise CampaignError(f"{where}: reps must be at least 1")
    if parsed.max_parallel is not None and parsed.max_parallel < 1:
        raise CampaignError(f"{where}: max_parallel must be at least 1")
    if parsed.breaker_after < 0:
        raise CampaignError(f"{where}: breaker_after must be 0 (never) or more")
    if parsed.max_cells < 1:
        raise CampaignError(f"{where}: max_cells must be at least 1")
    if parsed.max_output_bytes < 1:
        raise CampaignError(f"{where}: max_output_bytes must be at least 1")
    if parsed.limit is not None and parsed.limit < 1:
        raise CampaignError(f"{where}: limit must be at least 1")
    if parsed.instance_ids is not None and not parsed.instance_ids:
        raise CampaignError(f"{where}: instance_ids must name at least one instance")
    check_seconds(parsed.verify_timeout_s, "verify_timeout_s", where)
    if parsed.verify_template is not None:
        template_fields(parsed.verify_template, where)
    if parsed.judge is not None:
        check_seconds(parsed.judge.timeout_s, "[judge] timeout_s", where)
    if parsed.budget is not None:
        usd = parsed.budget.max_usd
        if not (math.isfinite(usd) and usd > 0):
            raise CampaignError(f"{where}: [budget] max_usd = {usd} must be a finite number > 0")
        prior = parsed.budget.expected_usd_per_attempt
        if prior is not None and not (math.isfinite(prior) and prior > 0):
            raise CampaignError(
                f"{where}: [budget] expected_usd_per_attempt = {prior} must be a finite number > 0"
            )
    if not parsed.arms:
        raise CampaignError(f"{where}: a campaign needs at least one [[arms]] entry")
    if parsed.instances and parsed.instances_file:
        raise CampaignError(f"{where}: give instances inline or instances_file, not both")


def _compile_filter(pattern: str | None, where: str) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except (re.error, RecursionError) as exc:
        raise CampaignError(f"{where}: instance_filter {pattern!r} is not a regex: {exc}") from None


class _Selector:
    """instance_ids, then instance_filter, then limit: whether each row in turn is kept."""

    def __init__(self, parsed: CampaignFile, where: str) -> None:
        self.ids = set(parsed.instance_ids) if parsed.instance_ids is not None else None
        self.pattern = _compile_filter(parsed.instance_filter, where)
        self.limit = parsed.limit
        self.kept = 0

    def keep(self, instance_id: str) -> bool:
        if self.ids is not None and instance_id not in self.ids:
            return False
        if self.pattern is not None and not self.pattern.search(instance_id):
            return False
        if self.limit is not None and self.kept >= self.limit:
            return False
        self.kept += 1
        return True


class _Resolved(msgspec.Struct, frozen=True, kw_only=True):
    """What every cell shares, resolved once."""

    parsed: CampaignFile
    base: Path
    where: str
    arms: list[ArmSpec]
    secrets: SecretsSpec | None
    judge: JudgeSpec | None
    excludes: list[str]
    candidate: CandidateSpec | None
    executor: ExecutorSpec | None
    sandbox: SandboxSpec
    gateway: GatewaySpec
    # [sandbox] network as given (None: each arm's default).
    network: Network | None = None
    # Each container image the cells need (materializer, swebench judge) -> the first
    # instance that needs it: filled by the validating pass, for submit to check.
    images: dict[str, str] = msgspec.field(default_factory=dict)


# Ray's own names for what a node has; a cell asks for CPU and GPU by name too.
_RAY_RESERVED = ("memory", "object_store_memory")
RESOURCE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _executor(parsed: ExecutorFile | None, where: str) -> ExecutorSpec | None:
    if parsed is None:
        return None
    resources = dict(parsed.resources or {})
    if parsed.kind == "local" and resources:
        raise CampaignError(f'{where}: [executor] resources are for kind = "ray"')
    for name, amount in resources.items():
        if not RESOURCE_NAME.match(name) or name in _RAY_RESERVED:
            raise CampaignError(f"{where}: [executor] resources: {name!r} is not a resource name")
        # Ray takes fractions of one unit, and whole numbers above it.
        if not amount > 0 or (amount > 1 and amount != int(amount)):
            raise CampaignError(
                f"{where}: [executor] resources.{name} must be above 0, and whole above 1"
            )
    return ExecutorSpec(kind=parsed.kind, resources=resources)


def _candidate(parsed: CandidateFile | None, where: str) -> CandidateSpec | None:
    if parsed is None:
        return None
    baseline = (parsed.generation, parsed.index) == (-1, -1)
    if not baseline and (parsed.generation < 0 or parsed.index < 0):
        raise CampaignError(
            f"{where}: [candidate] generation and index must be at least 0"
            " (both -1 for the baseline)"
        )
    if parsed.id is not None and not parsed.id:
        raise CampaignError(f"{where}: [candidate] id must not be empty")
    return CandidateSpec(
        id=parsed.id if parsed.id is not None else candidate_id(parsed.generation, parsed.index),
        generation=parsed.generation,
        index=parsed.index,
    )


def _resolve(parsed: CampaignFile, base: Path, where: str) -> _Resolved:
    arms = [_arm(a, base, f"{where}: arms[{n}]") for n, a in enumerate(parsed.arms)]
    _unique([a.name for a in arms], "arm name", where)
    secrets = None
    if parsed.secrets is not None:
        if not parsed.secrets.env_files:
            raise CampaignError(f"{where}: [secrets] env_files must name at least one file")
        for f in parsed.secrets.env_files:
            if "/" in f or f in (".", ".."):
                raise CampaignError(f"{where}: [secrets] env file {f!r} must be a file name")
        secrets = SecretsSpec(
            dir=_resolve_path(base, parsed.secrets.dir),
            env_files=parsed.secrets.env_files,
            wrapper=parsed.secrets.wrapper,
        )
    judge = _judge(parsed.judge, where)
    if parsed.excludes is not None and not parsed.excludes:
        # The reference refuses an empty list too (loadExcludes): it would put the test files
        # the verify command brings in the patch.
        raise CampaignError(f"{where}: excludes must name at least one pattern")
    excludes = parsed.excludes if parsed.excludes is not None else list(DEFAULT_EXCLUDES)
    gateway = _gateway(parsed.gateway, where)
    return _Resolved(
        parsed=parsed,
        base=base,
        where=where,
        arms=arms,
        secrets=secrets,
        judge=judge,
        excludes=excludes,
        candidate=_candidate(parsed.candidate, where),
        executor=_executor(parsed.executor, where),
        sandbox=_sandbox(parsed.sandbox, base, secrets, where, arms, gateway),
        network=parsed.sandbox.network if parsed.sandbox is not None else None,
        gateway=gateway,
    )


def _judge(parsed: JudgeFile | None, where: str) -> JudgeSpec | None:
    if parsed is None:
        return None
    if parsed.kind == "command":
        if not parsed.command:
            raise CampaignError(f'{where}: [judge] command is required (kind = "command")')
        for key in ("test_cmd", "log_parser", "cpus"):
            if getattr(parsed, key) is not None:
                raise CampaignError(f'{where}: [judge] {key} is for kind = "swebench"')
        return JudgeSpec(command=parsed.command, name=parsed.name, timeout_s=parsed.timeout_s)
    if parsed.command:
        raise CampaignError(f'{where}: [judge] command is for kind = "command"')
    # Either may be left to the rows' own eval_script / log_parser columns (checked per row).
    if parsed.test_cmd is not None and not parsed.test_cmd.strip():
        raise CampaignError(f"{where}: [judge] test_cmd must not be empty")
    if parsed.log_parser is not None:
        problem = log_parser_problem(parsed.log_parser)
        if problem is not None:
            raise CampaignError(f"{where}: [judge] log_parser: {problem}")
    if parsed.memory_mb < 16:
        raise CampaignError(f"{where}: [judge] memory_mb must be at least 16")
    if parsed.pids < 8:
        raise CampaignError(f"{where}: [judge] pids must be at least 8")
    if parsed.cpus is not None and not (math.isfinite(parsed.cpus) and parsed.cpus > 0):
        raise CampaignError(f"{where}: [judge] cpus must be a finite number > 0")
    return JudgeSpec(
        kind="swebench",
        name=parsed.name,
        timeout_s=parsed.timeout_s,
        test_cmd=parsed.test_cmd,
        log_parser=parsed.log_parser,
        memory_mb=parsed.memory_mb,
        pids=parsed.pids,
        cpus=parsed.cpus,
    )


def _gateway(spec: GatewayFile | None, where: str) -> GatewaySpec:
    """The [gateway] table; absent: the gateway (for the arms it serves, see _cells_of)."""
    spec = spec if spec is not None else GatewayFile()
    if spec.max_usd is not None and not (math.isfinite(spec.max_usd) and spec.max_usd > 0):
        raise CampaignError(
            f"{where}: [gateway] max_usd = {spec.max_usd} must be a finite number > 0"
        )
    if spec.max_tokens is not None and spec.max_tokens < 1:
        raise CampaignError(f"{where}: [gateway] max_tokens = {spec.max_tokens} must be >= 1")
    return GatewaySpec(kind=spec.kind, max_usd=spec.max_usd, max_tokens=spec.max_tokens)


def _rows(parsed: CampaignFile, base: Path, where: str) -> Callable[[], Iterable[Row]]:
    """A fresh pass over the campaign's rows each call."""
    if parsed.instances_file:
        path = Path(_resolve_path(base, parsed.instances_file))
        return lambda: read_rows(path, where)
    inline = parsed.instances
    return lambda: ((dict(r), f"{where}: instances[{i}]") for i, r in enumerate(inline))


def _instances(r: _Resolved, rows: Iterable[Row], selector: _Selector) -> Iterator[InstanceSpec]:
    """The selected rows as instances. Every row is validated, selected or not."""
    parsed = r.parsed
    for row, where in rows:
        instance = _instance(row, parsed.verify_template, where)
        if not selector.keep(instance.instance_id):
            continue
        yield _with_image(r, instance, where)


def _with_image(r: _Resolved, instance: InstanceSpec, where: str) -> InstanceSpec:
    """A selected instance with its image named (image materializer), its grading columns
    checked (swebench judge), and the images it needs noted in ``r.images``."""
    parsed = r.parsed
    if parsed.materializer is not None and parsed.materializer.kind == "image":
        # Recorded in the spec, so a rerun uses the same image even if the rule changes.
        instance = msgspec.structs.replace(
            instance, image=instance.image or default_image_name(instance.instance_id)
        )
    if r.judge is not None and r.judge.kind == "swebench":
        try:
            grading = grading_of(instance)
            check_gradable(grading, r.judge)
            if r.judge.log_parser is None:
                problem = log_parser_problem(grading.log_parser or "")
                if problem is not None:
                    raise GradingError(f"log_parser: {problem}")
        except GradingError as exc:
            raise CampaignError(
                f'{where}: instance {instance.instance_id!r}: [judge] kind = "swebench": {exc}'
            ) from None
        r.images.setdefault(grading.image, instance.instance_id)
    if instance.image is not None and (
        parsed.materializer is None or parsed.materializer.kind == "image"
    ):
        r.images.setdefault(instance.image, instance.instance_id)
    box = parsed.sandbox
    if box is not None and box.kind == "docker":
        # The agent's container (arenad.arms.base.ArmContext.sandbox names it alike).
        agent_image = box.image or instance.image or default_image_name(instance.instance_id)
        r.images.setdefault(agent_image, instance.instance_id)
    return instance


def _cells_of(r: _Resolved, instance: InstanceSpec, reps: int | None = None) -> Iterator[CellSpec]:
    """An instance's cells, in order (arm, rep); only the first ``reps`` of each arm if
    given."""
    parsed = r.parsed
    materializer = _materializer(parsed.materializer, instance, r.base, r.where)
    for arm in r.arms:
        for rep in range(parsed.reps if reps is None else min(reps, parsed.reps)):
            yield CellSpec(
                campaign=parsed.name,
                suite=parsed.suite,
                split=parsed.split,
                instance=instance,
                arm=arm,
                rep=rep,
                materializer=materializer,
                secrets=r.secrets,
                excludes=r.excludes,
                verify_timeout_s=parsed.verify_timeout_s,
                max_output_bytes=parsed.max_output_bytes,
                judge=r.judge,
                experiment_id=parsed.experiment_id,
                candidate=r.candidate,
                executor=r.executor,
                sandbox=msgspec.structs.replace(
                    r.sandbox, network=r.network or default_network(arm)
                ),
                verify_in=parsed.verify.verify_in if parsed.verify is not None else "checkout",
                # A kind whose row says so points its agent at the gateway (a command
                # arm only when it uses a model); the others reach their provider themselves.
                gateway=r.gateway if _via_gateway(arm) else GatewaySpec(),
            )


def load_campaign(path: Path) -> Campaign:
    """Read and validate a campaign file; raise CampaignError naming what and where.

    One pass over the instances validates every row, applies the selection and counts;
    the cells are made by a second pass (:meth:`Campaign.iter_cells`), never all held.
    """
    where = str(path)
    try:
        raw_text = path.read_bytes()
    except OSError as exc:
        raise CampaignError(f"cannot read campaign file {path}: {exc.strerror}") from None
    data = _decode_toml(raw_text, where)
    try:
        parsed = msgspec.convert(data, CampaignFile)
    except msgspec.ValidationError as exc:
        raise CampaignError(f"{where}: {_where(exc)}") from None
    base = path.resolve().parent
    _check_file(parsed, where)
    resolved = _resolve(parsed, base, where)
    rows = _rows(parsed, base, where)

    # The validating pass: every row, its id unique; only ids and a digest are kept.
    seen: set[str] = set()
    selected = hashlib.sha256()
    selector = _Selector(parsed, where)
    found_ids: set[str] = set()
    total = 0
    instance_count = 0
    preview_ids: list[str] = []
    preview_verify: list[str] = []
    local_sources: dict[str, dict[str, str]] = {}
    first_cells: list[CellSpec] = []
    for row, row_where in rows():
        total += 1
        instance = _instance(row, parsed.verify_template, row_where)
        iid = instance.instance_id
        if iid in seen:
            raise CampaignError(f"{row_where}: instance_id {iid!r} appears twice")
        seen.add(iid)
        if selector.ids is not None and iid in selector.ids:
            found_ids.add(iid)
        if not selector.keep(iid):
            continue
        materializer = _materializer(parsed.materializer, instance, base, row_where)
        if (
            materializer.kind == "git"
            and materializer.source is not None
            and os.path.isabs(materializer.source)
        ):
            local_sources.setdefault(materializer.source, {}).setdefault(instance.base_commit, iid)
        instance = _with_image(resolved, instance, row_where)
        if instance_count == 0:
            first_cells = list(_cells_of(resolved, instance, reps=1))  # each arm's first
        instance_count += 1
        selected.update(iid.encode() + b"\0")
        if len(preview_ids) < PREVIEW_CELLS:
            preview_ids.append(iid)
        if len(preview_verify) < 3 and instance.verify_cmd not in preview_verify:
            preview_verify.append(instance.verify_cmd)
    del seen
    if total == 0:
        raise CampaignError(f"{where}: no instances (give [[instances]] or instances_file)")
    if parsed.instance_ids is not None:
        missing = [i for i in dict.fromkeys(parsed.instance_ids) if i not in found_ids]
        if missing:
            shown = ", ".join(map(repr, missing[:5])) + (" ..." if len(missing) > 5 else "")
            raise CampaignError(
                f"{where}: instance_ids names {len(missing)} instance(s) not in the instances:"
                f" {shown}"
            )
    if instance_count == 0:
        raise CampaignError(
            f"{where}: the selection keeps no instance (instance_filter"
            f" {parsed.instance_filter!r} matched none of {total} row(s))"
        )
    cell_count = instance_count * len(resolved.arms) * parsed.reps
    if cell_count > parsed.max_cells:
        raise CampaignError(
            f"{where}: the campaign expands to {cell_count} cells ({instance_count}"
            f" instance(s) x {len(resolved.arms)} arm(s) x {parsed.reps} rep(s)), more than"
            f" max_cells = {parsed.max_cells}; raise max_cells in the campaign file if that"
            " is meant"
        )
    digest = selected.hexdigest()

    def cells() -> Iterator[CellSpec]:
        again = hashlib.sha256()
        for instance in _instances(resolved, rows(), _Selector(parsed, where)):
            again.update(instance.instance_id.encode() + b"\0")
            yield from _cells_of(resolved, instance)
        if again.hexdigest() != digest:
            raise CampaignError(f"{where}: the instances changed while the campaign was read")

    preview_cells = [
        cell_id(parsed.name, iid, arm.name, rep)
        for iid in preview_ids
        for arm in resolved.arms
        for rep in range(parsed.reps)
    ][:PREVIEW_CELLS]
    return Campaign(
        name=parsed.name,
        source_path=str(path.resolve()),
        spec_sha256=hashlib.sha256(raw_text).hexdigest(),
        max_parallel=parsed.max_parallel,
        breaker_after=parsed.breaker_after,
        budget=(
            Budget(
                max_usd=parsed.budget.max_usd,
                abort_running=parsed.budget.abort_running,
                expected_usd_per_attempt=parsed.budget.expected_usd_per_attempt,
            )
            if parsed.budget is not None
            else None
        ),
        selection=InstanceSelection(
            instance_ids=parsed.instance_ids,
            instance_filter=parsed.instance_filter,
            limit=parsed.limit,
            rows=total,
            selected=instance_count,
        ),
        reps=parsed.reps,
        arms=resolved.arms,
        sandbox=resolved.sandbox,
        secrets=resolved.secrets,
        instance_count=instance_count,
        cell_count=cell_count,
        preview_cell_ids=preview_cells,
        preview_verify=preview_verify,
        _cells=cells,
        images=dict(resolved.images),
        local_sources=local_sources,
        first_cells=first_cells,
    )


def _sandbox(
    spec: SandboxFile | None,
    base: Path,
    secrets: SecretsSpec | None,
    where: str,
    arms: list[ArmSpec],
    gateway: GatewaySpec,
) -> SandboxSpec:
    """The [sandbox] table: read_only paths resolved against the campaign file, existing,
    and never showing what a cell must not see (checked again against the arenad home at
    submit, and where the cell runs). Its ``network`` is the most open any cell gets (what
    submit checks); each cell's own is resolved for its arm."""
    opened: Network = "model" if any(uses_model(arm) for arm in arms) else "none"
    if spec is None:
        spec = SandboxFile()
    shares = []
    for n, raw in enumerate(spec.read_only):
        key = f"[sandbox] read_only[{n}]"
        if not raw.strip():
            raise CampaignError(f"{where}: {key} is empty")
        path = _resolve_path(base, raw)
        if not Path(path).exists():
            raise CampaignError(f"{where}: {key}: {path} does not exist")
        problem = share_problem(
            path,
            home_root=None,
            secrets_dir=secrets.dir if secrets is not None else None,
            homes=user_homes(),
        )
        if problem is not None:
            raise CampaignError(f"{where}: {key}: {problem}")
        shares.append(path)
    return SandboxSpec(
        kind=spec.kind,
        read_only=shares,
        memory_bytes=limits.parse_size(
            spec.memory, "[sandbox] memory", where, limits.MIN_MEMORY_BYTES
        ),
        pids=limits.parse_pids(spec.pids, "[sandbox] pids", where),
        cpus=limits.parse_cpus(spec.cpus, "[sandbox] cpus", where),
        disk_bytes=limits.parse_size(spec.disk, "[sandbox] disk", where, limits.MIN_DISK_BYTES),
        network=spec.network or opened,
        image=_docker_image(spec, where, secrets, _keys_at_the_gateway(arms, gateway)),
        workdir=_docker_workdir(spec, where),
    )


def _via_gateway(arm: ArmSpec) -> bool:
    """Whether the arm's agent is pointed at the gateway (its kind's row; an arm that uses
    no model has no call to point: docs/gateway.md)."""
    return kind_of_arm(arm).gateway and uses_model(arm)


def _keys_at_the_gateway(arms: list[ArmSpec], gateway: GatewaySpec) -> bool:
    """Every arm that calls a model does so through the gateway, which reads the keys from
    the [secrets] env files itself: no cell needs the secrets wrapper."""
    return gateway.kind == "gateway" and all(_via_gateway(arm) for arm in arms if uses_model(arm))


def _docker_image(
    spec: SandboxFile, where: str, secrets: SecretsSpec | None, keys_at_gateway: bool
) -> str | None:
    if spec.kind == "docker" and secrets is not None and not keys_at_gateway:
        # The secrets wrapper's variables are named only in files arenad never opens, so
        # they cannot be passed into a container by name; the gateway reads them for a
        # solo arm, whose agent then holds only its attempt's token.
        raise CampaignError(
            f'{where}: [sandbox] kind = "docker" takes [secrets] only when every model-using'
            ' arm calls through the gateway (a solo arm, [gateway] kind = "gateway")'
        )
    if spec.image is None:
        return None
    if spec.kind != "docker":
        raise CampaignError(f'{where}: [sandbox] image is for kind = "docker" only')
    if not spec.image.strip() or spec.image != spec.image.strip():
        raise CampaignError(f"{where}: [sandbox] image {spec.image!r} is not an image name")
    return spec.image


def _docker_workdir(spec: SandboxFile, where: str) -> str:
    w = spec.workdir
    if not w.startswith("/") or os.path.normpath(w) != w or w == "/" or "," in w or ":" in w:
        raise CampaignError(
            f"{where}: [sandbox] workdir {w!r} must be an absolute, normalized path (not /)"
        )
    return w


def _unique(values: list[str], what: str, where: str) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise CampaignError(f"{where}: {what} {v!r} appears twice")
        seen.add(v)


def spec_sha256(spec: CellSpec) -> str:
    return hashlib.sha256(msgspec.json.encode(spec)).hexdigest()
