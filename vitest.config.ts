import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

export default defineConfig({
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
    include: ["test/**/*.test.ts", "src/**/*.test.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
