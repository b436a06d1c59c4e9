/**
 * Partition lease decisions, pure. Given what this node holds, what the lease bucket says (as
 * mirrored by a watch, with the local time each lease last changed), who is live and where
 * placement wants each partition, decide what to acquire, steal and release.
 *
 *   unowned ──create──▶ held ──renew (CAS)──▶ held
 *      ▲                  │ placement moved: release (finish messages, passivate, delete lease)
 *      │                  │ CAS conflict or trust window over: lost (stop at once, write nothing)
 *      └──────────────────┘
 *   unrenewed for leaseTtlMs (local, monotonic observation), owner dead or alive ──steal (CAS)──▶ held
 *
 * Safety rests on the CAS writes, not on this view: a stale view only costs a failed write.
 */

/** A lease as mirrored from KV. */
export interface LeaseView {
  owner: string;
  incarnation: string;
  revision: number;
  /** Local clock time when this node saw the revision change last. */
  changedAtMs: number;
}

export interface LeaseInputs {
  me: string;
  incarnation: string;
  partitions: number;
  /** Placement: desired owner per partition among live scheduler nodes. */
  desired: readonly (string | undefined)[];
  /** Leases by partition; absent = no live lease (never written, released, or deleted). */
  leases: ReadonlyMap<number, LeaseView>;
  /** Partitions this node holds and trusts now. */
  held: ReadonlySet<number>;
  /** Partitions with a write or release in flight (left alone this round). */
  busy: ReadonlySet<number>;
  nowMs: number;
  leaseTtlMs: number;
}

export interface LeaseActions {
  acquire: number[];
  steal: { partition: number; expectedRevision: number }[];
  release: number[];
}

export function decideLeases(i: LeaseInputs): LeaseActions {
  const out: LeaseActions = { acquire: [], steal: [], release: [] };
  for (let p = 0; p < i.partitions; p++) {
    if (i.busy.has(p)) continue;
    const mine = i.desired[p] === i.me;
    const held = i.held.has(p);
    if (held) {
      if (!mine) out.release.push(p);
      continue;
    }
    if (!mine) continue;
    const lease = i.leases.get(p);
    if (!lease) {
      out.acquire.push(p);
      continue;
    }
    const ownerIsMe = lease.owner === i.me && lease.incarnation === i.incarnation;
    if (ownerIsMe) {
      // Our lease, but we stopped trusting it (trust window ran out): take it back with CAS.
      out.steal.push({ partition: p, expectedRevision: lease.revision });
      continue;
    }
    // A lease nobody renewed for a whole TTL is dead whether or not its owner is alive: an owner
    // trusts its lease only until renewal start + TTL − margin, which is before we see it expire.
    // (Waiting for the owner to be dead too orphaned partitions whose owner lost trust in a NATS
    // blip and then was placed elsewhere: alive, not renewing, never stolen.)
    const expired = i.nowMs - lease.changedAtMs >= i.leaseTtlMs;
    if (expired) out.steal.push({ partition: p, expectedRevision: lease.revision });
  }
  return out;
}

/** The local trust window: act as owner only until `renewStartedMs + ttl - margin`. */
export function trustedUntil(
  renewStartedMs: number,
  leaseTtlMs: number,
  safetyMarginMs: number,
): number {
  return renewStartedMs + leaseTtlMs - safetyMarginMs;
}
