/**
 * `kairos dev` (behind `npm start`): the embedded default. Starts `nats-server -js` as a child on a
 * free loopback port with data under `.kairos/nats` (unless --nats / KAIROS_NATS_URL is given),
 * plus one node with every role; creates a dev tenant on first start; records
 * `{nats_url, api_url, api_key, tenant_id}` in `.kairos/dev.json` so other `kairos` commands and
 * curl examples find the cluster; stops both on Ctrl-C / SIGTERM. State survives a restart because
 * the data folder does.
 */
import type { Command } from "commander";
import { join } from "node:path";
import { launchNatsServer, type NatsServerHandle } from "../dev/nats-launcher.ts";
import { ensureDevTenant } from "../tenants/index.ts";
import { nodeConfigFromFlags, onShutdown, startProcess, type NodeFlags, type ProcessFlags } from "./node.ts";
import { readDevFile, stateDir, writeDevFile } from "./dev-file.ts";

export const DEV_API_PORT = 7700;

export function registerDevCommand(program: Command): void {
  program
    .command("dev")
    .description("single-node dev cluster: embedded nats-server + one node with all roles")
    .option("--nats <url>", "use this NATS instead of starting one (env KAIROS_NATS_URL)")
    .option("--partitions <n>", "partition count when the cluster is first created", "16")
    .option("--executor <kind>", "docker, process or noop (default: docker if an engine answers, else process)")
    .option("--slots <n>", "worker slots", "4")
    .option("--api-port <port>", `API port (default ${DEV_API_PORT}, any free port if taken)`)
    .action(async (f: NodeFlags & ProcessFlags) => {
      let nats: NatsServerHandle | undefined;
      let url = f.nats ?? process.env["KAIROS_NATS_URL"];
      if (!url) {
        nats = await launchNatsServer({ storeDir: join(stateDir(), "nats") });
        url = nats.url;
        console.error(`kairos dev: nats-server ${nats.url} (pid ${nats.pid}, data ${nats.storeDir})`);
      }
      const config = nodeConfigFromFlags({ ...f, nodeId: f.nodeId ?? "dev", roles: "api,scheduler,worker" }, url);
      let p;
      try {
        p = await startProcess(config, f, { apiPort: DEV_API_PORT });
      } catch (e) {
        if (f.apiPort !== undefined || !String(e).includes("EADDRINUSE")) throw e;
        p = await startProcess(config, { ...f, apiPort: "0" }, { apiPort: 0 });
      }
      const tenant = await ensureDevTenant(p.tenants, readDevFile()?.api_key);
      writeDevFile({ nats_url: url, api_url: p.api!.url, api_key: tenant.api_key, tenant_id: tenant.tenant_id, cluster: config.clusterName, pid: process.pid });
      console.error(`kairos dev: node "${config.nodeId}" up; executor ${p.executor.kind} (${p.executor.reason})`);
      console.error(`kairos dev: API ${p.api!.url}  key ${tenant.api_key}  (saved in ${join(stateDir(), "dev.json")})`);
      console.error(`kairos dev: try  curl -H "Authorization: Bearer ${tenant.api_key}" ${p.api!.url}/v1/jobs`);
      onShutdown(async () => {
        console.error("kairos dev: stopping");
        await p.stop();
        await nats?.stop();
      });
    });
}
