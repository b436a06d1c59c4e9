/**
 * Property tests: `next` against the brute-force oracle (brute-force.ts) over random
 * expressions, zones (with the tricky ones) and instants 2020-2035, half of them placed just
 * before a daylight-saving transition. Seeded: KAIROS_FC_SEED=<n> reproduces a run; a
 * failure prints its seed and counterexample.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { Temporal } from "@js-temporal/polyfill";
import { compileSchedule, isKairosErrorCode } from "./helpers.ts";
import { bruteNext, cronAstArb, renderCron, ZONES, type CronAst } from "./brute-force.ts";

const SEED = Number(process.env.KAIROS_FC_SEED ?? 20260308);
const FROM_MS = Date.UTC(2020, 0, 1);
const TO_MS = Date.UTC(2035, 0, 1);

/** Transitions 2020-2035 per zone, from Temporal, computed once per zone. */
const transitionCache = new Map<string, number[]>();
function transitions(tz: string): number[] {
  let list = transitionCache.get(tz);
  if (list === undefined) {
    list = [];
    let z: Temporal.ZonedDateTime | null =
      Temporal.Instant.fromEpochMilliseconds(FROM_MS).toZonedDateTimeISO(tz);
    while (z !== null && list.length < 100) {
      z = z.getTimeZoneTransition("next");
      if (z === null || z.epochMilliseconds > TO_MS) break;
      list.push(z.epochMilliseconds);
    }
    transitionCache.set(tz, list);
  }
  return list;
}

const zoneArb = fc.constantFrom(...ZONES);
/** An instant 2020-2035, or (half the time) up to 2 days or 3 hours before a transition of the zone. */
function afterArb(tz: string): fc.Arbitrary<number> {
  const ts = transitions(tz);
  const uniform = fc.integer({ min: FROM_MS, max: TO_MS });
  if (ts.length === 0) return uniform;
  const before = fc.oneof(
    fc.integer({ min: 0, max: 2 * 86_400 }),
    fc.integer({ min: 0, max: 3 * 3600 }),
  );
  const near = fc
    .tuple(fc.integer({ min: 0, max: ts.length - 1 }), before, fc.integer({ min: 0, max: 999 }))
    .map(([i, s, ms]) => (ts[i] ?? FROM_MS) - s * 1000 + (ms < 500 ? 0 : ms));
  return fc.oneof(uniform, near);
}

/** A zone with transitions and an instant up to 3 hours before one of them. */
const nearTransitionArb = fc
  .constantFrom(...ZONES.filter((z) => z !== "UTC" && z !== "Asia/Kolkata"))
  .chain((tz) => {
    const ts = transitions(tz);
    return fc
      .tuple(
        fc.constant(tz),
        fc.integer({ min: 0, max: ts.length - 1 }),
        fc.integer({ min: 0, max: 3 * 3600 }),
      )
      .map(([zone, i, s]) => [zone, (ts[i] ?? FROM_MS) - s * 1000] as const);
  });

function everyHour(ast: CronAst): CronAst {
  return {
    ...ast,
    hour: [{ kind: "star" }],
    dom: [{ kind: "star" }],
    month: [{ kind: "star" }],
    dow: [{ kind: "star" }],
  };
}

function checkAgainstBruteForce(
  withSeconds: boolean,
  numRuns: number,
  nearTransitions = false,
): void {
  const base = fc
    .tuple(cronAstArb(withSeconds), fc.integer({ min: 0, max: 2 ** 30 - 1 }), zoneArb)
    .chain(([ast, style, tz]) =>
      fc.tuple(
        fc.constant(ast),
        fc.constant(style),
        fc.constant(tz),
        afterArb(tz),
        fc.integer({ min: 1, max: 6 }),
      ),
    );
  // Every hour of every day, so the random minutes (and seconds) meet the gap or the repeat.
  const dense = fc
    .tuple(
      cronAstArb(withSeconds),
      fc.integer({ min: 0, max: 2 ** 30 - 1 }),
      nearTransitionArb,
      fc.integer({ min: 1, max: 30 }),
    )
    .map(([ast, style, [tz, after], count]) => [everyHour(ast), style, tz, after, count] as const);
  const arb = nearTransitions ? dense : base;
  fc.assert(
    fc.property(arb, ([ast, style, tz, afterMs, count]) => {
      const cron = renderCron(ast, style);
      let schedule;
      try {
        schedule = compileSchedule({ cron, time_zone: tz });
      } catch (e) {
        // Only "never fires" may be rejected; then the brute force must find nothing either.
        assert.ok(
          isKairosErrorCode(e, "invalid_schedule") && /never fires/.test(e.message),
          `${cron}: ${String(e)}`,
        );
        assert.deepEqual(bruteNext(ast, tz, afterMs, 1), []);
        return;
      }
      const expected = bruteNext(ast, tz, afterMs, count);
      const actual = schedule.next(afterMs, count);
      assert.deepEqual(
        actual.map(iso),
        expected.map(iso),
        `${JSON.stringify(cron)} in ${tz} after ${iso(afterMs)}`,
      );
    }),
    { seed: SEED, numRuns },
  );
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}

describe("next agrees with brute-force enumeration of wall times", () => {
  it("5-field expressions", () => checkAgainstBruteForce(false, 300));
  it("6-field expressions with sparse seconds", () => checkAgainstBruteForce(true, 150));
  it("every hour, random minutes, up to 3 h before a transition", () =>
    checkAgainstBruteForce(false, 200, true));
  it("every hour, random minutes and seconds, up to 3 h before a transition", () =>
    checkAgainstBruteForce(true, 100, true));
});

describe("structural properties", () => {
  const simple = fc.record({
    cron: fc.constantFrom(
      "*/5 * * * *",
      "0 9 * * 1-5",
      "30 2 * * *",
      "0 0 1 * *",
      "*/2 * * * * *",
      "*/15 1-3 * * *",
      "0 0 L * *",
      "0 0 29 2 *",
    ),
    tz: zoneArb,
    after: fc.integer({ min: FROM_MS, max: TO_MS }),
  });
  it("results are ascending, whole seconds, after `after`, and chaining next(prev, 1) gives the same list", () => {
    fc.assert(
      fc.property(simple, ({ cron, tz, after }) => {
        const s = compileSchedule({ cron, time_zone: tz });
        const list = s.next(after, 5);
        assert.equal(list.length, 5);
        let prev = after;
        for (const t of list) {
          assert.ok(t > prev, "strictly ascending and after `after`");
          assert.equal(t % 1000, 0);
          assert.deepEqual(s.next(prev, 1), [t]);
          prev = t;
        }
      }),
      { seed: SEED, numRuns: 200 },
    );
  });
});
