"""Issue 27, finding 7, end to end on a real small filesystem: an agent with no disk
limit fills the disk under the home. The store's reserve gives the log room to record it
(``daemon.disk-full`` naming the filler's cell and its bytes) and the filler's real exit,
and the daemon goes on; the next daemon starts on the room left."""

from __future__ import annotations

from pathlib import Path

from arenad.daemon.diskfull import RESERVE_BYTES, RESERVE_NAME
from events import cell as ev
from events.control import DiskFull
from tests.conftest import make_repo
from tests.daemon.support import command_campaign, read_all, start_daemon, submitted
from tests.fullfs import small_fs

FILLER = "head -c 1G /dev/zero > big.bin; echo filled; exit 7"


def test_a_full_disk_is_recorded_naming_the_filler_and_the_next_daemon_starts(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    base = make_repo(repo, {"a.txt": "a\n"})
    camp = command_campaign(
        tmp_path / "fill.toml",
        name="fill",
        repo=repo,
        base=base,
        argv=["bash", "-c", FILLER],
        extra='[sandbox]\ndisk = "unlimited"\n',
    )
    with small_fs(tmp_path / "home", size="160m") as home:
        submitted(home, camp)
        first = start_daemon(home, "--until-idle", stderr=tmp_path / "first.err")
        assert first.wait(timeout=120) == 0, (tmp_path / "first.err").read_text()[-3000:]
        err = (tmp_path / "first.err").read_text()
        assert "disk full; largest run dirs: fill:i1:CMD:0 (attempt 1)" in err, err[-2000:]
        # No room for the reserve twice over: none is made, and the next daemon starts.
        assert not (home / RESERVE_NAME).exists()
        second = start_daemon(home, "--until-idle", stderr=tmp_path / "second.err")
        assert second.wait(timeout=120) == 0, (tmp_path / "second.err").read_text()[-3000:]
        assert "no room for the store's reserve" in (tmp_path / "second.err").read_text()
        # Read before the mount goes; the filler's bytes go with it.
        records = read_all(home)
    (full,) = [r.event for r in records if isinstance(r.event, DiskFull)]
    assert full.reserve_released_bytes == RESERVE_BYTES
    assert full.largest[0].cell_id == "fill:i1:CMD:0"
    assert full.largest[0].bytes > 64 << 20
    assert "full" in full.error
    ended = [
        r.event
        for r in records
        if isinstance(r.event, ev.RunCompleted | ev.RunAborted) and r.stream == "cell/fill:i1:CMD:0"
    ]
    assert [type(e).__name__ for e in ended] == ["RunCompleted"], ended
    assert isinstance(ended[0], ev.RunCompleted) and ended[0].rc == 7
