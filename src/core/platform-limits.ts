/**
 * Production Cloudflare's limits that local workerd does not enforce, and the
 * switch that makes local runs obey them: `PLATFORM_LIMITS = "emulate"` in
 * wrangler.toml's top-level `[vars]` (local development, tests, benchmarks),
 * absent in `[env.production]`, where the platform enforces them itself. So
 * what a local run shows is what production will do.
 */
import { OutboundGate } from "./outbound";

/** Outbound requests one object may have waiting for their response headers at once; the next waits. */
export const MAX_OUTBOUND_IN_FLIGHT = 6;

/** Subrequests (fetches, provider calls, stub calls) one invocation may make; the next throws. */
export const MAX_SUBREQUESTS_PER_INVOCATION = 10_000;

/** What the platform's subrequest past the cap throws with. */
export const TOO_MANY_SUBREQUESTS = "Too many subrequests.";

/** Whether this Worker emulates production's limits (`PLATFORM_LIMITS` is `"emulate"`). */
export function emulatesPlatformLimits(env: { readonly PLATFORM_LIMITS?: string }): boolean {
  return env.PLATFORM_LIMITS === "emulate";
}

/** A new object's outbound gate: six slots under emulation, none (nothing waits) otherwise. */
export function outboundGateFor(env: { readonly PLATFORM_LIMITS?: string }): OutboundGate | null {
  return emulatesPlatformLimits(env) ? new OutboundGate({ limit: MAX_OUTBOUND_IN_FLIGHT }) : null;
}

/** The subrequest cap an invocation's meter enforces: the platform's under emulation, none otherwise. */
export function subrequestCapFor(env: { readonly PLATFORM_LIMITS?: string }): number | null {
  return emulatesPlatformLimits(env) ? MAX_SUBREQUESTS_PER_INVOCATION : null;
}

/**
 * The platform retries a failed alarm six times (from 2 s, doubling), then
 * never again. An object whose alarm still fails from the fifth retry on and
 * that still has work to do (a run to drive, an end to report) arms the next
 * itself, a minute later: else nothing would wake it. Null for earlier retries.
 */
export function lateAlarmRetryAt(retryCount: number, now: number): number | null {
  return retryCount >= 5 ? now + 60_000 : null;
}
