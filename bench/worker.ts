/**
 * The bench's baselines (bench/wrangler.toml; driven by scripts/bench.mjs):
 * the same provider calls Troupe makes for `demo-enrich`, made the ways a user
 * would without Troupe, against this Worker's own simulated provider.
 *
 * - `POST /pool` `{ rows, concurrency, limits, seconds, keyPrefix }`: a
 *   `Promise.all` pool in this one invocation. With `limits: "emulate"` it
 *   has the 6 requests in flight and 10,000 subrequests one invocation has in
 *   production; `"off"` shows it without them, for reference. Answers when
 *   every row is done, or after `seconds` once the requests already sent are
 *   answered (the rest are never sent).
 * - `POST /workflows` `{ rows, concurrency, limits, keyPrefix }` → `{ id }`:
 *   a {@link RowsWorkflow} instance; `GET /workflows/<id>` its status,
 *   `POST /workflows/<id>/terminate` stops it.
 * - `/v1/sim/*`: the simulated provider's stats, config and reset, as on
 *   Troupe's own server.
 */
import { WorkflowEntrypoint, type WorkflowEvent, type WorkflowStep } from "cloudflare:workers";
import { Hono } from "hono";
import { z } from "zod";
import { TroupeError } from "../src/core/errors";
import { SubrequestMeter } from "../src/core/meter";
import { withOutbound, withSendStop } from "../src/core/outbound";
import { outboundGateFor, subrequestCapFor } from "../src/core/platform-limits";
import { simRoutes } from "../src/http/sim";
import { enrichRow, pool } from "./provider-pool";

export { SimProvider } from "../src/actors/SimProvider";

const Rows = z.array(z.object({ id: z.string(), name: z.string(), domain: z.string() })).min(1);

/** What the pool and the Workflow are asked to do. */
const RowsRequest = z.object({
  rows: Rows,
  concurrency: z.number().int().min(1).max(10_000),
  limits: z.enum(["emulate", "off"]),
  keyPrefix: z.string().min(1),
  seconds: z.number().positive().optional(),
});
type RowsRequest = z.infer<typeof RowsRequest>;

interface BenchEnv {
  SIM: Env["SIM"];
  ROWS: Workflow<RowsRequest>;
  PLATFORM_LIMITS?: string;
}

/** The outbound gate of one invocation: the platform's six slots, unless the request turned the limits off. */
function gateFor(env: BenchEnv, limits: RowsRequest["limits"]) {
  return limits === "emulate" ? outboundGateFor(env) : null;
}

/**
 * One `step.do` per row, the rows' steps run `concurrency` at a time (the way
 * Workflows run steps concurrently: `Promise.all`). The instance is one
 * invocation, so under emulation its provider requests share six slots.
 */
export class RowsWorkflow extends WorkflowEntrypoint<BenchEnv, RowsRequest> {
  override async run(event: Readonly<WorkflowEvent<RowsRequest>>, step: WorkflowStep) {
    const { rows, concurrency, limits, keyPrefix } = event.payload;
    // Made once per run of the instance; each step's callback enters it itself (a callback is called back
    // by the Workflow engine, outside this call's async context).
    const outbound = { caller: `Workflow:${event.instanceId}`, gate: gateFor(this.env, limits) };
    const meter = new SubrequestMeter();
    const { finished } = await pool(rows, { concurrency, untilMs: Number.POSITIVE_INFINITY }, (row) =>
      step.do(`row ${row.id}`, () => withOutbound(outbound, () => enrichRow(this.env, row, { keyPrefix, meter }))),
    );
    return { rows: finished };
  }
}

const app = new Hono<{ Bindings: BenchEnv }>();

app.get("/", (c) => c.text("troupe bench worker"));

app.post("/pool", async (c) => {
  const request = RowsRequest.parse(await c.req.json());
  const emulate = request.limits === "emulate";
  const meter = new SubrequestMeter({ cap: emulate ? subrequestCapFor(c.env) : null });
  const outbound = { caller: `BenchPool:${request.limits}`, gate: gateFor(c.env, request.limits) };
  const startedAt = Date.now();
  const seconds = request.seconds ?? 600;
  // At `seconds` the pool starts no row, and requests still waiting for a slot are never sent.
  const stop = AbortSignal.timeout(seconds * 1000);
  let done = 0;
  const enrich = async (row: (typeof request.rows)[number]) => {
    try {
      await enrichRow(c.env, row, { keyPrefix: request.keyPrefix, meter });
      done++;
    } catch (error) {
      if (!stop.aborted) throw error;
    }
  };
  try {
    await withOutbound(outbound, () =>
      withSendStop(stop, () => pool(request.rows, { concurrency: request.concurrency, untilMs: startedAt + seconds * 1000 }, enrich)),
    );
    return c.json({ rows: done, seconds: (Date.now() - startedAt) / 1000, requests: meter.provider, error: null });
  } catch (error) {
    // What the user's invocation would have died of (under emulation: the subrequest cap).
    const message = error instanceof Error ? error.message : String(error);
    return c.json({ rows: null, seconds: (Date.now() - startedAt) / 1000, requests: meter.provider, error: message });
  }
});

app.post("/workflows", async (c) => {
  const request = RowsRequest.parse(await c.req.json());
  const instance = await c.env.ROWS.create({ params: request });
  return c.json({ id: instance.id });
});

app.get("/workflows/:id", async (c) => c.json(await (await c.env.ROWS.get(c.req.param("id"))).status()));

app.post("/workflows/:id/terminate", async (c) => {
  await (await c.env.ROWS.get(c.req.param("id"))).terminate();
  return c.json({ terminated: true });
});

// The sim's routes read only the SIM binding, which this Worker has too.
app.route("/v1/sim", simRoutes as unknown as Hono<{ Bindings: BenchEnv }>);

app.onError((error, c) => {
  const status = error instanceof z.ZodError ? 400 : error instanceof TroupeError ? error.httpStatus : 500;
  return c.json({ error: { code: error instanceof TroupeError ? error.code : "bench_error", message: error.message } }, status as 400);
});

export default app satisfies ExportedHandler<BenchEnv>;
