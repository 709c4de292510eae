// Variables that are secrets or test-only, so `wrangler types` cannot see them.
interface TroupeSecretVars {
  /**
   * JSON `{ "<token>": "<orgId>" }`, tokens of at least 16 characters; unset in
   * local development (`TROUPE_LOCAL_DEV`) means `dev-token` → `dev` (src/http/auth.ts).
   */
  API_TOKENS?: string;
  /** `"on"` only under the test runner: short leases and waits. */
  TROUPE_TEST_MODE?: string;
  /** JSON `{ "<org>": ["host", "*.example.com"] }`: the hosts each org's plays may fetch (src/runtime/invocation/play-fetch.ts). */
  EGRESS_ALLOWLIST?: string;
  /** The simulated provider's API key, when a deployment sets one (the sim tools' auth scope). */
  SIM_API_KEY?: string;
}
interface Env extends TroupeSecretVars {}
declare namespace Cloudflare {
  interface Env extends TroupeSecretVars {}
}
