/**
 * The stored form of a run record: the API's `RunView` plus `_e`, the partition epoch of the
 * owner that wrote it. A writer that finds a later epoch on a record it wants to change is a
 * stale owner and stops (no blind overwrite). Readers get the view without `_e`.
 */
import { decode, encode } from "../cluster/codec.ts";
import type { RunView } from "../protocol/model.ts";

interface StoredRun extends RunView {
  _e?: number;
}

export function encodeRunRecord(record: RunView, epoch: number): Uint8Array {
  return encode({ ...record, _e: epoch } satisfies StoredRun);
}

export function decodeRunRecord(value: Uint8Array): { record: RunView; epoch: number } {
  const { _e, ...record } = decode<StoredRun>(value);
  return { record, epoch: _e ?? 0 };
}

/** The API view of a stored run record. */
export function runView(value: Uint8Array): RunView {
  return decodeRunRecord(value).record;
}
