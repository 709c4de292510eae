/** Tools that exist only under the test runner (TROUPE_TEST_MODE), to exercise dispatch's edges. */
import { faultProbeFor } from "../clients/faults";
import { callSim } from "../sim/client";
import { outputOf, SIM_BINDINGS, simFindEmail, simVerifyEmail } from "./sim-tools";
import { z } from "zod";
import { defineTool, ToolCallError } from "../play/define";

/**
 * `sim_find_email` under a credential the test controls: its auth scope is
 * the `sim` credential held by the FaultInjector (a fault rule can rotate it
 * and answer `auth_scope_changed`, as a provider would after a key rotation).
 */
export const testScopedFind = defineTool({
  ...simFindEmail,
  id: "test_scoped_find",
  bindings: [...SIM_BINDINGS, "FAULTS", "TROUPE_TEST_MODE"],
  authScope: async (env) => `test-credential:${(await faultProbeFor(env).credential("sim")) ?? "none"}`,
});

/**
 * `sim_find_email` as a provider that ignores idempotency keys and cannot be
 * asked for a past result: a request whose outcome is unknown must not be
 * sent again silently.
 */
export const testUnkeyedFind = defineTool({
  ...simFindEmail,
  id: "test_unkeyed_find",
  idempotent: false,
  recover: undefined,
});

/**
 * As {@link testUnkeyedFind}, from a provider that can be asked for a past
 * result but whose lookup is down: not knowing how a taken-over request
 * ended must not send it again either.
 */
export const testUnkeyedBlindFind = defineTool({
  ...simFindEmail,
  id: "test_unkeyed_blind_find",
  idempotent: false,
  recover: async () => {
    throw new ToolCallError({ code: "lookup_unavailable", message: "the provider's lookup is down", retryable: true });
  },
});

/**
 * As {@link testUnkeyedFind}, from a provider whose lookup of past results
 * works (the simulator's): a request whose outcome is unknown is asked after.
 */
export const testUnkeyedLookupFind = defineTool({
  ...simFindEmail,
  id: "test_unkeyed_lookup_find",
  idempotent: false,
});

/** `sim_find_email` whose provider pads its answer past what a receipt stores (2.1 MB): billed, never storable. */
export const testHugeFind = defineTool({
  ...simFindEmail,
  id: "test_huge_find",
  async execute(input, call) {
    return { ...(await simFindEmail.execute(input, call)), padding: "x".repeat(2_100_000) };
  },
});

/** Characters of `test_padded_find`'s padding: its answers fit in a row (256 KiB), and a few dozen pass what one RPC answer carries of them. */
export const PADDED_FIND_CHARS = 200_000;

/** `sim_find_email` whose provider pads its answer with its input's name, repeated to PADDED_FIND_CHARS: a large answer a receipt stores. */
export const testPaddedFind = defineTool({
  ...simFindEmail,
  id: "test_padded_find",
  async execute(input, call) {
    const padding = input.name.repeat(Math.ceil(PADDED_FIND_CHARS / input.name.length)).slice(0, PADDED_FIND_CHARS);
    return { ...(await simFindEmail.execute(input, call)), padding };
  },
});

/**
 * `sim_verify_email` as a provider that ignores idempotency keys, whose batch
 * answers this tool cannot split (a bug in `split`): every member was billed,
 * and none can be told its result.
 */
export const testUnkeyedBrokenSplit = defineTool({
  ...simVerifyEmail,
  id: "test_unkeyed_broken_split",
  idempotent: false,
  recover: undefined,
  batch: {
    ...simVerifyEmail.batch!,
    split: () => {
      throw new Error("the answer's members are not in the order sent");
    },
  },
});

/** `sim_find_email` whose provider wraps its answer 100 levels deep: billed, and no JSON store can hold it. */
export const testDeepFind = defineTool({
  ...simFindEmail,
  id: "test_deep_find",
  async execute(input, call) {
    let answer: unknown = await simFindEmail.execute(input, call);
    for (let i = 0; i < 100; i++) answer = { a: answer };
    return answer as { email: string };
  },
});

/**
 * `sim_find_email` from a provider that answers 403 when rate limited (as
 * Hunter does): the simulator's 429 comes back as a permanent-looking 403
 * `too_many_requests`, which only the tool's `isRateLimit` reads as "slow down".
 */
export const testForbiddenWhenLimitedFind = defineTool({
  ...simFindEmail,
  id: "test_403_limited_find",
  async execute(input, call) {
    const reply = await callSim(call.env, { tool: "sim_find_email", input, idempotencyKey: call.idempotencyKey, signal: call.signal });
    if (reply.status === 429)
      throw new ToolCallError({
        code: "too_many_requests",
        message: "You have reached your rate limit.",
        retryable: false,
        status: 403,
        headers: reply.headers,
      });
    return outputOf<{ email: string }>(reply, call);
  },
  isRateLimit: (error) => error instanceof ToolCallError && error.status === 403 && error.code === "too_many_requests",
});

/**
 * A tool whose provider is unreachable, reached with `call.fetch` as a tool of
 * a real API is: each request counts as the invocation's as it goes out,
 * answered or not.
 */
export const testFetchDown = defineTool({
  id: "test_fetch_down",
  provider: "down",
  version: "1",
  price: 0,
  input: z.object({ n: z.number() }),
  async execute(input, call) {
    try {
      await call.fetch(`https://troupe-provider.invalid/lookup/${input.n}`);
    } catch (error) {
      throw new ToolCallError({ code: "provider_unreachable", message: String(error), retryable: false });
    }
    return { reached: true };
  },
});

export const testTools = [
  testScopedFind,
  testUnkeyedFind,
  testUnkeyedBlindFind,
  testUnkeyedLookupFind,
  testHugeFind,
  testPaddedFind,
  testDeepFind,
  testUnkeyedBrokenSplit,
  testForbiddenWhenLimitedFind,
  testFetchDown,
];
