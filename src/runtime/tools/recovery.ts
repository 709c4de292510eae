/**
 * Recovery of a taken-over call. When an attempt claims a receipt that another
 * attempt had claimed and never completed (`takeover` on the claim), that
 * attempt may have died after its request reached the provider: billed, with
 * the answer lost. Asking the provider first (`AnyTool.recover`, which
 * neither bills nor counts) stores that answer instead of sending the call a
 * second time. A request with the key still being answered is waited for,
 * within the call's receipt wait.
 */
import type { AnyTool } from "../../play/types";
import { messageOf } from "../../core/errors";
import type { Log } from "../../contracts/events";
import { sleep } from "../../core/time";
import { outboundFetch } from "../../core/outbound";
import type { SubrequestMeter } from "../../core/meter";
import { toolEnv } from "../../play/define";

/** What one recovery needs: the call, its keys, and the invocation's services. */
export interface RecoverCallOptions {
  tool: AnyTool;
  input: unknown;
  idempotencyKey: string;
  authScopeDigest: string;
  env: Env;
  signal: AbortSignal;
  meter: SubrequestMeter;
  /** How long to wait for a request with the key that is still in flight. */
  waitMs: number;
  now(): number;
  log: Log;
}

const POLL_MS = [25, 50, 100, 200, 400];

/** Recoveries per invocation (keyed by its log function), so the ledger gets a line at 1, 10, 100… not one per call. */
const recoveries = new WeakMap<object, number>();

/**
 * What the provider says of the dead attempt's request: its answer
 * (`found`); that it never got it (`known`: the call may go out again); or
 * nothing sure (`known: false`: the tool cannot tell, the lookup failed, or
 * the request was still being answered when the wait ran out). The caller
 * decides what nothing sure allows: a provider that honours idempotency keys
 * replays a call sent again with the same key; one that ignores them would
 * execute and bill it twice.
 */
export type Recovered = { found: true; output: unknown } | { found: false; known: boolean };

export async function recoverCall(o: RecoverCallOptions): Promise<Recovered> {
  const recover = o.tool.recover;
  if (!recover) return { found: false, known: false };
  const until = o.now() + o.waitMs;
  for (let poll = 0; ; poll++) {
    o.signal.throwIfAborted();
    o.meter.lookups++;
    let answer: Awaited<ReturnType<typeof recover>>;
    try {
      answer = await recover(o.idempotencyKey, {
        idempotencyKey: o.idempotencyKey,
        signal: o.signal,
        env: toolEnv(o.tool, o.env),
        authScopeDigest: o.authScopeDigest,
        input: o.input,
        fetch: outboundFetch(o.signal),
      });
    } catch (error) {
      o.log(`${o.tool.id}: could not ask the provider for the result of a taken-over call (${messageOf(error)})`);
      return { found: false, known: false };
    }
    if (answer.found) {
      const count = (recoveries.get(o.log) ?? 0) + 1;
      recoveries.set(o.log, count);
      if (Number.isInteger(Math.log10(count))) {
        o.log(
          `${o.tool.id}: recovered the provider's result of a call taken over from a dead attempt instead of calling it again (${count} in this invocation so far)`,
          "call_recovered",
        );
      }
      return { found: true, output: answer.output };
    }
    if (!answer.inFlight) return { found: false, known: true };
    const left = until - o.now();
    if (left <= 0) return { found: false, known: false };
    await sleep(Math.min(left, POLL_MS[Math.min(poll, POLL_MS.length - 1)]!), o.signal);
  }
}
