/**
 * Deadlines that hold without the worker: the small supervisors each executor wraps a task in.
 * - process: `/bin/sh -c PROCESS_SUPERVISOR …` starts a watchdog then `exec`s the task (same pid,
 *   process group leader). The watchdog SIGKILLs the group at the deadline or when the worker is
 *   gone or frozen (read from /proc every 250 ms; `kill -0` without /proc).
 * - docker: the host's static busybox, mounted read-only at `CONTAINER_BUSYBOX`, is PID 1; its
 *   watchdog kills the task at the deadline. With a lease (`TaskSpec.leaseMs`) a second watchdog
 *   counts it down and kills the container when it runs out; the worker renews it on every
 *   acknowledged heartbeat (`CONTAINER_LEASE_DIR/until`), so a dead or frozen worker's container
 *   dies before the owner offers the run again.
 *
 * Pitfalls: busybox prefers its applets to PATH, so the command is resolved through PATH here;
 * missing/non-executable commands exit 127/126 with a marker line. Docker may miss an OOM kill
 * (`State.OOMKilled`), so the supervisor reads the cgroup's OOM counter and prints `MARK_OOM`.
 */
import { accessSync, constants as fsConstants, statSync } from "node:fs";
import { open } from "node:fs/promises";
import { delimiter, isAbsolute, join, resolve } from "node:path";
import type { ExecutionError } from "./types.ts";

/** How often the process watchdog checks that its worker still exists. */
export const WATCHDOG_POLL_S = 0.25;

/**
 * `sh -c` script of the process supervisor. $0 = name, $1 = PATH for the watchdog's own
 * `sleep`, $2 = the worker's pid, $3 = deadline in seconds, $4… = the task's program and
 * arguments. Nothing is assigned in the main shell, so the task's environment reaches the task
 * unchanged.
 *
 * The worker's pid is passed, not read from `$PPID`: a worker killed between the spawn and the
 * shell's start left `$PPID` naming the process the task was reparented to, which the watchdog
 * then took for a live worker — the task ran on to its deadline while the run was offered
 * elsewhere (the ledger chaos test, seed 7321: a kill -9 of the worker 114 ms before its task's
 * first line, two executions of one run overlapping by 1.6 s).
 */
export const PROCESS_SUPERVISOR = `(
  trap '' TERM INT HUP QUIT PIPE
  exec </dev/null >/dev/null
  PATH=$1
  kairos_w=$2
  if [ -r /proc/$$/stat ]; then
    kairos_alive() {
      { read -r kairos_s </proc/$$/stat; } 2>/dev/null || return 1
      kairos_s=\${kairos_s##*) }
      set -- $kairos_s
      [ "$2" = "$kairos_w" ] || return 1
      { read -r kairos_p </proc/$kairos_w/stat; } 2>/dev/null || return 1
      kairos_p=\${kairos_p##*) }
      set -- $kairos_p
      [ "$1" != "T" ] && [ "$1" != "t" ]
    }
  else
    kairos_alive() { kill -0 "$kairos_w" 2>/dev/null; }
  fi
  ( while kairos_alive; do sleep ${WATCHDOG_POLL_S}; done; kill -KILL 0 ) &
  sleep "$3"
  printf '\\n[kairos] task killed by its supervisor: deadline passed\\n' >&2
  kill -KILL 0
) &
shift 3
exec "$@"
`;

/** Where the docker executor mounts the host's static busybox inside every container. */
export const CONTAINER_BUSYBOX = "/.kairos/busybox";

/** Where a container finds its lease file (`until`), a read-only bind of a per-attempt host directory. */
export const CONTAINER_LEASE_DIR = "/.kairos/lease";

/**
 * Processes the docker supervisor adds to a container (PID 1, deadline watchdog and its sleep,
 * lease watchdog and its sleep): added to PidsLimit.
 */
export const DOCKER_SUPERVISOR_PIDS = 5;

/** The lease watchdog's tick. */
export const LEASE_TICK_MS = 250;

/**
 * The content of a lease file: a sequence number (a new value restarts the countdown) and the
 * lease left, in watchdog ticks, rounded down with room for the ticks' drift (each tick is a
 * `sleep 0.25` plus a fork, so a countdown runs slow) — the container dies before `validForMs`.
 */
