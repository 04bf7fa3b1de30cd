"""Run untrusted generated code with its tests in a subprocess, with limits (humaneval, mbpp).

Each program runs as ``python -I -B`` (isolated: no user site, no PYTHON* variables, no bytecode
writes) with an emptied environment, in a fresh temporary directory that is deleted afterwards, in
its own session (the whole process group is killed on timeout). Before the candidate runs, the
child sets hard resource limits on itself (CPU seconds, address space, file size, no core dumps;
set in the child rather than by ``preexec_fn``, which is unsafe in a process with threads) and
installs a guard as a Python audit hook that refuses: writes, renames, deletes and links outside
the directory; process creation (fork, exec, spawn, subprocess, os.system); sockets (no network);
signals to other processes; ctypes; raising resource limits; walking the garbage collector.

This is best-effort, not an OS sandbox: there are no namespaces, seccomp filter or privilege drop,
so native code that avoids Python's audited calls is not contained. Run untrusted models' output
in a throwaway container as well.
"""

import contextlib
import dataclasses
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

_GUARD = r'''
import os, resource, sys


def _limit(cpu_s, address_space_bytes, file_size_bytes):
    # hard limits too: the candidate cannot raise them (and the guard refuses setrlimit anyway)
    for kind, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, address_space_bytes),
                        (resource.RLIMIT_FSIZE, file_size_bytes), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(kind, (value, value))


def _install_guard(root):
    root = os.path.realpath(root)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    blocked = {
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
        "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
        "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
        "socket.gethostbyname", "socket.sendto", "socket.sendmsg", "ctypes.dlopen",
        "ctypes.dlsym", "resource.setrlimit", "resource.prlimit", "gc.get_objects",
        "gc.get_referrers", "gc.get_referents", "sys.addaudithook", "os.link", "os.symlink",
        "os.chroot", "os.setuid", "os.setgid",
    }
    path_args = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1),
                 "os.truncate": (0,), "os.chmod": (0,), "os.chown": (0,), "os.utime": (0,),
                 "os.mkfifo": (0,), "os.mknod": (0,), "shutil.rmtree": (0,)}
    busy = []

    def inside(path):
        if isinstance(path, int) or path is None:
            return True  # an already-open descriptor was checked when it was opened
        full = os.path.realpath(os.fsdecode(path))
        return full == root or full.startswith(root + os.sep) or full == os.devnull

    def guard(event, args):
        if busy:
            return
        busy.append(1)
        try:
            if event in blocked:
                raise PermissionError(f"sandbox: {event} is not allowed")
            if event == "open" and args[0] is not None:
                mode, flags = args[1], args[2]
                writes = (isinstance(flags, int) and flags > 0 and flags & write_flags) or (
                    isinstance(mode, str) and any(c in mode for c in "wax+"))
                if writes and not inside(args[0]):
                    raise PermissionError(f"sandbox: writing {args[0]!r} is not allowed")
            elif event in path_args:
                for i in path_args[event]:
                    if not inside(args[i]):
                        raise PermissionError(f"sandbox: {event} on {args[i]!r} is not allowed")
        finally:
            busy.clear()

    sys.addaudithook(guard)


_limit(*(int(arg) for arg in sys.argv[1:4]))
# the end-of-tests marker comes on stdin, read before any candidate code runs, and is kept only as
# a closure cell of the writer below: it is in no argv, environment or global the candidate can read
def _marker_writer(marker):
    return lambda: sys.stdout.write("\n" + marker + "\n")


_write_marker = _marker_writer(sys.stdin.readline().strip())
sys.stdin.close()
del _marker_writer
_install_guard(os.getcwd())
del _limit, _install_guard
with open("candidate.py", encoding="utf-8") as _f:
    _source = _f.read()
exec(compile(_source, "candidate.py", "exec"), {"__name__": "__main__"})
_write_marker()  # reached only if no exit() cut the tests short
sys.stdout.flush()
'''


@dataclasses.dataclass(frozen=True)
class ExecLimits:
    """Per-program limits: wall and CPU seconds, address space and largest file in MiB."""

    timeout_s: float = 10.0
    memory_mib: int = 1024
    file_size_mib: int = 16

    def __post_init__(self):
        if self.timeout_s <= 0 or self.memory_mib <= 0 or self.file_size_mib <= 0:
            raise ValueError(f"limits must be positive: {self}")

    def argv(self) -> list[str]:
        """The child's argv: CPU seconds (timeout rounded up + 1), address space and file bytes."""
        cpu_s = math.ceil(self.timeout_s) + 1
        return [str(cpu_s), str(self.memory_mib << 20), str(self.file_size_mib << 20)]


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """``status``: passed | failed (non-zero exit, or an exit before the tests ended) | timeout |
    killed (by a signal or a limit)."""

    status: str
    returncode: int | None
    duration_s: float
    output_tail: str

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run_program(source: str, limits: ExecLimits = ExecLimits()) -> ExecResult:
    """Run ``source`` (candidate code + tests) under the guard and limits.

    Passed means: exit status 0 *and* the whole program ran (a per-run token printed after it is
    seen), so a candidate that calls ``exit(0)`` before the tests, or in a ``__main__`` block,
    fails.
    """
    workdir = Path(tempfile.mkdtemp(prefix="specpilot-exec-"))
    try:
        (workdir / "candidate.py").write_text(source, encoding="utf-8")
        (workdir / "runner.py").write_text(_GUARD, encoding="utf-8")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(workdir), "TMPDIR": str(workdir),
               "LANG": "C.UTF-8"}
        start = time.monotonic()
        with open(workdir / "output.txt", "wb") as out:
            sentinel = uuid.uuid4().hex
            proc = subprocess.Popen([sys.executable, "-I", "-B", "runner.py", *limits.argv()],
                                    cwd=workdir, env=env, stdin=subprocess.PIPE, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            proc.stdin.write((sentinel + "\n").encode())
            proc.stdin.close()
            try:
                returncode = proc.wait(timeout=limits.timeout_s)
                status = "passed" if returncode == 0 else "failed" if returncode > 0 else "killed"
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # the session: its children too
                proc.wait()
                returncode, status = None, "timeout"
        duration_s = time.monotonic() - start
        if returncode == -signal.SIGXCPU:
            status = "timeout"
        tail = (workdir / "output.txt").read_bytes()[-2000:].decode("utf-8", "replace")
        if status == "passed" and sentinel not in tail:
            status, tail = "failed", tail + "\n[exited before the tests finished]"
        return ExecResult(status, returncode, duration_s, tail.replace(sentinel, "").rstrip())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


_FENCE = re.compile(r"```[ \t]*(?:python|py|Python)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The first fenced code block (```python ... ```) of a model's answer, or None."""
    match = _FENCE.search(text)
    return match.group(1) if match else None
