"""arenad.view.diff: a patch's lines, classified."""

from __future__ import annotations

from arenad.view.diff import DiffLine, diff_lines


def test_headers_hunks_and_changes() -> None:
    patch = (
        "diff --git a/x b/x\n"
        "--- a/x\n"
        "+++ b/x\n"
        "@@ -1,3 +1,3 @@\n"
        " same\n"
        "--- a removed line that looks like a header\n"
        "+++ an added one\n"
        "\\ No newline at end of file\n"
        "diff --git a/y b/y\n"
        "new file mode 100644\n"
    )
    assert [(d.kind, d.text[:12]) for d in diff_lines(patch)] == [
        ("file", "diff --git a"),
        ("meta", "--- a/x"),
        ("meta", "+++ b/x"),
        ("hunk", "@@ -1,3 +1,3"),
        ("ctx", " same"),
        ("del", "--- a remove"),
        ("add", "+++ an added"),
        ("ctx", "\\ No newline"),
        ("file", "diff --git a"),
        ("meta", "new file mod"),
    ]


def test_an_empty_patch_has_no_lines() -> None:
    assert diff_lines("") == []
    assert diff_lines("not a diff") == [DiffLine("meta", "not a diff")]
