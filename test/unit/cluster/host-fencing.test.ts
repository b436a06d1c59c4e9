/**
 * The actor host (src/actors/host.ts): timers as reminders and the epoch fence, on the in-memory KV
 * (with injected failures and holds) and a FakeClock, in the style of host.test.ts:
 * - a timer message whose handling fails is delivered again (backoff) while the
 *   partition is held — a reminder, not a fire-and-forget — and not once the partition is gone;
 * - the first message under a new partition epoch first rewrites (fences) the actor's
 *   state with that epoch, so an in-flight write of the old owner at the old revision fails; post
 *   effects are not performed when the partition stopped being trusted (or its epoch moved on)
 *   while the message was being handled.
 *
 * Checked against the pre-fix code (f27166f; the same file ran unchanged):
 * - FAILED before: "5: a timer whose handling fails once …", "5: a pending retry is dropped …"
 *   (no retry was ever pending), "7: the first message under a new epoch …", "7: an old owner's
 *   write landing between load and fence …", "7: post effects are not performed … trust lapsed",
 *   "7: post effects are not performed … epoch moved on".
 * - Passed before (negative control): "5: … not delivered again once the partition is lost".
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  ActorHost,
  EARLY_IDLE_MS,
  RELOAD_AFTER_DROP_MS,
  REVISION_FLOOR_MS,
} from "../../../src/actors/host.ts";
import type { ActorDefinition } from "../../../src/actors/actor.ts";
import { counterActor, type CounterState } from "../../../src/actors/counter.ts";
import { decode, encode } from "../../../src/cluster/codec.ts";
import { EventBus, type NodeEvent } from "../../../src/cluster/events.ts";
import { MemoryKv } from "../../../src/cluster/kv-memory.ts";
import type { KvEntry, WriteOptions, WriteResult } from "../../../src/cluster/kv.ts";
import { partitionOf } from "../../../src/cluster/placement.ts";
import { FakeClock } from "../../../src/lib/clock.ts";
import { KairosError, isKairosError } from "../../../src/lib/errors.ts";

const PARTITIONS = 4;
const NODE = "node-a";
const T = { timeout: 10_000 };

interface Deferred<T = void> {
  promise: Promise<T>;
  resolve: (v: T) => void;
}
function deferred<T = void>(): Deferred<T> {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
const turn = () => new Promise<void>((r) => setImmediate(r));

interface Stored<S> {
  s: S;
  e: number;
  w: string;
}

/**
 * MemoryKv with injected faults: `failUpdates` next updates throw KairosError("timeout") without
 * being applied; `holdNextUpdate()` blocks the next update until released; `afterGet` runs once
 * after a read has been answered (to let "another owner" write behind the reader's back).
 */
class FaultyKv extends MemoryKv {
  updates = 0;
  failUpdates = 0;
  afterGet: (() => Promise<void>) | undefined;
  #hold: { entered: Deferred; open: Deferred } | undefined;
  holdNextUpdate(): { entered: Promise<void>; release: () => void } {
    const h = { entered: deferred(), open: deferred() };
    this.#hold = h;
    return { entered: h.entered.promise, release: () => h.open.resolve() };
  }
  /** The next `reads` reads of `key` answer `entry` (a stream leader deposed without knowing it). */
  stale: { key: string; entry: KvEntry | null; reads: number } | undefined;
  override async get(key: string): Promise<KvEntry | null> {
    const st = this.stale;
    if (st && st.key === key && st.reads > 0) {
      st.reads--;
      return st.entry;
    }
    const e = await super.get(key);
    const after = this.afterGet;
    this.afterGet = undefined;
    if (after) await after();
    return e;
  }
  /** Each update's key and whether it came marked urgent (an urgent turn's fence and state). */
  readonly updateLog: { key: string; urgent: boolean }[] = [];
  /** Next updates are applied, then throw KairosError("timeout") (an unknown outcome that landed). */
  applyThenTimeout = 0;
  override async update(
    key: string,
    value: Uint8Array,
    rev: number,
    opts?: WriteOptions,
  ): Promise<WriteResult> {
    this.updates++;
    if (this.applyThenTimeout > 0) {
      this.applyThenTimeout--;
      await super.update(key, value, rev, opts);
      throw new KairosError("timeout", "kv update timed out (applied)");
    }
    this.updateLog.push({ key, urgent: opts?.urgent === true });
    const h = this.#hold;
    if (h) {
      this.#hold = undefined;
      h.entered.resolve();
      await h.open.promise;
    }
    if (this.failUpdates > 0) {
      this.failUpdates--;
      throw new KairosError("timeout", "kv update timed out (not applied)");
    }
    return super.update(key, value, rev, opts);
  }
}

