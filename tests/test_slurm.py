"""The SLURM profile on a real SLURM cluster: the shrunk rehearsal of tests/test_workflow_rehearsal.py
(one LSHTC1-shaped synthetic dataset, every stage down to the report, about 25 jobs) submitted with
``snakemake --profile workflow/profiles/slurm``, every job through ``sbatch``.

The test starts a one-node cluster on this machine, on the loopback interface only, with every
file (configuration, state, logs, the MUNGE key and socket, the accounting database) in a
temporary directory: munged, MariaDB, slurmdbd (so ``sacct`` answers from real accounting
records), slurmctld and slurmd, all stopped at the end. It then checks, from ``sacct``, that every
job Snakemake submitted ran under the account and partition set in the profile with its rule's
threads, memory and time limit, and that the report was built.

Skipped, with the reason, where it cannot run: not root (slurmd starts the jobs), Debian's
packages missing (``slurm-wlm munge slurmdbd mariadb-server``; ``.ci/run`` installs them), or a
daemon that does not start (the reason quotes its log).
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from test_workflow import _copy_workflow
from test_workflow_rehearsal import REHEARSAL, SHRINK
from watched import run_watched

# One utility and fewer baselines than the local shrunk rehearsal: every job costs two Snakemake
# start-ups on SLURM (the batch job, then its srun step), about 15 s each on a loaded machine.
SLURM_SHRINK = SHRINK + """
utilities: ["fbeta:beta=1"]
baselines: {top_s: [1], icp_epsilon: [0.1]}
"""

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

PACKAGES = "slurm-wlm munge slurmdbd mariadb-server"
#: program -> the Debian package that has it
PROGRAMS = {
    "munged": "munge", "munge": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "slurmdbd": "slurmdbd",
    "sbatch": "slurm-client", "srun": "slurm-client", "sacct": "slurm-client", "sacctmgr": "slurm-client",
    "sinfo": "slurm-client", "scancel": "slurm-client", "squeue": "slurm-client",
    "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server", "mariadb": "mariadb-server",
}
#: what the test cluster calls its account and partition (the lines a cluster user edits)
ACCOUNT, PARTITION = "svbop_test", "svbop"
CLUSTER = "svbop"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """A one-node SLURM cluster with accounting, every file under ``root``."""

    def __init__(self, root: Path):
        self.root = root
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.host = socket.gethostname().split(".")[0]
        for sub in ("etc", "state", "spool", "log", "munge", "db", "bin"):
            (root / sub).mkdir()
        self.conf = root / "etc" / "slurm.conf"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SQUEUE_"))}
        # snakemake-executor-plugin-slurm-jobstep drops every SLURM_* variable, SLURM_CONF too, before
        # its `srun` inside the job (upstream issue #164); a real cluster's configuration is in
        # /etc/slurm or served by slurmctld (configless), this one's is not: its srun is told.
        srun = root / "bin" / "srun"
        srun.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {shutil.which("srun")} "$@"\n')
        srun.chmod(0o755)
        env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["SLURM_CONF"] = str(self.conf)
        self.env = env

    # ---------------------------------------------------------------------------------- helpers
    def _relative(self, text: str) -> str:
        return text.replace(str(self.root), "<cluster>")

    def _tail(self, *logs: str, lines: int = 12) -> str:
        out = []
        for name in logs:
            path = self.root / name
            text = path.read_text(errors="replace").strip() if path.exists() else "(no log)"
            out.append(f"[{name}] " + " | ".join(text.splitlines()[-lines:]))
        return self._relative(" ".join(out))

    def run(self, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise RuntimeError(self._relative(f"{' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}"))
        return result

    def _start(self, name: str, *args: str) -> subprocess.Popen:
        with open(self.root / "log" / f"{name}.out", "w") as out:
            proc = subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def _wait(self, name: str, ready, logs: tuple[str, ...], timeout: float = 60) -> None:
        """Wait until ``ready()`` is true; skip naming the daemon and its log tail when it never is."""
        proc = dict(self.procs).get(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except (RuntimeError, subprocess.SubprocessError, OSError):
                pass
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.5)
        pytest.skip(f"{name} did not start: {self._tail(*logs)}")

    # ------------------------------------------------------------------------------- start, stop
    def start(self) -> None:
        root = self.root
        node = self.run("slurmd", "-C").stdout.splitlines()[0]  # NodeName=... CPUs=... RealMemory=...
        cpus = int(re.search(r"\bCPUs=(\d+)", node).group(1))
        memory = int(re.search(r"\bRealMemory=(\d+)", node).group(1))
        if cpus < 2 or memory < 8000:
            pytest.skip(f"the shrunk rehearsal's jobs need 2 CPUs and 2 x 4000 MB; this machine has {cpus} CPUs, "
                        f"{memory} MB")
        node = re.sub(r"^NodeName=\S+", f"NodeName={self.host} NodeAddr=127.0.0.1", node)
        node = re.sub(r"\s*UpTime=\S+", "", node)
        ports = {name: _free_port() for name in ("ctld", "slurmd", "dbd", "db")}

        # MUNGE: its own key and socket (the socket's directories must be traversable by all)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        sock = root / "munge" / "munge.socket"
        self._start("munged", "munged", "--foreground", f"--socket={sock}", f"--key-file={key}",
                    f"--pid-file={root / 'munge' / 'munged.pid'}", f"--seed-file={root / 'munge' / 'munged.seed'}",
                    f"--log-file={root / 'log' / 'munged.log'}")
        self._wait("munged", lambda: sock.exists() and self.run("munge", "-S", str(sock), "-n").returncode == 0,
                   ("log/munged.out", "log/munged.log"))

        # MariaDB for slurmdbd (TCP on 127.0.0.1; root logs in through the socket)
        data, dbsock = root / "db" / "data", root / "db" / "mariadb.sock"
        self.run("mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root",
                 "--auth-root-authentication-method=socket", "--skip-test-db", timeout=120)
        self._start("mariadbd", "mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={dbsock}",
                    f"--port={ports['db']}", "--bind-address=127.0.0.1", "--skip-name-resolve", "--user=root",
                    f"--pid-file={root / 'db' / 'mariadbd.pid'}", f"--log-error={root / 'log' / 'mariadbd.log'}",
                    "--skip-log-bin", "--innodb-buffer-pool-size=64M")
        sql = ("mariadb", "--no-defaults", f"--socket={dbsock}", "-u", "root", "-e")
        self._wait("mariadbd", lambda: self.run(*sql, "SELECT 1").returncode == 0, ("log/mariadbd.log",))
        self.run(*sql, "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'svbop'; "
                       "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")

        # slurmdbd.conf sits beside slurm.conf, owned by SlurmUser, mode 600
        common = f"AuthType=auth/munge\nAuthInfo=socket={sock}\nSlurmUser=root\n"
        dbd = root / "etc" / "slurmdbd.conf"
        dbd.write_text(common + f"""\
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={ports['dbd']}
LogFile={root / 'log' / 'slurmdbd.log'}
PidFile={root / 'state' / 'slurmdbd.pid'}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports['db']}
StorageUser=slurm
StoragePass=svbop
StorageLoc=slurm_acct_db
""")
        dbd.chmod(0o600)
        # no cgroups (containers rarely delegate them): processes tracked through /proc, no task binding
        self.conf.write_text(common + f"""\
