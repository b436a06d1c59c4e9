/**
 * Moves a dev server's JetStream data from the global account to the cluster account, once.
 *
 * Before the account layout (src/cluster/nats-accounts.ts), every Kairos user lived in
 * nats-server's global account `$G`, so a `kairos dev` folder holds its streams under
 * `<store>/jetstream/$G/`. The same server with accounts looks under `<store>/jetstream/KAIROS/`
 * and would start empty (the dev tenant, jobs and runs seemingly gone). nats-server keeps each
 * account's streams in a folder of that name, so on a single stopped server renaming the folder
 * moves them. Only done when the cluster account has no folder yet; never for clustered servers
 * (their meta layer records the account: back up and restore the streams instead, docs/deploy.md).
 */
import { existsSync, renameSync } from "node:fs";
import { join } from "node:path";
import { CLUSTER_ACCOUNT } from "../cluster/nats-accounts.ts";

/** Renames `<storeDir>/jetstream/$G` to `…/KAIROS` when only the former exists; true if it did. */
export function moveGlobalAccountStreams(storeDir: string): boolean {
  const from = join(storeDir, "jetstream", "$G");
  const to = join(storeDir, "jetstream", CLUSTER_ACCOUNT);
  if (!existsSync(from) || existsSync(to)) return false;
  renameSync(from, to);
  return true;
}
