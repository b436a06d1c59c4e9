/**
 * The task network: the operator-named, internal Docker bridge network on which tasks with
 * `network: "egress"` run (`kairos node --task-network`), and the host firewall that makes the
 * worker's egress proxy its only way out. `kairos dev` and the tests create it with
 * `createTaskNetwork`; operators may too (docs/deploy.md gives the same commands).
 *
 * What isolates a task there (docs/security.md, "Network egress"): the nftables rules here
 * (`firewallRules`), not Docker. Docker isolates an `--internal` network with iptables rules
 * only; with `--iptables=false` (how `kairos dev` and CI run it) there are none, and even then a
 * container on it gets a default route via the gateway (Docker 20.10). Without the firewall a
 * task reaches every host service on every host address (the gateway, the host's own public
 * address), the other containers of the network, and — the host forwarding for Docker — whatever
 * the host routes to. With it: from the bridge the host accepts only TCP to the proxy's port on
 * the gateway; nothing is routed from or to the bridge; frames between two containers of the
 * subnet are dropped at the bridge. The task cannot change its routes or craft packets (no
 * CAP_NET_ADMIN, no CAP_NET_RAW: docker-spec.ts drops every capability); IPv6 is switched off
 * in the container (docker-spec.ts). Docker's embedded DNS (127.0.0.11) answers nothing there
 * without its iptables rules: the task resolves no names; the proxy does.
 *
 * Pitfall: the firewall needs root (CAP_NET_ADMIN) and `nft`; without it the rules are not there
 * and a task can reach host services bound to 0.0.0.0 on the gateway address — `createTaskNetwork`
 * refuses to go on silently (pass `firewall: false` knowingly).
 */
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { isIP } from "node:net";
import type Dockerode from "dockerode";
import { KairosError } from "../lib/errors.ts";
import { engineMessage, statusOf } from "./docker-errors.ts";

/** What the worker needs to know of its task network. */
export interface TaskNetworkInfo {
  readonly name: string;
  readonly id: string;
  /** The host's address on the network: where the egress proxy listens. */
  readonly gateway: string;
  /** The IPv4 subnet, CIDR. */
  readonly subnet: string;
  /** The host's bridge interface of the network. */
  readonly bridge: string;
}

/** The label Kairos puts on the networks it creates. */
export const TASK_NETWORK_LABEL = "kairos.task_network";
const BRIDGE_NAME_OPTION = "com.docker.network.bridge.name";
const NETWORK_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;

interface NetworkInspect {
  Id: string;
  Name: string;
  Driver: string;
  Internal: boolean;
  Options?: Record<string, string> | null;
  IPAM?: { Config?: { Subnet?: string; Gateway?: string }[] | null } | null;
}

/**
 * The task network `name` as the worker uses it: it must exist, be a bridge network, be
 * `internal`, and have an IPv4 gateway. `invalid_argument` saying which is not so.
 */
export async function inspectTaskNetwork(
  docker: Dockerode,
  name: string,
): Promise<TaskNetworkInfo> {
  let n: NetworkInspect;
  try {
    n = (await docker.getNetwork(name).inspect()) as NetworkInspect;
  } catch (e) {
    if (statusOf(e) === 404)
      throw new KairosError(
        "invalid_argument",
        `task network ${JSON.stringify(name)} does not exist: create it as an internal bridge network (docs/deploy.md, "Task network")`,
        { field: "task-network" },
      );
    throw new KairosError(
      "unavailable",
      `cannot inspect task network ${name}: ${engineMessage(e)}`,
      { cause: e },
    );
  }
  const bad = (why: string) =>
    new KairosError("invalid_argument", `task network ${JSON.stringify(name)} ${why}`, {
      field: "task-network",
    });
  if (n.Driver !== "bridge") throw bad(`uses the ${n.Driver} driver; it must be a bridge network`);
  if (n.Internal !== true)
    throw bad("is not internal: its containers could route around the egress proxy");
  const v4 = (n.IPAM?.Config ?? []).find((c) => isIP(c.Gateway ?? "") === 4);
  if (v4?.Gateway === undefined || v4.Subnet === undefined)
    throw bad("has no IPv4 gateway for the egress proxy to listen on");
  return {
    name: n.Name,
    id: n.Id,
    gateway: v4.Gateway,
    subnet: v4.Subnet,
    bridge: n.Options?.[BRIDGE_NAME_OPTION] ?? `br-${n.Id.slice(0, 12)}`,
  };
}

