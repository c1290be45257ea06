"""A real one-machine SLURM cluster for the tests in this directory (slurm/devcluster.sh).

The session fixture `slurm_cluster` brings up a private cluster (its own scratch dir and ports, so
it never touches a dev cluster someone already runs), installs SLURM with apt-get if it is missing,
and tears it down at the end, checking that no process it started is left. It skips only when SLURM
cannot be installed or run here (devcluster.sh exits 75: not root, no apt-get, apt failed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEVCLUSTER = REPO / "slurm" / "devcluster.sh"
EXIT_CANNOT_INSTALL = 75


@dataclass
class SlurmCluster:
    dir: Path
    conf: Path
    env: dict[str, str]
    pids: dict[str, int] = field(default_factory=dict)

    def run(
        self, *cmd: str, check: bool = True, timeout: float = 60, **kw
    ) -> subprocess.CompletedProcess:
        """Run a client command (sinfo, sbatch, ...) against this cluster; text output captured."""
        proc = subprocess.run(
            list(cmd),
            check=False,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kw,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    def wait_for(self, what: str, predicate: Callable[[], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.2)
        raise AssertionError(
            f"timed out after {timeout:.0f}s waiting for {what} (logs in {self.dir / 'log'})"
        )

    def interrupted_sweep(
        self,
        cwd: Path,
        overrides: list[str],
        *,
        sweep_id: str,
        what: str,
        ready: Callable[[Path], bool],
        interrupt: list[str],
        env: dict[str, str] | None = None,
        ready_timeout: float = 180,
        timeout: float = 300,
    ) -> tuple[Path, str]:
        """Run `python -m quadrants.sweep -m OVERRIDES sweep_id=SWEEP_ID` (one job) in `cwd` against
        this cluster; once `ready(run directory)` (`what` names it), run the client command
        `interrupt` + the job id (`scontrol requeue`, `scancel --signal=USR2`) and wait for the sweep
        to finish, which must succeed. Returns (run directory, job id)."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "quadrants.sweep", "-m", *overrides, f"sweep_id={sweep_id}"],
            cwd=cwd,
            env={**self.env, "HF_HUB_OFFLINE": "1", **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        sweep_dir = cwd / "outputs" / "quadrants" / sweep_id
        run_dir = sweep_dir / "default"  # one job, named after no swept key
        try:
            self.wait_for(what, lambda: ready(run_dir), ready_timeout)
            (job_dir,) = [
                p for p in (sweep_dir / ".submitit").iterdir() if p.is_dir()
            ]  # one job: no array
            self.run(*interrupt, job_dir.name)
            out, _ = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, out[-3000:]
        return run_dir, job_dir.name

    def job_state(self, job_id: str) -> str:
        """The job's state as the controller sees it (finished jobs stay for MinJobAge)."""
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
        for token in out.split():
            if token.startswith("JobState="):
                return token.split("=", 1)[1]
        return "UNKNOWN"

    def sacct_states(self, job_id: str) -> dict[str, str]:
        """{JobID: State} of a job (array tasks as <id>_<index>) from the accounting database."""
        out = self.run(
            "sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", job_id, check=False
        ).stdout
        return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (this machine's PID 1 may never reap reparented daemons)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _leftovers(cluster_dir: Path, pids: dict[str, int]) -> list[str]:
    """Processes of this cluster still alive: recorded daemons, anything carrying the cluster's
    marker in its environment, and job steps holding its slurmd log open."""
    left = [f"{name} (pid {pid})" for name, pid in pids.items() if _alive(pid)]
    marker = f"QUADRANTS_SLURM_INSTANCE={cluster_dir}".encode()
    slurmd_log = str(cluster_dir / "log" / "slurmd.log")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in pids.values() or not _alive(int(proc.name)):
            continue
        try:
            comm = (proc / "comm").read_text().strip()
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                left.append(f"{comm} (pid {proc.name}, cluster environment)")
            elif comm == "slurmstepd" and any(
                os.readlink(fd) == slurmd_log for fd in (proc / "fd").iterdir()
            ):
                left.append(f"slurmstepd (pid {proc.name})")
        except OSError:
            continue
    return left


@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    if not sys.platform.startswith("linux"):
        pytest.skip("the SLURM dev cluster runs on Linux only")
    # A short path (unix socket paths are limited to ~100 bytes), unique to this session.
    cluster_dir = Path(tempfile.mkdtemp(prefix="quadrants-slurm-test-", dir="/tmp"))
    env = {
        **os.environ,
        "QUADRANTS_SLURM_DIR": str(cluster_dir),
        # Away from the default 6817 and below the ephemeral range; skipped if taken.
        "QUADRANTS_SLURM_PORT": str(20000 + (os.getpid() % 1000) * 10),
    }
    up = subprocess.run(
        ["bash", str(DEVCLUSTER), "up"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if up.returncode == EXIT_CANNOT_INSTALL:
        shutil.rmtree(cluster_dir, ignore_errors=True)
        reason = [
            line for line in up.stderr.splitlines() if "cannot" in line
        ] or up.stderr.splitlines()[-1:]
        pytest.skip(f"no SLURM dev cluster on this machine: {' '.join(reason).strip()}")
    pids = {
        f.name: int(f.read_text())
        for f in (cluster_dir / "pids").glob("*")
        if f.read_text().strip()
    }
    if up.returncode != 0:
        subprocess.run(
            ["bash", str(DEVCLUSTER), "down"],
            check=False,
            env=env,
            capture_output=True,
            timeout=300,
        )
        pytest.fail(f"slurm/devcluster.sh up failed ({up.returncode}):\n{up.stderr}", pytrace=False)
    conf = cluster_dir / "etc" / "slurm.conf"
    client_env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    client_env["SLURM_CONF"] = str(conf)
    cluster = SlurmCluster(dir=cluster_dir, conf=conf, env=client_env, pids=pids)

    yield cluster

    down = subprocess.run(
        ["bash", str(DEVCLUSTER), "down"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    left = _leftovers(cluster_dir, pids)
    # The database files are big; the logs stay for a failed session.
    shutil.rmtree(cluster_dir / "mysql", ignore_errors=True)
    if request.session.testsfailed == 0 and down.returncode == 0 and not left:
        shutil.rmtree(cluster_dir, ignore_errors=True)
    assert down.returncode == 0, f"slurm/devcluster.sh down failed:\n{down.stderr}"
    assert not left, f"processes of the dev cluster left after down: {left}"
