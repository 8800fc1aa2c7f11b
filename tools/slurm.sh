#!/usr/bin/env bash
# Start and stop a private, single-node Slurm cluster on this machine, for integration
# tests and CI that submit real `sbatch` job arrays. Needs root (or sudo) and Debian's
# packages; works without systemd (every daemon is started directly by this script).
#
# Usage:
#   eval "$(tools/slurm.sh start [SCRATCH])"   # install if needed, start, print exports
#   tools/slurm.sh status [SCRATCH]            # sinfo; exit 0 when up, 1 when down
#   tools/slurm.sh stop [SCRATCH]              # cancel all jobs, stop what start started
#
# SCRATCH (default /tmp/mapf-slurm) holds everything: slurm.conf, state, spool, logs,
# pid files and the job-completion log. `start` prints on stdout only shell lines to
# eval (`export SLURM_CONF=$SCRATCH/slurm.conf`); progress goes to stderr. Nothing is
# written to /etc/slurm: the client commands find the cluster through SLURM_CONF only.
#
# start:
#   - installs slurm-wlm and munge (apt-get, no recommends) when sbatch, slurmctld,
#     slurmd or munged are missing; service start-up by the packages is suppressed;
#   - creates /etc/munge/munge.key (1024 random bytes, munge:munge 0400) if absent and
#     starts munged as user munge unless a working munged is already running (in that
#     case it is left alone and `stop` will not touch it either);
#   - writes $SCRATCH/slurm.conf (cluster "mapf", node `hostname -s` with CPUs=nproc,
#     partition "debug"), starts slurmctld (-c: clean state, -i: ignore state errors) and
#     slurmd as root, and waits until sinfo shows the node idle;
#   - is idempotent: when the daemons recorded in $SCRATCH are alive and sinfo answers,
#     it only prints the export lines again.
# stop:
#   cancels every job of this private cluster, then stops slurmd, slurmctld and munged
#   (munged only if this script started it) by the PIDs recorded in $SCRATCH, waiting for
#   each to exit. Nothing is ever killed by name.
#
# Querying jobs (Slurm 22.05 from bookworm; no slurmdbd, so no accounting):
#   - squeue                  pending/running jobs; `squeue -t all` also lists finished
#                             ones while slurmctld keeps them (MinJobAge=3600 s), with
#                             %T = PENDING|RUNNING|COMPLETING|COMPLETED|FAILED|CANCELLED;
#   - scontrol show job -o ID one line per job/task, also for finished ones during
#                             MinJobAge: JobState=<as above> ExitCode=<status>:<signal>
#                             (FAILED: Reason=NonZeroExitCode ExitCode=3:0; scancel of a
#                             running task: CANCELLED ExitCode=0:15). An array's ID lists
#                             all its tasks (still-pending ones as one record with
#                             ArrayTaskId=2-5); ID_TASK names one task. Unknown or purged
#                             IDs: "Invalid job id specified"/"Job X not found", exit 1;
#   - sacct                   does NOT work: "Slurm accounting storage is disabled", exit 1;
#   - $SCRATCH/jobcomp.log    one line per finished task (JobCompType=jobcomp/filetxt):
#                             "JobId=.. JobState=COMPLETED ... ArrayJobId=.. ArrayTaskId=..
#                             ... ExitCode=0:0"; emptied by the next `start`.
#   Array tasks get their own JobId when they start; the array's own ID goes to the last
#   task started, so address tasks as ARRAYID_TASK (squeue %i, scontrol show job A_T).
#   scancel of a task still pending inside the array's shared record (squeue shows
#   A_[0-3]) just removes it from the array: no record is left ("Job A_T not found");
#   a task with its own record (running, or shown alone as A_T) becomes CANCELLED.
#   Cancel tasks as A_T (or the whole array as A), not by a task's raw JobId: once the
#   array's own record has finished, `scancel RAWID` fails silently (exit 0).
#   Scheduling passes run on ~1 s ticks: tasks start up to ~1 s after sbatch or after a
#   CPU frees up (2-3 s for the very first jobs after start).
# Caveats: jobs run as the submitting user (root in CI) on this host, in the directory
# sbatch was called from (unless --chdir), with the submitter's environment (--export=ALL
# default, SLURM_CONF included); output files must be writable by that user. Jobs do not
# survive stop/start (slurmctld -c forgets them), but job IDs keep increasing across
# restarts with the same SCRATCH (its state/ directory keeps the last ID). One task per
# CPU at a time (CR_Core, CPUs=nproc); memory is not a consumable resource.
# Ports 6817/6818 must be free (override with MAPF_SLURM_CTLD_PORT / MAPF_SLURMD_PORT).
# A munged started by one SCRATCH's `start` is stopped by that SCRATCH's `stop`.
set -euo pipefail

