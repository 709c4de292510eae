/** Turns a map's input rows into keyed rows: explicit keys deduped, else content hash plus index. */
import { messageOf, TerminalError } from "../../core/errors";
import { canonicalJson, sha256Hex } from "../../core/hash";
import { hasLoneSurrogate } from "../../core/utf8";
import type { PlannedRow } from "../../contracts/shards";
import type { MapOptions, Row } from "../../play/types";

export interface RowPlan {
  rows: PlannedRow[];
  duplicatesDropped: number;
}

const MAX_KEY_LENGTH = 512;

export async function planRows(rows: readonly Row[], key: MapOptions["key"]): Promise<RowPlan> {
  const planned: PlannedRow[] = [];
  if (key === undefined) {
    for (let i = 0; i < rows.length; i++) {
      const input = rows[i]!;
      planned.push({ key: await contentKey(input, i), index: i, input });
    }
    return { rows: planned, duplicatesDropped: 0 };
  }
  const seen = new Set<string>();
  let duplicatesDropped = 0;
  rows.forEach((input, i) => {
    const k = keyOfRow(input, i, key);
    if (typeof k !== "string") throw new TerminalError("invalid_row_key", `row ${i} ${k.error}`);
    if (seen.has(k)) {
      duplicatesDropped++;
      return;
    }
    seen.add(k);
    planned.push({ key: k, index: planned.length, input });
  });
  return { rows: planned, duplicatesDropped };
}

/** Row `i`'s key by the map's explicit `key` option, or why it has none. */
export function keyOfRow(input: Row, i: number, key: NonNullable<MapOptions["key"]>): string | { error: string } {
  // Own fields only: a row without the key field has no key, even when the field is named like an Object.prototype member.
  let raw: unknown;
  try {
    raw = typeof key === "function" ? key(input, i) : Object.hasOwn(input, key) ? input[key] : undefined;
  } catch (error) {
    // The row's, not the map's: a key function reading a field the row lacks (`row.email.toLowerCase()`).
    return { error: `has no key (the key function threw: ${messageOf(error).slice(0, 500)})` };
  }
  if (raw === undefined || raw === null || raw === "")
    return { error: `has no key (${typeof key === "function" ? "key function" : `field ${JSON.stringify(key)}`} is empty)` };
  // A string, or a number or bigint written as one (7 and "7" are one row). Anything else written as a string collides:
  // every object is "[object Object]", every promise of an async key function "[object Promise]".
  const kind = typeof raw;
  if (kind !== "string" && !(kind === "number" && Number.isFinite(raw)) && kind !== "bigint") {
    const what =
      raw instanceof Promise ? "a promise (a key function must not be async)" : kind === "number" ? String(raw) : `of type ${kind}`;
    return { error: `has a key that is ${what}, not a string or a number` };
  }
  // JSON parses a whole number past 2^53 to the nearest double: distinct ids sent as digits would be one row, keyed by
  // digits no one sent.
  if (kind === "number" && Number.isInteger(raw) && !Number.isSafeInteger(raw))
    return {
      error: `has a key that is a number past ${Number.MAX_SAFE_INTEGER} (${String(raw)}), whose last digits JSON does not keep: send the id as a string`,
    };
  const k = String(raw);
  if (k.length > MAX_KEY_LENGTH) return { error: `has a key longer than ${MAX_KEY_LENGTH} characters` };
  // Storage writes a lone surrogate as U+FFFD: the stored key would not be the row's.
  if (hasLoneSurrogate(k)) return { error: "has a key that is not well-formed Unicode (a lone surrogate, as `\\ud800` in JSON)" };
  return k;
}

/** The key of row `i` of a map without a `key` option: its content's hash and its place. */
export async function contentKey(input: Row, i: number): Promise<string> {
  return `#${(await sha256Hex(canonicalJson(input))).slice(0, 24)}:${i}`;
}
