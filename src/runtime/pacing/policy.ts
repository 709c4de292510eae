/**
 * Pacing policy per provider: how fast and how wide an org may call it. The
 * defaults live here in code; an org may override a provider's policy at run
 * time (`PUT /v1/pacing/<provider>`, stored by that org's PacingGate), which
 * is also how tests and the bench tell the gate the simulated provider's limit.
 */
import { z } from "zod";

/** How fast and how wide an org may call one provider. */
export const PacingPolicy = z
  .object({
    /**
     * The provider's documented request rate for the org; null: none (the
     * gate then paces by the quota the provider announces, or learns one
     * from its 429s). The gate paces at {@link PACE_UTILIZATION} of it.
     */
    requestsPerSecond: z.number().min(0.01).max(100_000).nullable(),
    /** Provider requests in flight at once across the org; null: no limit. */
    concurrency: z.number().int().min(1).max(10_000).nullable(),
    /** Batch calls one chunk's scheduler keeps in flight for one tool. */
    batchParallelism: z.number().int().min(1).max(64),
  })
  .strict();
export type PacingPolicy = z.infer<typeof PacingPolicy>;

/** A partial override; unset fields keep the default. */
export const PacingOverride = PacingPolicy.partial().strict();
export type PacingOverride = z.infer<typeof PacingOverride>;

/**
 * Share of a known rate (declared, announced or learned) the gate hands out:
 * the rest absorbs the jitter between a slot's start and its request's
 * arrival, which can bunch requests into a provider's window.
 */
export const PACE_UTILIZATION = 0.96;

/** For providers this table does not name. */
export const DEFAULT_PACING: PacingPolicy = { requestsPerSecond: null, concurrency: 64, batchParallelism: 4 };

const KNOWN: Record<string, PacingPolicy> = {
  // The simulated provider has no limit until its config sets `ratePerSecond`; tell the gate with an override.
  sim: { requestsPerSecond: null, concurrency: 256, batchParallelism: 4 },
};

/** The policy of `provider`, with an org's override applied. */
export function pacingPolicyFor(provider: string, override: PacingOverride | null = null): PacingPolicy {
  return { ...(KNOWN[provider] ?? DEFAULT_PACING), ...(override ?? {}) };
}
