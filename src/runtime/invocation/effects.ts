/**
 * The one path of every effect a play makes through `ctx`: a map, a tool
 * call, a child play, a wait, a sleep, a log line, a fetch. Each call gets its
 * place in the play (its kind, and its ordinal among the calls of that kind
 * and name in this invocation), which is the key a replay finds it under,
 * and the rule of where it may be made is checked here, once, for all of
 * them; then the effect's own store records it or hands back what it
 * recorded (datasets for maps, receipts for tools, the journal for children,
 * waits, sleeps and log lines).
 *
 * Ordinals are per invocation: the play replays from the top in each one, so
 * the nth call of a deterministic play is the same call on every replay.
 */
import { TerminalError } from "../../core/errors";

export type EffectKind = "map" | "tool" | "child" | "wait" | "sleep" | "log" | "fetch";

/** One effect's place in the play. */
export interface EffectCall {
  kind: EffectKind;
  /** What the effect is of: a map's name, a tool id, a child play, an event key (empty when nothing). */
  name: string;
  /** How many effects of this kind and name came before it in this invocation. */
  ordinal: number;
}

/**
 * Where an effect may be made. A wait or a sleep parks the whole run, so a
 * field function (a row) cannot make one; a row's tool calls, child plays,
 * fetches and log lines belong to its row.
 */
const ROW_RULES: Record<EffectKind, "row" | "refused" | "play"> = {
  map: "play",
  // A field's call of the play's `ctx.tool` is its row's (the row's lease, abort and batching; the same receipt).
  tool: "row",
  child: "row",
  wait: "refused",
  sleep: "refused",
  log: "row",
  // A field's call of the play's `ctx.fetch` is its row's: not in the play's trace (a replay in an executor makes it in the row).
  fetch: "row",
};

/** Per invocation: the ordinals handed out so far. */
export class Effects {
  #ordinals = new Map<string, number>();

  /**
   * Makes one effect: `inRow` when a field function is running it, through
   * `row` when the effect belongs to its row, else at play level through
   * `play` with the effect's place. A refused effect rejects with `wait_in_row`.
   */
  make<T>(kind: EffectKind, name: string, inRow: boolean, at: { play(call: EffectCall): T; row?(): T }): T {
    if (inRow && ROW_RULES[kind] === "refused") throw waitInRow(kind);
    if (inRow && ROW_RULES[kind] === "row" && at.row) return at.row();
    const slot = `${kind}:${name}`;
    const ordinal = this.#ordinals.get(slot) ?? 0;
    this.#ordinals.set(slot, ordinal + 1);
    return at.play({ kind, name, ordinal });
  }
}

function waitInRow(kind: EffectKind): TerminalError {
  const what = kind === "sleep" ? "ctx.sleep" : "ctx.waitForEvent";
  return new TerminalError(
    "wait_in_row",
    `${what} parks the whole run, so it cannot be called from a field function; wait before or after ctx.map`,
  );
}
