/**
 * Disconnects every live connection of one user in one account, on every server of the NATS
 * cluster, through the system account's services (needs a `SYS` user's connection):
 *
 *   `$SYS.REQ.SERVER.PING.CONNZ` {acc, user} → each server lists its matching connections (cid)
 *   `$SYS.REQ.SERVER.<server id>.KICK` {cid}  → that server closes the connection
 *
 * Used by `kairos admin service revoke` after the identity's record is marked revoked, so the
 * kicked client's reconnect meets a callout that refuses it. Bounded: servers answer within
 * `waitMs` a round, at most `MAX_ROUNDS` rounds of listing and kicking.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import { KairosError } from "../lib/errors.ts";

const PAGE = 1024;
const MAX_ROUNDS = 10;

interface ConnzAnswer {
  server?: { id?: string };
  data?: { server_id?: string; connections?: { cid?: number }[] };
  error?: { description?: string };
}

export interface KickResult {
  /** Servers that answered. */
  servers: number;
  /** Connections closed. */
  kicked: number;
}

async function connz(
  sys: NatsConnection,
  body: Record<string, unknown>,
  subject: string,
  waitMs: number,
): Promise<ConnzAnswer[]> {
  const out: ConnzAnswer[] = [];
  const it = await sys.requestMany(subject, JSON.stringify(body), {
    strategy: "timer",
    maxWait: waitMs,
  });
  for await (const m of it) out.push(m.json<ConnzAnswer>());
  return out;
}

/**
 * Closes `user`'s connections in `account` on every server that answers within `waitMs`: lists
 * and kicks in rounds until a round lists none (a server lists at most `PAGE` a round), at most
 * `MAX_ROUNDS` rounds.
 */
export async function kickUser(
  sys: NatsConnection,
  account: string,
  user: string,
  waitMs = 1000,
): Promise<KickResult> {
  let kicked = 0;
  let servers = 0;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const answers = await connz(
      sys,
      { acc: account, user, limit: PAGE },
      "$SYS.REQ.SERVER.PING.CONNZ",
      waitMs,
    );
    servers = Math.max(servers, answers.length);
    let listed = 0;
    for (const a of answers) {
      if (a.error) throw new KairosError("unavailable", `CONNZ: ${a.error.description ?? "error"}`);
      const id = a.data?.server_id ?? a.server?.id;
      if (id === undefined || !/^N[A-Z2-7]{55}$/.test(id)) continue;
      for (const c of a.data?.connections ?? []) {
        if (typeof c.cid !== "number") continue;
        listed++;
        const r = (
          await sys.request(`$SYS.REQ.SERVER.${id}.KICK`, JSON.stringify({ cid: c.cid }), {
            timeout: waitMs,
          })
        ).json<{ error?: unknown }>();
        // A connection gone meanwhile (closed by itself) answers an error: nothing left to close.
        if (!r.error) kicked++;
      }
    }
    if (listed === 0) return { servers, kicked };
  }
  throw new KairosError(
    "unavailable",
    `${user} still had connections after ${MAX_ROUNDS} rounds of kicks (${kicked} closed); run the revocation again`,
  );
}
