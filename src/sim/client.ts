/**
 * How the rest of Troupe reaches the simulated provider: through the stub of
 * its one global object. Replies are returned, not thrown, so callers (the
 * tool definitions) classify them by status: 200 success, 4xx permanent
 * except 429, 429/503 transient. Every reply keeps its headers: a 429's
 * `Retry-After`, and under a rate limit its state (see `rateLimitHeaders` in
 * the config), which the tools hand to pacing.
 *
 * The simulator stands for a provider's remote HTTP API: a call, a batch or a
 * result lookup is an outbound request of the calling object (`sendOutbound`),
 * which takes a slot of its gate under `PLATFORM_LIMITS=emulate` and names it
 * in {@link SIM_CALLER_HEADER}.
 */
import { TroupeError } from "../core/errors";
import { sendOutbound } from "../core/outbound";
import { SIM_CALLER_HEADER, type BatchMember, type SimConfig, type SimConfigPatch } from "./protocol";
import { SimConfig as SimConfigSchema, SimStats as SimStatsSchema, type SimStats } from "./protocol";

export type { SimStats, SimConfig, SimConfigPatch, BatchMember, BatchMemberResult } from "./protocol";
export { SIM_CALLER_HEADER } from "./protocol";

/** The name of the one simulator instance. */
export const SIM_OBJECT_NAME = "sim";

/** A provider answer: its HTTP status, its JSON body and its headers (a `429`'s wait, the limit's state). */
export interface SimReply {
  status: number;
  // The body's shape depends on the status and tool: `{ output }`, `{ results }` or `{ error }`.
  body: any;
  headers: Headers;
}

/** The stub of the global simulator object. */
/** All the simulator's callers need of the Worker: its object. */
export type SimEnv = Pick<Env, "SIM">;

export function simStub(env: SimEnv): DurableObjectStub {
  return env.SIM.getByName(SIM_OBJECT_NAME);
}

/**
 * Calls one tool once under `idempotencyKey`.
 *
 * @example
 * const reply = await callSim(env, { tool: "sim_find_email", input: { name: "Ada Lovelace", domain: "example.com" }, idempotencyKey: "k1" });
 * if (reply.status === 200) reply.body.output.email; // "ada.lovelace@example.com"
 */
export async function callSim(
  env: SimEnv,
  req: { tool: string; input: unknown; idempotencyKey: string; signal?: AbortSignal },
): Promise<SimReply> {
  const response = await providerRequest(env, "https://sim/call", {
    method: "POST",
    headers: { "content-type": "application/json", "Idempotency-Key": req.idempotencyKey },
    body: JSON.stringify({ tool: req.tool, input: req.input }),
    signal: req.signal,
  });
  return toReply(response);
}

/**
 * Calls a batchable tool once for several members, each under its own key.
 * A 200 reply's `body.results` holds one `{ status, output }` or
 * `{ status, error }` per member, in member order.
 */
export async function callSimBatch(env: SimEnv, req: { tool: string; members: BatchMember[]; signal?: AbortSignal }): Promise<SimReply> {
  const response = await providerRequest(env, "https://sim/batch", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ tool: req.tool, members: req.members }),
    signal: req.signal,
  });
  return toReply(response);
}

/**
 * What the simulator answered under `idempotencyKey`, without billing or
 * counting: `{ found: true, output }` for a billed key, else `{ found: false,
 * inFlight }` (a request with the key is still being answered).
 */
export async function simResult(
  env: SimEnv,
  idempotencyKey: string,
  signal?: AbortSignal,
): Promise<{ found: true; output: unknown } | { found: false; inFlight: boolean }> {
  const reply = await lookUpSim(env, idempotencyKey, signal);
  if (reply.status !== 200) throw new TroupeError("sim_error", `The simulator answered ${reply.status}: ${JSON.stringify(reply.body)}`);
  return reply.body as { found: true; output: unknown } | { found: false; inFlight: boolean };
}

/** As {@link simResult}, its answer returned whatever its status: a lookup over the rate limit is answered `429`. */
export async function lookUpSim(env: SimEnv, idempotencyKey: string, signal?: AbortSignal): Promise<SimReply> {
  return toReply(await providerRequest(env, `https://sim/result?key=${encodeURIComponent(idempotencyKey)}`, { signal }));
}

/** The simulator's counters since the last reset. */
export async function simStats(env: SimEnv): Promise<SimStats> {
  return SimStatsSchema.parse(await expectOk(await simStub(env).fetch("https://sim/stats")));
}

/** The simulator's current config. */
export async function simConfig(env: SimEnv): Promise<SimConfig> {
  return SimConfigSchema.parse(await expectOk(await simStub(env).fetch("https://sim/config")));
}

/**
 * Changes the simulator's config (a partial update) and returns the result.
 * An invalid patch comes back as a non-200 reply rather than a throw.
 */
export async function updateSimConfig(env: SimEnv, patch: SimConfigPatch): Promise<SimReply> {
  const response = await simStub(env).fetch("https://sim/config", {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(patch),
  });
  return toReply(response);
}

/** Zeroes the counters and forgets billed keys; returns the zeroed stats. */
export async function resetSim(env: SimEnv): Promise<SimStats> {
  return SimStatsSchema.parse(await expectOk(await simStub(env).fetch("https://sim/reset", { method: "POST" })));
}

/**
 * One request to the provider API, as an outbound request of the calling
 * object: it resolves when the answer's headers arrive, which frees the slot
 * (the body is read after).
 */
function providerRequest(env: SimEnv, url: string, init: RequestInit & { headers?: Record<string, string> }): Promise<Response> {
  return sendOutbound(
    (caller) => simStub(env).fetch(url, caller === null ? init : { ...init, headers: { ...init.headers, [SIM_CALLER_HEADER]: caller } }),
    init.signal ?? undefined,
  );
}

async function toReply(response: Response): Promise<SimReply> {
  return { status: response.status, body: await response.json(), headers: response.headers };
}

async function expectOk(response: Response): Promise<unknown> {
  const body: unknown = await response.json();
  if (!response.ok) throw new TroupeError("sim_error", `The simulator answered ${response.status}: ${JSON.stringify(body)}`);
  return body;
}
