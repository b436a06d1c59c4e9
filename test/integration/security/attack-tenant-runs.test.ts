/**
 * A tenant's runs across its jobs, attacked with real credentials on a real nats-server
 * (docs/security.md, docs/nats-api.md): tenant A has ended runs, listed through its runs log
 * (`tl.<tenant>.<seq>`, `tlh.<tenant>` in the runs bucket, docs/kv.md).
 *
 * - Over the NATS API (`runs.tenant`), tenant B's service user asks for A's runs by every subject
 *   and payload it can form: A's subject (refused by the server), a wildcard in the tenant token,
 *   A's id as an extra token, a `tenant_id` in the body, A's own cursor. None returns a run of A.
 * - In KV, B's service user, the shared worker and a pinned worker read (direct get by subject and
 *   by body, message get, a consumer, stream info with a subject filter, a subscription) and
 *   write (put, `DEL` and `PURGE` markers, stream purge) A's runs-log keys and keys of a log not
 *   yet written: every attempt is refused by the server, nothing is read, and every key keeps its
 *   last sequence.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { NatsApiClient } from "../../../src/client/nats-api-client.ts";
import type { KairosProcess } from "../../../src/server/start.ts";
import { tenantLogHeadKey, tenantLogKey } from "../../../src/history/tenant-run-log.ts";
import type { NatsFixture } from "../../support/nats.ts";
import { eventually } from "../../support/kairos.ts";
import {
  allPartitionsHeld,
  asTenant,
  attackKvWrites,
  defenceOrEffect,
  nextPermissionError,
  outsiders,
  startAttackNode,
  startTwoTenants,
} from "../../support/attack.ts";

const TA = "truntaaaaaaaaaaaa";
const TB = "truntbbbbbbbbbbbb";
/** No such tenant: the subscriptions' marker chunk is written under it. */
const MARKER = "truntmarkermarker";
const API = "kairos.kairos.api";
const STREAM = "KV_kairos_runs";
const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

const spec = {
  name: "a's",
  schedule: { cron: "0 0 1 1 *", time_zone: "UTC" }, // never fires on its own during the test
  task: { image: "busybox", args: ["true"], timeout_s: 5 },
};

interface Reply {
  ok: boolean;
  status: number;
  result?: { runs?: { run_id: string; tenant_id: string }[]; next_cursor?: string | null };
  error?: { code: string; field?: string };
}

