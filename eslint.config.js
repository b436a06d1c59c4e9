// Lint rules guard the boundaries described in CONTRIBUTING.md: no floating promises,
// no `any` leaking, and no ambient time/randomness in the actor and cluster code.
import tseslint from "typescript-eslint";

const ambient = [
  { object: "Date", property: "now", message: "Inject a Clock (src/lib/clock.ts)." },
  { object: "Math", property: "random", message: "Inject a Random (src/lib/random.ts)." },
];

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
    files: ["src/actors/**/*.ts", "src/cluster/**/*.ts", "src/schedule/**/*.ts", "src/server/node.ts"],
    rules: {
      "no-restricted-properties": ["error", ...ambient],
      "no-restricted-globals": [
        "error",
        { name: "setTimeout", message: "Use the node TimerQueue / Clock." },
        { name: "setInterval", message: "Use the node TimerQueue / Clock." },
      ],
      "no-restricted-syntax": [
        "error",
        { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: "Inject a Clock." },
      ],
    },
  },
  {
    files: ["test/**/*.ts", "bench/**/*.ts"],
    rules: {
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-non-null-assertion": "off",
    },
  },
);
