/**
 * The job actor's slot requests to its tenant actor (the slot economy, tenant-actor.ts): the
 * `acquire_slot` effect asks for a slot with the tenant's cap and weight and the grant's expiry
 * (the run's timeout + `slotGraceMs`); a grant given at once comes back to the job actor as
 * `slot_granted` (a later one arrives from the tenant actor itself). `release_slot` gives one back.
 *
 * Gotchas: a failed request is not re-sent here — the run's `slot_check` timer asks again
 * (`SLOT_RECHECK_MS`); re-asking at once after a timeout turned an overloaded tenant actor into a
 * retry storm. A grant is named per hold (`grant`), so a late release cannot free a newer one.
 */
import type { ShellContext } from "../actors/host.ts";
import type { JobEffect } from "./job-actor.ts";
import type { JobShellDeps } from "./job-shell.ts";

export type SlotDeps = Pick<JobShellDeps, "router" | "slotGraceMs" | "tenantMaxConcurrent" | "tenantWeight">;
type TenantAddress = { type: string; id: string };

export async function acquireSlot(deps: SlotDeps, ctx: ShellContext, tenant: TenantAddress, fx: Extract<JobEffect, { kind: "acquire_slot" }>): Promise<void> {
  const max = await deps.tenantMaxConcurrent?.(tenant.id);
  const weight = await deps.tenantWeight?.(tenant.id);
  const reply = await deps.router().request<{ granted: boolean }>(tenant, {
    kind: "acquire", run_id: fx.grant, job: ctx.address.id, ttl_ms: fx.timeout_s * 1000 + (deps.slotGraceMs ?? 120_000),
    ...(max !== undefined ? { max_concurrent: max } : {}), ...(weight !== undefined ? { weight } : {}),
  });
  if (reply.granted) ctx.tell({ kind: "slot_granted", run_id: fx.grant });
}

export async function releaseSlot(deps: SlotDeps, tenant: TenantAddress, fx: Extract<JobEffect, { kind: "release_slot" }>): Promise<void> {
  await deps.router().request(tenant, { kind: "release", run_id: fx.grant });
}
