/**
 * Benchmark dispatcher: `npm run bench -- <name> [args]` runs `bench/<name>.ts`, which
 * exports `run(args: string[]): Promise<void>`. Each benchmark appends its own section to
 * BENCHMARKS.md with the machine and the measured figures.
 */
const [name, ...args] = process.argv.slice(2);
if (name === undefined || !/^[a-z][a-z0-9-]*$/.test(name)) {
  console.error("usage: npm run bench -- <name> [args]   (name = a file in bench/, e.g. sandbox)");
  process.exit(2);
}
const mod = (await import(`./${name}.ts`)) as { run?: (args: string[]) => Promise<void> };
if (typeof mod.run !== "function") {
  console.error(`bench/${name}.ts does not export run(args)`);
  process.exit(2);
}
await mod.run(args);
// The benchmark has printed its figures and stopped what it started; a stopped NATS client's
// watcher timers (idle-heartbeat monitors of closed connections) must not keep the process alive.
process.exit(0);