// --- test actor types -----------------------------------------------------------------------

interface TimedState {
  readonly dueMs: number | null;
  readonly fired: number;
}
type TimedMsg = { kind: "arm"; atMs: number } | { kind: "fire" };
/** Arms timer "t"; each `fire` counts (not idempotent, so a duplicate would show). */
const timedActor: ActorDefinition<TimedState, TimedMsg, number> = {
  type: "timed",
  initialState: () => ({ dueMs: null, fired: 0 }),
  receive(s, m) {
    if (m.kind === "arm") {
      return {
        state: { ...s, dueMs: m.atMs },
        reply: s.fired,
        effects: [{ kind: "timer", name: "t", atMs: m.atMs, msg: { kind: "fire" } }],
      };
    }
    return { state: { dueMs: null, fired: s.fired + 1 }, reply: s.fired + 1 };
  },
};

interface PosterState {
  readonly n: number;
}
/** Every message changes state and asks for one post effect (`p<n>`). */
const posterActor: ActorDefinition<PosterState, { n: number }, number, string> = {
  type: "poster",
  initialState: () => ({ n: 0 }),
  receive: (s, m) => ({ state: { n: s.n + 1 }, reply: s.n + 1, post: [`p${m.n}`] }),
};

/** The poster whose messages n >= 50 are urgent (`ActorDefinition.urgent`). */
const urgentPosterActor: ActorDefinition<PosterState, { n: number }, number, string> = {
  ...posterActor,
  type: "uposter",
  urgent: (m) => m.n >= 50,
};

interface PendingState {
  readonly pending: boolean;
  readonly done: number;
}
type PendingMsg = { kind: "work" } | { kind: "go" };
/**
 * Must be in memory while its partition is held (`loadOnAcquire`): a `work` leaves work pending in
 * its state, which its activation takes up (a timer) — as a job actor's run-now leaves a run whose
 * activation arms its dispatch.
 */
const pendingActor: ActorDefinition<PendingState, PendingMsg, number> = {
  type: "pending",
  loadOnAcquire: true,
  initialState: () => ({ pending: false, done: 0 }),
  onActivate: (s, ctx) =>
    s.pending ? [{ kind: "timer", name: "go", atMs: ctx.nowMs, msg: { kind: "go" } }] : [],
  receive: (s, m) =>
    m.kind === "work"
      ? { state: { ...s, pending: true }, reply: s.done }
      : { state: { pending: false, done: s.done + 1 }, reply: s.done + 1 },
};

interface LedgerState {
  readonly n: number;
}
type LedgerMsg = { kind: "defer" } | { kind: "record" } | { kind: "get" };
/**
 * `defer`: a change kept in memory (`deferWrite`); `record`: a change whose `pre` effect (the
 * registration's `perform`, a write elsewhere) fails; `get`: the count it decides from.
 */
const ledgerActor: ActorDefinition<LedgerState, LedgerMsg, number, "record"> = {
  type: "ledger",
  initialState: () => ({ n: 0 }),
  receive: (s, m) =>
    m.kind === "defer"
      ? { state: { n: s.n + 1 }, reply: s.n + 1, deferWrite: true }
      : m.kind === "record"
        ? { state: { n: s.n + 10 }, reply: s.n + 10, pre: ["record"] }
        : { state: s, reply: s.n },
};

