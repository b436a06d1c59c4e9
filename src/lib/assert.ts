/** Exhaustiveness check for closed unions: the compiler rejects a call that can be reached. */
export function assertNever(value: never, what = "value"): never {
  throw new Error(`unexpected ${what}: ${JSON.stringify(value)}`);
}
