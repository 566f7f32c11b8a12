"""The bubblewrap sandbox of one job: the submitted model (the maintainer's serving
command) and the `infer` step that feeds it run together inside one `bwrap` with fresh
user, pid, ipc, uts, mount, cgroup and network namespaces. The network namespace holds
only its own loopback (no route out, no host loopback); the file system is read-only
binds of the system, the Python install, the code and what the template names, a private
tmpfs /tmp and /dev/shm (each sized), the run's exported input (read-only) and its
output folder. bwrap itself is started with an empty environment (its pid 1 keeps its
own environment in /proc/1/environ, readable inside), `--clearenv` plus an allow-list for
the command. Inside, the launcher caps the sandbox's processes (RLIMIT_NPROC, soft and
hard, counted in the sandbox's own user namespace) and turns core dumps off (RLIMIT_CORE
0: a dump piped to the host's handler would carry the model's memory, clips included).
A job runs one such sandbox per partition of its rows (runner.py).

Host side: `probe` (can this machine sandbox at all?), `Policy.command` (the bwrap
argv), `CappedLog` (a child's output kept to a bounded size), `start_time` and
`kill_group` (a process group ended only when its leader is still the same process).
Inside: `python -m redvox.release.serve.sandbox SPEC` (`launch`): set the limits, start
the model, wait for GET /v1/models, run infer, exit; the exit status says which stage
ended it."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# Where the job's folders appear inside the sandbox.
INPUT = "/job/input"
OUTPUT = "/job/output"
# The launcher's exit statuses, one per stage that can end a job (anything else, a
# signal included, is "evaluation failed").
NOT_HEALTHY, MODEL_EXITED, INFER_FAILED = 20, 21, 22
UNSANDBOXED = "UNSANDBOXED (--unsandboxed-dev): the model runs with the service's rights"
# How long a job may hold its slot. A 7B speech model on one GPU over the full build
# (README, "Limits and timeouts"): about 2.3 h at the pessimistic 0.8 rows/s, the judge
# included; loading it and capturing CUDA graphs: minutes.
JOB_TIMEOUT_S = 3 * 3600.0
HEALTH_TIMEOUT_S = 900.0
SLOT_SECONDS_PER_DAY = 6 * 3600.0
# A job ends (for its user, and for the next job's start) on this grid after its start:
# a model that times its work carries log2(JOB_TIMEOUT_S / RELEASE_QUANTUM_S + 1) bits.
RELEASE_QUANTUM_S = 900.0
# The sandbox's tmpfs /tmp (its working folder and HOME: caches, a compile cache) and
# /dev/shm (vLLM's and torch's shared buffers): host memory, so a bounded share each.
TMP_MB = 1024
SHM_MB = 1024
# Processes and threads of one sandbox (RLIMIT_NPROC counts both): vLLM on one GPU runs
# a few hundred threads; a fork bomb stops here. The kernel does not apply it to
# processes of root (README, "Limits and timeouts").
NPROC = 4096
# An answer goes to the judge cut to this many bytes of UTF-8 (jobfiles.read_answers): a
# model cannot make the judge read megabytes per row (the probe's 900 KB answers), nor
# carry that much through it; 16 KiB is about 4,000 tokens, far over any real answer.
MAX_ANSWER_BYTES = 16 * 1024
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only what the dynamic loader and name lookups of loopback need; nothing with secrets.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "hosts", "nsswitch.conf",
             "localtime", "alternatives")  # fmt: skip
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
INSTALL = "bubblewrap not installed: apt-get install bubblewrap (or make system-deps)"
USERNS = (
    "user namespaces disabled: sysctl -w kernel.unprivileged_userns_clone=1 "
    "user.max_user_namespaces=15000 (and, on Ubuntu 24.04, "
    "kernel.apparmor_restrict_unprivileged_userns=0)"
)


class SandboxUnavailable(Exception):
    """This machine cannot run the sandbox; the message names the missing piece."""


def bwrap_path() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(INSTALL)
    return path


def system_binds() -> list[str]:
    """bwrap arguments for the system folders (a merged-/usr symlink stays a symlink)."""
    args: list[str] = []
    for folder in SYSTEM_DIRS:
        path = Path(folder)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), folder]
        elif path.is_dir():
            args += ["--ro-bind", folder, folder]
    for name in ETC_FILES:
        if Path("/etc", name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


# --unshare-all only tries the user namespace; --unshare-user makes it required
NAMESPACES = ["--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
              "--cap-drop", "ALL", "--uid", "65534", "--gid", "65534", "--hostname", "sandbox",
              "--proc", "/proc", "--dev", "/dev"]  # fmt: skip


def probe() -> None:
    """Runs `true` in the namespaces a job uses; SandboxUnavailable naming what is missing."""
    argv = [bwrap_path(), *NAMESPACES, *system_binds(), "--clearenv", "--", "true"]
    try:
        done = subprocess.run(argv, env={}, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"bubblewrap could not run: {exc}") from None
    if done.returncode == 0:
        return
    message = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    lowered = message.lower()
    if "namespace" in lowered or "uid map" in lowered or "operation not permitted" in lowered:
        raise SandboxUnavailable(f"{USERNS} (bwrap: {message})")
    raise SandboxUnavailable(f"bubblewrap cannot create the sandbox: {message}")


def code_dirs() -> list[Path]:
    """The Python install, the virtual environment and the redvox code the launcher and
    the evaluator import (an editable install keeps it outside the environment)."""
    dirs = [Path(sys.base_prefix), Path(sys.prefix)]
    spec = importlib.util.find_spec("redvox.release")
    dirs += [Path(p) for p in (spec.submodule_search_locations or [])]
    return [d.resolve() for d in dirs]


def template_paths(argv: list[str]) -> list[Path]:
    """The absolute paths the serving command names that exist (its program, its script,
    a model folder), and the virtual environment of a program that lives in one."""
    paths: list[Path] = []
    for word in argv:
        value = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        if value.startswith("/") and Path(value).exists():
            paths.append(Path(value))
    if argv and argv[0].startswith("/"):
        venv = Path(argv[0]).parent.parent
        config = venv / "pyvenv.cfg"
        if config.is_file():
            paths.append(venv)
            for line in config.read_text("utf-8", errors="replace").splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "home" and Path(value.strip()).is_dir():
                    paths.append(Path(value.strip()).parent)
    return paths


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class Policy:
    """What a job's sandbox may see: read-only paths and device nodes the maintainer adds
    (`--sandbox-ro`, `--sandbox-dev`, e.g. the model cache and /dev/nvidia*), environment
    variables it passes (`--sandbox-env NAME` or NAME=VALUE), the tmpfs sizes, the cap on
    its processes, and the folders it must never see (the state folder and the build)."""

    forbidden: tuple[Path, ...]
    ro_paths: tuple[Path, ...] = ()
    dev_paths: tuple[Path, ...] = ()
    env: tuple[str, ...] = ()
    tmp_mb: int = TMP_MB
    shm_mb: int = SHM_MB
    nproc: int = NPROC

    def __post_init__(self):
        for name in self.env:
            key = name.split("=", 1)[0]
            if key.upper().startswith("REDVOX_") or any(w in key.upper() for w in SECRET_WORDS):
                raise ValueError(f"--sandbox-env {key}: secrets never enter the sandbox")
        for path in (*self.ro_paths, *self.dev_paths):
            if not path.is_absolute() or not path.exists():
                raise ValueError(f"sandbox path {path}: not an existing absolute path")

    def check(self, path: Path) -> Path:
        """PATH, resolved, when it neither holds nor lies inside a forbidden folder."""
        real = path.resolve()
        for folder in self.forbidden:
            folder = folder.resolve()
            if inside(real, folder) or inside(folder, real):
                raise ValueError(
                    f"sandbox path {path}: it would show {folder} to the model (the state "
                    f"folder and the build are never bound); bind a narrower folder"
                )
        return real

    def limits(self) -> dict[str, int]:
        """The resource limits the launcher sets inside the sandbox (soft = hard)."""
        return {"nproc": self.nproc, "core": 0}

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "PYTHONNOUSERSITE": "1",
            "NO_PROXY": "*",
        }  # fmt: skip
        for item in self.env:
            key, sep, value = item.partition("=")
            if sep:
                env[key] = value
            elif key in os.environ:
                env[key] = os.environ[key]
        return env

    def binds(self, template_argv: list[str]) -> list[Path]:
        """Every read-only bind of a job, each checked against the forbidden folders."""
        seen: list[Path] = []
        for path in (*code_dirs(), *template_paths(template_argv), *self.ro_paths):
            real = self.check(path)
            if not any(inside(real, folder) for folder in seen):
                seen.append(real)
        return seen

    def command(self, template_argv: list[str], input_dir: Path, output_dir: Path,
                inner: list[str]) -> list[str]:  # fmt: skip
        """The bwrap argv running INNER with the job's INPUT_DIR (read-only) and
        OUTPUT_DIR (writable) at /job/input and /job/output."""
        argv = [bwrap_path(), *NAMESPACES, *system_binds()]
        # the tmpfs first: a bind below /tmp (a template's script there) must stay visible
        argv += ["--size", str(self.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp"]
        for path in self.binds(template_argv):
            argv += ["--ro-bind", str(path), str(path)]
        for path in self.dev_paths:
            argv += ["--dev-bind", str(self.check(path)), str(path)]
        # /dev read-only too, but for a sized /dev/shm (torch and vLLM workers share it)
        argv += ["--size", str(self.shm_mb * 1024 * 1024), "--tmpfs", "/dev/shm",
                 "--remount-ro", "/dev"]  # fmt: skip
        # the root (bwrap's own tmpfs, holding the mount points) read-only last: only
        # /tmp, /dev/shm and /job/output can be written
        argv += ["--ro-bind", str(input_dir), INPUT, "--bind", str(output_dir), OUTPUT,
                 "--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]  # fmt: skip
        for key, value in sorted(self.environment().items()):
            argv += ["--setenv", key, value]
        return [*argv, "--", *inner]


# --- host side: logs and processes ----------------------------------------------------


class CappedLog:
    """Copies a child's output (a pipe) into PATH (0600): the first HEAD bytes, then the
    last TAIL bytes, with the count of what was dropped between. Never holds more than
    TAIL bytes in memory; the pipe is drained to its end so the child never blocks."""

    def __init__(self, path: Path, head: int = 256 * 1024, tail: int = 256 * 1024):
        self.path, self.head, self.tail = path, head, tail
        self.read_fd, write_fd = os.pipe()
        self.write_fd = write_fd  # give it to the child, then call started()
        self.thread = threading.Thread(target=self._pump, daemon=True)

    def started(self) -> None:
        os.close(self.write_fd)
        self.thread.start()

    def _pump(self) -> None:
        kept, dropped, last = 0, 0, b""
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while chunk := os.read(self.read_fd, 65536):
                room = self.head - kept
                if room > 0:
                    os.write(fd, chunk[:room])
                    kept += min(room, len(chunk))
                    chunk = chunk[room:]
                if chunk:
                    last = (last + chunk)[-self.tail :]
                    dropped += len(chunk)
            if last:
                dropped -= len(last)
                if dropped:
                    os.write(fd, f"\n[... {dropped} bytes dropped ...]\n".encode())
                os.write(fd, last)
        finally:
            os.close(fd)
            os.close(self.read_fd)

    def close(self, timeout: float = 10.0) -> None:
        self.thread.join(timeout)


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks after boot); None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def kill_group(pid: int, start: int | None) -> bool:
    """SIGKILL to the process group PID leads, if PID is still the process that started at
    START (a pid reused by another process is left alone); True when it was signalled."""
    if start is None or start_time(pid) != start:
        return False
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


_PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # looked up before any fork


def child_setup() -> None:
    """preexec_fn of the job's processes: SIGKILLed when the service process dies
    (PR_SET_PDEATHSIG), and whatever they create private (umask 077)."""
    _PRCTL(1, signal.SIGKILL)
    os.umask(0o077)


# --- inside the sandbox ---------------------------------------------------------------


def _healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


def _stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


LIMITS = {"nproc": resource.RLIMIT_NPROC, "core": resource.RLIMIT_CORE}


def set_limits(limits: dict[str, int] | None) -> None:
    """Soft and hard limits (LIMITS' names) for this process and all it starts: inside
    the sandbox nothing can raise a hard limit again (no capabilities)."""
    for name, value in (limits or {}).items():
        _, hard = resource.getrlimit(LIMITS[name])
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(LIMITS[name], (value, value))


def launch(spec: dict) -> int:
    """Set the limits, start the model, wait until GET /v1/models answers 200, run infer
    against it; the exit status is 0, NOT_HEALTHY, MODEL_EXITED or INFER_FAILED."""
    model = infer = None
    set_limits(spec.get("limits"))
    try:
        try:
            model = subprocess.Popen(
                spec["model"], stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            print(f"launcher: the serving command could not start: {exc}", file=sys.stderr)
            return MODEL_EXITED
        healthy_by = time.monotonic() + spec["health_timeout_s"]
        url = f"http://127.0.0.1:{spec['port']}/v1/models"
        while not _healthy(url):
            if model.poll() is not None:
                print("launcher: the model exited before it was healthy", file=sys.stderr)
                return MODEL_EXITED
            if time.monotonic() > healthy_by:
                print("launcher: the model did not become healthy in time", file=sys.stderr)
                return NOT_HEALTHY
            time.sleep(0.25)
        infer = subprocess.Popen(
            [sys.executable, "-P", "-m", "redvox.release.evaluation.evaluate", "infer", *spec["infer"]],
            stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        while (code := infer.poll()) is None:
            if model.poll() is not None:
                print("launcher: the model exited during infer", file=sys.stderr)
                return MODEL_EXITED
            time.sleep(0.25)
        print(f"launcher: infer exited with status {code}", file=sys.stderr)
        return 0 if code == 0 else INFER_FAILED
    finally:
        _stop(infer)
        _stop(model)


if __name__ == "__main__":
    sys.exit(launch(json.loads(sys.argv[1])))