interface TallyState {
  readonly n: number;
}
type TallyMsg = { kind: "inc" } | { kind: "peek" };
/** Counts `inc`s; a `peek` is answered from memory (`query`, the fast path) once loaded. */
const tallyActor: ActorDefinition<TallyState, TallyMsg, number> = {
  type: "tally",
  initialState: () => ({ n: 0 }),
  query: (s, m) => (m.kind === "peek" ? { reply: s.n, alsoQueue: false } : undefined),
  receive: (s, m) =>
    m.kind === "inc" ? { state: { n: s.n + 1 }, reply: s.n + 1 } : { state: s, reply: s.n },
};

/**
 * A tally with a far-off warm timer whose type lets it leave early (a job created for later):
 * passivated EARLY_IDLE_MS after its last turn.
 */
type FarMsg = TallyMsg | { kind: "arm"; atMs: number } | { kind: "fire" };
const farTallyActor: ActorDefinition<TallyState, FarMsg, number> = {
  type: "far",
  warmTimer: "fire",
  passivateEarly: () => true,
  initialState: () => ({ n: 0 }),
  query: (s, m) => (m.kind === "peek" ? { reply: s.n, alsoQueue: false } : undefined),
  receive: (s, m) =>
    m.kind === "arm"
      ? {
          state: { n: s.n + 1 },
          reply: s.n + 1,
          effects: [{ kind: "timer", name: "fire", atMs: m.atMs, msg: { kind: "fire" } }],
        }
      : m.kind === "inc"
        ? { state: { n: s.n + 1 }, reply: s.n + 1 }
        : { state: s, reply: s.n },
};

// --- fixture ----------------------------------------------------------------------------------

function setup(epochAtStart = 7) {
  const clock = new FakeClock(1_000_000);
  const kv = new FaultyKv("actors");
  const events = new EventBus();
  const seen: NodeEvent[] = [];
  events.on((e) => seen.push(e));
  const untrusted = new Set<number>();
  const errors: string[] = [];
  let onError: (() => void) | undefined;
  const posts: string[] = [];
  const state = { epoch: epochAtStart };
  const host = new ActorHost({
    nodeId: NODE,
    clock,
    events,
    kv,
    partitions: PARTITIONS,
    isTrusted: (p) => !untrusted.has(p),
    epochOf: () => state.epoch,
    send: async () => undefined,
    mailboxLimit: 16,
    idleMs: 60_000,
    onError: (m, e) => {
      errors.push(`${m}: ${String(e)}`);
      onError?.();
    },
  });
  host.register({ definition: counterActor });
  host.register({ definition: timedActor });
  host.register({
    definition: posterActor,
    performPost: (post) => void posts.push(...(post as string[])),
  });
  host.register({ definition: urgentPosterActor });
  host.register({ definition: pendingActor });
  host.register({ definition: tallyActor });
  host.register({ definition: farTallyActor });
  host.register({
    definition: ledgerActor,
    perform: () => Promise.reject(new KairosError("timeout", "kv update timed out (applied?)")),
  });
  const stored = async <S>(key: string): Promise<(Stored<S> & { revision: number }) | null> => {
    const e = await kv.get(key);
    return e ? { ...decode<Stored<S>>(e.value), revision: e.revision } : null;
  };
  /** Resolves at the next onError call (arm before acting). */
  const nextError = () => new Promise<void>((r) => (onError = r));
  const next = (pred: (e: NodeEvent) => boolean): Promise<NodeEvent> =>
    new Promise((resolve) => {
      const off = events.on((e) => {
        if (pred(e)) {
          off();
          resolve(e);
        }
      });
    });
  const written = async <S>(
    key: string,
    pred: (s: S) => boolean,
  ): Promise<{ done: Promise<S> }> => {
    const d = deferred<S>();
    const w = await kv.watch(key, (c) => {
      if (c.value) {
        const s = decode<Stored<S>>(c.value).s;
        if (pred(s)) d.resolve(s);
      }
    });
    return { done: d.promise.finally(() => w.stop()) };
  };
  const acquireAll = async () => {
    for (let p = 0; p < PARTITIONS; p++) await host.acquire(p);
  };
  return {
    clock,
    kv,
    events,
    seen,
    untrusted,
    errors,
    posts,
    state,
    host,
    stored,
    nextError,
    next,
    written,
    acquireAll,
  };
}