ClusterName={CLUSTER}
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={ports['ctld']}
SlurmdPort={ports['slurmd']}
SlurmdUser=root
CredType=cred/munge
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}
SlurmctldPidFile={root / 'state' / 'slurmctld.pid'}
SlurmdPidFile={root / 'state' / 'slurmd.pid'}
SlurmctldLogFile={root / 'log' / 'slurmctld.log'}
SlurmdLogFile={root / 'log' / 'slurmd.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports['dbd']}
AccountingStoragePass={sock}
AccountingStorageEnforce=associations
AccountingStoreFlags=job_comment
{node} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.host} Default=YES MaxTime=INFINITE State=UP
""")
        self._start("slurmdbd", "slurmdbd", "-D")
        self._wait("slurmdbd", lambda: self.run("sacctmgr", "-n", "list", "cluster").returncode == 0,
                   ("log/slurmdbd.out", "log/slurmdbd.log"))
        # the association the plugin validates (sacctmgr list user) and AccountingStorageEnforce demands
        self.run("sacctmgr", "-i", "add", "cluster", CLUSTER)
        self.run("sacctmgr", "-i", "add", "account", ACCOUNT, "Description=svbop tests", "Organization=svbop")
        self.run("sacctmgr", "-i", "add", "user", "root", f"Account={ACCOUNT}", f"DefaultAccount={ACCOUNT}")

        self._start("slurmctld", "slurmctld", "-D")
        self._wait("slurmctld", lambda: self.run("sinfo", "-h").returncode == 0,
                   ("log/slurmctld.out", "log/slurmctld.log"))
        self._start("slurmd", "slurmd", "-D", "-N", self.host)
        self._wait("slurmd", lambda: self.run("sinfo", "-h", "-o", "%T").stdout.strip() == "idle",
                   ("log/slurmd.out", "log/slurmd.log", "log/slurmctld.log"))

    def stop(self) -> None:
        """Cancel what is left of the jobs, then stop the daemons, last started first."""
        try:
            self.run("scancel", "--user", "root", check=False, timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.run("squeue", "-h", check=False, timeout=30).stdout.strip():
                time.sleep(1)
        except (subprocess.SubprocessError, OSError):
            pass
        for _name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("a SLURM cluster needs root here (slurmd starts the jobs as their user)")
    missing = sorted({pkg for prog, pkg in PROGRAMS.items() if shutil.which(prog) is None})
    if missing:
        pytest.skip(f"slurm-wlm/munge not installed: Debian packages {' '.join(missing)} missing "
                    f"(apt-get install {PACKAGES}; .ci/run does)")
    # short (sockets' paths are limited to 107 bytes); munged wants its socket's directories
    # traversable by everyone
    root = Path(tempfile.mkdtemp(prefix="svbop-slurm-", dir="/tmp" if os.path.isdir("/tmp") else None))
    root.chmod(0o755)
    cl = Cluster(root)
    try:
        try:
            cl.start()
        except RuntimeError as exc:  # a set-up command failed (database, accounts): say which and why
            pytest.skip(f"the SLURM test cluster did not start: {exc}")
        yield cl
    finally:
        cl.stop()
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------------- the log and sacct
def _resolved_jobs(log: str) -> dict[str, dict]:
    """SLURM job id -> rule, wildcards, threads and resources, as Snakemake's log of the run shows them."""
    jobs, submitted, current = {}, {}, None
    for line in log.splitlines():
        if m := re.match(r"^(local)?rule (\w+):$", line):
            current = {"rule": m.group(2), "local": bool(m.group(1)), "threads": 1, "wildcards": "", "resources": {}}
        elif current is not None and (m := re.match(r"^\s+(jobid|threads|wildcards|resources): (.*)$", line)):
            key, value = m.groups()
            if key == "jobid":
                jobs[value] = current
            elif key == "threads":
                current["threads"] = int(value)
            elif key == "wildcards":
                current["wildcards"] = value
            else:
                current["resources"] = dict(item.split("=", 1) for item in value.split(", "))
        elif m := re.search(r"Job (\d+) has been submitted with SLURM jobid (\d+)", line):
            submitted[m.group(2)] = jobs[m.group(1)]
    return submitted


