/**
 * The per-tenant mail bound (pure): the first `maxPerWindow` events of a window are mailed, the
 * rest counted into one digest per address (listing a bounded few); tenants are apart; a closed
 * window starts afresh; open windows are bounded.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { MailLimiter, type EventLine } from "../../../src/notify/mail-limit.ts";
import { eventMail, digestMail, oneLine } from "../../../src/notify/mail-text.ts";
import type { RunView } from "../../../src/protocol/model.ts";

const line = (i: number, type: EventLine["type"] = "run.failed"): EventLine => ({
  type,
  run_id: `r${i}`,
  job_id: "j1",
  scheduled_for: "2026-01-01T00:00:00Z",
  reason: "exit code 1",
});

describe("MailLimiter", () => {
  it("mails maxPerWindow events, then holds the rest for one digest per address", () => {
    const m = new MailLimiter({
      maxPerWindow: 3,
      windowMs: 60_000,
      digestMaxListed: 2,
      maxTenants: 10,
    });
    const kinds = Array.from(
      { length: 10_000 },
      (_, i) =>
        m.admit(
          "t1",
          i % 2 ? "a@x.co" : "b@x.co",
          line(i, i % 3 ? "run.failed" : "run.missed"),
          1000 + i,
        ).kind,
    );
    assert.deepEqual(kinds.slice(0, 4), ["send", "send", "send", "digest"]);
    assert.equal(kinds.filter((k) => k === "send").length, 3);
    // Another tenant has its own window.
    assert.deepEqual(m.admit("t2", "c@x.co", line(0), 5000), { kind: "send", opened: true });
    const digests = m.close("t1");
    assert.equal(digests.length, 2, "one per address");
    assert.equal(
      digests.reduce((n, d) => n + d.count, 0),
      10_000 - 3,
    );
    for (const d of digests) {
      assert.equal(d.listed.length, 2, "bounded list");
      assert.equal(d.windowStartMs, 1000);
      assert.equal(d.windowEndMs, 61_000);
      assert.equal((d.byType["run.failed"] ?? 0) + (d.byType["run.missed"] ?? 0), d.count);
    }
    assert.deepEqual(m.close("t1"), [], "closed");
    assert.deepEqual(m.admit("t1", "a@x.co", line(1), 70_000), { kind: "send", opened: true });
  });

  it("bounds the open windows", () => {
    const m = new MailLimiter({
      maxPerWindow: 1,
      windowMs: 1000,
      digestMaxListed: 1,
      maxTenants: 2,
    });
    m.admit("t1", "a@x.co", line(1), 0);
    m.admit("t2", "a@x.co", line(1), 0);
    assert.equal(m.admit("t3", "a@x.co", line(1), 0).kind, "dropped");
    assert.equal(m.admit("t1", "a@x.co", line(2), 0).kind, "digest", "open ones go on");
    assert.equal(m.open, 2);
  });
});

describe("mail text", () => {
  it("keeps control characters out of the subject and quotes a bounded output tail", () => {
    const run = {
      run_id: "r1",
      job_id: "j1",
      tenant_id: "t1",
      scheduled_for: "2026-01-01T00:00:00Z",
      trigger: "schedule",
      status: "failed",
      attempt: 1,
      attempts: [],
      created_at: "2026-01-01T00:00:00Z",
      started_at: null,
      finished_at: null,
      next_attempt_at: null,
      result: { exit_code: 1, output: "x".repeat(10_000) },
      reason: "bad\r\nBcc: evil@x.co",
    } satisfies RunView;
    const m = eventMail("run.failed", run);
    assert.equal(/[\r\n]/.test(m.subject), false);
    assert.ok(m.text.length < 3_000, "output clipped");
    assert.ok(m.text.includes("reason:         bad Bcc: evil@x.co"), "reason on one line");
    assert.equal(m.headers["X-Kairos-Event"], "run.failed");
    assert.equal(oneLine("a\u2028b\u0000c", 10), "a b c");
    const d = digestMail({
      tenantId: "t1",
      to: "a@x.co",
      windowStartMs: 0,
      windowEndMs: 60_000,
      count: 5,
      byType: { "run.failed": 5 },
      listed: [line(1)],
    });
    assert.equal(d.headers["X-Kairos-Digest"], "5");
    assert.match(d.text, /… and 4 more/);
  });
});
