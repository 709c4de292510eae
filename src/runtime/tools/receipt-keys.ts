/** Receipt keys and the idempotency keys derived from them. */
import { canonicalJson, sha256Hex } from "../../core/hash";

export interface ReceiptKeyParts {
  org: string;
  toolId: string;
  toolVersion: string;
  input: unknown;
  /** Digest of the credentials the tool runs with: new credentials, new receipts. */
  authScope: string;
  staleAfterSeconds?: number;
  nowMs: number;
}

/**
 * The identity of a tool call: the same call in any run or play of the org
 * shares it. With `staleAfterSeconds` the key rolls over every that many
 * seconds, so a result older than one bucket is not reused.
 */
export async function receiptKey(parts: ReceiptKeyParts): Promise<string> {
  const bucket = parts.staleAfterSeconds ? Math.floor(parts.nowMs / (parts.staleAfterSeconds * 1000)) : 0;
  const material = canonicalJson([parts.org, parts.toolId, parts.toolVersion, parts.authScope, bucket, parts.input]);
  return `r:${await sha256Hex(material)}`;
}

/** What the provider bills by: stable across retries of one receipt generation. */
export async function idempotencyKey(receipt: string, generation: number): Promise<string> {
  return `tr_${(await sha256Hex(`${receipt}#${generation}`)).slice(0, 40)}`;
}
