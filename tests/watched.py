"""Subprocesses of the tests bounded by a hang, not by a deadline.

A pipeline or ``svbop report`` run takes minutes here and may take ten times as long on a loaded
machine: a wall-clock ``timeout=`` sized for this machine fails a slow one that is working.  A run
is stopped only when it hangs: neither its process tree used CPU time nor did it write output for
:data:`QUIET_S` seconds (a process waiting on a lock, a socket or a pipe does neither).  A job
working on something big uses CPU all along; a sleeping one is what a test must not wait for.

``run_watched`` is a drop-in for ``subprocess.run(..., capture_output=True)``: it returns a
:class:`subprocess.CompletedProcess` and raises :class:`subprocess.TimeoutExpired` (its whole process
group killed first) when the run hangs, or outlasts ``limit_s`` when one is given.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

#: Seconds without CPU time or output after which a run counts as hung (SVBOP_TEST_QUIET_S overrides).
QUIET_S = float(os.environ.get("SVBOP_TEST_QUIET_S", 900))
#: Seconds between two looks at the process tree.
POLL_S = 2.0


def _tree_cpu_ticks(root: int) -> int | None:
    """CPU clock ticks used by ``root`` and its live descendants, and by the children they waited for
    (Linux ``/proc``); None where there is no ``/proc``."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().decode(errors="replace").rpartition(")")[2].split()
        except OSError:
            continue
        pid = int(entry)
        parents[pid] = int(fields[1])
        ticks[pid] = sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
    if root not in ticks:
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def run_watched(cmd, *, quiet_s: float | None = None, limit_s: float | None = None, input: str | None = None,
                text: bool = True, **popen) -> subprocess.CompletedProcess:
    """Run ``cmd`` to its end, capturing stdout and stderr, unless it hangs (see the module's text).

    Parameters
    ----------
    cmd : sequence
        The command, as for :class:`subprocess.Popen`.
    quiet_s : float, optional
        Seconds without CPU time or output that count as a hang (default :data:`QUIET_S`).
    limit_s : float, optional
        A bound on the whole run besides (default: none).
    input : str, optional
        Written to the command's stdin (else stdin is empty).
    **popen
        ``cwd``, ``env`` and the other keywords of :class:`subprocess.Popen`.
    """
    quiet_s = QUIET_S if quiet_s is None else float(quiet_s)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, start_new_session=True, **popen)
    chunks: dict[str, list] = {"out": [], "err": []}
    last = [time.monotonic()]

    def pump(stream, into):
        read = stream.readline if text else (lambda: stream.read1(65536))
        for piece in iter(read, "" if text else b""):
            into.append(piece)
            last[0] = time.monotonic()
        stream.close()

    readers = [threading.Thread(target=pump, args=(s, chunks[k]), daemon=True)
               for s, k in ((proc.stdout, "out"), (proc.stderr, "err"))]
    for r in readers:
        r.start()
    if input is not None:
        try:
            proc.stdin.write(input)
            proc.stdin.close()
        except BrokenPipeError:
            pass
    start = time.monotonic()
    ticks = _tree_cpu_ticks(proc.pid)
    why = None
    while True:
        try:
            proc.wait(timeout=POLL_S)
            break
        except subprocess.TimeoutExpired:
            pass
        now_ticks = _tree_cpu_ticks(proc.pid)
        if now_ticks is not None and ticks is not None and now_ticks > ticks:
            last[0] = time.monotonic()
        ticks = now_ticks if now_ticks is not None else ticks
        now = time.monotonic()
        if now - last[0] > quiet_s:
            why = f"no CPU time and no output for {quiet_s:.0f} s (hung)"
        elif limit_s is not None and now - start > limit_s:
            why = f"still running after {limit_s:.0f} s"
        if why:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.wait()
            break
    for r in readers:
        r.join()
    joiner = "" if text else b""
    out, err = joiner.join(chunks["out"]), joiner.join(chunks["err"])
    if why:
        raise subprocess.TimeoutExpired(cmd, now - start, output=out, stderr=(err or joiner) + (
            f"\n[run_watched: stopped: {why}]" if text else f"\n[run_watched: stopped: {why}]".encode()))
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
