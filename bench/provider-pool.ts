/**
 * What a user writes without Troupe to enrich rows over the simulated
 * provider: per row, `sim_find_email` then `sim_verify_email` of the email it
 * found, each retried on 429 and 503 after the wait the provider asks for; and
 * `Promise.all` over a fixed number of lanes to bound the rows in flight.
 * Nothing here is durable: a crash loses every row not yet returned.
 */
import type { SubrequestMeter } from "../src/core/meter";
import { callSim, type SimEnv, type SimReply } from "../src/sim/client";

/** One input row, as `demo-enrich` takes it. */
export interface BenchRow {
  id: string;
  name: string;
  domain: string;
}

/** What the bench learns of one row. */
export interface RowOutcome {
  id: string;
  email: string | null;
  verdict: string | null;
}

/**
 * Runs `work` over `items` with at most `concurrency` at once, starting no
 * item after `untilMs` (epoch ms). Resolves with how many items it finished.
 */
export async function pool<T>(items: readonly T[], options: { concurrency: number; untilMs: number }, work: (item: T) => Promise<unknown>) {
  let next = 0;
  let finished = 0;
  const lane = async () => {
    while (next < items.length && Date.now() < options.untilMs) {
      const item = items[next++]!;
      await work(item);
      finished++;
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency, items.length) }, lane));
  return { finished };
}

/**
 * Enriches one row with two provider calls (keys `<prefix>:<id>:find` and
 * `:verify`), counting each request on `meter` (which throws past the
 * platform's subrequest cap under emulation, as production would).
 */
export async function enrichRow(env: SimEnv, row: BenchRow, options: { keyPrefix: string; meter: SubrequestMeter }): Promise<RowOutcome> {
  const found = await callUntilAnswered(env, options.meter, {
    tool: "sim_find_email",
    input: { name: row.name, domain: row.domain },
    idempotencyKey: `${options.keyPrefix}:${row.id}:find`,
  });
  const email: string | null = found.status === 200 ? found.body.output.email : null;
  if (email === null) return { id: row.id, email, verdict: null };
  const verified = await callUntilAnswered(env, options.meter, {
    tool: "sim_verify_email",
    input: { email },
    idempotencyKey: `${options.keyPrefix}:${row.id}:verify`,
  });
  return { id: row.id, email, verdict: verified.status === 200 ? verified.body.output.verdict : null };
}

/** Sends the call until it is answered with neither 429 nor 503, waiting what the provider asks (plus up to 50 ms of jitter). */
async function callUntilAnswered(
  env: SimEnv,
  meter: SubrequestMeter,
  request: { tool: string; input: unknown; idempotencyKey: string },
): Promise<SimReply> {
  for (;;) {
    meter.provider++;
    const reply = await callSim(env, request);
    if (reply.status !== 429 && reply.status !== 503) return reply;
    const waitMs = Number(reply.headers.get("Retry-After-Ms") ?? Number(reply.headers.get("Retry-After") ?? 1) * 1000);
    await new Promise((resolve) => setTimeout(resolve, waitMs + Math.random() * 50));
  }
}
