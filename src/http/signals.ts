/** Signals: external events delivered to a play's `ctx.waitForEvent` (API.md "Events and live progress"). */
import { Hono } from "hono";
import { SignalRequest } from "../api/contract";
import { EVENT_KEY } from "../runtime/invocation/waits";
import { TroupeError, ValidationError } from "../core/errors";
import type { AppEnv } from "./context";
import { validate } from "./errors";
import { readJsonBody } from "./json-body";
import { coordinatorOf, idempotencyKeyOf, runNotFound } from "./runs";

/** The largest `data` a signal may carry, as JSON. */
export const MAX_SIGNAL_BYTES = 64 * 1024;

export const signalRoutes = new Hono<AppEnv>();

/**
 * `POST /v1/runs/<runId>/signals/<eventKey>` with `{ "data": ... }` → 202
 * `{ runId, eventKey, status, consumed, duplicate }`. `consumed`: a waiting
 * `ctx.waitForEvent(eventKey)` took it now; otherwise it is kept for the next
 * wait on that key. An `Idempotency-Key` header makes a repeated delivery a
 * no-op. A run that already ended → 409 `run_finished`.
 */
signalRoutes.post("/runs/:runId/signals/:eventKey", async (c) => {
  const runId = c.req.param("runId");
  const eventKey = c.req.param("eventKey");
  const coordinator = coordinatorOf(c.env, runId);
  if (!EVENT_KEY.test(eventKey)) {
    throw new ValidationError(`the event key must match ${EVENT_KEY.source}`, [
      { path: "eventKey", message: `must match ${EVENT_KEY.source}` },
    ]);
  }
  const dedupeKey = idempotencyKeyOf(c.req.raw);
  const { data } = validate(SignalRequest, await readJsonBody(c.req.raw), 'the signal (a JSON object { "data": ... })');
  const size = new TextEncoder().encode(JSON.stringify(data)).length;
  if (size > MAX_SIGNAL_BYTES) {
    throw new ValidationError(`data is ${size} bytes of JSON; a signal carries at most ${MAX_SIGNAL_BYTES}`, [
      { path: "data", message: `at most ${MAX_SIGNAL_BYTES} bytes` },
    ]);
  }
  const result = await coordinator.signal(c.get("org"), eventKey, data, dedupeKey);
  if (result.outcome === "not_found") throw runNotFound(runId);
  if (result.outcome === "full") {
    throw new TroupeError(
      "too_many_signals",
      `run ${runId} keeps ${result.open} signals no wait has taken; a signal goes to a key the play waits on (ctx.waitForEvent)`,
      { httpStatus: 409, details: { open: result.open } },
    );
  }
  if (result.outcome === "key_reused") {
    throw new TroupeError(
      "idempotency_key_reused",
      `this Idempotency-Key was already used for another signal (${JSON.stringify(result.eventKey)}${result.eventKey === eventKey ? " with other data" : ""}); send a new key for a new signal`,
      { httpStatus: 409 },
    );
  }
  if (result.outcome === "finished") {
    // A run ending or past its limit may still show running or waiting: say what stops it.
    const state = {
      ended: `is ${result.status}`,
      cancelling: "is cancelling",
      ending: "is ending (its play has finished)",
      past_limit: "is past its runtime limit (timeoutSeconds) and is being stopped",
    }[result.why];
    throw new TroupeError("run_finished", `run ${runId} ${state}; signals go to runs that are still running or waiting`, {
      httpStatus: 409,
    });
  }
  return c.json({ runId, eventKey, status: result.status, consumed: result.consumed, duplicate: result.duplicate }, 202);
});
