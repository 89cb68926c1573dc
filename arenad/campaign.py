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
    instances_file = "instances.jsonl"  # SWE-bench rows, or [[instances]] inline
    verify_template = "python -m pytest -q {test_path}"   # optional; {field} of the row
    excludes = [...]                  # default: the seed's test-file list
    max_output_bytes = 67108864       # per agent stdout / stderr file; the rest is dropped

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

    [[arms]]
    name = "SOLO"
    kind = "solo"                     # solo | supervisor | command
    model = "scripted/fixer"
"""

from __future__ import annotations

import hashlib
import json
import re
import string
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from arenad.errors import CampaignError
from arenad.materialize.image import default_image_name
from arenad.sandbox.confine import share_problem, user_homes
from events.specs import (
    DEFAULT_EXCLUDES,
    DEFAULT_MAX_OUTPUT_BYTES,
    SUPERVISOR_DEFAULT_ENV_KNOBS,
    WORKER_PROMPT_SUFFIX,
    ArmSpec,
    CellSpec,
    CommandArm,
    InstanceSpec,
    JudgeSpec,
    MaterializerSpec,
    SandboxSpec,
    SecretsSpec,
    SoloArm,
    SupervisorArm,
)

PATH_COMPONENT = re.compile(r"^[A-Za-z0-9._-]+$")
ENV_KNOB = re.compile(r"^[A-Z_][A-Z0-9_]*$")
DEFAULT_LOOPS_REPO = "~/code/loops"


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


class CommandArmFile(_Strict, tag="command", tag_field="kind", frozen=True, kw_only=True):
    name: str
    argv: list[str]
    model: str | None = None
    timeout_s: float = 1000.0
    prompt_suffix: str = WORKER_PROMPT_SUFFIX
    env: dict[str, str] = {}
    uses_model: bool = True
    kill_grace_s: float = 1.0


ArmFile = SoloArmFile | SupervisorArmFile | CommandArmFile


class MaterializerFile(_Strict, frozen=True, kw_only=True):
    kind: Literal["image", "git"]
    source: str | None = None


class SecretsFile(_Strict, frozen=True, kw_only=True):
    dir: str
    env_files: list[str]
    wrapper: list[str] = msgspec.field(default_factory=lambda: ["dotenvx", "run"])


class SandboxFile(_Strict, frozen=True, kw_only=True):
    kind: Literal["bwrap", "none"] = "bwrap"
    read_only: list[str] = []


class JudgeFile(_Strict, frozen=True, kw_only=True):
    command: str
    name: str = "swe-arena-official-judge"
    timeout_s: float = 600.0


class CampaignFile(_Strict, frozen=True, kw_only=True):
    name: str
    suite: str = "swe-bench-verified"
    split: Literal["search", "dev", "holdout", "canary"] = "search"
    reps: int = 1
    # This campaign's cap on cells at once; unset, only the daemon's --max-parallel applies.
    max_parallel: int | None = None
    experiment_id: str | None = None
    instances: list[dict[str, Any]] = []
    instances_file: str | None = None
    verify_template: str | None = None
    verify_timeout_s: float = 600.0
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    excludes: list[str] | None = None
    materializer: MaterializerFile | None = None
    secrets: SecretsFile | None = None
    judge: JudgeFile | None = None
    sandbox: SandboxFile | None = None
    arms: list[ArmFile]


class Campaign(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    source_path: str
    spec_sha256: str
    max_parallel: int | None
    cells: list[CellSpec]


_INSTANCE_FIELDS = set(InstanceRow.__struct_fields__)


def _where(exc: msgspec.ValidationError) -> str:
    # msgspec says "... - at `$.arms[0]`": turn the JSON path into the TOML key path.
    return str(exc).replace("`$.", "`").replace("`$`", "the top level")


def check_path_component(value: str, what: str, where: str) -> None:
    if value in (".", "..") or not PATH_COMPONENT.match(value):
        raise CampaignError(
            f"{where}: {what} {value!r} must match [A-Za-z0-9._-]+ and not be '.' or '..'"
            " (it becomes a directory name)"
        )


def _resolve_path(base: Path, raw: str) -> str:
    path = Path(raw).expanduser()
    return str(path if path.is_absolute() else (base / path).resolve())


def _looks_like_url(raw: str) -> bool:
    return "://" in raw or raw.startswith("git@")


def _read_rows(path: Path, where: str) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise CampaignError(f"{where}: cannot read instances_file {path}: {exc.strerror}") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CampaignError(f"{path}:{n}: not a JSON row ({exc.msg})") from None
        if not isinstance(row, dict):
            raise CampaignError(f"{path}:{n}: a row must be a JSON object")
        row["__where__"] = f"{path}:{n}"
        rows.append(row)
    return rows


def render_verify_template(template: str, row: dict[str, Any], where: str) -> str:
    """Fill {field} placeholders from the instance row; unknown or malformed -> error."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise CampaignError(f"{where}: verify_template is malformed: {exc}") from None
    for field in fields:
        if not field.isidentifier():
            raise CampaignError(
                f"{where}: verify_template placeholder {{{field}}} is not a plain field name"
            )
        if field not in row:
            raise CampaignError(
                f"{where}: verify_template uses {{{field}}}, but instance"
                f" {row.get('instance_id')!r} has no field {field!r}"
            )
    values = {k: v if isinstance(v, str) else json.dumps(v) for k, v in row.items()}
    return template.format(**values)


