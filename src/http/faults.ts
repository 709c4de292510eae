/**
 * `/v1/test/faults`: the fault plan over HTTP, for black-box tests. Answers
 * 404 unless the Worker runs with `TROUPE_TEST_MODE=on` and the `FAULTS`
 * binding exists, so production config never reaches it.
 *
 * - `GET` → `{ plan, counts, hits, credentials }`
 * - `PUT` with a {@link FaultPlan} → the new state (counters zeroed)
 * - `DELETE` → clears rules, counters and credentials
 */
import { Hono } from "hono";
import { validate } from "./errors";
import { NotFoundError } from "../core/errors";
import { readJson } from "../sim/protocol";
import { FAULT_OBJECT_NAME, FaultPlan } from "../clients/faults";

export const testRoutes = new Hono<{ Bindings: Env }>();

function injector(env: Env) {
  if (env.TROUPE_TEST_MODE !== "on" || !env.FAULTS) throw new NotFoundError("not_found", "no such route");
  return env.FAULTS.getByName(FAULT_OBJECT_NAME);
}

testRoutes.get("/faults", async (c) => c.json(await injector(c.env).state()));
testRoutes.put("/faults", async (c) => {
  const stub = injector(c.env);
  return c.json(await stub.setPlan(validate(FaultPlan, await readJson(c.req.raw), "the fault plan")));
});
testRoutes.delete("/faults", async (c) => c.json(await injector(c.env).clear()));