say() { printf 'slurm.sh: %s\n' "$*" >&2; }
die() { printf 'slurm.sh: error: %s\n' "$*" >&2; exit 2; }

# Print the header comment above as help; exit with $1 (default 2).
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit "${1:-2}"
}

CMD=${1:-}
SCRATCH=${2:-/tmp/mapf-slurm}
[[ -n "$CMD" ]] || usage
# An absolute path: it is written into slurm.conf and printed for the caller.
[[ $CMD != start ]] || mkdir -p "$SCRATCH"
if [[ -d $SCRATCH ]]; then SCRATCH=$(cd "$SCRATCH" && pwd); fi

CONF=$SCRATCH/slurm.conf
CTLD_PID=$SCRATCH/slurmctld.pid
SLURMD_PID=$SCRATCH/slurmd.pid
MUNGED_PID=$SCRATCH/munged.pid           # present only when this script started munged
CTLD_PORT=${MAPF_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${MAPF_SLURMD_PORT:-6818}
NODE=$(hostname -s)
export SLURM_CONF=$CONF                   # for the sinfo/scontrol/squeue calls below

SUDO=()
[[ $(id -u) -eq 0 ]] || SUDO=(sudo)

# ---------------------------------------------------------------- process helpers

# pid_of FILE NAME: print the PID recorded in FILE if that process is alive and its
# command name is NAME (guards against a recycled PID); fail otherwise.
pid_of() {
    local file=$1 name=$2 pid comm
    [[ -s "$file" ]] || return 1
    pid=$(tr -dc '0-9' <"$file")
    [[ -n "$pid" ]] || return 1
    comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
    [[ "$comm" == "$name" ]] || return 1
    printf '%s\n' "$pid"
}

# stop_pid FILE NAME: TERM the process recorded in FILE, wait up to 30 s, then KILL.
stop_pid() {
    local file=$1 name=$2 pid i
    if ! pid=$(pid_of "$file" "$name"); then
        "${SUDO[@]}" rm -f "$file"
        return 0
    fi
    say "stopping $name (pid $pid)"
    "${SUDO[@]}" kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        [[ -d /proc/$pid ]] || break
        sleep 0.1
    done
    if [[ -d /proc/$pid ]]; then
        say "$name (pid $pid) ignored SIGTERM for 30 s; sending SIGKILL"
        "${SUDO[@]}" kill -KILL "$pid" 2>/dev/null || true
        while [[ -d /proc/$pid ]]; do sleep 0.1; done
    fi
    "${SUDO[@]}" rm -f "$file"
}

# sinfo answering at all (the controller is reachable).
ctld_answers() { timeout 10 sinfo -h -o %T >/dev/null 2>&1; }

# The node's state as sinfo prints it (idle, mixed, down*, ...), empty if unknown.
node_state() { timeout 10 sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1; }

print_exports() {
    printf 'export SLURM_CONF=%q\n' "$CONF"
}

show_logs() {
    local f
    for f in "$SCRATCH/slurmctld.log" "$SCRATCH/slurmd.log" /var/log/munge/munged.log; do
        [[ -f "$f" ]] || continue
        printf -- '--- tail of %s\n' "$f" >&2
        tail -n 20 "$f" >&2 || true
    done
}

# ---------------------------------------------------------------- installation

install_packages() {
    if command -v sbatch >/dev/null && command -v slurmctld >/dev/null \
        && command -v slurmd >/dev/null && command -v munged >/dev/null; then
        return 0
    fi
    say "installing slurm-wlm and munge with apt-get"
    # Keep the packages' init scripts from starting daemons (no systemd here, and we
    # start them ourselves): a policy-rc.d that forbids everything, only while installing.
    local policy=/usr/sbin/policy-rc.d ours=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
        "${SUDO[@]}" chmod 0755 "$policy"
        ours=1
    fi
    local apt=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
    local rc=0
    if ! "${apt[@]}" install --no-install-recommends slurm-wlm munge >&2; then
        say "apt-get install failed; refreshing the package lists and trying again"
        "${apt[@]}" update >&2 \
            && "${apt[@]}" install --no-install-recommends slurm-wlm munge >&2 \
            || rc=$?
    fi
    [[ $ours -eq 0 ]] || "${SUDO[@]}" rm -f "$policy"
    [[ $rc -eq 0 ]] || die "could not install slurm-wlm and munge"
    for tool in sbatch slurmctld slurmd munged; do
        command -v "$tool" >/dev/null \
            || die "$tool is still missing after installing slurm-wlm and munge"
    done
}

# ---------------------------------------------------------------- munge

munge_works() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }

start_munge() {
    if munge_works; then
        say "munged already running and working"
        return 0
    fi
    if ! id munge >/dev/null 2>&1; then
        # The package is there but its maintainer script did not create its user (an
        # image that copied the files, or a postinst that failed): create it as the
        # postinst would, a system user and group without a login.
        command -v munged >/dev/null || die "munged is missing (is the munge package installed?)"
        say "creating the system user munge (the munge package's postinst did not)"
        local group=(--user-group)
        getent group munge >/dev/null && group=(-g munge)
        "${SUDO[@]}" useradd --system "${group[@]}" --no-create-home \
            --home-dir /nonexistent --shell /usr/sbin/nologin munge \
            || die "could not create the system user munge"
    fi
    local key=/etc/munge/munge.key
    "${SUDO[@]}" install -d -o munge -g munge -m 0700 /etc/munge
    if [[ ! -s $key ]]; then
        say "creating $key"
        "${SUDO[@]}" dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    fi
    "${SUDO[@]}" chown munge:munge "$key"
    "${SUDO[@]}" chmod 0400 "$key"
    # Socket, pid, log and seed directories munged expects (normally made by its unit).
    "${SUDO[@]}" install -d -o munge -g munge -m 0755 /run/munge
    "${SUDO[@]}" install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
    # Files left by an earlier munge user (another uid: an image whose passwd lost the
    # entry) make munged refuse to start ("insecure logfile"): they are munge's.
    "${SUDO[@]}" chown -R munge:munge /var/lib/munge /var/log/munge
    local pidfile=/run/munge/munged.pid
    # A munged that is alive but not answering (or a stale socket) cannot be reused.
    if pid_of "$pidfile" munged >/dev/null; then
        die "munged (pid $(cat "$pidfile")) is running but 'munge -n | unmunge' fails;" \
            "fix or stop it first"
    fi
    say "starting munged"
    # munged daemonizes itself and writes $pidfile; --force removes a stale socket.
    "${SUDO[@]}" runuser -u munge -- /usr/sbin/munged --force --pid-file="$pidfile" \
        || { show_logs; die "munged failed to start"; }
    local i
    for ((i = 0; i < 50; i++)); do
        munge_works && break
        sleep 0.1
    done
    munge_works || { show_logs; die "munged started but 'munge -n | unmunge' still fails"; }
    # Remember that we started it, so that `stop` stops it (and nothing else).
    "${SUDO[@]}" cat "$pidfile" >"$MUNGED_PID"
}

# ---------------------------------------------------------------- slurm

write_conf() {
    local cpus mem_mb
    cpus=$(nproc)
    # Leave 512 MiB to the system; slurmd drains a node whose RealMemory exceeds the
    # hardware. Memory is not a consumable resource (CR_Core), so this is informational.
    mem_mb=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 - 512 }' /proc/meminfo)
    ((mem_mb >= 100)) || mem_mb=100
    mkdir -p "$SCRATCH/state" "$SCRATCH/spool"
    cat >"$CONF" <<EOF
# Written by tools/slurm.sh: a private single-node cluster; regenerated on every start.
ClusterName=mapf
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
# Finished jobs stay visible to "scontrol show job" for an hour.
MinJobAge=3600
MaxJobCount=100000
MaxArraySize=100001
KillWait=5
# No slurmdbd: no accounting (sacct does not work); finished jobs are also logged here.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$SCRATCH/jobcomp.log
StateSaveLocation=$SCRATCH/state
SlurmdSpoolDir=$SCRATCH/spool
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$SCRATCH/slurmctld.log
SlurmdLogFile=$SCRATCH/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