def _instance(row: dict[str, Any], template: str | None, where: str) -> InstanceSpec:
    where = row.pop("__where__", where)
    known = {k: v for k, v in row.items() if k in _INSTANCE_FIELDS}
    extra = {k: v for k, v in row.items() if k not in _INSTANCE_FIELDS}
    if "verify" in extra and "verify_cmd" not in known:
        known["verify_cmd"] = extra.pop("verify")
    try:
        parsed = msgspec.convert(known, InstanceRow)
    except msgspec.ValidationError as exc:
        raise CampaignError(f"{where}: instance: {_where(exc)}") from None
    check_path_component(parsed.instance_id, "instance_id", where)
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


def _arm(arm: ArmFile, base: Path, where: str) -> ArmSpec:
    check_path_component(arm.name, "arm name", where)
    if isinstance(arm, SoloArmFile):
        return SoloArm(
            name=arm.name,
            model=arm.model,
            timeout_s=arm.timeout_s,
            prompt_suffix=arm.prompt_suffix,
            opencode_bin=arm.opencode_bin,
            extra_args=arm.extra_args,
            kill_grace_s=arm.kill_grace_s,
        )
    if isinstance(arm, CommandArmFile):
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
        )
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
    if not cancel_ms > 0 or cancel_ms == float("inf"):
        raise CampaignError(
            f"{where}: arm {arm.name!r}: DRIVER_CANCEL_TIMEOUT_MS must be a positive number"
        )
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
            source = _resolve_path(base, source)
        return MaterializerSpec(kind="git", source=source)
    return MaterializerSpec(kind="image")


def load_campaign(path: Path) -> Campaign:
    """Read and validate a campaign file; raise CampaignError naming what and where."""
    where = str(path)
    try:
        raw_text = path.read_bytes()
    except OSError as exc:
        raise CampaignError(f"cannot read campaign file {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw_text.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CampaignError(f"{where}: not valid TOML: {exc}") from None
    try:
        parsed = msgspec.convert(data, CampaignFile)
    except msgspec.ValidationError as exc:
        raise CampaignError(f"{where}: {_where(exc)}") from None
    base = path.resolve().parent
    check_path_component(parsed.name, "campaign name", where)
    if parsed.reps < 1:
        raise CampaignError(f"{where}: reps must be at least 1")
    if parsed.max_parallel is not None and parsed.max_parallel < 1:
        raise CampaignError(f"{where}: max_parallel must be at least 1")
    if parsed.max_output_bytes < 1:
        raise CampaignError(f"{where}: max_output_bytes must be at least 1")
    if not parsed.arms:
        raise CampaignError(f"{where}: a campaign needs at least one [[arms]] entry")
    if parsed.instances and parsed.instances_file:
        raise CampaignError(f"{where}: give instances inline or instances_file, not both")
    rows = [dict(r, __where__=f"{where}: instances[{i}]") for i, r in enumerate(parsed.instances)]
    if parsed.instances_file:
        rows = _read_rows(Path(_resolve_path(base, parsed.instances_file)), where)
    if not rows:
        raise CampaignError(f"{where}: no instances (give [[instances]] or instances_file)")
    instances = [_instance(row, parsed.verify_template, where) for row in rows]
    _unique([i.instance_id for i in instances], "instance_id", where)
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
    judge = (
        JudgeSpec(
            command=parsed.judge.command, name=parsed.judge.name, timeout_s=parsed.judge.timeout_s
        )
        if parsed.judge
        else None
    )
    excludes = parsed.excludes if parsed.excludes is not None else list(DEFAULT_EXCLUDES)
    sandbox = _sandbox(parsed.sandbox, base, secrets, where)
    if parsed.materializer is not None and parsed.materializer.kind == "image":
        # Recorded in the spec, so a rerun uses the same image even if the rule changes.
        instances = [
            msgspec.structs.replace(i, image=i.image or default_image_name(i.instance_id))
            for i in instances
        ]
    cells = [
        CellSpec(
            campaign=parsed.name,
            suite=parsed.suite,
            split=parsed.split,
            instance=instance,
            arm=arm,
            rep=rep,
            materializer=_materializer(parsed.materializer, instance, base, where),
            secrets=secrets,
            excludes=excludes,
            verify_timeout_s=parsed.verify_timeout_s,
            max_output_bytes=parsed.max_output_bytes,
            judge=judge,
            experiment_id=parsed.experiment_id,
            sandbox=sandbox,
        )
        for instance in instances
        for arm in arms
        for rep in range(parsed.reps)
    ]
    return Campaign(
        name=parsed.name,
        source_path=str(path.resolve()),
        spec_sha256=hashlib.sha256(raw_text).hexdigest(),
        max_parallel=parsed.max_parallel,
        cells=cells,
    )


def _sandbox(
    spec: SandboxFile | None, base: Path, secrets: SecretsSpec | None, where: str
) -> SandboxSpec:
    """The [sandbox] table: read_only paths resolved against the campaign file, existing,
    and never showing what a cell must not see (checked again against the arenad home at
    submit, and where the cell runs)."""
    if spec is None:
        return SandboxSpec()
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
    return SandboxSpec(kind=spec.kind, read_only=shares)


def _unique(values: list[str], what: str, where: str) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise CampaignError(f"{where}: {what} {v!r} appears twice")
        seen.add(v)


def spec_sha256(spec: CellSpec) -> str:
    return hashlib.sha256(msgspec.json.encode(spec)).hexdigest()
