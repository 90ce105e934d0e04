"""The output folder of ``svbop report`` under faults: links, a second run, a killed run, leftovers.

* :func:`check_links`: no link (symbolic or hard) anywhere in what ``svbop report`` writes (``OUT/.svbop`` and its
  workflow files, ``data/``, ``results/``, ``.snakemake/``; ``OUT/tables``, ``OUT/figures`` and the
  files at the top), refused before any work, so nothing is written through one.  The only links
  allowed are the ones the workflow makes itself: ``.svbop/data/<dataset>/downloads/<file>`` (a
  ``path:`` file linked to the user's own copy) and ``.svbop/data/<dataset>/raw/<file>`` (linked to
  those), each to a regular file, and each replaced, never written through.
* :func:`hold_folder`: a lock file of svbop report's own (``OUT/.svbop/report.lock``, an ``flock``),
  taken before anything else is written: a second run into the same folder is refused in one line
  naming the process that holds it, before it rewrites ``svbop_report.yaml`` or anything else.  The
  lock is passed on to the Snakemake process, so it is held until the workflow itself has ended
  (the kernel drops it when the last holder dies: a killed run leaves no lock of this kind).
* :func:`clear_stale_locks`: Snakemake's own locks (``.snakemake/locks``) left by a killed run.
  Once :func:`hold_folder` holds the folder, no svbop report works in it; the locks are cleared as
  ``snakemake --unlock`` clears them unless a live process still has its working folder inside
  ``OUT/.svbop`` (a killed run's workflow or job still running): then one line names it and the fix.
* :func:`clear_leftovers`: the temporary files an interrupted run left (``.<name>.XXXXXXXX`` beside
  the files it writes), removed at the start of the next run.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

__all__ = ["LOCK_NAME", "check_links", "check_lock_file", "clear_leftovers", "clear_stale_locks", "hold_folder",
           "lock_holders", "processes_in", "temporary_name"]

#: svbop report's own lock file, inside the working folder.
LOCK_NAME = "report.lock"
#: The names of the temporary files svbop report writes beside a file ``name`` (tempfile's 8 characters).
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\Z")


def temporary_name(entry: str) -> str | None:
    """The file a temporary file ``.<name>.XXXXXXXX`` stood for, or None when ``entry`` is not one."""
    m = _TEMPORARY.fullmatch(entry)
    return m.group("name") if m else None


def _workflow_link(work: Path, path: Path) -> bool:
    """A link the workflow makes itself: ``data/<dataset>/{downloads,raw}/<file>`` to a regular file."""
    try:
        parts = path.relative_to(work).parts
    except ValueError:
        return False
    return len(parts) == 4 and parts[0] == "data" and parts[2] in ("downloads", "raw") and path.is_file()


def check_links(out: Path, names, work_dir: str) -> None:
    """Refuse a link anywhere under ``out/<name>`` for each of ``names`` (except the workflow's own).

    Raises
    ------
    ValueError
        One line naming the link, its target and the fix.
    """
    work = out / work_dir
    for name in names:
        top = out / name
        if top.is_symlink():
            _refuse_link(out, top)
        if not top.is_dir():
            continue
        for folder, dirs, files in os.walk(top):  # never follows a link
            for entry in (*dirs, *files):
                path = Path(folder) / entry
                if path.is_symlink() and not _workflow_link(work, path):
                    _refuse_link(out, path)
            for entry in files:  # a hard link: a file written in place would change its other name too
                path = Path(folder) / entry
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                    raise ValueError(f"-o {out}: {path.relative_to(out)} is a hard link ({info.st_nlink} names for one "
                                     "file); svbop report never writes through a link: remove it, or choose another "
                                     "folder")


def _refuse_link(out: Path, path: Path) -> None:
    raise ValueError(f"-o {out}: {path.relative_to(out)} is a link (to {os.readlink(path)}); svbop report never "
                     "writes through a link: remove it (or the folder holding it), or choose another folder")


def hold_folder(work: Path, out: Path) -> int | None:
    """Take svbop report's lock of ``work`` (created if needed); return its file descriptor.

    The descriptor is inheritable by the Snakemake process (``pass_fds``) and closed by the caller
    when the run ends.  None where ``fcntl`` is missing (Windows: Snakemake's own lock then refuses).
    The file records the holder's process id and start time; a refusal names a process that really
    holds the lock (a recorded id the system has given to another process since is never named).

    Raises
    ------
    ValueError
        The lock file is not a regular file (a FIFO, a device, a folder), or another process holds
        it (a second svbop report into the same folder, or a stopped one's workflow): one line
        naming the file or the process.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover
        return None
    path = work / LOCK_NAME
    check_lock_file(work, out)
    try:  # O_NONBLOCK: a FIFO put there since the check never blocks the open
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as exc:
        raise ValueError(f"-o {out}: cannot take the lock {path} ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            _refuse_lock_kind(out, path, mode)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _refuse_held(work, out, path, fd)
        except OSError as exc:
            raise ValueError(f"-o {out}: cannot take the lock {path} ({exc.strerror or exc})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {_start_time(os.getpid()) or ''}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_lock_file(work: Path, out: Path) -> None:
    """Refuse a lock file ``work/report.lock`` that is not a regular file (a FIFO, a device, a folder, a
    link), before anything opens it (a FIFO's open could wait for a writer; a device's could act).

    Raises
    ------
    ValueError
        One line naming the file, what it is and the fix.
    """
    path = work / LOCK_NAME
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(f"-o {out}: cannot take the lock {path} ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        _refuse_lock_kind(out, path, info.st_mode)


def _refuse_lock_kind(out: Path, path: Path, mode: int) -> None:
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a link" if stat.S_ISLNK(mode)
            else "not a regular file")
    raise ValueError(f"-o {out}: the lock {path} is {kind}, not a regular file; svbop report never opens it: "
                     "remove it, or give another -o folder")


def _refuse_held(work: Path, out: Path, path: Path, fd: int) -> None:
    """The lock is held: one line naming a process that really holds it."""
    recorded = os.pread(fd, 128, 0).decode(errors="replace").split()
    holders = lock_holders(path)
    pid = int(recorded[0]) if recorded and recorded[0].isdigit() else None
    started = recorded[1] if len(recorded) > 1 else None
    # the recorded svbop report still runs: the same id, the same start time (an id is reused once its process ends)
    if pid is not None and pid in holders or pid is not None and not holders and started is not None \
            and _start_time(pid) == started:
        raise ValueError(f"-o {out}: another svbop report is running in this folder (process {pid}); wait for it "
                         "to end, or give another -o folder")
    if holders:  # the recorded process ended (or its id is another process's now); its workflow holds the lock on
        h = holders[0]
        raise ValueError(f"-o {out}: the workflow of a stopped svbop report still runs in {work} (process {h}); "
                         f"wait for it to end or stop it (kill {h}), then rerun")
    raise ValueError(f"-o {out}: another process holds the lock {path} (not one this user can see); wait for it to "
                     "end, or give another -o folder")


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks after boot, ``/proc/<pid>/stat``), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name, in parentheses, may hold spaces
    return fields[19] if len(fields) > 19 else None


def lock_holders(path: Path) -> list[int]:
    """Live processes (other than this one) holding an ``flock`` on the file ``path``, oldest first
    (Linux ``/proc``: every process with a descriptor of the file whose ``fdinfo`` shows a lock;
    elsewhere none are found)."""
    try:
        target = os.stat(path)
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    except OSError:
        return []
    me = os.getpid()
    found = []
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # ended, or another user's
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) != (target.st_dev, target.st_ino):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as fh:
                    if any(line.startswith("lock:") and "FLOCK" in line for line in fh):
                        found.append(pid)
                        break
            except OSError:
                continue
    return found


def processes_in(folder: Path) -> list[int]:
    """Live processes (other than this one) whose working folder is ``folder`` or inside it
    (Linux ``/proc``; elsewhere none are found)."""
    found = []
    target = str(folder.resolve())
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid in (os.getpid(), os.getppid()):  # this run, and the shell that started it
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == target or cwd.startswith(target + os.sep):
            found.append(pid)
    return found


def clear_stale_locks(work: Path, out: Path) -> bool:
    """Remove Snakemake's locks in ``work`` that a killed run left; return whether there were any.

    Call only while :func:`hold_folder` holds ``work`` (no other svbop report runs in it).

    Raises
    ------
    ValueError
        A live process still works inside ``work`` (a killed run's workflow): one line naming it,
        the folder and the fix.
    """
    locks = work / ".snakemake" / "locks"
    if not locks.is_dir() or not any(locks.iterdir()):
        return False
    busy = processes_in(work)
    if busy:
        raise ValueError(f"-o {out}: process {busy[0]} is still working in {work} (the workflow of an earlier run "
                         f"that was stopped); wait for it to end or stop it (kill {busy[0]}), then rerun")
    shutil.rmtree(locks)  # what `snakemake --unlock` does
    return True


def clear_leftovers(folder: Path, names=None) -> int:
    """Remove the temporary files ``.<name>.XXXXXXXX`` an interrupted run left in ``folder`` (only
    regular files, only for ``names`` when given); return how many."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        name = temporary_name(entry.name)
        if name is None or (names is not None and name not in names):
            continue
        if entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            removed += 1
    return removed
