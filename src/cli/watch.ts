/**
 * Watching a run until it ends: the live feed folded into progress and shown
 * by a view, and what Ctrl-C means while it runs.
 */
import { createInterface } from "node:readline/promises";
import type { TroupeClient, RunView } from "../client/index.ts";
import { TERMINAL_STATUSES } from "../client/index.ts";
import { RunProgress } from "./progress.ts";
import { retrying } from "./retry.ts";
import type { RunWatchView } from "./views.ts";

/** How a watch ended: the run ended (its final view), or the CLI detached and the run goes on. */
export type WatchEnd = { kind: "ended"; run: RunView } | { kind: "detached"; status: string };

/** What Ctrl-C does: ask (a terminal on both ends), or detach at once. */
export type InterruptMode = { kind: "ask"; input: NodeJS.ReadableStream; output: NodeJS.WritableStream } | { kind: "detach" };

/** The answer to "cancel or detach?". */
type Choice = "cancel" | "detach" | "watch";

/**
 * Watches `runId` until it ends, showing it with `view`. On SIGINT, asks
 * whether to cancel the run (then keeps watching until it ends `cancelled`),
 * detach, or keep watching; without a terminal, SIGINT detaches.
 */
export async function watchRun(options: {
  client: TroupeClient;
  runId: string;
  view: RunWatchView;
  interrupt: InterruptMode;
}): Promise<WatchEnd> {
  const { client, runId, view, interrupt } = options;
  const progress = new RunProgress(runId);
  const stop = new AbortController();
  let detached = false;
  let asking: AbortController | null = null;

  const detach = () => {
    detached = true;
    stop.abort();
  };
  const onInterrupt = async () => {
    if (interrupt.kind === "detach") return detach();
    // A second Ctrl-C while the question is open: the user wants out; detaching never loses work.
    if (asking) return;
    asking = new AbortController();
    view.pause();
    const choice = await ask(interrupt, runId, progress.status, asking.signal);
    asking = null;
    if (choice === "detach") return detach();
    if (choice === "cancel") {
      view.note(`${runId}: cancelling; watching until it ends`);
      try {
        const answer = await client.cancel(runId);
        view.update(progress, progress.cancelAnswered(answer.status));
      } catch (error) {
        view.note(`${runId}: the cancel was not accepted (${(error as Error).message}); still watching`);
      }
    }
    view.resume(progress);
  };
  const handler = () => void onInterrupt();
  process.on("SIGINT", handler);
  try {
    for await (const message of client.events(runId, { signal: stop.signal })) {
      view.update(progress, progress.apply(message));
    }
  } finally {
    process.off("SIGINT", handler);
    // The run ended while the question was open: the question no longer applies.
    (asking as AbortController | null)?.abort();
  }
  if (detached) {
    view.finish(progress, null);
    return { kind: "detached", status: progress.status };
  }
  // The run has ended: a server restarting just then must not turn its end into a failure of the command.
  const run = await retrying(`reading ${runId}`, () => client.get(runId));
  // The feed ends with the run; a status that is not terminal yet is the view catching up.
  if (!TERMINAL_STATUSES.has(run.status)) view.note(`${runId}: the live feed ended while the run is ${run.status}`);
  progress.applyFinal(run);
  view.finish(progress, run);
  return { kind: "ended", run };
}

/** Asks on the terminal; a second Ctrl-C detaches, an aborted question keeps watching. */
async function ask(
  interrupt: Extract<InterruptMode, { kind: "ask" }>,
  runId: string,
  status: string,
  signal: AbortSignal,
): Promise<Choice> {
  const rl = createInterface({ input: interrupt.input, output: interrupt.output, terminal: true });
  const interrupted = new Promise<Choice>((resolve) => rl.once("SIGINT", () => resolve("detach")));
  try {
    const answer = rl
      .question(`\nRun ${runId} is ${status}. [c]ancel it, [d]etach (it goes on), or keep [w]atching? `, { signal })
      .then(choiceOf, () => "watch" as const);
    return await Promise.race([answer, interrupted]);
  } finally {
    rl.close();
  }
}

function choiceOf(answer: string): Choice {
  const a = answer.trim().toLowerCase();
  if (a.startsWith("c")) return "cancel";
  if (a.startsWith("d")) return "detach";
  return "watch";
}