start_slurm() {
    write_conf
    # Fresh logs and completion records for this run (state/ is kept: it holds the last
    # job ID, so IDs keep increasing across restarts).
    "${SUDO[@]}" rm -f "$SCRATCH/slurmctld.log" "$SCRATCH/slurmd.log" "$SCRATCH/jobcomp.log"
    say "starting slurmctld and slurmd (config $CONF)"
    # Both daemonize themselves and write the pid files named in slurm.conf.
    # slurmctld -c: start clean (no jobs from an earlier run), -i: ignore state errors.
    "${SUDO[@]}" slurmctld -f "$CONF" -c -i || { show_logs; die "slurmctld failed to start"; }
    "${SUDO[@]}" slurmd -f "$CONF" -N "$NODE" || { show_logs; die "slurmd failed to start"; }
    local i state='' alive=0
    for ((i = 0; i < 60; i++)); do
        # Both daemons must be ours and alive (a controller of another SCRATCH on the same
        # port would answer sinfo too), and the node idle (maybe with a suffix: idle~).
        alive=0
        pid_of "$CTLD_PID" slurmctld >/dev/null && pid_of "$SLURMD_PID" slurmd >/dev/null \
            && alive=1
        state=$(node_state)
        ((alive)) && [[ $state == idle* ]] && break
        # Daemons that died at start-up (bad config, port in use) will not come back.
        ((alive || i < 6)) || break
        # A node left down/drained from a previous configuration: bring it back.
        if [[ $state == down* || $state == drain* ]]; then
            "${SUDO[@]}" env SLURM_CONF="$CONF" \
                scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
        fi
        sleep 0.5
    done
    if ((!alive)); then
        show_logs
        die "slurmctld or slurmd is not running (see the logs above)"
    fi
    if [[ $state != idle* ]]; then
        show_logs
        timeout 10 sinfo -N -l >&2 || true
        die "node $NODE did not become idle within 30 s (state: '${state:-no answer}')"
    fi
    say "up: node $NODE idle in partition debug"
}

cmd_start() {
    if pid_of "$CTLD_PID" slurmctld >/dev/null && pid_of "$SLURMD_PID" slurmd >/dev/null \
        && ctld_answers; then
        say "already running from $SCRATCH"
        print_exports
        return 0
    fi
    # Leftovers of an earlier start that is no longer healthy: stop them first.
    stop_pid "$SLURMD_PID" slurmd
    stop_pid "$CTLD_PID" slurmctld
    install_packages
    start_munge
    start_slurm
    print_exports
}

cmd_stop() {
    if pid_of "$CTLD_PID" slurmctld >/dev/null && ctld_answers; then
        # This cluster is private: cancel all its jobs so no job step outlives slurmd.
        # By array job ID (%F; the job ID for plain jobs): scancel silently ignores the
        # raw JobId of an array task once the array's own record has finished.
        local jobs i
        jobs=$(timeout 10 squeue -h -o %F 2>/dev/null | sort -un | tr '\n' ' ')
        if [[ -n ${jobs// /} ]]; then
            say "cancelling jobs: $jobs"
            # shellcheck disable=SC2086
            "${SUDO[@]}" env SLURM_CONF="$CONF" scancel $jobs 2>/dev/null || true
            for ((i = 0; i < 30; i++)); do
                [[ -z $(timeout 10 squeue -h -o %A 2>/dev/null) ]] && break
                sleep 0.5
            done
            ((i < 30)) || say "jobs still listed after 15 s; stopping the daemons anyway"
        fi
    fi
    stop_pid "$SLURMD_PID" slurmd
    stop_pid "$CTLD_PID" slurmctld
    stop_pid "$MUNGED_PID" munged
    say "stopped"
}

cmd_status() {
    if pid_of "$CTLD_PID" slurmctld >/dev/null && ctld_answers; then
        say "up (SLURM_CONF=$CONF)"
        sinfo
        return 0
    fi
    say "down (nothing answering for $CONF)"
    return 1
}

case $CMD in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    -h | --help | help) usage 0 ;;
    *) usage ;;
esac
