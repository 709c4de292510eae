/**
 * What each `troupe` command does, over {@link TroupeClient}. Each returns
 * the process's exit code; errors are thrown and reported by main.ts.
 */
import { createWriteStream, rmSync } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import { pipeline } from "node:stream/promises";
import { TroupeApiError, type RunStarted, type TroupeClient } from "../client/index.ts";
import { CliError, EXIT, exitCodeOfStatus, UsageError } from "./exit-codes.ts";
import { formatCredits, plainMapLine, RunProgress } from "./progress.ts";
import { printable } from "./printable.ts";
import { discardUpload, parseJson, runInput, type InputOptions } from "./run-input.ts";
import { PlainView, SilentView, type RunWatchView } from "./views.ts";
import { watchRun, type InterruptMode } from "./watch.ts";

/** Options every command that watches a run shares. */
export interface WatchOptions {
  json?: boolean;
  detach?: boolean;
}

const out = (line: string) => process.stdout.write(`${line}\n`);
const printJson = (value: unknown) => out(JSON.stringify(value, null, 2));

/** `troupe run <play>`: starts a run, then watches it until it ends (or only prints its id with `--detach`). */
export async function runCommand(
  client: TroupeClient,
  play: string,
  options: InputOptions & WatchOptions & { maxSpend?: number; force?: boolean; forceToolRefresh?: boolean; idempotencyKey?: string },
): Promise<number> {
  const { input, uploadId } = await runInput(options, client);
  let started: RunStarted;
  try {
    started = await client.submit(
      { play, input, force: options.force, forceToolRefresh: options.forceToolRefresh, maxSpend: options.maxSpend },
      { idempotencyKey: options.idempotencyKey },
    );
  } catch (error) {
    // A 4xx answer started no run on this upload (a reused Idempotency-Key's run reads the upload of its first
    // submit). Without an answer (unreachable, 5xx) a run may have started that reads it: it stays.
    if (error instanceof TroupeApiError && error.status >= 400 && error.status < 500) await discardUpload(client, uploadId);
    throw error;
  }
  // The key answered the run an earlier command started (the same file, uploaded then): it reads that upload, not this.
  if (uploadId !== null && started.unusedUpload === uploadId) await discardUpload(client, uploadId);
  return startedThenWatch(client, started, options);
}

/** `troupe rerun <runId>`: the run's play and input as a new run, watched like `run`. */
export async function rerunCommand(
  client: TroupeClient,
  runId: string,
  options: WatchOptions & { maxSpend?: number; force?: boolean; forceToolRefresh?: boolean },
): Promise<number> {
  const started = await client.rerun(runId, {
    force: options.force,
    forceToolRefresh: options.forceToolRefresh,
    maxSpend: options.maxSpend,
  });
  if (!options.json) process.stderr.write(`rerun of ${started.rerunOf}\n`);
  return startedThenWatch(client, started, options);
}

/** `troupe watch <runId>`: the live progress of a run until it ends. */
export async function watchCommand(client: TroupeClient, runId: string, options: WatchOptions): Promise<number> {
  return watch(client, runId, options);
}

async function startedThenWatch(client: TroupeClient, started: RunStarted, options: WatchOptions): Promise<number> {
  if (options.detach) {
    if (options.json) printJson(started);
    else out(`${started.runId} ${started.status}; watch it with: troupe watch ${started.runId}`);
    return EXIT.ok;
  }
  return watch(client, started.runId, options);
}

async function watch(client: TroupeClient, runId: string, options: WatchOptions): Promise<number> {
  const view: RunWatchView = options.json
    ? new SilentView()
    : process.stdout.isTTY
      ? // Loaded only here: the terminal renderer's dependencies cost every other command startup time.
        new (await import("./TerminalView.ts")).TerminalView(process.stdout)
      : new PlainView(process.stdout);
  // Asking needs a terminal to read the answer from and to show the question on.
  const interrupt: InterruptMode =
    process.stdin.isTTY && process.stderr.isTTY ? { kind: "ask", input: process.stdin, output: process.stderr } : { kind: "detach" };
  const end = await watchRun({ client, runId, view, interrupt });
  if (end.kind === "detached") {
    if (options.json) printJson({ runId, status: end.status, detached: true });
    else process.stderr.write(`detached from ${runId} (${end.status}); it goes on: troupe watch ${runId}\n`);
    return EXIT.interrupted;
  }
  if (options.json) printJson(end.run);
  return exitCodeOfStatus(end.run.status);
}