def _minutes(limit: str) -> float:
    """sacct's Timelimit ``[D-]HH:MM:SS`` in minutes."""
    days, _, clock = limit.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 1440 + h * 60 + m + s / 60


def _megabytes(req_mem: str) -> int:
    """sacct's ReqMem (``4000M``, ``4G``, older ``4000Mn``) in MB."""
    m = re.fullmatch(r"([\d.]+)([KMGT])[nc]?", req_mem)
    assert m, req_mem
    return round(float(m.group(1)) * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}[m.group(2)])


SACCT_FIELDS = "JobIDRaw,JobName,Comment,Account,Partition,ReqCPUS,ReqMem,Timelimit,State,ExitCode,Elapsed"


def test_the_shrunk_rehearsal_runs_on_a_slurm_cluster_with_each_rules_resources(cluster, tmp_path):
    from svbop.config import load_yaml, merge_configs, validate_config

    workdir = _copy_workflow(tmp_path)
    (workdir / "shrink.yaml").write_text(SLURM_SHRINK)
    # what a cluster user edits: the account and partition in the profile
    profile = workdir / "workflow/profiles/slurm/config.yaml"
    text = profile.read_text()
    edited = (text.replace('# slurm_account: "my_account"', f'slurm_account: "{ACCOUNT}"')
                  .replace('# slurm_partition: "cpu"', f'slurm_partition: "{PARTITION}"'))
    assert edited.count(ACCOUNT) == 1 and edited.count(f'"{PARTITION}"') == 1, "the profile's slurm_ lines moved"
    profile.write_text(edited)

    started = datetime.datetime.now() - datetime.timedelta(minutes=1)
    result = run_watched(  # stopped only if it hangs (Snakemake polls the queue: CPU time while jobs run)
        [sys.executable, "-m", "snakemake", "--profile", "workflow/profiles/slurm",
         "--configfile", str(REHEARSAL), "shrink.yaml",
         # first status check after 1 s, not 40 (a real cluster keeps the default)
         "--slurm-init-seconds-before-status-checks", "1"],
        cwd=workdir, env=cluster.env,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    assert (workdir / "results/report.html").exists()
    html = (workdir / "results/report.html").read_text()
    assert "<table" in html and "rehearsal" in html.lower()

    # every job but the local target rule `all` went through sbatch
    resolved = _resolved_jobs(log)
    rules = {job["rule"] for job in resolved.values()}
    assert {"features_tfidf", "train_flat_part", "train_tree_part", "build_index", "predict_svbop_full_naive",
            "predict_svbop_hsg", "predict_svbop_hf", "predict_icp", "evaluate", "report_html"} <= rules
    n_jobs = int(re.findall(r"^total\s+(\d+)$", log, flags=re.M)[0])
    assert len(resolved) == n_jobs - 1 and "all" not in rules

    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    sacct = cluster.run("sacct", "-X", "--parsable2", "--name", run_id, "--starttime",
                        started.strftime("%Y-%m-%dT%H:%M:%S"), f"--format={SACCT_FIELDS}").stdout
    print(sacct)  # the accounting records of the run (pytest -rP shows them)
    lines = sacct.strip().splitlines()
    records = {r["JobIDRaw"]: r for r in (dict(zip(lines[0].split("|"), line.split("|"))) for line in lines[1:])}
    assert set(records) == set(resolved)

    for jobid, job in resolved.items():
        rec, res = records[jobid], job["resources"]
        where = f"SLURM job {jobid} ({job['rule']} {job['wildcards']})"
        assert (rec["State"], rec["ExitCode"]) == ("COMPLETED", "0:0"), where
        assert (rec["Account"], rec["Partition"], rec["JobName"]) == (ACCOUNT, PARTITION, run_id), where
        assert re.fullmatch(rf"rule_{job['rule']}(_wildcards_.*)?", rec["Comment"]), where
        assert int(rec["ReqCPUS"]) == job["threads"], where
        assert _megabytes(rec["ReqMem"]) == int(res["mem_mb"]), where
        assert _minutes(rec["Timelimit"]) == int(res["runtime"]), where

    # ... and those are the rules' and the configuration's values, for three rules, exactly
    config = load_yaml(workdir / "config.yaml")
    for layer in (REHEARSAL, workdir / "shrink.yaml"):
        config = merge_configs(config, load_yaml(layer))
    config = validate_config(config)
    defaults = yaml.safe_load(edited)["default-resources"]
    data = config["datasets"]["rehearsal_lshtc1"]
    expected = {
        # memory and time from the dataset's features config
        ("features_tfidf", "dataset=rehearsal_lshtc1"): (1, data["features"]["mem_mb"], data["features"]["runtime"]),
        # the flat model's threads, memory and time (the profile does not override its time)
        ("train_flat_part", "dataset=rehearsal_lshtc1, part=1"):
            (data["flat"]["threads"], data["flat"]["mem_mb"], data["flat"]["runtime"]),
        # the jobs that read the held-out probabilities: the dataset's scores config
        ("evaluate", "dataset=rehearsal_lshtc1"): (1, data["scores"]["mem_mb"], data["scores"]["runtime"]),
        # no resources in the rule: the SLURM profile's default-resources
        ("report_html", ""): (1, defaults["mem_mb"], defaults["runtime"]),
    }
    seen = {}
    for jobid, job in resolved.items():
        key = (job["rule"], job["wildcards"])
        if key in expected:
            rec = records[jobid]
            seen[key] = (int(rec["ReqCPUS"]), _megabytes(rec["ReqMem"]), _minutes(rec["Timelimit"]))
    assert seen == expected
