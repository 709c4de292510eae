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
 * The provider's answer to the dead attempt's request, or null when it has
 * none (or the tool cannot tell): then the call is executed, with the same key.
 */
export async function recoverCall(o: RecoverCallOptions): Promise<{ output: unknown } | null> {
  const recover = o.tool.recover;
  if (!recover) return null;
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
      });
    } catch (error) {
      // Not knowing is not fatal: the call goes out again under the same key, which the provider replays.
      o.log(
        `${o.tool.id}: could not ask the provider for the result of a taken-over call (${messageOf(error)}); calling it again with the same idempotency key`,
      );
      return null;
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
      return { output: answer.output };
    }
    const left = until - o.now();
    if (!answer.inFlight || left <= 0) return null;
    await sleep(Math.min(left, POLL_MS[Math.min(poll, POLL_MS.length - 1)]!), o.signal);
  }
}