/** `troupe status <runId>`: the run now. */
export async function statusCommand(client: TroupeClient, runId: string, options: { json?: boolean }): Promise<number> {
  const run = await client.get(runId);
  if (options.json) {
    printJson(run);
    return EXIT.ok;
  }
  out(`${run.runId}  ${run.play}  ${run.status}`);
  out(`created ${run.createdAt}, updated ${run.updatedAt}${run.parentRunId ? `, child of ${run.parentRunId}` : ""}`);
  const progress = new RunProgress(run.runId);
  progress.apply({ type: "snapshot", run, seq: 0 });
  for (const map of progress.maps.values()) out(plainMapLine(map));
  if (progress.spend !== null)
    out(`spend: ${formatCredits(progress.spend)} credits${run.maxSpend != null ? ` of at most ${formatCredits(run.maxSpend)}` : ""}`);
  if (run.status === "completed") out(`result: ${JSON.stringify(run.result)}`);
  if (run.error) out(`error: ${printable(`${run.error.code}: ${run.error.message}`)}`);
  return EXIT.ok;
}

/** `troupe runs`: the org's runs, newest first, a page at a time. */
export async function runsCommand(client: TroupeClient, options: { limit?: number; cursor?: string; json?: boolean }): Promise<number> {
  const page = await client.list({ limit: options.limit, cursor: options.cursor });
  if (options.json) {
    printJson(page);
    return EXIT.ok;
  }
  if (!page.runs.length) out("no runs");
  const playWidth = Math.max(4, ...page.runs.map((r) => r.play.length));
  for (const r of page.runs)
    out(
      [r.runId, r.play.padEnd(playWidth), r.status.padEnd(10), r.createdAt, r.parentRunId ? `child of ${r.parentRunId}` : ""]
        .join("  ")
        .trimEnd(),
    );
  if (page.nextCursor) out(`more: troupe runs${options.limit ? ` --limit ${options.limit}` : ""} --cursor ${page.nextCursor}`);
  return EXIT.ok;
}

/** `troupe uploads`: the org's uploads, ready or receiving parts, in upload-id order, a page at a time. */
export async function uploadsCommand(client: TroupeClient, options: { limit?: number; cursor?: string; json?: boolean }): Promise<number> {
  const page = await client.listUploads({ limit: options.limit, cursor: options.cursor });
  if (options.json) {
    printJson(page);
    return EXIT.ok;
  }
  // A page can be empty and still have a next one (it held only what a deleted or failed upload left).
  if (!page.uploads.length) out(page.nextCursor ? "no uploads on this page" : "no uploads");
  const sizes = page.uploads.map((u) => (u.status === "ready" ? `${u.rows} rows  ${u.bytes} bytes` : ""));
  const sizeWidth = Math.max(0, ...sizes.map((size) => size.length));
  for (const [i, u] of page.uploads.entries())
    out([u.uploadId, u.status.padEnd(9), u.format.padEnd(6), sizes[i]!.padEnd(sizeWidth), u.createdAt].join("  "));
  if (page.nextCursor) out(`more: troupe uploads${options.limit ? ` --limit ${options.limit}` : ""} --cursor ${page.nextCursor}`);
  return EXIT.ok;
}

/** `troupe delete-upload <uploadId>`: deletes the upload, ready or receiving parts, and everything stored for it. */
export async function deleteUploadCommand(client: TroupeClient, uploadId: string, options: { json?: boolean }): Promise<number> {
  const answer = await client.deleteUpload(uploadId);
  if (options.json) printJson(answer);
  else out(`${answer.uploadId} deleted`);
  return EXIT.ok;
}

/** `troupe cancel <runId>`: asks the run to stop; it ends `cancelled`. */
export async function cancelCommand(client: TroupeClient, runId: string, options: { json?: boolean }): Promise<number> {
  const answer = await client.cancel(runId);
  if (options.json) printJson(answer);
  else out(`${answer.runId} ${answer.status}`);
  return EXIT.ok;
}

