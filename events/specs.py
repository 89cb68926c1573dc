"""Specs carried inside events: everything needed to run a cell again.

These are the *resolved* forms (defaults applied, paths absolute). The campaign
file arenad reads from users is a different, stricter type (``arenad.campaign``)
that resolves into these.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import msgspec

# The reference's exact closing instruction (solo.sh): the solo arm gets the same suffix
# the supervisor's workers get, so prompt content is never a confound between arms.
WORKER_PROMPT_SUFFIX = (
    "\n\nWork only in your current working directory. Implement the change completely and"
    " correctly — do not stub, weaken, or special-case anything, and keep the repository's"
    " existing tests passing. An automated check verifies your work after you finish."
)

# The reference's cap on a child's captured output, here per agent stdout / stderr file.
DEFAULT_MAX_OUTPUT_BYTES = 64 << 20

# The reference's test-file excludes (fixtures/excludes.txt); each becomes
# ':(exclude,glob)<pattern>' on the patch-extraction pathspec.
DEFAULT_EXCLUDES: tuple[str, ...] = (
    "**/tests/**",
    "**/test/**",
    "test_*.py",
    "**/test_*.py",
    "*_test.py",
    "**/*_test.py",
    "conftest.py",
    "**/conftest.py",
)

# sup4.sh's env knobs; LOOPS_BRAIN_LOG is always run-dir derived and added at run time.
SUPERVISOR_DEFAULT_ENV_KNOBS: dict[str, str] = {
    "WORKER_BACKEND": "cli",
    "LOOPS_WORKER_HARNESS": "opencode",
    "LOOPS_BRAIN_RETRIES": "30",
    "DRIVER_DEADLINE_MS": "2600000",
}

Split = Literal["search", "dev", "holdout", "canary"]


class Spec(msgspec.Struct, frozen=True, kw_only=True):
    """Base of stored specs: frozen, keyword-only, tolerant of fields added later."""


class InstanceSpec(Spec, frozen=True, kw_only=True):
    instance_id: str
    repo: str = ""
    base_commit: str
    problem_statement: str
    image: str | None = None
    verify_cmd: str
    # SWE-bench rows carry many more fields; they are kept verbatim for the record.
    extra: dict[str, Any] = {}


class SoloArm(Spec, tag="solo", tag_field="kind", frozen=True, kw_only=True):
    name: str
    model: str
    timeout_s: float = 1000.0
    prompt_suffix: str = WORKER_PROMPT_SUFFIX
    opencode_bin: str = "opencode"
    extra_args: list[str] = []
    kill_grace_s: float = 1.0


class SupervisorArm(Spec, tag="supervisor", tag_field="kind", frozen=True, kw_only=True):
    name: str
    worker_model: str
    driver_model: str
    timeout_s: float = 2800.0
    budget: int = 40
    max_sandboxes: int = 4
    max_usd: float = 8.0
    max_depth: int = 3
    env_knobs: dict[str, str] = {}
    loops_repo: str
    extension_path: str
    shim_path: str
    # argv with placeholders {ws} {params} {extension} {run_dir} {shim} {loops_repo};
    # run with cwd = loops_repo.
    driver_cmd: list[str]
    kill_grace_s: float = 40.0
    # Workers share the cell's opencode store; two of them creating it at the same instant
    # can fail ("database is locked", a migration race). Before the driver starts, this
    # binary creates and migrates the store once (`opencode db`, no rows written).
    init_opencode_store: bool = True
    opencode_bin: str = "opencode"


class CommandArm(Spec, tag="command", tag_field="kind", frozen=True, kw_only=True):
    """Any agent CLI as an arm: argv with {ws} {prompt_file} {run_dir} {model} placeholders."""

    name: str
    argv: list[str]
    model: str | None = None
    timeout_s: float = 1000.0
    prompt_suffix: str = WORKER_PROMPT_SUFFIX
    env: dict[str, str] = {}
    # Whether the command touches a model (and so runs under the secrets wrapper).
    uses_model: bool = True
    kill_grace_s: float = 1.0
    # What its stdout is: JSON lines (opencode's stream and the like), or plain text lines,
    # ingested as they are rather than each recorded malformed.
    output: Literal["jsonl", "text"] = "jsonl"


ArmSpec = SoloArm | SupervisorArm | CommandArm


class MaterializerSpec(Spec, frozen=True, kw_only=True):
    kind: Literal["image", "git"]
    # git: a local path or URL to clone; image: unused (the instance names the image).
    source: str | None = None


class SecretsSpec(Spec, frozen=True, kw_only=True):
    dir: str
    env_files: list[str]
    # The wrapper argv prefix; '-f FILE' pairs, '--', 'bash', '-c', SCRIPT follow.
    wrapper: list[str] = msgspec.field(default_factory=lambda: ["dotenvx", "run"])


class SandboxSpec(Spec, frozen=True, kw_only=True):
    """How a cell's agent run, verify command and judge are confined (arenad.sandbox).

    ``bwrap``: a bubblewrap sandbox that shows the system read-only, the cell's own run dir
    (its workspace and private dirs writable) and ``read_only``, and hides the rest;
    ``none``: an explicit opt-out (the child sees what the daemon's user sees);
    ``docker``: the agent runs in a container of the instance's image
    (:mod:`arenad.sandbox.container`), its verify and command judge as with ``bwrap``."""

    kind: Literal["bwrap", "none", "docker"] = "bwrap"
    # Absolute paths shown read-only inside besides the system (a dataset, an agent CLI
    # installed somewhere unusual).
    read_only: list[str] = []
    # -- per-run limits (arenad.runs.cgroups): each agent run, verify and judge in its own
    # cgroup. None: not limited (what a spec recorded before limits decodes as).
    memory_bytes: int | None = None
    pids: int | None = None
    cpus: float | None = None
    # The workspace's disk use past which the agent run is aborted ("disk limit").
    disk_bytes: int | None = None
    # The agent run's network (arenad.sandbox.network): "model" its model endpoints only,
    # through a forwarder; "none" loopback only; "host" the machine's. Resolved at load
    # (model when the arm uses one, else none). A spec recorded before the key decodes as
    # "host": what its cells were submitted to run with.
    network: Literal["model", "none", "host"] = "host"
    # kind = "docker": the agent's image (None: the instance's, as the materializer names
    # it) and where the workspace is mounted inside.
    image: str | None = None
    workdir: str = "/testbed"


class GatewaySpec(Spec, frozen=True, kw_only=True):
    """Whether a cell's model calls go through the daemon's model gateway (arenad.gateway),
    and the attempt's spend caps the gateway enforces per call. A spec recorded before the
    gateway decodes as ``none`` (the agent reaches its provider itself)."""

    kind: Literal["gateway", "none"] = "none"
    max_usd: float | None = None
    max_tokens: int | None = None


class JudgeSpec(Spec, frozen=True, kw_only=True):
    """An optional judge run after verify on a scored run.

    ``kind = "command"``: ``command`` runs in the workspace and prints a verdict JSON.
    ``kind = "swebench"``: the official SWE-bench grade in a fresh container of the
    instance's image (:mod:`arenad.verdict.swebench`): ``test_cmd`` runs in ``/testbed`` and
    swebench's ``log_parser`` reads its output; the container gets ``memory_mb`` of memory
    (no swap), at most ``pids`` processes, ``cpus`` CPUs (None: no limit) and no network.
    """

    command: str = ""
    name: str = "swe-arena-official-judge"
    timeout_s: float = 600.0
    kind: Literal["command", "swebench"] = "command"
    test_cmd: str | None = None
    log_parser: str | None = None
    memory_mb: int = 4096
    pids: int = 4096
    cpus: float | None = None


class CandidateSpec(Spec, frozen=True, kw_only=True):
    """Which improvement-loop candidate a campaign evaluates (the rollout ledger's
    ``candidate_id`` / ``generation`` / ``candidate_index``); -1/-1 is the baseline."""

    id: str
    generation: int
    index: int


class ExecutorSpec(Spec, frozen=True, kw_only=True):
    """Where a cell runs: ``local`` (the daemon's machine) or ``ray`` (a node of the
    daemon's Ray cluster that offers ``resources``, e.g. ``{"arenad_slot": 1}``, which the
    cell holds while it lives there)."""

    kind: Literal["local", "ray"] = "local"
    resources: dict[str, float] = {}


class CellSpec(Spec, frozen=True, kw_only=True):
    campaign: str
    suite: str = "swe-bench-verified"
    split: Split = "search"
    instance: InstanceSpec
    arm: ArmSpec
    rep: int
    materializer: MaterializerSpec
    secrets: SecretsSpec | None = None
    excludes: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_EXCLUDES))
    verify_timeout_s: float = 600.0
    # Bytes kept of each of the agent's stdout and stderr files (the reference's 64 MiB).
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    judge: JudgeSpec | None = None
    experiment_id: str | None = None
    # The campaign's [candidate] keys; None: the ledger falls back to the campaign name
    # (``baseline`` or ``gen<G>-cand<C>``).
    candidate: CandidateSpec | None = None
    # None: wherever the daemon's executor runs cells (the campaign had no [executor]).
    executor: ExecutorSpec | None = None
    # A spec recorded before sandboxes decodes as the default: sandboxed.
    sandbox: SandboxSpec = msgspec.field(default_factory=SandboxSpec)
    # Where verify and the judge run (arenad.verdict.grade): a fresh checkout of base with
    # the stored patch applied, or the agent's own workspace (self-reported). A spec
    # recorded before grading checkouts decodes as the default: the checkout.
    verify_in: Literal["checkout", "workspace"] = "checkout"
    gateway: GatewaySpec = msgspec.field(default_factory=GatewaySpec)

    @property
    def cell_id(self) -> str:
        return cell_id(self.campaign, self.instance.instance_id, self.arm.name, self.rep)


def cell_id(campaign: str, instance_id: str, arm: str, rep: int) -> str:
    """Cell identity: (campaign, instance, arm, rep). ':' never occurs in the parts."""
    return f"{campaign}:{instance_id}:{arm}:{rep}"


class CellId(NamedTuple):
    """A cell id's parts: the one parser of what :func:`cell_id` builds."""

    campaign: str
    instance_id: str
    arm: str
    rep: int

    @classmethod
    def parse(cls, text: str) -> CellId | None:
        """The parts of ``text``; None for any other shape (a log may hold an id written
        by hand or by an older version: its readers decide what that means)."""
        parts = text.split(":")
        if len(parts) == 4 and parts[3].isascii() and parts[3].isdigit():
            return cls(parts[0], parts[1], parts[2], int(parts[3]))
        return None


def campaign_of(text: str) -> str:
    """The campaign a cell id names: its text before the first ':' (of any shape)."""
    return text.split(":", 1)[0]


def arm_of(text: str) -> str:
    """The arm a cell id names, its third part ("" when it has none)."""
    parts = text.split(":")
    return parts[2] if len(parts) > 2 else ""
