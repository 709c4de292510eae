import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    projects: [
      {
        // The runtime, in workerd: real objects, real SQLite, real alarms.
        plugins: [
          cloudflareTest({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              // Test policy: short leases and waits so the suite runs in seconds.
              bindings: {
                TROUPE_TEST_MODE: "on",
                API_TOKENS: JSON.stringify({ "dev-token": "dev", "other-token": "other" }),
                // A tool credential: log lines that quote it must come out redacted.
                SIM_API_KEY: "sim-secret-credential-7f3a9c",
                // ctx.fetch: org "other" may fetch only these hosts; every other org has no allowlist.
                EGRESS_ALLOWLIST: JSON.stringify({ other: ["allowed.example", "*.allowed.example"] }),
              },
            },
          }),
        ],
        test: {
          name: "workers",
          // The plugin imports the Worker again at each object invocation, a round trip to this process each time:
          // answered from memory once loaded (the file says why).
          setupFiles: ["./test/setup-module-cache.ts"],
          // Vitest's default is one worker per core minus one: on two cores, one file at a time. Most of these
          // files wait on alarms, leases and held answers rather than burn CPU: measured on two idle cores, two at a
          // time kept them 50% busy (423 s), four 77% (280 s).
          maxWorkers: 4,
          // Each test file's isolate imports the Worker's modules again, one request each: its dependencies go
          // prebundled, a few modules rather than hundreds (the import phase measured about a quarter shorter).
          deps: {
            optimizer: {
              ssr: {
                enabled: true,
                include: [
                  "zod",
                  "hono",
                  "hono/body-limit",
                  "hono/utils/http-status",
                  "partyserver",
                  "csv-parse/sync",
                  "csv-stringify/sync",
                  "structured-headers",
                ],
              },
            },
          },
          include: ["test/**/*.test.ts", "src/**/*.test.ts"],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      {
        // What runs outside the Worker (the CLI, the dashboard in a browser), against a real local server on 127.0.0.1.
        test: {
          name: "node",
          environment: "node",
          include: ["test-node/**/*.test.ts"],
          // Each file starts its own local server: one at a time on two cores.
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