describe(
  "tenant runs: another tenant and the workers cannot reach them",
  { timeout: 180_000 },
  () => {
    let nats: NatsFixture;
    let admin: NatsConnection;
    let jsm: JetStreamManager;
    let node: KairosProcess;
    /** A's run ids, and A's cursor after its newest run. */
    let runsA: string[] = [];
    let cursorA: string;

    before(async () => {
      ({ nats, admin } = await startTwoTenants(TA, TB, "truns-admin"));
      jsm = await jetstreamManager(admin);
      node = await startAttackNode(nats, {
        nodeId: "truns-1",
        roles: ["api", "scheduler", "worker"],
        partitions: 4,
      });
      await allPartitionsHeld(node);
      await asTenant(nats, "alpha", TA, async (a) => {
        const { job } = await a.createJob(spec);
        const made = [(await a.runNow(job.job_id)).run_id, (await a.runNow(job.job_id)).run_id];
        // Ended and logged: A's own list shows both (the log is written within 200 ms).
        runsA = await eventually(
          async () => {
            const { runs } = await a.listTenantRuns();
            const ids = runs.filter((r) => r.status === "succeeded").map((r) => r.run_id);
            return made.every((id) => ids.includes(id)) ? ids : undefined;
          },
          20_000,
          "A's runs listed",
        );
        const page = await a.listTenantRuns({ limit: 1 });
        assert.ok(page.next_cursor, "A's first page of one has a cursor");
        cursorA = page.next_cursor;
      });
    });

    after(async () => {
      await node?.stop();
      await admin?.close();
      await nats?.stop();
    });

    /** Fails with what leaked when `reply` carries a run of A. */
    const leaked = (what: string, reply: Reply): string | undefined => {
      const got = (reply.result?.runs ?? []).filter(
        (r) => r.tenant_id === TA || runsA.includes(r.run_id),
      );
      return got.length > 0
        ? `${what}: answered A's runs ${got.map((r) => r.run_id).join(", ")}`
        : undefined;
    };

    it("B's service user gets none of A's runs by subject or payload", async () => {
      const nc = await nats.connectService("beta");
      const through: string[] = [];
      const ask = async (subject: string, body: unknown): Promise<Reply> =>
        JSON.parse(
          dec((await nc.request(subject, enc(JSON.stringify(body)), { timeout: 5_000 })).data),
        ) as Reply;
      try {
        // A's subject, and a wildcard in the tenant token: refused by the server.
        for (const subject of [`${API}.${TA}.runs.tenant`, `${API}.*.runs.tenant`]) {
          const v = nextPermissionError(nc);
          let reply: Reply | undefined;
          void ask(subject, {}).then(
            (r) => (reply = r),
            () => undefined,
          );
          const o = await defenceOrEffect(
            v,
            async () => (reply ? (leaked(subject, reply) ?? `${subject}: answered`) : undefined),
            `B asks ${subject}`,
          );
          if (o.kind === "effect") through.push(o.what);
          else assert.deepEqual([o.value.operation, o.value.subject], ["publish", subject]);
        }
        // B's own subject: with A's id as an extra token, A's id in the body, A's cursor.
        const own = `${API}.${TB}.runs.tenant`;
        const tricks: {
          what: string;
          subject: string;
          body: unknown;
          refused?: [number, string, string?];
        }[] = [
          {
            what: "A's id as a token",
            subject: `${own}.${TA}`,
            body: {},
            refused: [404, "not_found"],
          },
          {
            what: "tenant_id in the body",
            subject: own,
            body: { tenant_id: TA },
            refused: [400, "invalid_argument", "tenant_id"],
          },
          {
            what: "tenant_id beside a limit",
            subject: own,
            body: { limit: 200, tenant_id: TA },
            refused: [400, "invalid_argument", "tenant_id"],
          },
          { what: "A's cursor", subject: own, body: { cursor: cursorA } },
          {
            what: "A's cursor, status succeeded",
            subject: own,
            body: { cursor: cursorA, status: "succeeded" },
          },
          { what: "no parameters", subject: own, body: {} },
        ];
        for (const t of tricks) {
          const r = await ask(t.subject, t.body);
          const leak = leaked(t.what, r);
          if (leak !== undefined) through.push(leak);
          else if (t.refused)
            assert.deepEqual(
              [r.status, r.error?.code, r.error?.field],
              [t.refused[0], t.refused[1], t.refused[2]],
              t.what,
            );
          else assert.equal(r.status, 200, t.what);
        }
      } finally {
        await nc.close();
      }
      assert.deepEqual(through, [], "what B got of A's runs");
      // The runs are there: A still lists them.
      const ncA = await nats.connectService("alpha");
      try {
        const { runs } = await new NatsApiClient(ncA, {
          cluster: "kairos",
          tenantId: TA,
        }).listTenantRuns();
        assert.deepEqual(
          runs
            .map((r) => r.run_id)
            .filter((id) => runsA.includes(id))
            .sort(),
          [...runsA].sort(),
        );
      } finally {
        await ncA.close();
      }
    });

    /** The runs-log keys attacked: A's (written by the node) and keys of logs no one wrote yet. */
    const keys = () => [
      tenantLogKey(TA, 0),
      tenantLogHeadKey(TA),
      tenantLogKey(TA, 1),
      tenantLogKey(TB, 0),
      tenantLogHeadKey(TB),
    ];
    /** Each key's last sequence in the runs stream (or `none`): any write or purge changes it. */
    const lastSeqs = async (): Promise<string> => {
      const out: string[] = [];
      for (const k of keys()) {
        const m = await jsm.streams
          .getMessage(STREAM, { last_by_subj: `$KV.kairos_runs.${k}` })
          .catch(() => null);
        out.push(`${k}@${m ? m.seq : "none"}`);
      }
      return out.join(" ");
    };

    /** One read of a key: what the attacker asks, and how it would learn the value. */
    type Read = "direct get" | "direct get by body" | "message get" | "consumer" | "stream info";
    const READS: Read[] = [
      "direct get",
      "direct get by body",
      "message get",
      "consumer",
      "stream info",
    ];
    /**
     * Makes the read; resolves with what was read when an answer carries the key's value (or any
     * JetStream answer that is not an error), else never. Returns the subject the server must refuse.
     */
    const read = (
      nc: NatsConnection,
      op: Read,
      key: string,
      got: (what: string) => void,
    ): string => {
      const subject = `$KV.kairos_runs.${key}`;
      const req = (api: string, body: unknown) => {
        void nc
          .request(api, body === undefined ? undefined : enc(JSON.stringify(body)), {
            timeout: 3_000,
          })
          .then(
            (m) => {
              const text = dec(m.data);
              if (m.data.length > 0 && !/"error"/.test(text))
                got(`${op} ${key} answered ${text.slice(0, 120)}`);
            },
            () => undefined,
          );
        return api;
      };
      switch (op) {
        case "direct get":
          return req(`$JS.API.DIRECT.GET.${STREAM}.${subject}`, undefined);
        case "direct get by body":
          return req(`$JS.API.DIRECT.GET.${STREAM}`, { last_by_subj: subject });
        case "message get":
          return req(`$JS.API.STREAM.MSG.GET.${STREAM}`, { last_by_subj: subject });
        case "consumer": {
          const deliver = `_INBOX.truns.${Math.random().toString(36).slice(2)}`;
          return req(`$JS.API.CONSUMER.CREATE.${STREAM}`, {
            stream_name: STREAM,
            config: {
              deliver_subject: deliver,
              filter_subject: subject,
              ack_policy: "none",
              deliver_policy: "last_per_subject",
            },
          });
        }
        case "stream info":
          return req(`$JS.API.STREAM.INFO.${STREAM}`, { subjects_filter: "$KV.kairos_runs.tl.>" });
      }
    };

    const attackers = outsiders(
      () => nats,
      [{ who: "tenant B's service user", name: "beta" }],
      "truns",
    );

    for (const a of attackers) {
      it(`${a.who}: cannot read or write a tenant's runs-log keys in KV`, async () => {
        const before = await lastSeqs();
        assert.match(before, new RegExp(`${tenantLogKey(TA, 0)}@\\d+`), "A's first chunk is there");
        assert.match(before, new RegExp(`${tenantLogHeadKey(TA)}@\\d+`), "A's head is there");
        const nc = await a.connect();
        const through: string[] = [];
        try {
          for (const op of READS) {
            for (const key of [tenantLogKey(TA, 0), tenantLogHeadKey(TA)]) {
              let what: string | undefined;
              const v = nextPermissionError(nc);
              const subject = read(nc, op, key, (w) => (what ??= w));
              await nc.flush().catch(() => undefined);
              const o = await defenceOrEffect(v, async () => what, `${a.who} ${op} ${key}`);
              if (o.kind === "effect") through.push(o.what);
              else assert.deepEqual([o.value.operation, o.value.subject], ["publish", subject]);
            }
          }
          // Listening for chunks as they are written: a marker chunk of a tenant that does not
          // exist (the admin's write, in the node's account) must not be heard.
          for (const subject of [`$KV.kairos_runs.tl.>`, `$KV.kairos_runs.>`]) {
            let what: string | undefined;
            const v = nextPermissionError(nc);
            nc.subscribe(subject, {
              callback: (e, m) =>
                void (e ? undefined : (what ??= `subscribe ${subject} heard ${m.subject}`)),
            });
            await nc.flush().catch(() => undefined);
            admin.publish(`$KV.kairos_runs.${tenantLogKey(MARKER, 0)}`, enc("marker"));
            await admin.flush();
            const o = await defenceOrEffect(v, async () => what, `${a.who} subscribe ${subject}`);
            if (o.kind === "effect") through.push(o.what);
            else assert.deepEqual([o.value.operation, o.value.subject], ["subscription", subject]);
          }
          through.push(
            ...(await attackKvWrites(nc, {
              who: a.who,
              bucket: "runs",
              keys: keys(),
              // A forged chunk naming a run of the attacker's choice (or a forged head).
              value: enc(JSON.stringify({ ids: ["forged"], t: 0 })),
              state: lastSeqs,
              label: "the keys",
            })),
          );
        } finally {
          await nc.close();
        }
        assert.deepEqual(through, [], `what ${a.who} got through`);
        assert.equal(await lastSeqs(), before, "every runs-log key keeps its last sequence");
      });
    }
  },
);
