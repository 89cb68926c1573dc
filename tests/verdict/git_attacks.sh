#!/bin/bash
# A hostile agent's attacks on the daemon's own git calls (issue 13, findings 1, 2 and 5),
# run in its workspace (the cwd) with nothing but bash, coreutils and git, as an agent in
# a sandbox could. Usage:
#
#     git_attacks.sh PWN [ATTACK...]    with OUTSIDE_REPO / SECRET_DIR / TEMPLATE_OBJECTS
#
# Every attack plants commands that write a marker file PWN/<tag> when something runs them
# (only the daemon would: the agent runs no git command after planting). "edit" makes the
# agent's real change. The attacks never run git on anything but their own files.
set -eu
pwn=$1
shift
ws=$PWD
evil="$ws/.evil.sh"
printf '#!/bin/sh\necho "$@" >> "%s/$1"\ncase "$1" in clean*|smudge*) cat ;; textconv*) cat "$2" ;; esac\nexit 0\n' \
    "$pwn" >"$evil"
chmod +x "$evil"

cfg() { git config -f "$ws/.git/config" "$@"; }
hooks() {
    mkdir -p "$1"
    for h in pre-commit post-index-change reference-transaction post-checkout pre-auto-gc \
        fsmonitor-watchman post-commit pre-push; do
        printf '#!/bin/sh\n%s hook-%s\n' "$evil" "$h" >"$1/$h"
        chmod +x "$1/$h"
    done
}
nested() {
    mkdir -p sub
    git -C sub init -q
    echo 'S = 1' >sub/s.py
    git -C sub add -A
    git -C sub -c user.name=a -c user.email=a@b commit -qm s
    echo '# dirty' >>sub/s.py
    git config -f sub/.git/config core.fsmonitor "$evil sub-fsmonitor"
    hooks sub/.git/hooks
}

for attack in "$@"; do
    case $attack in
    edit)
        echo 'fixed = True' >>app.py
        echo 'NEW = 1' >new.py
        ;;
    fsmonitor) cfg core.fsmonitor "$evil fsmonitor" ;;
    hooks-path)
        hooks "$ws/.hooks-evil"
        cfg core.hooksPath "$ws/.hooks-evil"
        ;;
    hooks) hooks "$ws/.git/hooks" ;;
    diff-external) cfg diff.external "$evil diff-external" ;;
    textconv)
        echo '* diff=evil' >>.gitattributes
        cfg diff.evil.textconv "$evil textconv"
        ;;
    diff-command)
        echo '* diff=evilcmd' >>.gitattributes
        cfg diff.evilcmd.command "$evil diff-command"
        ;;
    filter)
        echo '* filter=evil' >>.gitattributes
        cfg filter.evil.clean "$evil clean"
        cfg filter.evil.smudge "$evil smudge"
        cfg filter.evil.required true
        ;;
    filter-process)
        echo '* filter=evilp' >>.gitattributes
        cfg filter.evilp.process "$evil filter-process"
        ;;
    include)
        printf '[core]\n\tfsmonitor = %s include\n' "$evil" >"$ws/evil.cfg"
        cfg include.path ../evil.cfg
        ;;
    include-if)
        printf '[diff]\n\texternal = %s include-if\n' "$evil" >"$ws/evil2.cfg"
        cfg includeIf.gitdir:/.path "$ws/evil2.cfg"
        ;;
    alias)
        cfg alias.add "!$evil alias-add"
        cfg alias.diff "!$evil alias-diff"
        cfg alias.status "!$evil alias-status"
        ;;
    pager)
        cfg core.pager "$evil core-pager"
        cfg pager.diff "$evil pager-diff"
        cfg pager.status "$evil pager-status"
        ;;
    transport)
        cfg core.sshCommand "$evil ssh-command"
        cfg core.askPass "$evil askpass"
        cfg credential.helper "!$evil credential"
        cfg core.gitProxy "$evil git-proxy"
        cfg protocol.ext.allow always
        cfg remote.origin.url "ext::$evil ext-transport"
        cfg remote.origin.uploadpack "$evil uploadpack"
        cfg uploadpack.packObjectsHook "$evil pack-objects-hook"
        cfg core.alternateRefsCommand "$evil alternate-refs"
        ;;
    editors)
        cfg core.editor "$evil editor"
        cfg sequence.editor "$evil sequence-editor"
        cfg gpg.program "$evil gpg"
        cfg commit.gpgSign true
        cfg merge.evil.driver "$evil merge-driver %O %A %B"
        echo '* merge=evil' >>.gitattributes
        ;;
    nested) nested ;;
    gitmodules)
        nested
        printf '[submodule "sub"]\n\tpath = sub\n\turl = ext::%s sub-url\n\tupdate = !%s sub-update\n' \
            "$evil" "$evil" >.gitmodules
        ;;
    worktree) cfg core.worktree "$SECRET_DIR" ;;
    autocrlf)
        cfg core.autocrlf true
        echo '*.py text eol=crlf' >>.gitattributes
        ;;
    gitdir-file)
        rm -rf .git
        echo "gitdir: $OUTSIDE_REPO/.git" >.git
        ;;
    delete-git) rm -rf .git ;;
    recreate-git)
        rm -rf .git
        git init -q
        ;;
    objects-symlink)
        rm -rf .git/objects
        ln -s "$TEMPLATE_OBJECTS" .git/objects
        ;;
    fifo) mkfifo fifo ;;
    symlinks)
        ln -s "$SECRET_DIR/id_rsa" .gitattributes
        ln -s /etc/hostname link-out
        ;;
    rewrite-objects)
        # As the files' owner may: make each object file writable, overwrite it in place.
        find .git/objects -type f | while read -r f; do
            chmod u+w "$f"
            head -c "$(stat -c %s "$f")" /dev/zero | tr '\0' 'X' | dd of="$f" conv=notrunc status=none
        done
        ;;
    *)
        echo "unknown attack $attack" >&2
        exit 2
        ;;
    esac
done
