/**
 * `kairos dev` (behind `npm start`): the embedded default. Starts `nats-server -js` as a child on a
 * free loopback port with data under `.kairos/nats` (unless --nats / KAIROS_NATS_URL is given),
 * plus one node with every role; records how to reach it in `.kairos/dev.json`; stops both on
 * Ctrl-C / SIGTERM. State survives a restart because the data folder does.
 */
import type { Command } from "commander";
import { join } from "node:path";
import { launchNatsServer, type NatsServerHandle } from "../dev/nats-launcher.ts";
import { nodeConfigFromFlags, onShutdown, startNode, type NodeFlags } from "./node.ts";
import { stateDir, writeDevFile } from "./dev-file.ts";

export function registerDevCommand(program: Command): void {
  program
    .command("dev")
    .description("single-node dev cluster: embedded nats-server + one node with all roles")
    .option("--nats <url>", "use this NATS instead of starting one (env KAIROS_NATS_URL)")
    .option("--partitions <n>", "partition count when the cluster is first created", "16")
    .action(async (f: NodeFlags) => {
      let nats: NatsServerHandle | undefined;
      let url = f.nats ?? process.env["KAIROS_NATS_URL"];
      if (!url) {
        nats = await launchNatsServer({ storeDir: join(stateDir(), "nats") });
        url = nats.url;
        console.error(`kairos dev: nats-server ${nats.url} (pid ${nats.pid}, data ${nats.storeDir})`);
      }
      const node = await startNode(nodeConfigFromFlags({ ...f, nodeId: f.nodeId ?? "dev", roles: "api,scheduler,worker" }, url));
      writeDevFile({ nats_url: url, cluster: node.config.clusterName, pid: process.pid });
      console.error(`kairos dev: node "${node.config.nodeId}" up with roles ${node.config.roles.join(",")}; details in ${join(stateDir(), "dev.json")}`);
      onShutdown(async () => {
        console.error("kairos dev: stopping");
        await node.stop();
        await nats?.stop();
      });
    });
}
