/**
 * The HTTP contract shared by the server's routes and `TroupeClient`
 * (docs/api.md): the request schemas the server validates with, and (from
 * ./responses.ts) the shapes of its answers.
 *
 * This is the lowest layer of the API: it imports only zod, never a Worker
 * or Node API, so the same file runs in the Worker, in Node (the CLI, the
 * tests) and in a browser (the dashboard). Request types are the schemas'
 * *input* types (what a caller sends; the server fills defaults). The
 * client imports them as types only, so zod is not loaded (or bundled) with it.
 */
import { z } from "zod";

/**
 * The most credits a spend cap may name (`maxSpend`, an org's daily limit):
 * spend is counted in whole micro-credits, exact up to 2^53, so a billion
 * credits is far past any run and still counted to the micro-credit.
 */
export const MAX_CREDITS = 1_000_000_000;
/** A cap in credits, as the API takes it. */
export const Credits = z.number().finite().min(0).max(MAX_CREDITS);

export * from "./responses.ts";

/**
 * `POST /v1/runs`, and `POST /v1/runs/estimate`: the play, its input (validated
 * by the play's own schema), rerun flags, limits.
 *
 * @example
 * const body: StartRun = { play: "demo-enrich", input: { csv: "id,name,domain\n1,Ada Lovelace,example.com\n" } };
 */
export const StartRun = z
  .object({
    play: z.string().min(1).max(64),
    input: z.unknown(),
    /** Recompute every row (tool receipts are still reused). */
    force: z.boolean().default(false),
    /** Recompute every row and call providers again: a deliberate re-bill. */
    forceToolRefresh: z.boolean().default(false),
    /** The run's runtime limit, 1 s to 24 h (the default); hitting it fails the run with `deadline_exceeded`. */
    timeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(24 * 3600)
      .optional(),
    /** The most credits the run may bill; past it the run ends `failed` with `spend_cap_reached` (docs/api.md "Spend"). */
    maxSpend: Credits.optional(),
    /** Send again the requests an earlier run left with an unknown outcome (`outcome_unknown`), to providers that ignore idempotency keys. */
    retryUnknown: z.boolean().optional(),
  })
  .strict();
/** The body of a run as a caller sends it (`force` and `forceToolRefresh` default to false). */
export type StartRun = z.input<typeof StartRun>;

/** `POST /v1/runs/<runId>/rerun`: the same play and input as a new run, with new flags and cap. */
export const RerunRequest = z
  .object({
    force: z.boolean().default(false),
    forceToolRefresh: z.boolean().default(false),
    maxSpend: Credits.optional(),
    retryUnknown: z.boolean().optional(),
    /** The rerun's runtime limit; absent, the limit the run it reruns had. */
    timeoutSeconds: StartRun.shape.timeoutSeconds,
  })
  .strict();
export type RerunRequest = z.input<typeof RerunRequest>;

/** `POST /v1/runs/<runId>/signals/<eventKey>`: `data` (any JSON, `null` included) goes to `ctx.waitForEvent(eventKey)`. */
export const SignalRequest = z
  .object({
    // Present, whatever its value: `{}` is a mistake, `{ "data": null }` a signal without payload.
    data: z.custom<unknown>((value) => value !== undefined, { error: "required: the signal's payload (any JSON value, null included)" }),
  })
  .strict();
export type SignalRequest = z.input<typeof SignalRequest>;