export function leaseFileContent(seq: number, validForMs: number): string {
  const ticks = Math.max(0, Math.floor((validForMs * 0.9) / LEASE_TICK_MS) - 1);
  return `${seq} ${ticks}\n`;
}

/** Marker lines (stderr) of the docker supervisor when the command cannot be run. */
export const MARK_NOT_FOUND = "[kairos] command not found: ";
export const MARK_NOT_EXECUTABLE = "[kairos] command not executable: ";
/**
 * Marker line (stderr) of the docker supervisor after a failed task when the container's memory
 * cgroup counted an OOM kill (cgroup v1 `memory.oom_control`, v2 `memory.events`), then the count.
 */
export const MARK_OOM = "[kairos] out of memory: processes of the task killed by the kernel: ";

/**
 * `busybox sh -c` script, PID 1 of every container. $0 = name, $1 = deadline in seconds,
 * $2 = 1 when a lease file is mounted at CONTAINER_LEASE_DIR (else 0), $3… = the command (the
 * task's args, or the image's Entrypoint + Cmd).
 *
 * The task runs with `oom_score_adj` 1000 (raising it needs no privilege), so the kernel's OOM
 * killer takes a task process while one is left — never the supervisor or its watchdogs first.
 * Without it, a second OOM kill during the first victim's exit could take PID 1: the container
 * died with no "Killed", no OOM marker, and a task that survived a killed child exited 137.
 */
export const DOCKER_SUPERVISOR = `kairos_b=${CONTAINER_BUSYBOX}
kairos_d=$1
kairos_l=$2
shift 2
kairos_p=$1
case $1 in
  */*) ;;
  *)
    kairos_p=
    kairos_seen=
    kairos_ifs=$IFS
    IFS=:
    set -f
    for kairos_dir in \${PATH:-/usr/local/bin:/usr/bin:/bin}; do
      kairos_f=\${kairos_dir:-.}/$1
      if [ -f "$kairos_f" ] && [ -x "$kairos_f" ]; then kairos_p=$kairos_f; break; fi
      if [ -z "$kairos_seen" ] && [ -e "$kairos_f" ]; then kairos_seen=$kairos_f; fi
    done
    set +f
    IFS=$kairos_ifs
    if [ -z "$kairos_p" ]; then kairos_p=\${kairos_seen:-$1}; fi
    ;;
esac
case $kairos_p in
  */*) ;;
  *) printf '%s%s\\n' '${MARK_NOT_FOUND}' "$1" >&2; exit 127 ;;
esac
if [ ! -e "$kairos_p" ]; then printf '%s%s\\n' '${MARK_NOT_FOUND}' "$1" >&2; exit 127; fi
if [ ! -f "$kairos_p" ] || [ ! -x "$kairos_p" ]; then printf '%s%s\\n' '${MARK_NOT_EXECUTABLE}' "$1" >&2; exit 126; fi
shift
(
  trap '' TERM INT HUP QUIT PIPE
  exec </dev/null >/dev/null
  "$kairos_b" sleep "$kairos_d"
  printf '\\n[kairos] container killed by its own deadline\\n' >&2
  kill -KILL -1
) &
if [ "$kairos_l" = 1 ]; then
  (
    trap '' TERM INT HUP QUIT PIPE
    exec </dev/null >/dev/null
    kairos_seq=
    kairos_left=0
    while :; do
      kairos_s=
      kairos_q=
      { read -r kairos_s kairos_q <${CONTAINER_LEASE_DIR}/until; } 2>/dev/null
      if [ -n "$kairos_s" ] && [ "$kairos_s" != "$kairos_seq" ]; then kairos_seq=$kairos_s; kairos_left=$kairos_q; fi
      [ "$kairos_left" -gt 0 ] 2>/dev/null || break
      kairos_left=$((kairos_left - 1))
      "$kairos_b" sleep ${LEASE_TICK_MS / 1000}
    done
    printf '\n[kairos] container killed: its worker stopped renewing the lease\n' >&2
    kill -KILL -1
  ) &
fi
(
  { echo 1000 >/proc/self/oom_score_adj; } 2>/dev/null
  exec "$kairos_p" "$@"
)
kairos_rc=$?
if [ "$kairos_rc" -ne 0 ]; then
  kairos_o=0
  for kairos_f in /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events; do
    [ -r "$kairos_f" ] || continue
    while read -r kairos_k kairos_v; do
      if [ "$kairos_k" = oom_kill ]; then kairos_o=$kairos_v; fi
    done <"$kairos_f"
  done
  if [ "$kairos_o" -gt 0 ] 2>/dev/null; then printf '\n%s%s\n' '${MARK_OOM}' "$kairos_o" >&2; fi
fi
exit $kairos_rc
`;

