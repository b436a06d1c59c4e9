// Lint rules guard the boundaries described in CONTRIBUTING.md: no floating promises, no `any`
// leaking, no ambient time, randomness or timers outside the entry points, and a budget on the
// length of functions and modules. Formatting (and so line length: 100 columns) is Prettier's,
// checked by `npm run lint:format`.
import tseslint from "typescript-eslint";

/**
 * The files that may read the wall clock, draw random numbers and arm host timers: they wire the
 * real ones. Everything else in src takes the injected Clock (src/lib/clock.ts) and Random
 * (src/lib/random.ts), so the simulation and unit tests run it on their own time.
 */
const AMBIENT_ALLOWED = [
  // Entry points: read the environment and wire the real clock and randomness into the rest.
  "src/cli/**/*.ts",
  // The real Clock (`systemClock`), the host's timers (`deferOnHost`) and the real Random.
  "src/lib/clock.ts",
  "src/lib/random.ts",
  // `kairos dev`'s supervisors of real OS processes (dockerd, nats-server): kill grace and
  // readiness polls on ref'd host timers that keep the CLI alive while they wait.
  "src/dev/docker-engine.ts",
  "src/dev/nats-launcher.ts",
];

const ambient = [
  { object: "Date", property: "now", message: "Inject a Clock (src/lib/clock.ts)." },
  { object: "Math", property: "random", message: "Inject a Random (src/lib/random.ts)." },
];

const budget = {
  "max-lines-per-function": ["error", { max: 80, skipBlankLines: true, skipComments: true }],
  "max-lines": ["error", { max: 500, skipBlankLines: true, skipComments: true }],
};

export default tseslint.config(
  // *.mjs: plain-JS entry shims (bin/kairos.mjs, the lease thread's boot) that only register tsx.
  { ignores: ["node_modules/**", ".kairos/**", "dist/**", "eslint.config.js", ".dependency-cruiser.cjs", "bin/**", "src/**/*.mjs"] },
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        {
          allowForKnownSafeCalls: [
            { from: "package", package: "node:test", name: ["describe", "it", "test", "suite", "before", "after"] },
          ],
        },
      ],
      "@typescript-eslint/no-explicit-any": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/restrict-template-expressions": "off",
      "@typescript-eslint/require-await": "off",
    },
  },
  {
    files: ["src/**/*.ts"],
    ignores: AMBIENT_ALLOWED,
    rules: {
      "no-restricted-properties": ["error", ...ambient],
      "no-restricted-globals": [
        "error",
        { name: "setTimeout", message: "Use the injected Clock's setTimer (or the node's TimerQueue)." },
        { name: "setInterval", message: "Use the injected Clock's setTimer (or the node's TimerQueue)." },
      ],
      "no-restricted-syntax": [
        "error",
        { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: "Inject a Clock: new Date(clock.now())." },
      ],
    },
  },
  // The dashboard's browser modules (src/dashboard: plain JS the API serves as it is) are outside
  // the TypeScript project: linted without type information.
  { files: ["src/dashboard/**/*.js"], ...tseslint.configs.disableTypeChecked },
  // The budget holds for src; tests and benchmarks read as one scenario per `describe`/`run`.
  { files: ["src/**/*.ts"], rules: budget },
  {
    files: ["test/**/*.ts", "bench/**/*.ts"],
    rules: {
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-non-null-assertion": "off",
    },
  },
);
