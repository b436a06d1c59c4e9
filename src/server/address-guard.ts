/**
 * Defence in depth at the bus boundary: an actor message that names a tenant must be addressed to
 * an actor of that tenant. The API derives both from the caller's API key, so an honest sender
 * never trips this; a forged message on the bus (`create` to `job/<A>.<job>` carrying
 * `tenant_id: B`, or a slot request of tenant A naming tenant B's job) is refused with
 * `permission_denied` before the actor sees it (`KairosNode.guard`, checked in src/server/partition-responder.ts).
 *
 * The check is made by the partition's responder: on what arrives over NATS, and on the API's own
 * commands that its node hands to a partition it serves in memory (`KairosNode.commandRouter`,
 * `PartitionResponder.localActors`). The host itself (src/actors/host.ts) does not repeat it for a
 * direct in-process `deliver`; an actor's sends to others go through NATS and are checked there.
 */
import type { MessageGuard } from "../actors/actor.ts";
import { splitJobActorId } from "../protocol/ids.ts";

/** A value for a refusal message (JSON, bounded). */
function shown(v: unknown): string {
  return (JSON.stringify(v) ?? "undefined").slice(0, 100);
}

function field(msg: unknown, name: string): unknown {
  return typeof msg === "object" && msg !== null
    ? (msg as Record<string, unknown>)[name]
    : undefined;
}

/** `job/<tenant>.<job>`: a `tenant_id` or `job_id` in the message must be the address's. */
export const jobAddressGuard: MessageGuard = (id, msg) => {
  const { tenantId, jobId } = splitJobActorId(id);
  const t = field(msg, "tenant_id");
  if (t !== undefined && t !== tenantId)
    return `message for tenant ${shown(t)} addressed to a job of tenant ${tenantId}`;
  const j = field(msg, "job_id");
  if (j !== undefined && j !== jobId)
    return `message for job ${shown(j)} addressed to job ${jobId}`;
  return undefined;
};

/** `tenant/<tenant>`: a `tenant_id`, or the tenant of a `job` address, must be this tenant. */
export const tenantAddressGuard: MessageGuard = (id, msg) => {
  const t = field(msg, "tenant_id");
  if (t !== undefined && t !== id)
    return `message for tenant ${shown(t)} addressed to tenant ${id}`;
  const jobs = [field(msg, "job")];
  // A `slots` batch (slot-broker.ts) names a job per acquire: every one must be of this tenant.
  const asks = field(msg, "acquire");
  if (asks !== undefined) {
    if (!Array.isArray(asks)) return `slot message with acquire ${shown(asks)}: not a list`;
    for (const a of asks) jobs.push(field(a, "job") ?? null);
  }
  for (const job of jobs) {
    if (job !== undefined && (typeof job !== "string" || splitJobActorId(job).tenantId !== id)) {
      return `slot message for job ${shown(job)} addressed to tenant ${id}`;
    }
  }
  return undefined;
};
