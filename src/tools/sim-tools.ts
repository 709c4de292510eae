/** Tools served by the simulated provider (API.md), available when `SIM_PROVIDER` is `on`. */
import { z } from "zod";
import { defineTool, ToolCallError } from "../play/define";
import { callSim, type SimReply } from "../sim/client";

/** Maps the simulator's HTTP answer to an output or a classified failure. */
export function outputOf<T>(reply: SimReply): T {
  if (reply.status === 200) return (reply.body as { output: T }).output;
  const error = (reply.body as { error?: { code?: string; message?: string } } | null)?.error;
  const retryable = reply.status === 429 || reply.status >= 500;
  throw new ToolCallError({
    code: error?.code ?? `http_${reply.status}`,
    message: error?.message ?? `provider answered HTTP ${reply.status}`,
    retryable,
    retryAfterMs: reply.retryAfterMs,
  });
}

export const simFindEmail = defineTool({
  id: "sim_find_email",
  provider: "sim",
  version: "1",
  input: z.object({ name: z.string().min(1).max(500), domain: z.string().min(1).max(253) }),
  async execute(input, call) {
    return outputOf<{ email: string }>(
      await callSim(call.env, { tool: "sim_find_email", input, idempotencyKey: call.idempotencyKey, signal: call.signal }),
    );
  },
});

export const simVerifyEmail = defineTool({
  id: "sim_verify_email",
  provider: "sim",
  version: "1",
  input: z.object({ email: z.string().min(1).max(600) }),
  async execute(input, call) {
    return outputOf<{ email: string; verdict: "valid" | "invalid" }>(
      await callSim(call.env, { tool: "sim_verify_email", input, idempotencyKey: call.idempotencyKey, signal: call.signal }),
    );
  },
});
