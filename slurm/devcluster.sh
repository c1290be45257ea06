#!/usr/bin/env bash
# A real one-machine SLURM cluster on localhost, for developing and testing SLURM sweeps.
#
#   slurm/devcluster.sh up              # install if missing, start the daemons; no-op if already up
#   eval "$(slurm/devcluster.sh env)"   # export SLURM_CONF (sinfo, srun, sbatch, sacct, submitit)
#   slurm/devcluster.sh status          # daemons, PIDs, sinfo; exit 0 if up, 3 if down
#   slurm/devcluster.sh down            # cancel its jobs, stop what `up` started, wait until gone
#
# One node (localhost: this machine's CPUs and memory), one partition `debug` (the default).
# Runs as root (munged as the munge user). Installs with apt-get when binaries are missing:
# slurmctld slurmd slurm-client munge, plus slurmdbd mariadb-server-core mariadb-client-core for
# accounting (non-interactively, without starting their system services).
#
# Environment:
#   QUADRANTS_SLURM_DIR         scratch dir for every conf/state/spool/log/pid/socket/db file
#                               (default /tmp/quadrants-slurm; refused inside the repository)
#   QUADRANTS_SLURM_ACCOUNTING  1 (default): also run MariaDB + slurmdbd so sacct works. submitit
#                               polls sacct for job states; without it every poll logs a warning
#                               and a job that dies without writing its result (scancel, OOM kill,
#                               node failure) leaves the Hydra launcher waiting forever.
#                               0: no accounting (bring-up ~1 s instead of ~2.5 s).
#   QUADRANTS_SLURM_PORT        first TCP port to try for slurmctld (default 6817; slurmd and
#                               slurmdbd take the next two). Ports in use are skipped, so several
#                               dev clusters (different QUADRANTS_SLURM_DIR) can run side by side.
#
# Every daemon runs in the foreground in its own session (setsid) with a minimal environment; its
# PID is recorded in $QUADRANTS_SLURM_DIR/pids/. `down` stops exactly those PIDs (after checking
# each is still the daemon it started, not a recycled PID), plus any job step (slurmstepd and its
# processes) of this cluster that outlived slurmd.
set -euo pipefail

export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd -P)"

DIR="$(realpath -m "${QUADRANTS_SLURM_DIR:-/tmp/quadrants-slurm}")"
case "${QUADRANTS_SLURM_ACCOUNTING:-1}" in 0|false|no|off) ACCOUNTING=0;; *) ACCOUNTING=1;; esac
CONF="$DIR/etc/slurm.conf"
DBD_CONF="$DIR/etc/slurmdbd.conf"
MUNGE_SOCKET="$DIR/munge/munge.socket.2"
MYSQL_SOCKET="$DIR/mysql/mysqld.sock"
CLUSTER_NAME="quadrants-dev"
PARTITION="debug"
NODE="localhost"
CRED_EXPIRE=10           # seconds; also the delay before a requeued job may start again
EXIT_CANNOT_INSTALL=75   # `up` exits with this only when SLURM cannot be installed/run here
EXIT_DOWN=3              # `status` when the cluster is down

SLURM_PKGS=(slurmctld slurmd slurm-client munge)
ACCT_PKGS=(slurmdbd mariadb-server-core mariadb-client-core)
ALL_DAEMONS="slurmd slurmctld slurmdbd mariadbd munged"   # stop order

log() { printf 'devcluster: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ------------------------------------------------------------------------------ processes
daemons() {
  if [ "$ACCOUNTING" = 1 ]; then echo munged mariadbd slurmdbd slurmctld slurmd
  else echo munged slurmctld slurmd; fi
}

recorded_pid() { if [ -s "$DIR/pids/$1" ]; then cat "$DIR/pids/$1"; fi; }

# Alive = exists and is not a zombie. Daemons are reparented when `up` exits, and a container's
# PID 1 may never reap them, so a stopped daemon can linger as a zombie: that counts as gone.
alive() {
  local stat
  stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
  stat="${stat##*) }"
  case "${stat:0:1}" in Z|X|"") return 1;; *) return 0;; esac
}

