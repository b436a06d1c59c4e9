/**
 * Typed lifecycle events of a node. Production code emits them; tests await them (arm the waiter
 * before acting) instead of sleeping; `kairos node --events` prints them as JSON lines so tests
 * of real processes can await them too.
 */
export type NodeEvent =
  | { type: "node_started"; nodeId: string; incarnation: string; roles: string[] }
  | { type: "node_stopping"; nodeId: string }
  | { type: "member_joined"; nodeId: string; roles: string[] }
  | { type: "member_left"; nodeId: string; reason: "leave" | "timeout" }
  | { type: "partition_acquired"; partition: number; epoch: number }
  | { type: "partition_released"; partition: number }
  | { type: "partition_lost"; partition: number; reason: string }
  | { type: "actor_activated"; actorType: string; id: string; partition: number }
  | { type: "actor_passivated"; actorType: string; id: string }
  | { type: "write_fenced"; actorType: string; id: string; partition: number; reason: string }
  /** The bus boundary refused a message (worker plane, or a forged tenant: src/server/partition-responder.ts). */
  | { type: "message_refused"; actor: string; reason: string }
  /** A worker's advert went above the per-worker limits (`--max-worker-slots`, `--max-worker-prefetch`): believed only up to them (src/slots/worker-trust.ts). */
  | {
      type: "worker_advert_clamped";
      worker: string;
      fields: string[];
      slots: number;
      free: number;
      prefetch: number | null;
    }
  /** A worker left an offer unanswered and is benched until `until_ms`, or answered its trial and is trusted again (src/slots/worker-trust.ts). */
  | { type: "worker_benched"; worker: string; strikes: number; until_ms: number }
  | { type: "worker_trusted"; worker: string; strikes: number }
  /** A request dropped unanswered: its reply subject is not its asker's inbox (src/cluster/reply-guard.ts), or it came under another subject than the one subscribed (`subject`: a JetStream push consumer's delivery). */
  | {
      type: "reply_refused";
      responder: "actors" | "worker_plane" | "nats_api" | "worker" | "stats";
      reason: string;
      subject: string;
    };

export type NodeEventListener = (e: NodeEvent) => void;

/** A tiny synchronous event bus (no EventEmitter string typing). */
export class EventBus {
  #listeners = new Set<NodeEventListener>();
  on(fn: NodeEventListener): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }
  emit(e: NodeEvent): void {
    for (const fn of this.#listeners) fn(e);
  }
}