/** `troupe signal <runId> <eventKey>`: delivers `--data` (JSON; null without it) to the play's wait on the key. */
export async function signalCommand(
  client: TroupeClient,
  runId: string,
  eventKey: string,
  options: { data?: string; idempotencyKey?: string; json?: boolean },
): Promise<number> {
  const data = options.data === undefined ? null : parseJson(options.data, "--data");
  const answer = await client.signal(runId, eventKey, data, { idempotencyKey: options.idempotencyKey });
  if (options.json) printJson(answer);
  else
    out(
      `${runId}: ${eventKey} ${answer.duplicate ? "already delivered (duplicate)" : answer.consumed ? "delivered to the waiting play" : "kept for the next wait on it"}; run ${answer.status}`,
    );
  return EXIT.ok;
}

/** `troupe export <runId> <dataset>`: the run's rows as CSV or NDJSON, streamed by the server, to `--out` or stdout. */
export async function exportCommand(
  client: TroupeClient,
  runId: string,
  dataset: string,
  options: { format: "csv" | "ndjson"; out?: string; safe?: boolean },
): Promise<number> {
  if (options.safe && options.format !== "csv")
    throw new UsageError("--safe is for CSV (cells a spreadsheet would run); NDJSON holds JSON values");
  const body = await client.exportDataset(runId, dataset, { format: options.format, safe: options.safe });
  const rows = Readable.fromWeb(body as NodeReadableStream<Uint8Array>);
  if (!options.out) {
    await pipeline(rows, process.stdout, { end: false });
    return EXIT.ok;
  }
  // The file appears whole or not at all: an export that fails (no such run, a read cut short) or is interrupted
  // (Ctrl-C) leaves one there untouched, and no part of it beside.
  const partial = `${options.out}.part-${process.pid}`;
  const interrupted = () => {
    rmSync(partial, { force: true });
    process.exit(EXIT.interrupted);
  };
  process.once("SIGINT", interrupted);
  try {
    await pipeline(rows, createWriteStream(partial));
    await rename(partial, options.out);
  } catch (error) {
    await rm(partial, { force: true });
    throw error;
  } finally {
    process.off("SIGINT", interrupted);
  }
  process.stderr.write(`wrote ${options.out}\n`);
  return EXIT.ok;
}

/** `troupe estimate <play>`: what the run would bill now; nothing is started. */
export async function estimateCommand(client: TroupeClient, play: string, options: InputOptions & { json?: boolean }): Promise<number> {
  const { input, uploadId } = await runInput(options, client);
  let estimate: Awaited<ReturnType<TroupeClient["estimate"]>>;
  try {
    estimate = await client.estimate({ play, input });
  } catch (error) {
    // 404 `not_found` is the server's "no such route"; an unknown play has its own code.
    if (error instanceof TroupeApiError && error.status === 404 && error.code === "not_found") {
      throw new CliError(
        `this server cannot estimate yet: POST /v1/runs/estimate answered 404 (${client.baseUrl}); update the server to a version with spend estimates`,
      );
    }
    throw error;
  } finally {
    // An estimate starts nothing: no run will ever read its upload.
    await discardUpload(client, uploadId);
  }
  if (options.json) {
    printJson(estimate);
    return EXIT.ok;
  }
  out(`rows: ${estimate.rows.total} total, ${estimate.rows.reusable} reusable, ${estimate.rows.toCompute} to compute`);
  for (const [tool, calls] of Object.entries(estimate.calls)) out(`${tool}: ${calls.new} new calls, ${calls.reused} reused`);
  const { low, expected, high } = estimate.spend;
  if (low === high) out(`spend: ${formatCredits(expected)} credits`);
  else
    out(
      `spend: ${formatCredits(expected)} credits expected (${high === null ? `at least ${formatCredits(low)}, no known upper bound` : `${formatCredits(low)} to ${formatCredits(high)}`})`,
    );
  for (const note of estimate.notes ?? []) out(`note: ${printable(note)}`);
  return EXIT.ok;
}