# Is PID the daemon NAME that this script started for this DIR (not a recycled PID)?
is_ours() {
  local name=$1 pid=$2
  [ -n "$pid" ] || return 1
  alive "$pid" || return 1
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] || return 1
  tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qxF "QUADRANTS_SLURM_INSTANCE=$DIR"
}

daemon_running() { is_ours "$1" "$(recorded_pid "$1")"; }

# Start NAME: own session, minimal environment, cwd in the scratch dir, stdin closed, output
# appended to log/NAME.out, no inherited lock fd; record its PID.
start_daemon() {
  local name=$1; shift
  (
    cd "$DIR/run"
    env -i PATH="$PATH" LANG=C.UTF-8 HOME=/root QUADRANTS_SLURM_INSTANCE="$DIR" \
      SLURM_CONF="$CONF" MYSQL_UNIX_PORT="$MYSQL_SOCKET" \
      setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 9>&- &
    echo $! > "$DIR/pids/$name"
  )
}

# Stop PID: SIGTERM, SIGKILL after GRACE seconds; return once it is gone.
stop_pid() {
  local pid=$1 grace=${2:-15} i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < grace * 10; i++)); do alive "$pid" || return 0; sleep 0.1; done
  log "pid $pid still there ${grace}s after SIGTERM: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive "$pid" || return 0; sleep 0.1; done
  die "pid $pid survived SIGKILL"
}

# Job steps (slurmstepd) of this cluster. slurmd starts them in their own sessions with a clean
# environment; they are recognisable by the slurmd log file of this DIR, which they keep open.
our_stepds() {
  local p f
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = slurmstepd ] || continue
    alive "${p#/proc/}" || continue
    for f in "$p"/fd/*; do
      if [ "$(readlink "$f" 2>/dev/null)" = "$DIR/log/slurmd.log" ]; then
        echo "${p#/proc/}"
        break
      fi
    done
  done
}

descendants() {
  local p c
  for p in "$@"; do
    for c in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
      echo "$c"
      descendants "$c"
    done
  done
}

# --------------------------------------------------------------------------------- install
have_binaries() {
  local b
  for b in slurmctld slurmd sbatch srun sinfo squeue scancel scontrol munged munge unmunge; do
    command -v "$b" >/dev/null || return 1
  done
  if [ "$ACCOUNTING" = 1 ]; then
    for b in slurmdbd sacct sacctmgr mariadbd mariadb-install-db mariadb my_print_defaults; do
      command -v "$b" >/dev/null || return 1
    done
    compgen -G "/usr/lib/*/slurm-wlm/accounting_storage_mysql.so" >/dev/null || return 1
  fi
}

cannot_install() { log "cannot install SLURM: $*"; exit "$EXIT_CANNOT_INSTALL"; }

install_packages() {
  have_binaries && return 0
  command -v apt-get >/dev/null || cannot_install "SLURM binaries missing and no apt-get here"
  local pkgs=("${SLURM_PKGS[@]}") policy=/usr/sbin/policy-rc.d made_policy=0 ok=0
  if [ "$ACCOUNTING" = 1 ]; then pkgs+=("${ACCT_PKGS[@]}"); fi
  log "installing ${pkgs[*]} with apt-get (log: $DIR/log/apt.log)"
  # Keep the packages' own services (munge, slurmctld, slurmd, ...) from starting on install.
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy" && made_policy=1
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=300
             -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold
             install --no-install-recommends "${pkgs[@]}")
  if "${apt[@]}" >"$DIR/log/apt.log" 2>&1; then
    ok=1
  elif apt-get -q -o DPkg::Lock::Timeout=300 update >>"$DIR/log/apt.log" 2>&1 \
       && "${apt[@]}" >>"$DIR/log/apt.log" 2>&1; then
    ok=1
  fi
  if [ "$made_policy" = 1 ]; then rm -f "$policy"; fi
  if [ "$ok" != 1 ]; then
    tail -n 20 "$DIR/log/apt.log" >&2
    cannot_install "apt-get install ${pkgs[*]} failed"
  fi
  have_binaries || cannot_install "packages installed but binaries still missing"
}