const keyOf = (type: string, id: string) =>
  `${type}.${partitionOf({ type, id }, PARTITIONS)}.${id}`;

// --- timers are reminders ---------------------------------------------------------------------

describe("ActorHost: an actor dropped with its state in doubt", () => {
  // The simulation's seed 826: a run-now whose state write timed out (applied) was answered with
  // the error; its job got no further message, and the run its state now held stayed queued.
  it(
    "is read back soon when its type must be in memory while its partition is held, and its activation takes up what its state holds",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "in-doubt";
      const key = keyOf("pending", id);
      await t.host.deliver("pending", id, { kind: "go" }); // written: done 1
      const taken = await t.written<PendingState>(key, (s) => !s.pending && s.done === 2);
      t.kv.applyThenTimeout = 1;
      await assert.rejects(t.host.deliver("pending", id, { kind: "work" }), (e) =>
        isKairosError(e, "timeout"),
      );
      assert.deepEqual(
        (await t.stored<PendingState>(key))?.s,
        { pending: true, done: 1 },
        "the write landed",
      );
      const reloaded = t.next((e) => e.type === "actor_activated" && e.id === id);
      t.clock.advance(RELOAD_AFTER_DROP_MS); // no message for it: only the reload can take the work up
      await reloaded;
      t.clock.advance(1); // the timer its activation armed
      assert.deepEqual(await taken.done, { pending: false, done: 2 });
    },
  );
  it(
    "a turn whose `pre` effects fail is dropped: the next message is decided on the state read back, not on the memory from before the failure",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "pre-in-doubt";
      assert.equal(await t.host.deliver("ledger", id, { kind: "defer" }), 1); // memory only
      assert.equal(await t.host.deliver("ledger", id, { kind: "get" }), 1);
      await assert.rejects(t.host.deliver("ledger", id, { kind: "record" }), (e) =>
        isKairosError(e, "timeout"),
      );
      // What its `pre` effects did is unknown: memory (1) is not what it goes on from.
      const reloaded = t.next((e) => e.type === "actor_activated" && e.id === id);
      assert.equal(await t.host.deliver("ledger", id, { kind: "get" }), 0, "read back");
      await reloaded;
    },
  );
});

describe("ActorHost: a state read back behind a revision this node saw", () => {
  // A job actor dropped for a write of unknown outcome and read back, within the same epoch, from
  // a stream leader deposed without knowing it: no fence write catches the older state, and its
  // heartbeats were answered `lease_lost` for a lease the stored state held (its worker dropped
  // the attempt; the lease, read back right later, was probed and its result counted lost).
  const inDoubt = async (t: ReturnType<typeof setup>, id: string) => {
    const key = keyOf("tally", id);
    assert.equal(await t.host.deliver("tally", id, { kind: "inc" }), 1);
    const old = await t.kv.get(key);
    assert.equal(await t.host.deliver("tally", id, { kind: "inc" }), 2, "acknowledged");
    t.kv.applyThenTimeout = 1;
    await assert.rejects(t.host.deliver("tally", id, { kind: "inc" }), (e) =>
      isKairosError(e, "timeout"),
    );
    assert.equal((await t.stored<TallyState>(key))?.s.n, 3, "the write landed");
    return { key, old: old! };
  };

  it(
    "is not taken: the reader hears not_owner (it retries), and the next read answers from the stored state",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "behind";
      const { key, old } = await inDoubt(t, id);
      t.kv.stale = { key, entry: old, reads: 1 };
      await assert.rejects(
        t.host.deliver("tally", id, { kind: "peek" }),
        (e) => isKairosError(e, "not_owner"),
        "answered from a state older than one this node wrote",
      );
      t.kv.stale = { key, entry: null, reads: 1 }; // a leader that missed the key's creation
      await assert.rejects(
        t.host.deliver("tally", id, { kind: "peek" }),
        (e) => isKairosError(e, "not_owner"),
        "answered from no state (initial): 0",
      );
      assert.equal(await t.host.deliver("tally", id, { kind: "peek" }), 3);
      assert.equal(
        await t.host.deliver("tally", id, { kind: "inc" }),
        4,
        "written at its revision",
      );
    },
  );

  it(
    "is taken past REVISION_FLOOR_MS (a write the stream lost for good must not leave the key unreadable)",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "lost-for-good";
      const { key, old } = await inDoubt(t, id);
      t.kv.stale = { key, entry: old, reads: Number.POSITIVE_INFINITY };
      await assert.rejects(t.host.deliver("tally", id, { kind: "peek" }), (e) =>
        isKairosError(e, "not_owner"),
      );
      t.clock.advance(REVISION_FLOOR_MS);
      assert.equal(await t.host.deliver("tally", id, { kind: "peek" }), 1);
    },
  );
});

