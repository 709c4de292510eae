/**
 * The simulated provider's internal HTTP surface, served by the `SimProvider`
 * object (reached through its stub, so the host is irrelevant):
 *
 * - `POST /call` (`Idempotency-Key` header, body {@link CallBody}) → `{ output }`
 * - `POST /batch` (body {@link BatchBody}) → `{ results: BatchMemberResult[] }`
 * - `GET /result?key=<idempotency key>` → `{ found: true, output }` or
 *   `{ found: false, inFlight }`: what a request under the key was answered,
 *   without billing or counting it as a call (how a caller that lost a
 *   response recovers it instead of asking again); limited like a call
 * - `GET /stats`, `GET /config`, `PUT /config` ({@link SimConfigPatch}), `POST /reset`
 *
 * Every request to `/call` and `/batch` is counted, then refused if more than
 * `maxConcurrent` are being answered (a lookup too), then rate-limited (a lookup too; its
 * answer stating the limit in the configured header style), then validated,
 * then delayed by `latencyMs`, then settled by the store in one synchronous
 * step. While a request to `/call`, `/batch` or `/result` is being answered it
 * is in flight: the store keeps the peak, overall and per caller (the
 * `X-Sim-Caller` header), which is how tests see an object's outbound gate.
 *
 * An idempotency key is bound to the tool and input it was first sent with:
 * sent again with either changed, it is refused `422 idempotency_key_reused`
 * and not billed (`SimStore.settle`). In a batch that is one member's answer,
 * like any member's failure: the batch is still `200` and the other members
 * are settled as usual.
 */
import { Hono, type Context, type MiddlewareHandler } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { TroupeError, ValidationError } from "../core/errors";
import {
  BatchBody,
  CallBody,
  parse,
  readJson,
  SIM_CALLER_HEADER,
  SimConfigPatch,
  type BatchMemberResult,
  type SimErrorBody,
} from "./protocol";
import { limitHeaders } from "./limit-headers";
import { ArrivalWindow, SlidingWindowLimiter } from "./rate-limiter";
import type { SimStore } from "./sim-store";
import { BATCHABLE_TOOLS, isSimTool, type SimToolName } from "./simulator";

/** What the app needs from its host. */
export interface SimAppOptions {
  store: SimStore;
  /** Defaults to `Date.now`. */
  now?: () => number;
  /** Defaults to a `setTimeout` promise. */
  sleep?: (ms: number) => Promise<void>;
}