/**
 * Whether the docker supervisor's last output line says the kernel OOM-killed a process of the
 * container (its cgroup's `oom_kill` counter, read after a failed task): the engine's
 * `State.OOMKilled` alone misses kills whose OOM event reaches dockerd after the exit event
 * (Docker 20.10 sets the flag only from an OOM event that came first).
 */
export function oomMarked(outputTail: string): boolean {
  const last = outputTail.trimEnd().split("\n").pop() ?? "";
  return last.startsWith(MARK_OOM);
}

/**
 * The checks execvp would make for `program` (PATH search when it has no slash), so the
 * process executor can still tell a missing program (invalid_task) from a non-executable
 * one (permission_denied) although the shell, not node, now executes it.
 */
export function checkProgram(
  program: string,
  pathEnv: string,
  cwd: string,
): ExecutionError | undefined {
  const candidates = program.includes("/")
    ? [isAbsolute(program) ? program : resolve(cwd, program)]
    : pathEnv.split(delimiter).map((dir) => resolve(cwd, join(dir === "" ? "." : dir, program)));
  let denied = false;
  for (const file of candidates) {
    let isFile: boolean;
    try {
      isFile = statSync(file).isFile();
    } catch {
      continue; // ENOENT, ENOTDIR, ELOOP: not here
    }
    try {
      if (!isFile) throw new Error("not a regular file");
      accessSync(file, fsConstants.X_OK);
      return undefined;
    } catch {
      denied = true;
    }
  }
  return denied
    ? {
        class: "permission_denied",
        message: `permission denied executing ${program}`,
        retryable: false,
      }
    : { class: "invalid_task", message: `program not found: ${program}`, retryable: false };
}

const PT_INTERP = 3;

/**
 * Why `path` cannot serve as the in-container supervisor, or undefined when it can: it must be
 * a statically linked ELF executable (no PT_INTERP), since it runs inside arbitrary images.
 * Debian's dynamically linked `busybox` package would fail in every container.
 */
export async function staticBusyboxProblem(path: string): Promise<string | undefined> {
  let fh;
  try {
    fh = await open(path, "r");
  } catch (e) {
    return `${path} cannot be read (${(e as NodeJS.ErrnoException).code ?? String(e)}); install a static busybox there (apt-get install -y busybox-static)`;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile() || (st.mode & 0o111) === 0) return `${path} is not an executable file`;
    const head = Buffer.alloc(64);
    await fh.read(head, 0, 64, 0);
    if (head.readUInt32BE(0) !== 0x7f454c46) return `${path} is not an ELF executable`;
    const is64 = head[4] === 2;
    const le = head[5] === 1;
    const u16 = (b: Buffer, o: number): number => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
    const u32 = (b: Buffer, o: number): number => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
    const phoff = is64
      ? Number(le ? head.readBigUInt64LE(32) : head.readBigUInt64BE(32))
      : u32(head, 28);
    const phentsize = u16(head, is64 ? 54 : 42);
    const phnum = u16(head, is64 ? 56 : 44);
    const table = Buffer.alloc(phentsize * phnum);
    await fh.read(table, 0, table.length, phoff);
    for (let i = 0; i < phnum; i++) {
      if (u32(table, i * phentsize) === PT_INTERP)
        return `${path} is dynamically linked; the containers need a static busybox (apt-get install -y busybox-static)`;
    }
    return undefined;
  } finally {
    await fh.close();
  }
}
