/** Shared by the node-side tests: a local server per test file, and bounded polling. */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
// @ts-expect-error: a plain .mjs helper shared with the scripts
import { startServer, stopServer } from "../scripts/local-server.mjs";

/** A `wrangler dev` on 127.0.0.1:`port` with fresh state, and how to stop it. */
export async function localServer(port: number): Promise<{ baseUrl: string; stop(): Promise<void> }> {
  const state = mkdtempSync(join(tmpdir(), "troupe-node-"));
  const child: unknown = await startServer({ port, stateDir: state });
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    async stop() {
      await stopServer(child);
      rmSync(state, { recursive: true, force: true });
    },
  };
}

/**
 * Polls `read` until `done` holds for its value, at most `attempts` times
 * `intervalMs` apart; throws with the last value otherwise.
 */
export async function until<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  options: { attempts?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const { attempts = 150, intervalMs = 100, what = "the condition" } = options;
  let last: T | undefined;
  for (let i = 0; i < attempts; i++) {
    last = await read();
    if (done(last)) return last;
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`${what} did not hold after ${attempts} polls; last value: ${JSON.stringify(last)}`);
}