# ------------------------------------------------------------------------------- configure
port_listening() {
  local hex; hex="$(printf '%04X' "$1")"
  awk -v h="$hex" \
    'FNR > 1 { split($2, a, ":"); if (a[2] == h && $4 == "0A") f = 1 } END { exit !f }' \
    /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

choose_ports() {
  local base=${QUADRANTS_SLURM_PORT:-6817}
  while port_listening "$base" || port_listening $((base + 1)) || port_listening $((base + 2)); do
    base=$((base + 10))
    [ "$base" -lt 65000 ] || die "no free TCP ports for slurmctld/slurmd/slurmdbd"
  done
  CTLD_PORT=$base SLURMD_PORT=$((base + 1)) DBD_PORT=$((base + 2))
}

# RealMemory (MB): the machine's memory, or its cgroup limit if lower, minus 5% for the system
# (slurmd drains a node whose configured memory exceeds what it finds).
machine_memory_mb() {
  local mem_kb limit
  mem_kb="$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"
  limit="$(cat /sys/fs/cgroup/memory.max 2>/dev/null || echo max)"
  if [[ "$limit" =~ ^[0-9]+$ ]] && [ $((limit / 1024)) -lt "$mem_kb" ]; then
    mem_kb=$((limit / 1024))
  fi
  echo $((mem_kb / 1024 * 95 / 100))
}

write_configs() {
  local cpus mem acct
  cpus="$(nproc)"
  mem="$(machine_memory_mb)"
  choose_ports
  if [ "$ACCOUNTING" = 1 ]; then
    acct="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
# The munge socket for talking to slurmdbd (AuthInfo's socket is not used for that).
AccountingStoragePass=$MUNGE_SOCKET"
  else
    acct="AccountingStorageType=accounting_storage/none"
  fi
  # NB: unquoted heredoc; no backquotes in the comments.
  cat > "$CONF.tmp" <<EOF
# Written by slurm/devcluster.sh at each "up": a one-node cluster on localhost ($DIR).
ClusterName=$CLUSTER_NAME
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A private munged (own key and socket in the scratch dir). cred_expire is the job-step credential
# lifetime (default 120 s) and also how long a requeued job waits before it may start again.
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=$CRED_EXPIRE

StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/etc/plugstack.conf

# No cgroups: processes are tracked through /proc; --cpus-per-task and --mem only schedule (jobs
# must set their own thread counts).
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
$acct
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A job that asks for no memory gets one CPU's share, not the whole node (which would serialise
# every job).
DefMemPerCPU=$((mem / cpus))

# The node comes back by itself when slurmd registers (e.g. after the machine restarted).
ReturnToService=2
MailProg=/bin/true

# Requeue: jobs are requeueable unless submitted with --no-requeue (scontrol requeue, node
# failure). A batch job that exits with code 99 is requeued by SLURM itself. KillWait: seconds
# between SIGTERM and SIGKILL at the time limit, scancel or requeue (default 30).
JobRequeue=1
RequeueExit=99
KillWait=5
UnkillableStepTimeout=30
OverTimeLimit=0
# Finished jobs stay visible to squeue/scontrol for 5 min (sacct keeps them for good).
MinJobAge=300
# Try pending jobs every second (default: 60 s main loop, 30 s backfill), so a requeued job
# starts as soon as its cred_expire delay is over.
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
MessageTimeout=10
SlurmdTimeout=60
SlurmctldTimeout=60
InactiveLimit=0

NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$CONF.tmp" "$CONF"
  : > "$DIR/etc/plugstack.conf"
  if [ "$ACCOUNTING" = 1 ]; then
    (umask 077; cat > "$DBD_CONF.tmp" <<EOF
# Written by slurm/devcluster.sh at each "up" ($DIR).
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
DebugLevel=info
# MariaDB as root over its unix socket (MYSQL_UNIX_PORT in slurmdbd's environment).
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
EOF
    )
    mv "$DBD_CONF.tmp" "$DBD_CONF"
  fi
}

# ---------------------------------------------------------------------------------- waiting
show_logs() {
  local f
  for f in "$DIR/log/$1.out" "$DIR/log/$1.log"; do
    if [ -s "$f" ]; then log "--- last lines of $f"; tail -n 15 "$f" >&2; fi
  done
}

wait_for() {  # wait_for SECONDS DAEMON WHAT COMMAND...
  local secs=$1 daemon=$2 what=$3 i; shift 3
  for ((i = 0; i < secs * 20; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    # (a just-started daemon may not have exec'd yet: check twice before giving up)
    if ! daemon_running "$daemon" && { sleep 0.3; ! daemon_running "$daemon"; }; then
      log "$daemon exited while waiting for $what"
      show_logs "$daemon"
      return 1
    fi
    sleep 0.05
  done
  log "timed out after ${secs}s waiting for $what"
  show_logs "$daemon"
  return 1
}

munge_ok() { munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET"; }
mysql_ok() { mariadb --no-defaults --socket="$MYSQL_SOCKET" -u root -e 'SELECT 1'; }
dbd_ok() { SLURM_CONF="$CONF" sacctmgr -n -P show cluster format=cluster; }
ctld_ok() { SLURM_CONF="$CONF" scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_idle() { [ "$(SLURM_CONF="$CONF" sinfo -h -n "$NODE" -o %T)" = idle ]; }

cluster_up() {
  local d
  for d in $(daemons); do daemon_running "$d" || return 1; done
  ctld_ok
}

# ----------------------------------------------------------------------------- subcommands
prepare_dirs() {
  case "$DIR/" in "$REPO_ROOT"/*) die "QUADRANTS_SLURM_DIR=$DIR is inside the repository";; esac
  if [ "${#MUNGE_SOCKET}" -ge 100 ] || [ "${#MYSQL_SOCKET}" -ge 100 ]; then
    die "QUADRANTS_SLURM_DIR=$DIR is too long for a unix socket path"
  fi
  mkdir -p "$DIR"/{etc,state,spool,log,run,pids,munge,mysql}
  chmod 755 "$DIR"
}

lock() {
  exec 9>"$DIR/.lock"
  flock -w 300 9 || die "another devcluster.sh holds $DIR/.lock"
}

start_munge() {
  local key="$DIR/munge/munge.key"
  chown munge:munge "$DIR/munge"
  chmod 755 "$DIR/munge"
  if [ ! -s "$key" ]; then
    (umask 077; dd if=/dev/urandom of="$key.tmp" bs=1024 count=1 status=none)
    chown munge:munge "$key.tmp"; chmod 400 "$key.tmp"; mv "$key.tmp" "$key"
  fi
  start_daemon munged setpriv --reuid=munge --regid=munge --clear-groups \
    munged --foreground --key-file="$key" --socket="$MUNGE_SOCKET" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  wait_for 15 munged "munged" munge_ok
}

start_mariadb() {
  local data="$DIR/mysql/data"
  local opts=(--innodb-buffer-pool-size=32M --innodb-log-file-size=16M)
  if [ ! -d "$data/mysql" ]; then
    rm -rf "$data"
    mariadb-install-db --no-defaults --datadir="$data" --user=root --skip-test-db \
      --auth-root-authentication-method=socket "${opts[@]}" >"$DIR/log/mariadb-install.log" 2>&1 \
      || { tail -n 20 "$DIR/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  start_daemon mariadbd mariadbd --no-defaults --user=root --datadir="$data" \
    --socket="$MYSQL_SOCKET" --skip-networking --pid-file="$DIR/run/mariadbd.pid" \
    --log-error="$DIR/log/mariadbd.log" --skip-log-bin --performance-schema=OFF "${opts[@]}"
  wait_for 30 mariadbd "mariadbd" mysql_ok
}

print_hint() {
  log "use it with:  export SLURM_CONF=$CONF    (or: eval \"\$($0 env)\")"
}

cmd_up() {
  if [ "$(id -u)" != 0 ]; then
    log "cannot run the dev cluster: needs root"
    exit "$EXIT_CANNOT_INSTALL"
  fi
  prepare_dirs
  lock
  if have_binaries && cluster_up; then
    log "already up ($DIR)"
    print_hint
    return 0
  fi
  install_packages
  stop_daemons quiet   # whatever is left of a previous, partial bring-up
  local t0=$SECONDS
  write_configs
  start_munge || die "munged did not start"
  if [ "$ACCOUNTING" = 1 ]; then
    start_mariadb || die "mariadbd did not start"
    start_daemon slurmdbd slurmdbd -D
    wait_for 30 slurmdbd "slurmdbd" dbd_ok || die "slurmdbd did not start"
  fi
  # -i: start even if saved state is unreadable. State is kept across down/up on purpose: job ids
  # keep increasing, so a re-run sweep never meets an old job's files under .submitit/<id>.
  start_daemon slurmctld slurmctld -D -i -f "$CONF"
  wait_for 30 slurmctld "slurmctld" ctld_ok || die "slurmctld did not start"
  start_daemon slurmd slurmd -D -N "$NODE" -f "$CONF"
  wait_for 30 slurmd "node $NODE to be idle" node_idle || die "slurmd did not register"
  log "up in $((SECONDS - t0))s: partition $PARTITION, node $NODE ($(nproc) CPUs)," \
    "ports $CTLD_PORT-$((CTLD_PORT + 2)), dir $DIR"
  print_hint
}

cancel_jobs() {
  ctld_ok || return 0
  SLURM_CONF="$CONF" scancel --quiet --partition="$PARTITION" 2>/dev/null || true
  local i
  for ((i = 0; i < 300; i++)); do
    local active
    active="$(SLURM_CONF="$CONF" squeue -h -t running,completing,configuring,suspended -o %i \
              2>/dev/null || true)"
    if [ -z "$active" ] && [ -z "$(our_stepds)" ]; then
      return 0
    fi
    sleep 0.1
  done
  log "jobs still running 30s after scancel; stopping the daemons anyway"
}

stop_daemons() {
  local d pid stepds procs
  for d in $ALL_DAEMONS; do
    pid="$(recorded_pid "$d")"
    if is_ours "$d" "$pid"; then
      if [ "${1:-}" != quiet ]; then log "stopping $d (pid $pid)"; fi
      stop_pid "$pid" 20
    fi
    rm -f "$DIR/pids/$d"
    if [ "$d" = slurmd ]; then
      stepds="$(our_stepds)"
      if [ -n "$stepds" ]; then
        procs="$(descendants $stepds)"
        log "stopping job steps left behind: $(echo $stepds) (with their processes $(echo $procs))"
        for pid in $stepds; do stop_pid "$pid" 10; done
        for pid in $procs; do if alive "$pid"; then stop_pid "$pid" 5; fi; done
      fi
    fi
  done
}

cmd_down() {
  if [ ! -d "$DIR/pids" ]; then log "nothing to stop ($DIR has no dev cluster)"; return 0; fi
  lock
  if command -v scancel >/dev/null; then cancel_jobs; fi
  stop_daemons
  log "down ($DIR)"
}

cmd_status() {
  local d pid up=1
  for d in $(daemons); do
    pid="$(recorded_pid "$d")"
    if is_ours "$d" "$pid"; then
      echo "$d: running (pid $pid)"
    else
      echo "$d: not running"
      up=0
    fi
  done
  echo "SLURM_CONF=$CONF"
  if [ "$up" = 1 ] && ctld_ok; then
    SLURM_CONF="$CONF" sinfo
    return 0
  fi
  echo "down"
  return "$EXIT_DOWN"
}

cmd_env() { echo "export SLURM_CONF=$CONF"; }

cmd_install() { mkdir -p "$DIR/log" && install_packages; }

case "${1:-}" in
  install) cmd_install ;;  # the packages only (CI prepares them while other stages run)
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
