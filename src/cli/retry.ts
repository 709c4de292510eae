/**
 * Asking again what a server busy or restarting could not answer: for
 * requests that are safe to send twice (an upload's part, its complete, a
 * read), never for a submit.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { isTransient } from "../client/index.ts";
import { describeError } from "./exit-codes.ts";

/** The waits before each new try: a restart of the local server, or a blip of the platform's, is over by then. */
export const RETRY_DELAYS_MS = [500, 2_000, 5_000];

/**
 * `send()`, asked again after each of `delays` while it fails in a way asking
 * again may cure (unreachable, 429, 5xx); any other failure, or the last, is
 * thrown. Each new try is said on stderr, naming `what`.
 */
export async function retrying<T>(what: string, send: () => Promise<T>, delays: readonly number[] = RETRY_DELAYS_MS): Promise<T> {
  for (let tries = 0; ; tries++) {
    try {
      return await send();
    } catch (error) {
      const delay = delays[tries];
      if (delay === undefined || !isTransient(error)) throw error;
      process.stderr.write(`troupe: ${what} failed (${describeError(error)}); trying again in ${delay / 1000} s\n`);
      await sleep(delay);
    }
  }
}
