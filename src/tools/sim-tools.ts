/** Tools served by the simulated provider (API.md), available when `SIM_PROVIDER` is `on`. */
import { z } from "zod";
import { defineTool, ToolCallError } from "../play/define";
import type { BatchMemberResult } from "../play/types";
import type { ToolCall, ToolEnv, ToolRecovery } from "../play/types";
import { callSim, callSimBatch, lookUpSim, type BatchMemberResult as SimMemberResult, type SimReply } from "../sim/client";

/** What the simulator's tools need of the Worker: its object, and the key a deployment may set. */
export const SIM_BINDINGS = ["SIM", "SIM_API_KEY"] as const;

/** The simulator's credential: a key if the deployment sets one, else the local default. */
function simAuthScope(env: ToolEnv<"SIM_API_KEY">): string {
  return env.SIM_API_KEY ? `key:${env.SIM_API_KEY}` : "sim-local";
}

/**
 * Maps the simulator's HTTP answer to an output or a classified failure;
 * either way its headers reach the org's pacing (a success's through
 * `reportHeaders`, a failure's on the error).
 */
export function outputOf<T>(reply: SimReply, call: Pick<ToolCall, "reportHeaders">): T {
  if (reply.status !== 200) throw failureOf(reply);
  call.reportHeaders(reply.headers);
  return (reply.body as { output: T }).output;
}

/** The simulator's non-200 answer as a classified failure, with its status and headers (a 429's wait is read from them). */
function failureOf(reply: SimReply): ToolCallError {
  const error = (reply.body as { error?: { code?: string; message?: string } } | null)?.error;
  return new ToolCallError({
    code: error?.code ?? `http_${reply.status}`,
    message: error?.message ?? `provider answered HTTP ${reply.status}`,
    retryable: reply.status === 429 || reply.status >= 500,
    status: reply.status,
    headers: reply.headers,
  });
}

/** Asks the simulator what it answered under the key (not billed, not counted as a call): the tools' `recover`. */
async function recoverFromSim<T>(
  idempotencyKey: string,
  call: { env: ToolEnv<"SIM">; signal: AbortSignal; reportHeaders(headers: HeadersInit): void },
): Promise<ToolRecovery<T>> {
  const reply = await lookUpSim(call.env, idempotencyKey, call.signal);
  // A 429 carries its wait and the limit's headers to pacing, as a call's does; so does an answer.
  if (reply.status !== 200) throw failureOf(reply);
  call.reportHeaders(reply.headers);
  const result = reply.body as { found: true; output: unknown } | { found: false; inFlight: boolean };
  return result.found ? { found: true, output: result.output as T } : { found: false, inFlight: result.inFlight };
}

export const simFindEmail = defineTool({
  id: "sim_find_email",
  provider: "sim",
  version: "1",
  price: 1,
  bindings: SIM_BINDINGS,
  authScope: simAuthScope,
  input: z.object({ name: z.string().min(1).max(500), domain: z.string().min(1).max(253) }),
  async execute(input, call) {
    return outputOf<{ email: string }>(
      await callSim(call.env, { tool: "sim_find_email", input, idempotencyKey: call.idempotencyKey, signal: call.signal }),
      call,
    );
  },
  recover: (idempotencyKey, call) => recoverFromSim<{ email: string }>(idempotencyKey, call),
});

type Verdict = { email: string; verdict: "valid" | "invalid" };

/** Batchable through the simulator's `/batch` (at most 50 members, its default `batchMaxSize`). */
export const simVerifyEmail = defineTool({
  id: "sim_verify_email",
  provider: "sim",
  version: "1",
  price: 0.25,
  bindings: SIM_BINDINGS,
  authScope: simAuthScope,
  input: z.object({ email: z.string().min(1).max(600) }),
  async execute(input, call) {
    return outputOf<Verdict>(
      await callSim(call.env, { tool: "sim_verify_email", input, idempotencyKey: call.idempotencyKey, signal: call.signal }),
      call,
    );
  },
  recover: (idempotencyKey, call) => recoverFromSim<Verdict>(idempotencyKey, call),
  batch: {
    maxMembers: 50,
    compile: (members) => members.map((m) => ({ idempotencyKey: m.idempotencyKey, input: m.input })),
    send: async (members: { idempotencyKey: string; input: unknown }[], call) => {
      const reply = await callSimBatch(call.env, { tool: "sim_verify_email", members, signal: call.signal });
      // A batch-level failure (429, 5xx, 400) fails the whole batch, classified like a single call's.
      if (reply.status !== 200) throw failureOf(reply);
      call.reportHeaders(reply.headers);
      return reply.body.results as SimMemberResult[];
    },
    split: (results: SimMemberResult[]): BatchMemberResult<Verdict>[] =>
      results.map((r) =>
        r.status === 200
          ? { ok: true, output: r.output as Verdict }
          : { ok: false, error: { code: r.error.code, message: r.error.message, retryable: r.status >= 500 } },
      ),
  },
});
