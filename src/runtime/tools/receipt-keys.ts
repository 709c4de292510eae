/** Receipt keys and the idempotency keys derived from them. */
import { canonicalJson, sha256Hex } from "../../core/hash";
import { ToolCallError } from "../../play/tool-error";

export interface ReceiptKeyParts {
  org: string;
  toolId: string;
  toolVersion: string;
  input: unknown;
  /** Digest of the credentials the tool runs with: new credentials, new receipts. */
  authScope: string;
}

/**
 * The identity of a tool call: the same call in any run or play of the org
 * shares it, whatever its `staleAfterSeconds` (the receipt says how old its
 * result is, and a claim decides whether it is stale: a key that rolled over
 * with the clock gave a call retried, redispatched or replayed across a
 * boundary a new key, and a second bill).
 */
export async function receiptKey(parts: ReceiptKeyParts): Promise<string> {
  // The 0 stands where a stale-after bucket was: keys of calls without `staleAfterSeconds` stay as they were.
  const material = canonicalJson([parts.org, parts.toolId, parts.toolVersion, parts.authScope, 0, parts.input]);
  return `r:${await sha256Hex(material)}`;
}

/** What the provider bills by: stable across retries of one receipt generation. */
export async function idempotencyKey(receipt: string, generation: number): Promise<string> {
  return `tr_${(await sha256Hex(`${receipt}#${generation}`)).slice(0, 40)}`;
}

/**
 * A call's `staleAfterSeconds` as the time (ms) before which a result another run finished is stale, reckoned from
 * `startedAt` (the run's start), not from now: a replay or a redispatch of the call judges a result as its first
 * pass did, so it reuses what that pass reused. Undefined without one; a value that is not a number ≥ 0 fails the call.
 */
export function staleBeforeOf(staleAfterSeconds: unknown, startedAt: number): number | undefined {
  if (staleAfterSeconds === undefined) return undefined;
  if (!(typeof staleAfterSeconds === "number" && Number.isFinite(staleAfterSeconds) && staleAfterSeconds >= 0))
    throw new ToolCallError({ code: "invalid_tool_options", message: "staleAfterSeconds must be a number ≥ 0", retryable: false });
  return Math.max(0, startedAt - staleAfterSeconds * 1000);
}