/** Builds the simulator's request handler over `store`; one per object instance. */
export function createSimApp(options: SimAppOptions): Hono {
  const { store } = options;
  const now = options.now ?? Date.now;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const limiter = new SlidingWindowLimiter();
  const arrivals = new ArrivalWindow();
  /**
   * Keys of requests admitted and not yet settled: how many under each key, and until when the latest may still
   * settle (memory only: they die with the object). A key sent again while the first is answered stays in flight
   * until both are.
   */
  const inFlight = new Map<string, { requests: number; until: number }>();
  /** Provider requests being answered now, overall and per caller (memory only: they die with the object). */
  const answering = { total: 0, byCaller: new Map<string, number>() };
  const app = new Hono();

  /** Marks a provider request in flight until it is answered, raising the stored peaks. */
  const tracked: MiddlewareHandler = async (c, next) => {
    const caller = c.req.header(SIM_CALLER_HEADER) ?? null;
    const callerInFlight = caller === null ? 0 : (answering.byCaller.get(caller) ?? 0) + 1;
    answering.total++;
    if (caller !== null) answering.byCaller.set(caller, callerInFlight);
    store.recordInFlight({ inFlight: answering.total, caller, callerInFlight });
    try {
      await next();
    } finally {
      answering.total--;
      if (caller !== null) {
        const left = answering.byCaller.get(caller)! - 1;
        if (left > 0) answering.byCaller.set(caller, left);
        else answering.byCaller.delete(caller);
      }
    }
  };
  for (const path of ["/call", "/batch", "/result"]) app.use(path, tracked);

  /** Runs `settle` with `keys` marked in flight until it returns. */
  const settling = async <T>(keys: string[], settle: () => Promise<T>): Promise<T> => {
    const until = now() + store.config().latencyMs + 5_000;
    for (const key of keys) inFlight.set(key, { requests: (inFlight.get(key)?.requests ?? 0) + 1, until });
    try {
      return await settle();
    } finally {
      for (const key of keys) {
        const left = inFlight.get(key)!;
        if (left.requests > 1) inFlight.set(key, { ...left, requests: left.requests - 1 });
        else inFlight.delete(key);
      }
    }
  };

  /**
   * Counts the request, then answers `429` if it is over the concurrency or the rate limit.
   * Under a limit, the answer (whatever it turns out to be) states the limit
   * in the configured `rateLimitHeaders` style.
   */
  const admit = (c: Context, tool: SimToolName | null, batch: boolean): Response | null => {
    store.recordRequest({ tool, batch });
    return limit(c);
  };

  /** Answers `429` if the request (a call, a batch or a lookup) is over the concurrency or the rate limit; see `admit`. */
  const limit = (c: Context): Response | null => {
    const at = now();
    store.recordObservedRate(arrivals.record(at));
    const { ratePerSecond, rateLimitHeaders, maxConcurrent, latencyMs } = store.config();
    // This request is among those being answered (`tracked`); a slot frees within one latency.
    if (maxConcurrent !== null && answering.total > maxConcurrent) {
      if (rateLimitHeaders !== "none") {
        c.header("Retry-After", String(Math.max(1, Math.ceil(latencyMs / 1000))));
        c.header("Retry-After-Ms", String(Math.max(1, latencyMs)));
      }
      // Under a rate limit too, the answer states it, as every answer does (API.md).
      if (ratePerSecond !== null) {
        const state = { limit: ratePerSecond, ...limiter.state(at, ratePerSecond), retryAfterMs: null };
        for (const [name, value] of Object.entries(limitHeaders(rateLimitHeaders, state))) c.header(name, value);
      }
      store.recordRateLimited();
      return c.json<SimErrorBody>(
        { error: { code: "too_many_concurrent_requests", message: `Over ${maxConcurrent} requests at once; retry when one is answered.` } },
        429,
      );
    }
    const admission = limiter.admit(at, ratePerSecond);
    if (ratePerSecond === null) return null;
    const retryAfterMs = admission.admitted ? null : Math.ceil(admission.retryAfterMs);
    const state = { limit: ratePerSecond, ...limiter.state(at, ratePerSecond), retryAfterMs };
    for (const [name, value] of Object.entries(limitHeaders(rateLimitHeaders, state))) c.header(name, value);
    if (retryAfterMs === null) return null;
    store.recordRateLimited();
    return c.json<SimErrorBody>(
      { error: { code: "rate_limited", message: `Over ${ratePerSecond} requests per second; retry after ${retryAfterMs} ms.` } },
      429,
    );
  };

  /** Resets so far: a request admitted before one is answered 503 unbilled and uncounted, as a restarted provider would. */
  let resets = 0;
  /** Sleeps the configured latency; false when the simulator was reset meanwhile (the request is dropped). */
  const delay = async (): Promise<boolean> => {
    const before = resets;
    const { latencyMs } = store.config();
    if (latencyMs > 0) await sleep(latencyMs);
    return resets === before;
  };
  const dropped = (c: Context) =>
    c.json<SimErrorBody>(
      { error: { code: "sim_reset", message: "The simulator was reset while this request was in flight; send it again." } },
      503,
    );

  app.post("/call", async (c) => {
    // Counted and limited before its body is read: a malformed request is a request too (protocol.ts).
    const read = await readJson(c.req.raw).then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    const raw = "value" in read ? read.value : undefined;
    const limited = admit(c, knownTool(raw), false);
    if (limited) return limited;
    if ("error" in read) throw read.error;
    const body = parse(CallBody, raw, "call body");
    const key = c.req.header("Idempotency-Key");
    if (!key) throw new ValidationError("The Idempotency-Key header is required.", [{ path: "Idempotency-Key", message: "Required" }]);
    const callTool = requireTool(body.tool);
    const settlement = await settling([key], async () => ((await delay()) ? store.settle(callTool, key, body.input) : null));
    if (settlement === null) return dropped(c);
    if (settlement.status === 200) return c.json({ output: settlement.output }, 200);
    return c.json<SimErrorBody>({ error: settlement.error }, settlement.status);
  });

  app.post("/batch", async (c) => {
    // Counted and limited before its body is read: a malformed request is a request too (protocol.ts).
    const read = await readJson(c.req.raw).then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    );
    const raw = "value" in read ? read.value : undefined;
    const limited = admit(c, knownTool(raw), true);
    if (limited) return limited;
    if ("error" in read) throw read.error;
    const body = parse(BatchBody, raw, "batch body");
    const batchTool = requireTool(body.tool);
    if (!BATCHABLE_TOOLS.has(batchTool))
      throw new ValidationError(`${batchTool} cannot be batched; call it once per input.`, [{ path: "tool", message: "Not batchable" }]);
    const { batchMaxSize } = store.config();
    if (body.members.length > batchMaxSize) {
      throw new ValidationError(`A batch holds at most ${batchMaxSize} members; got ${body.members.length}.`, [
        { path: "members", message: `At most ${batchMaxSize}` },
      ]);
    }
    const results = await settling(
      body.members.map((m) => m.idempotencyKey),
      async () => {
        if (!(await delay())) return null;
        return body.members.map((member): BatchMemberResult => {
          const settlement = store.settle(batchTool, member.idempotencyKey, member.input);
          return settlement.status === 200
            ? { status: 200, output: settlement.output }
            : { status: settlement.status, error: settlement.error };
        });
      },
    );
    if (results === null) return dropped(c);
    return c.json({ results }, 200);
  });

  app.get("/result", (c) => {
    // A lookup is a request to the provider's API like a call: limited as one, though neither counted as a call nor billed.
    const limited = limit(c);
    if (limited) return limited;
    const key = c.req.query("key");
    if (!key) throw new ValidationError("The key query parameter is required.", [{ path: "key", message: "Required" }]);
    const billed = store.billedOutput(key);
    if (billed) return c.json({ found: true, output: billed.output });
    const held = inFlight.get(key);
    return c.json({ found: false, inFlight: held !== undefined && held.until > now() });
  });

  app.get("/stats", (c) => c.json(store.stats()));
  app.get("/config", (c) => c.json(store.config()));
  app.put("/config", async (c) => c.json(store.updateConfig(parse(SimConfigPatch, await readJson(c.req.raw), "config"))));
  app.post("/reset", (c) => {
    resets++;
    store.reset();
    limiter.clear();
    arrivals.clear();
    return c.json(store.stats());
  });

  app.notFound((c) => c.json<SimErrorBody>({ error: { code: "not_found", message: `No route ${c.req.method} ${c.req.path}.` } }, 404));
  app.onError((error, c) => {
    if (error instanceof TroupeError && error.httpStatus < 500) {
      const body: SimErrorBody = {
        error: { code: error.code, message: error.message, ...(error.details === undefined ? {} : { details: error.details }) },
      };
      return c.json(body, error.httpStatus as ContentfulStatusCode);
    }
    console.error("sim provider failed", error);
    return c.json<SimErrorBody>({ error: { code: "internal_error", message: "The simulated provider failed unexpectedly." } }, 500);
  });
  return app;
}

function knownTool(raw: unknown): SimToolName | null {
  const tool = raw && typeof raw === "object" ? (raw as { tool?: unknown }).tool : undefined;
  return typeof tool === "string" && isSimTool(tool) ? tool : null;
}

function requireTool(tool: string): SimToolName {
  if (!isSimTool(tool)) throw new TroupeError("unknown_tool", `The simulator has no tool "${tool}".`, { httpStatus: 400 });
  return tool;
}