describe("ActorHost: an actor passivated seconds after its last write", () => {
  it(
    "is not read back from an older state while the idle rule would have kept it unread (and at least REVISION_FLOOR_MS: a floor as for a drop); past it, it is, and the floor is forgotten",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "created-for-later";
      const key = keyOf("far", id);
      assert.equal(
        await t.host.deliver("far", id, { kind: "arm", atMs: t.clock.now() + 3_600_000 }),
        1,
      );
      const old = await t.kv.get(key);
      assert.equal(await t.host.deliver("far", id, { kind: "inc" }), 2);
      await turn();
      const gone = t.next((e) => e.type === "actor_passivated" && e.id === id);
      t.clock.advance(EARLY_IDLE_MS + 1);
      t.host.sweep();
      await gone;
      assert.equal(t.host.earlyFloors, 1);
      t.kv.stale = { key, entry: old!, reads: 1 }; // a stream leader deposed without knowing it
      await assert.rejects(
        t.host.deliver("far", id, { kind: "peek" }),
        (e) => isKairosError(e, "not_owner"),
        "answered from a state older than the one it was passivated at",
      );
      assert.equal(await t.host.deliver("far", id, { kind: "peek" }), 2);
      // Past the floor's time, an older state is taken (as for a drop).
      await turn();
      const again = t.next((e) => e.type === "actor_passivated" && e.id === id);
      t.clock.advance(EARLY_IDLE_MS + 1);
      t.host.sweep();
      await again;
      // Held as long as the idle rule would have kept it in memory, unread (the host's idle time
      // of 60 s from its last turn here), and no less than REVISION_FLOOR_MS.
      const held = Math.max(REVISION_FLOOR_MS, 60_000 - (EARLY_IDLE_MS + 1));
      t.clock.advance(held - 1);
      t.kv.stale = { key, entry: old!, reads: 1 };
      await assert.rejects(t.host.deliver("far", id, { kind: "peek" }), (e) =>
        isKairosError(e, "not_owner"),
      );
      assert.equal(await t.host.deliver("far", id, { kind: "peek" }), 2);
      await turn();
      const third = t.next((e) => e.type === "actor_passivated" && e.id === id);
      t.clock.advance(EARLY_IDLE_MS + 1);
      t.host.sweep();
      await third;
      t.clock.advance(held);
      t.kv.stale = { key, entry: old!, reads: 1 };
      assert.equal(await t.host.deliver("far", id, { kind: "peek" }), 1);
      // Floors nobody read back are forgotten once they have lapsed (a batch's do not stay).
      await t.host.deliver("far", "another", { kind: "arm", atMs: t.clock.now() + 3_600_000 });
      await turn();
      t.clock.advance(EARLY_IDLE_MS + 1);
      t.host.sweep();
      assert.equal(t.host.activeCount, 0);
      assert.equal(t.host.earlyFloors, 2, "both passivated early: one floor each");
      t.clock.advance(held);
      t.host.sweep();
      assert.equal(t.host.earlyFloors, 0, "lapsed floors are not kept");
      assert.deepEqual(t.errors, []);
    },
  );
});

