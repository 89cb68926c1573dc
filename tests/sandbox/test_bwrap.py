"""The bwrap command line (pure): what it must always say, in what order."""

from __future__ import annotations

from arenad.sandbox.bwrap import Binds, Host, inside, nested_dropped, sandbox_argv

HOST = Host(
    bwrap="/usr/bin/bwrap",
    version="0.8.0",
    env="/usr/bin/env",
    links=(("/bin", "usr/bin"),),
    system=("/usr", "/etc"),
    masked=("/etc/shadow",),
    etc_targets=("/run/systemd/resolve",),
)
RUN = "/tmp/h/campaigns/c/rep-0/attempt-1/runs/i1/CMD"
BINDS = Binds(
    read_only=("/tmp/tools/venv", "/srv/data"),
    run_dir=RUN,
    read_write=(f"{RUN}/home", f"{RUN}/ws"),
    chdir=f"{RUN}/ws",
)


def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_outer_chain_ignores_group_signals_and_the_child_gets_them_back() -> None:
    argv = sandbox_argv(HOST, BINDS, ["agent", "--x"])
    assert argv[:3] == ["/usr/bin/env", "--ignore-signal=TERM,INT,HUP", "/usr/bin/bwrap"]
    sep = argv.index("--")
    assert argv[sep + 1 :] == [
        "/usr/bin/env",
        "--default-signal=TERM,INT,HUP",
        "-u",
        "OLDPWD",
        f"PWD={RUN}/ws",
        "agent",
        "--x",
    ]


def test_confinement_flags_are_always_there_and_the_network_is_kept() -> None:
    argv = sandbox_argv(HOST, BINDS, ["true"])
    head = argv[: argv.index("--")]
    for flag in ("--unshare-pid", "--die-with-parent", "--unshare-ipc", "--unshare-uts"):
        assert flag in head
    assert head[head.index("--cap-drop") + 1] == "ALL"
    # Its own session would take the child out of the run's process group.
    assert "--new-session" not in head and "--unshare-net" not in head
    assert "--unshare-all" not in head
    # /proc/sys read-only after the fresh /proc; the root read-only at the end.
    assert head.index("--proc") < head.index("/proc/sys")
    assert _pairs(head, "--ro-bind").count("/proc/sys") == 1
    assert head[head.index("--remount-ro") + 1] == "/"
    assert _pairs(head, "--chdir") == [f"{RUN}/ws"]


def test_binds_come_in_an_order_that_makes_them_all_visible() -> None:
    argv = sandbox_argv(HOST, BINDS, ["true"])
    tmpfs = argv.index("/tmp", argv.index("--tmpfs"))
    share = argv.index("/tmp/tools/venv")
    run = argv.index(RUN)
    ws = argv.index(f"{RUN}/ws")
    # A share or run dir under /tmp is bound after /tmp's tmpfs; the writable dirs after
    # the read-only run dir they live in.
    assert tmpfs < share < run < ws
    assert argv[run - 1] == "--ro-bind" and argv[ws - 1] == "--bind"
    assert argv[argv.index("/run/systemd/resolve") - 1] == "--ro-bind"
    assert argv.index("/run/systemd/resolve") > argv.index("/run", tmpfs)
    assert _pairs(argv, "--symlink") == ["usr/bin"]
    assert argv[argv.index("/etc/shadow") - 1] == "/dev/null"


def test_nested_paths_are_dropped_and_parents_come_first() -> None:
    assert nested_dropped(["/a/b/c", "/a/b", "/x/", "/a/b", "/usr/lib/y"], ["/usr"]) == (
        "/x",
        "/a/b",
    )
    assert inside("/a/b", "/a") and inside("/a", "/a") and not inside("/ab", "/a")
    assert inside("/anything", "/")
