/**
 * The capture sources an executor was answered: what its coordinator's
 * invocation had done when it ran a map (capture.ts replays the play up to
 * there). One carries the run's input (up to 16 MiB), so they are kept for
 * the executor object's life, by epoch, coordinator invocation and map: a
 * source asked while an earlier map ran has that map unsettled, and a replay
 * for a later one would stop there.
 *
 * A kept source is only as good as the invocation that answered it. An
 * attempt that starts in a later invocation of the executor (held while
 * another drained, or wound down) may start after that invocation ended (a
 * coordinator restart): taking the kept source, it would lease rows and call
 * providers for an epoch fenced off, on shards the next epoch has not
 * claimed at yet. So each executor invocation asks once whether the
 * coordinator's invocation still answers (a small answer, not the source)
 * before its attempts take a kept source. A sweep takes one as it is: it
 * leases nothing.
 */
import type { CaptureSource, CoordinatorLink } from "../../clients/executors";

/** Which source: the epoch, the coordinator's invocation that assigned the work, and the map. */
export interface SourceAt {
  attemptSeq: number;
  map: string;
  invocation?: string;
}

type Asking = Pick<CoordinatorLink, "captureSource">;

/**
 * Whether asking for a source failed because the source is past what one call carries (32 MiB serialized): the
 * run's input in hand (24 MiB of rows as JSON, twice that in memory once one character is past Latin-1) and its
 * play-level answers. The platform's own refusal, the same locally and deployed; asking again cannot help.
 */
export function sourceTooLarge(error: unknown): boolean {
  return error instanceof Error && /Serialized RPC arguments or return values are limited/.test(error.message);
}

/**
 * Why the source of an invocation whose stored input is `inputJson` and whose play-level effects so far are
 * `effects` cannot be sent to an executor (it weighs more than `budgetBytes`: the policy's `sourceBudgetBytes`), or
 * null when it can. Strings serialize at one byte a character, two once one character is past Latin-1, so the check
 * is of bytes, not characters. The coordinator asks before it sends a map to executors: each executor asking for a
 * source the platform refuses to carry costs a call and an uncaught exception in the coordinator, and ends the same
 * way (the map runs there).
 */
export function sourceOverBudget(inputJson: string, effects: unknown, budgetBytes: number): string | null {
  let effectsJson: string;
  try {
    effectsJson = JSON.stringify(effects) ?? "";
  } catch {
    return null; // Not JSON: the platform's own refusal (sourceTooLarge) still decides.
  }
  const bytes = serializedBytes(inputJson) + serializedBytes(effectsJson);
  if (bytes <= budgetBytes) return null;
  return `its play's source is too large to send to an executor (${(bytes / 2 ** 20).toFixed(1)} MiB serialized; one call carries 32 MiB)`;
}

function serializedBytes(text: string): number {
  return /[\u0100-\uffff]/.test(text) ? 2 * text.length : text.length;
}

export class CaptureSources {
  #kept = new Map<string, Promise<CaptureSource | null>>();

  /** For a sweep: a kept source as it is, else asked (and kept). */
  forSweep(link: Asking, at: SourceAt): Promise<CaptureSource | null> {
    const key = keyOf(at);
    return this.#kept.get(key) ?? this.#keep(key, this.#ask(link, at));
  }

  /**
   * For an attempt of the executor invocation whose confirmed keys are `confirmed`: a source kept from an earlier
   * one is taken once the coordinator's invocation that answered it is confirmed to answer still; null when it no
   * longer does (the attempt's invocation ended).
   */
  forAttempt(link: Asking, at: SourceAt, confirmed: Set<string>): Promise<CaptureSource | null> {
    const key = keyOf(at);
    const kept = this.#kept.get(key);
    if (kept && confirmed.has(key)) return kept;
    confirmed.add(key);
    const asked = kept
      ? kept.then(async (source) => {
          if (!source?.invocation) return source;
          const answer = await link.captureSource(at.attemptSeq, source.invocation);
          return answer === "unchanged" ? source : mine(answer, at);
        })
      : this.#ask(link, at);
    // A failed ask is asked again by the next attempt.
    asked.catch(() => confirmed.delete(key));
    return this.#keep(key, asked);
  }

  #ask(link: Asking, at: SourceAt): Promise<CaptureSource | null> {
    return link.captureSource(at.attemptSeq).then((answer) => mine(answer === "unchanged" ? null : answer, at));
  }

  #keep(key: string, source: Promise<CaptureSource | null>): Promise<CaptureSource | null> {
    const [seq, by] = key.split(":");
    // An older epoch's sources are done with (its attempts are fenced off), and so are another invocation's.
    for (const older of this.#kept.keys()) {
      const [olderSeq, olderBy] = older.split(":");
      if (Number(olderSeq) < Number(seq) || (by && olderSeq === seq && olderBy !== by)) this.#kept.delete(older);
    }
    this.#kept.set(key, source);
    source.catch(() => {
      if (this.#kept.get(key) === source) this.#kept.delete(key);
    });
    return source;
  }
}

function keyOf({ attemptSeq, invocation, map }: SourceAt): string {
  return `${attemptSeq}:${invocation ?? ""}:${map}`;
}

/** The answer, if it is the invocation's that assigned the work (null: another invocation answers now). */
function mine(answer: CaptureSource | null, at: SourceAt): CaptureSource | null {
  return answer && at.invocation && answer.invocation && answer.invocation !== at.invocation ? null : answer;
}
