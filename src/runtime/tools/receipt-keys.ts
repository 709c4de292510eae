/** Receipt keys and the idempotency keys derived from them. */
import { canonicalJson, sha256Hex } from "../../core/hash";

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
