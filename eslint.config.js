// Type-aware lint for the whole workspace. Services and libraries log through pino, never
// the console; only CLIs and the dev launcher may print to the terminal. The blocks at the
// end encode the project's conventions (package surfaces, one door to NATS, pure cores, config
// read once) so CI fails when one breaks.
import js from "@eslint/js";
import tseslint from "typescript-eslint";
import zmlLint from "./test/lint/no-import-cycle.ts";

// --- Conventions -------------------------------------------------------------------------
// ESLint replaces a rule's options when a later block matches the same file, so each block
// below lists every restriction that applies to its files.

/** Each package is used through its `index.ts` (`exports` in package.json), never its src. */
const NO_DEEP_IMPORTS = {
  group: [
    "@zml/*/*",
    "!@zml/tdx/testing",
    // Plain, zod-free parts of the contracts that the SDK bundles (its index pulls in zod).
    "!@zml/contracts/routing-header",
    "!@zml/contracts/sealed",
    "!@zml/contracts/sse",
    "!@zml/contracts/testing",
    "!@zml/bus/testing",
    // The TD's sealer on libsodium: a subpath, so the SDK that bundles the seal's index does
    // not carry its WebAssembly.
    "!@zml/seal/sodium",
    "**/libs/*/src/**",
    "**/services/*/src/**",
  ],
  message: "Import the package's public surface (its index.ts), not a file inside it.",
};
/** The test kits (`@zml/<pkg>/testing`) are for tests and simulators, never a service. */
const NO_TEST_KITS = {
  group: ["@zml/*/testing"],
  message: "Test kits build fixtures for tests; a service gets its parts from main.ts.",
};
/** `libs/bus` is the one door to NATS. */
const NO_RAW_NATS = {
  group: ["@nats-io/*"],
  message:
    "Use @zml/bus (publishJson, requestJson, serveJson, KV, streams). If it truly cannot wrap " +
    "what you need, disable this rule on that line and say why.",
};
const NO_RAW_CONNECTION = {
  name: "@zml/bus",
  importNames: ["natsConnectionOf"],
  message: "The raw connection is for tests and tools; services use the typed helpers.",
};
/** Pure cores are functions of their inputs: no network, files, logger, metrics or clock. */
const NO_IO = {
  group: [
    "node:fs",
    "node:fs/*",
    "node:net",
    "node:http",
    "node:http2",
    "node:https",
    "node:child_process",
    "node:dns",
    "node:dgram",
    "undici",
    "fastify",
    "pino",
    "prom-client",
    "@nats-io/*",
    "@opentelemetry/*",
    "@zml/bus",
    "@zml/telemetry",
    "@zml/runtime",
  ],
  message: "A pure core does no I/O: take what it needs as arguments (pass `now` in).",
};
const PURE_CORES = ["libs/routing/src/**/*.ts", "libs/health/src/**/*.ts", "libs/tdx/src/**/*.ts"];
/** The tdx command-line entry points read files; they are not part of the core. */
const PURE_CORE_EXCEPTIONS = ["libs/tdx/src/cli.ts", "libs/tdx/src/verify-quote-command.ts"];

const NO_EXPORT_ALL = {
  selector: "ExportAllDeclaration",
  message: "List what a module exports by name; `export *` hides the public surface.",
};
const NO_PROCESS_ENV = {
  selector: "MemberExpression[object.name='process'][property.name='env']",
  message: "Read the environment once, in main.ts through loadConfig; pass values in.",
};

export default tseslint.config(
  { ignores: ["**/node_modules/**", "**/.turbo/**", "**/coverage/**", "**/dist/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
      "no-console": "error",
    },
  },
  // Build configs and their plugins are plain JavaScript, outside every tsconfig.
  { files: ["**/*.mjs"], ...tseslint.configs.disableTypeChecked },
  {
    files: ["**/cli/**", "deploy/dev/**", "**/bench/**", "**/*.cli.ts"],
    rules: { "no-console": "off" },
  },
  {
    files: ["**/*.test.ts", "test/**"],
    rules: {
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-assignment": "off",
    },
  },
  { files: ["eslint.config.js"], ...tseslint.configs.disableTypeChecked },

  {
    files: ["**/*.ts", "**/*.js"],
    plugins: { zml: zmlLint },
    rules: {
      "zml/no-import-cycle": "error",
      "no-restricted-imports": ["error", { patterns: [NO_DEEP_IMPORTS] }],
      "no-restricted-syntax": ["error", NO_EXPORT_ALL],
    },
  },
  {
    files: ["services/**/*.ts"],
    rules: { "no-restricted-imports": ["error", { patterns: [NO_DEEP_IMPORTS, NO_RAW_NATS] }] },
  },
  {
    files: ["services/*/src/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        { paths: [NO_RAW_CONNECTION], patterns: [NO_DEEP_IMPORTS, NO_RAW_NATS, NO_TEST_KITS] },
      ],
    },
  },
  {
    files: PURE_CORES,
    ignores: PURE_CORE_EXCEPTIONS,
    rules: { "no-restricted-imports": ["error", { patterns: [NO_DEEP_IMPORTS, NO_IO] }] },
  },
  {
    // Library and service code gets its configuration handed in. The test harness and the
    // CLI's I/O port read the environment of the process they belong to.
    files: ["services/*/src/**/*.ts", "libs/*/src/**/*.ts"],
    ignores: ["**/main.ts", "**/config.ts", "libs/harness/**", "libs/cli/src/io.ts"],
    rules: { "no-restricted-syntax": ["error", NO_EXPORT_ALL, NO_PROCESS_ENV] },
  },
);