/** The bridge interface name Kairos gives network `name` (at most 15 characters). */
export function bridgeNameOf(name: string): string {
  return `kx-${createHash("sha256").update(name).digest("hex").slice(0, 12)}`;
}

/** The nftables table of a bridge (one per family, same name). */
function tableOf(info: TaskNetworkInfo): string {
  return `kairos_${info.bridge.replace(/[^A-Za-z0-9_]/g, "_")}`;
}

/**
 * The host firewall of a task network (an `nft -f` script, idempotent: it replaces its own
 * tables): from the bridge, only TCP to the proxy port on the gateway reaches the host; nothing
 * is routed from or to the bridge; no frame between two of its containers is bridged.
 */
export function firewallRules(info: TaskNetworkInfo, proxyPort: number): string {
  const t = tableOf(info);
  const br = info.bridge;
  return [
    `table inet ${t} {}`,
    `delete table inet ${t}`,
    `table inet ${t} {`,
    `  chain input {`,
    `    type filter hook input priority -10; policy accept;`,
    `    iifname "${br}" ip daddr ${info.gateway} tcp dport ${proxyPort} accept`,
    `    iifname "${br}" drop`,
    `  }`,
    `  chain forward {`,
    `    type filter hook forward priority -10; policy accept;`,
    `    iifname "${br}" drop`,
    `    oifname "${br}" drop`,
    `  }`,
    `}`,
    `table bridge ${t} {}`,
    `delete table bridge ${t}`,
    `table bridge ${t} {`,
    `  chain forward {`,
    `    type filter hook forward priority -10; policy accept;`,
    `    ip saddr ${info.subnet} drop`,
    `    ip daddr ${info.subnet} drop`,
    `  }`,
    `}`,
    "",
  ].join("\n");
}

/** Runs `nft -f -` with `script`; `unavailable` with nft's words when it fails. */
function nft(script: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = execFile("nft", ["-f", "-"], { timeout: 10_000 }, (err, _out, stderr) => {
      if (err)
        reject(
          new KairosError(
            "unavailable",
            `nft could not apply the task network's firewall (it needs root and nftables): ${String(stderr).trim() || err.message}`,
            { cause: err },
          ),
        );
      else resolve();
    });
    child.stdin?.end(script);
  });
}

/**
 * Creates the internal task network `name` if it does not exist (labelled, with a bridge named
 * by `bridgeNameOf`), then installs its firewall for a proxy on `proxyPort` unless `firewall` is
 * false. Returns the network as `inspectTaskNetwork` sees it.
 */
export async function createTaskNetwork(
  docker: Dockerode,
  name: string,
  opts: { proxyPort: number; firewall: boolean; subnet?: string },
): Promise<TaskNetworkInfo> {
  if (!NETWORK_NAME.test(name))
    throw new KairosError("invalid_argument", `task network name ${JSON.stringify(name)}`, {
      field: "task-network",
    });
  try {
    await docker.createNetwork({
      Name: name,
      Driver: "bridge",
      Internal: true,
      CheckDuplicate: true,
      Labels: { [TASK_NETWORK_LABEL]: "true" },
      Options: { [BRIDGE_NAME_OPTION]: bridgeNameOf(name) },
      ...(opts.subnet !== undefined ? { IPAM: { Config: [{ Subnet: opts.subnet }] } } : {}),
    });
  } catch (e) {
    if (statusOf(e) !== 409)
      throw new KairosError(
        "unavailable",
        `cannot create task network ${name}: ${engineMessage(e)}`,
        { cause: e },
      );
  }
  const info = await inspectTaskNetwork(docker, name);
  if (opts.firewall) await nft(firewallRules(info, opts.proxyPort));
  return info;
}

/** Removes the task network's firewall (if any) and the network (if it exists). */
export async function removeTaskNetwork(docker: Dockerode, name: string): Promise<void> {
  let info: TaskNetworkInfo | undefined;
  try {
    info = await inspectTaskNetwork(docker, name);
  } catch {
    info = undefined;
  }
  if (info !== undefined) {
    const t = tableOf(info);
    await nft(
      `table inet ${t} {}\ndelete table inet ${t}\ntable bridge ${t} {}\ndelete table bridge ${t}\n`,
    ).catch(() => undefined);
  }
  try {
    await docker.getNetwork(name).remove();
  } catch (e) {
    if (statusOf(e) !== 404) throw e;
  }
}
