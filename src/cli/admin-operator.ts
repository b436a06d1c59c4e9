/**
 * `kairos admin operator-key create <name> | revoke <key_id> | list`: the keys of the API's
 * operator views (`/v1/admin/…`, the dashboard's operator sign-in; src/tenants/operator-keys.ts),
 * apart from every tenant's API keys. A new key is shown once; `list` shows ids, names and
 * whether revoked, never a key. Registered by admin.ts, which lends its NATS flags and its
 * connection to the tenants bucket.
 */
import type { Command } from "commander";
import type { KvStore } from "../cluster/kv.ts";
import { systemClock } from "../lib/clock.ts";
import { KvOperatorKeys } from "../tenants/operator-keys.ts";

interface Flags {
  json?: boolean;
}

/** What admin.ts lends: its common flags, and a run of `fn` over the cluster's tenants bucket. */
export interface AdminHelpers<F extends Flags> {
  common: (cmd: Command) => Command;
  withTenantsKv: <T>(f: F, fn: (kv: KvStore) => Promise<T>) => Promise<T>;
}

export function registerOperatorKeyCommands<F extends Flags>(
  admin: Command,
  h: AdminHelpers<F>,
): void {
  const op = admin
    .command("operator-key")
    .description("keys of the operators' views (GET /v1/admin/…, the dashboard's cluster page)");
  const keys = (kv: KvStore) => new KvOperatorKeys(kv, systemClock);
  h.common(op.command("create <name>"))
    .description("create an operator key for <name> (a person or a tool)")
    .option("--json", "print {key_id, name, operator_key}")
    .action(async (name: string, f: F) => {
      const r = await h.withTenantsKv(f, (kv) => keys(kv).create(name));
      if (f.json) {
        console.log(JSON.stringify({ key_id: r.keyId, name, operator_key: r.key }));
        return;
      }
      console.log(`operator key  ${r.key}`);
      console.log(`key id        ${r.keyId}`);
      console.error("The operator key is shown only once: store it now.");
    });
  h.common(op.command("revoke <key_id>"))
    .description("revoke an operator key (API nodes stop accepting it within 5 s)")
    .action(async (keyId: string, f: F) => {
      await h.withTenantsKv(f, (kv) => keys(kv).revoke(keyId));
      console.log(`revoked ${keyId}`);
    });
  h.common(op.command("list"))
    .description("operator keys: id, name, created, revoked (never the key)")
    .option("--json", "machine-readable output")
    .action(async (f: F) => {
      const list = await h.withTenantsKv(f, (kv) => keys(kv).list());
      if (f.json) {
        console.log(JSON.stringify(list));
        return;
      }
      for (const k of list)
        console.log(
          `${k.key_id}  ${k.name.padEnd(24)} ${k.created_at}${k.revoked ? "  revoked" : ""}`,
        );
    });
}
