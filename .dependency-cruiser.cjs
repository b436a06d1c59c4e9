// Dependency rules, checked by `npm run lint` (and so by `npm test` and CI): see CONTRIBUTING.md,
// "Shape of the code". Run `npx depcruise src` to check by hand.
/** @type {import("dependency-cruiser").IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: "no-area-cycle",
      severity: "error",
      comment:
        "An area of src/ (a top-level folder: lib, schedule, cluster, actors, protocol, slots, history, notify, jobs, worker, ...) must not " +
        "depend on itself through another area. Move the shared piece down to the lower area " +
        "(as src/protocol/ holds what jobs and worker both need).",
      scope: "folder",
      from: { path: "^src/" },
      to: { circular: true },
    },
    {
      name: "no-cycle-in-area",
      severity: "error",
      comment:
        "No module of an area may reach itself through others of that area, not even through type-only " +
        "imports: a circle makes a reader follow one concern through several files and back. Put the " +
        "shared types in a leaf module of the area (as job-state/job-types.ts holds the job actor's messages " +
        "and effects, and worker/types.ts the interfaces of the worker's parts). A cycle through " +
        "several areas is an area cycle (no-area-cycle).",
      from: { path: "^src/([^/]+)/" },
      to: { circular: true, viaOnly: { path: "^src/$1/" } },
    },
    {
      name: "no-module-cycle",
      severity: "error",
      comment:
        "A module must not import itself through others at run time (ES module initialisation order), " +
        "in any area.",
      from: { path: "^src/" },
      to: { circular: true, viaOnly: { dependencyTypesNot: ["type-only"] } },
    },
  ],
  options: {
    includeOnly: "^src/",
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    doNotFollow: { path: "node_modules" },
  },
};
