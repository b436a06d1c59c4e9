// Entry of the lease keeper's worker thread (lease-keeper-thread.ts): the thread runs the
// TypeScript sources through tsx like the main thread (bin/kairos.mjs, `node --import tsx`).
import { register } from "tsx/esm/api";
import { workerData } from "node:worker_threads";

register();
await import(workerData.entry);
