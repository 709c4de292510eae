/**
 * The end a run decided (its play returned, threw or was cancelled; or one
 * found before the play ran), checked and stored as it will be kept: from
 * here on, an invocation that dies leaves it to the next, which carries it
 * out rather than running the play again (run-driver.ts), and a cancel or a
 * signal arriving meanwhile is answered as the run ends.
 */
import { messageOf } from "../../core/errors";
import { utf8BytesPast } from "../../core/utf8";
import type { RunEnding, RunStore } from "../../stores/run-store";

/** The most bytes a play's result may take as JSON, in UTF-8. */
export const MAX_RESULT_BYTES = 1024 * 1024;

/**
 * Stores `end` as the run's ending and returns it. A result is stored in the run's row (2 MB at most) and sent to its
 * watchers and parents: one JSON cannot hold, or a larger one, fails the run instead. An error is redacted of the
 * secrets `redact` knows (the headers this invocation's fetches sent): a next invocation carrying it out knows none.
 */
export function decideEnd(store: RunStore, end: RunEnding, redact: <T>(value: T) => T): RunEnding {
  const decided = end.kind === "completed" ? checkedResult(end.result) : end.kind === "failed" ? { ...end, error: redact(end.error) } : end;
  store.setEnding(decided);
  return decided;
}

function checkedResult(result: unknown): RunEnding {
  let json: string;
  try {
    json = JSON.stringify(result ?? null);
  } catch (error) {
    const message = `the play returned a result JSON cannot hold (${messageOf(error).slice(0, 200)}): return plain data`;
    return { kind: "failed", error: { code: "invalid_result", message } };
  }
  // Counted in UTF-8, as storage counts it (a character is up to three bytes).
  const bytes = utf8BytesPast(json, MAX_RESULT_BYTES);
  if (bytes === null) return { kind: "completed", result };
  return {
    kind: "failed",
    error: {
      code: "result_too_large",
      message: `the play returned a result of ${bytes} bytes as JSON; the limit is ${MAX_RESULT_BYTES}: keep large outputs in a dataset (ctx.map) and return a summary`,
    },
  };
}