describe("ActorHost timers are reminders", () => {
  it(
    "5: a timer whose handling fails once (KV timeout) is delivered again while the partition is held",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "remind-me";
      const key = keyOf("timed", id);
      await t.host.deliver("timed", id, { kind: "arm", atMs: t.clock.now() + 1_000 });
      t.kv.failUpdates = 1;
      const failed = t.nextError();
      t.clock.advance(1_000);
      await failed;
      assert.match(t.errors[0] ?? "", /timer for timed\/remind-me/);
      assert.equal(t.host.pendingTimers, 1, "the failed timer message is scheduled again");
      assert.deepEqual(
        (await t.stored<TimedState>(key))?.s.fired,
        0,
        "the failed write was not applied",
      );
      const fired = await t.written<TimedState>(key, (s) => s.fired === 1);
      t.clock.advance(5_000); // beyond the first backoff step
      assert.deepEqual(await fired.done, { dueMs: null, fired: 1 });
      await turn();
      assert.equal(t.host.pendingTimers, 0, "delivered once it succeeded: no further retry");
      assert.equal((await t.stored<TimedState>(key))?.s.fired, 1);
    },
  );

  it(
    "5: a timer whose handling fails is not delivered again once the partition is lost",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "lost-one";
      const p = partitionOf({ type: "timed", id }, PARTITIONS);
      await t.host.deliver("timed", id, { kind: "arm", atMs: t.clock.now() + 1_000 });
      const hold = t.kv.holdNextUpdate();
      t.kv.failUpdates = 1;
      t.clock.advance(1_000);
      await hold.entered; // the fire's write is in flight…
      t.host.lose(p); // …when the partition is lost
      hold.release();
      for (let i = 0; i < 5; i++) await turn();
      assert.equal(t.host.pendingTimers, 0, "no retry armed for a partition no longer held");
      const updates = t.kv.updates;
      t.clock.advance(60_000);
      for (let i = 0; i < 5; i++) await turn();
      assert.equal(t.kv.updates, updates, "nothing was delivered after the loss");
      assert.equal((await t.stored<TimedState>(keyOf("timed", id)))?.s.fired, 0);
    },
  );

  it("a pending retry is dropped when the partition is lost before it is due", T, async () => {
    const t = setup();
    await t.acquireAll();
    const id = "retry-then-lose";
    const p = partitionOf({ type: "timed", id }, PARTITIONS);
    await t.host.deliver("timed", id, { kind: "arm", atMs: t.clock.now() + 1_000 });
    t.kv.failUpdates = 1;
    const failed = t.nextError();
    t.clock.advance(1_000);
    await failed;
    assert.equal(t.host.pendingTimers, 1, "a retry is pending");
    t.host.lose(p);
    assert.equal(t.host.pendingTimers, 0);
    const updates = t.kv.updates;
    t.clock.advance(60_000);
    for (let i = 0; i < 5; i++) await turn();
    assert.equal(t.kv.updates, updates);
  });
});

// --- the epoch fence -------------------------------------------------------------------------

