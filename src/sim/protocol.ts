/**
 * The simulated provider's wire contract: request bodies, replies and the
 * shapes of its stats and config. Shared by the object, its client and the
 * `/v1/sim` routes, so both sides of the stub agree on one schema.
 */
import { z } from "zod";
import { describeIssues, issuesOf, TroupeError, ValidationError } from "../core/errors";

/**
 * Names the object that sent a provider request, as `<Class>:<name>`
 * (`RunCoordinator:<runId>`): the simulator records peaks of requests in
 * flight per caller under it. Absent on requests made outside an object.
 */
export const SIM_CALLER_HEADER = "X-Sim-Caller";

/** Body of `POST https://sim/call` (the key travels in the `Idempotency-Key` header). */
export const CallBody = z.object({ tool: z.string().min(1), input: z.unknown() });
export type CallBody = z.infer<typeof CallBody>;

/** One member of a batch: its own idempotency key and input. */
export const BatchMember = z.object({ idempotencyKey: z.string().min(1), input: z.unknown() });
export type BatchMember = z.infer<typeof BatchMember>;

/** Body of `POST https://sim/batch`. */
export const BatchBody = z.object({ tool: z.string().min(1), members: z.array(BatchMember).min(1) });
export type BatchBody = z.infer<typeof BatchBody>;

/**
 * How the simulator states its rate limit (`ratePerSecond`), like the real
 * providers it stands for:
 * - `retry-after`: a 429 carries `Retry-After` (whole seconds, rounded up)
 *   and `Retry-After-Ms` (the exact wait, an extension some APIs send);
 * - `none`: a bare 429;
 * - `ietf`: as `retry-after`, and every answer carries
 *   `RateLimit-Policy: "default";q=<rate>;w=1` and
 *   `RateLimit: "default";r=<left>;t=<seconds until more is available>`;
 * - `x-ratelimit`: as `retry-after`, and every answer carries
 *   `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`
 *   (seconds until more is available).
 */
export const RateLimitHeaders = z.enum(["retry-after", "none", "ietf", "x-ratelimit"]);
export type RateLimitHeaders = z.infer<typeof RateLimitHeaders>;

/** The simulation's settings, stored durably. */
export const SimConfig = z.object({
  latencyMs: z.number().int().min(0).max(10_000),
  ratePerSecond: z.number().int().min(1).max(100_000).nullable(),
  batchMaxSize: z.number().int().min(1).max(1000),
  rateLimitHeaders: RateLimitHeaders,
  /**
   * Provider requests (calls, batches, result lookups) it answers at once; one more is answered `429`
   * `too_many_concurrent_requests`, as providers that limit concurrency do. Null: no limit.
   */
  maxConcurrent: z.number().int().min(1).max(100_000).nullable(),
});
export type SimConfig = z.infer<typeof SimConfig>;

/** The settings a fresh simulator starts with (`POST /reset` restores `rateLimitHeaders`). */
export const DEFAULT_SIM_CONFIG: SimConfig = {
  latencyMs: 0,
  ratePerSecond: null,
  batchMaxSize: 50,
  rateLimitHeaders: "retry-after",
  maxConcurrent: null,
};

/** Body of `PUT https://sim/config`: a partial update; unknown fields are rejected. */
export const SimConfigPatch = SimConfig.partial().strict();
export type SimConfigPatch = z.infer<typeof SimConfigPatch>;

/** Per-tool counters. */
export const ToolStats = z.object({ calls: z.number(), billed: z.number() });
export type ToolStats = z.infer<typeof ToolStats>;

/**
 * The simulator's counters since the last reset.
 * - `calls`: provider requests received (a batch counts once; 400s and 429s count too);
 * - `billed`: distinct idempotency keys (calls and batch members) that succeeded;
 * - `duplicates`: successes whose key had already been billed (exactly-once keeps this at 0);
 * - `byTool`: `calls` and `billed` per known tool;
 * - `batchCalls`: batch requests; `rateLimited`: `429` answers (over `ratePerSecond` or `maxConcurrent`);
 * - `maxObservedPerSecond`: the most requests (admitted or not) received in any one-second window;
 * - `maxInFlight`: the most provider requests (calls, batches and result lookups) being answered at once;
 * - `maxInFlightByCaller`: the same peak per caller ({@link SIM_CALLER_HEADER}), `{ "<caller>": peak }`;
 * - `keyReused`: calls and batch members refused `422 idempotency_key_reused` because their key was first
 *   sent with another tool or input (unbilled; a runtime that derives keys correctly keeps this at 0).
 */
export const SimStats = z.object({
  calls: z.number(),
  billed: z.number(),
  duplicates: z.number(),
  byTool: z.record(z.string(), ToolStats),
  batchCalls: z.number(),
  rateLimited: z.number(),
  maxObservedPerSecond: z.number(),
  maxInFlight: z.number(),
  maxInFlightByCaller: z.record(z.string(), z.number()),
  keyReused: z.number(),
});
export type SimStats = z.infer<typeof SimStats>;

/** The error body every non-2xx answer carries. */
export interface SimErrorBody {
  error: { code: string; message: string; details?: unknown };
}

/** One member's answer inside `{ results }` of a batch, in member order. */
export type BatchMemberResult = { status: 200; output: unknown } | { status: 400 | 422 | 503; error: { code: string; message: string } };

/** Reads a JSON body; a missing or malformed one is a 400, and so is one the sender stopped sending (it went away). */
export async function readJson(request: Request): Promise<unknown> {
  const text = await request.text().catch((error: unknown) => {
    throw new TroupeError("body_unreadable", `The body could not be read: ${error instanceof Error ? error.message : String(error)}`, {
      httpStatus: 400,
    });
  });
  try {
    return JSON.parse(text) as unknown;
  } catch (error) {
    throw new ValidationError(`The body is not valid JSON: ${error instanceof Error ? error.message : String(error)}`, [
      { path: "(body)", message: "invalid JSON" },
    ]);
  }
}

/** Parses `value` with `schema`, or throws a {@link ValidationError} naming the fields. */
export function parse<S extends z.ZodType>(schema: S, value: unknown, what: string): z.infer<S> {
  const result = schema.safeParse(value);
  if (!result.success) throw new ValidationError(`Invalid ${what}: ${describeIssues(result.error)}`, issuesOf(result.error));
  return result.data;
}
