/**
 * `/v1/pacing/<provider>`: the caller's org's pacing of one provider.
 *
 * - `GET` → `{ provider, policy, override, state }`
 * - `PUT` with a partial `{ requestsPerSecond, concurrency, batchParallelism }`
 *   → sets the org's override (e.g. the rate its plan with the provider allows;
 *   tests and the bench tell the gate the simulated provider's `ratePerSecond`)
 * - `DELETE` → back to the defaults in `src/runtime/pacing/policy.ts`, forgetting
 *   what the gate learned from the provider's answers (its next request
 *   probes the provider again)
 *
 * Runs already in progress pick a change up at their next invocation.
 * `state` shows the rate in force and where it comes from: the declared
 * rate, the provider's announced quota (`announcedRequestsPerSecond`), or
 * one learned from its 429s (`learnedRequestsPerSecond`).
 */
import { Hono } from "hono";
import { z } from "zod";
import { validate } from "./errors";
import { readJsonBody } from "./json-body";
import { PacingOverride } from "../runtime/pacing/policy";
import { pacingGate } from "../clients/pacing-gates";

export const pacingRoutes = new Hono<{ Bindings: Env; Variables: { org: string } }>();

const ProviderName = z.string().regex(/^[a-z0-9_-]{1,64}$/, "a provider name: [a-z0-9_-]{1,64}");

const gate = (env: Env, org: string, provider: string) => pacingGate(env, org, provider);

pacingRoutes.get("/:provider", async (c) => {
  const provider = validate(ProviderName, c.req.param("provider"), "the provider", ["provider"]);
  return c.json(await gate(c.env, c.get("org"), provider).state(provider));
});

pacingRoutes.put("/:provider", async (c) => {
  const provider = validate(ProviderName, c.req.param("provider"), "the provider", ["provider"]);
  const override = validate(PacingOverride, await readJsonBody(c.req.raw), "the pacing override");
  return c.json(await gate(c.env, c.get("org"), provider).configure(provider, override));
});

pacingRoutes.delete("/:provider", async (c) => {
  const provider = validate(ProviderName, c.req.param("provider"), "the provider", ["provider"]);
  return c.json(await gate(c.env, c.get("org"), provider).configure(provider, null));
});