describe("ActorHost epoch fencing and post effects", () => {
  it(
    "an urgent message's turn marks its writes urgent — the epoch fence and the state update — and a plain one's neither",
    T,
    async () => {
      const t = setup(8);
      for (const id of ["u", "p"])
        await t.kv.put(keyOf("uposter", id), encode({ s: { n: 0 }, e: 7, w: "node-old" }));
      await t.acquireAll();
      assert.equal(await t.host.deliver("uposter", "u", { n: 51 }), 1);
      assert.equal(await t.host.deliver("uposter", "p", { n: 1 }), 1);
      assert.deepEqual(t.kv.updateLog, [
        { key: keyOf("uposter", "u"), urgent: true }, // the fence (epoch 7 → 8)
        { key: keyOf("uposter", "u"), urgent: true }, // the state
        { key: keyOf("uposter", "p"), urgent: false },
        { key: keyOf("uposter", "p"), urgent: false },
      ]);
    },
  );

  it(
    "7: the first message under a new epoch fences the state first; the old owner's in-flight write then conflicts",
    T,
    async () => {
      const t = setup(8);
      const id = "taken-over";
      const key = keyOf("counter", id);
      // The old owner (epoch 7) wrote the state; its next write (at this revision) is in flight.
      const oldRev = await t.kv.put(
        key,
        encode({ s: { value: 41, recent: [] }, e: 7, w: "node-old" }),
      );
      await t.acquireAll();
      // A read-only message: without the fence it would write nothing.
      assert.deepEqual(await t.host.deliver("counter", id, { kind: "get" }), { value: 41 });
      const fenced = await t.stored<CounterState>(key);
      assert.equal(fenced?.e, 8, "state rewritten under the new epoch before the first decision");
      assert.equal(fenced?.w, NODE);
      assert.deepEqual(fenced?.s, { value: 41, recent: [] }, "the fence write keeps the state");
      assert.ok(fenced.revision > oldRev);
      // The stalled old owner's write lands now, at its old revision: refused.
      const late = await t.kv.update(
        key,
        encode({ s: { value: 999, recent: ["old"] }, e: 7, w: "node-old" }),
        oldRev,
      );
      assert.deepEqual(late, { ok: false, conflict: "revision_mismatch" });
      assert.deepEqual(await t.host.deliver("counter", id, { kind: "inc", by: 1, reqId: "n1" }), {
        value: 42,
        applied: true,
      });
      assert.equal((await t.stored<CounterState>(key))?.e, 8);
    },
  );

  it(
    "7: an old owner's write landing between load and fence: the fence fails, not_owner, write_fenced, their write stays",
    T,
    async () => {
      const t = setup(8);
      const id = "raced";
      const key = keyOf("counter", id);
      const oldRev = await t.kv.put(
        key,
        encode({ s: { value: 1, recent: [] }, e: 7, w: "node-old" }),
      );
      await t.acquireAll();
      t.kv.afterGet = async () => {
        const r = await t.kv.update(
          key,
          encode({ s: { value: 2, recent: ["old"] }, e: 7, w: "node-old" }),
          oldRev,
        );
        assert.ok(r.ok);
      };
      const fenced = t.next((e) => e.type === "write_fenced");
      await assert.rejects(t.host.deliver("counter", id, { kind: "get" }), (e: unknown) => {
        assert.ok(isKairosError(e, "not_owner"), String(e));
        return true;
      });
      const ev = await fenced;
      assert.ok(ev.type === "write_fenced" && /epoch fence/.test(ev.reason), JSON.stringify(ev));
      assert.deepEqual((await t.stored<CounterState>(key))?.s, { value: 2, recent: ["old"] });
      // The retry reloads, fences on the winner's state and answers from it.
      assert.deepEqual(await t.host.deliver("counter", id, { kind: "get" }), { value: 2 });
      assert.equal((await t.stored<CounterState>(key))?.e, 8);
    },
  );

  it(
    "7: post effects are not performed when the partition's trust lapsed during the handling",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "post-trust";
      const p = partitionOf({ type: "poster", id }, PARTITIONS);
      assert.equal(await t.host.deliver("poster", id, { n: 1 }), 1);
      assert.deepEqual(t.posts, ["p1"], "control: a trusted owner performs its post effects");
      const hold = t.kv.holdNextUpdate();
      const r = t.host.deliver("poster", id, { n: 2 });
      await hold.entered; // passed the trust check before the write; the write is in flight
      t.untrusted.add(p);
      hold.release();
      assert.equal(await r, 2, "the write itself landed");
      assert.equal((await t.stored<PosterState>(keyOf("poster", id)))?.s.n, 2);
      assert.deepEqual(t.posts, ["p1"], "a stale owner stays silent");
    },
  );

  it(
    "7: post effects are not performed when the partition's epoch moved on during the handling",
    T,
    async () => {
      const t = setup();
      await t.acquireAll();
      const id = "post-epoch";
      assert.equal(await t.host.deliver("poster", id, { n: 1 }), 1);
      const hold = t.kv.holdNextUpdate();
      const r = t.host.deliver("poster", id, { n: 2 });
      await hold.entered;
      t.state.epoch = 8; // the partition was lost and re-acquired under a new epoch meanwhile
      hold.release();
      await r;
      assert.deepEqual(t.posts, ["p1"]);
    },
  );
});
