/**
 * `troupe`: the command line of Troupe (docs/cli.md). It talks to
 * `TROUPE_URL` (default http://127.0.0.1:8787) with `TROUPE_TOKEN` (default
 * `dev-token`). Exit codes: 0 done (a watched run completed), 1 failed,
 * 2 usage error, 3 a watched run was cancelled, 130 detached on Ctrl-C.
 */
import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { TroupeClient } from "../client/index.ts";
import {
  cancelCommand,
  deleteUploadCommand,
  estimateCommand,
  exportCommand,
  rerunCommand,
  runCommand,
  runsCommand,
  signalCommand,
  statusCommand,
  uploadsCommand,
  watchCommand,
} from "./commands.ts";
import { EXIT, describeError, exitCodeOfError } from "./exit-codes.ts";

/** Runs the command line `argv` (without node and the script) and resolves to the exit code. */
export async function main(argv: string[], env: Record<string, string | undefined> = process.env): Promise<number> {
  let exitCode: number = EXIT.ok;
  // An empty variable means unset, as shells usually intend.
  const client = () =>
    new TroupeClient({
      baseUrl: program.opts<{ url?: string }>().url || env.TROUPE_URL || undefined,
      token: env.TROUPE_TOKEN || undefined,
    });
  const done = (code: number) => {
    exitCode = code;
  };

  const program = new Command("troupe")
    .description("Run and watch Troupe plays (docs/cli.md).")
    .option("--url <url>", "the server (default: $TROUPE_URL, else http://127.0.0.1:8787); the token is $TROUPE_TOKEN (default dev-token)")
    .showSuggestionAfterError()
    .exitOverride()
    .configureOutput({ outputError: (text, write) => write(text) });

  const inputOptions = (command: Command) =>
    command
      .option("--csv <file>", "rows from a CSV file (a header line, then rows)")
      .option("--ndjson <file>", "rows from a file of one JSON object per line")
      .option("--input <json>", "the play's whole input as JSON");

  inputOptions(program.command("run").argument("<play>", "the play's name (troupe plays lists them)"))
    .description("start a run and show its progress until it ends")
    .option("--max-spend <credits>", "the most credits the run may bill", credits)
    .option("--force", "recompute every row (tool results are still reused)")
    .option("--force-tool-refresh", "recompute every row and call the providers again (bills again)")
    .option("--idempotency-key <key>", "submitting again with this key returns the same run")
    .option("--detach", "print the run's id and exit without watching")
    .option("--json", "print one JSON object (the run as it ended) instead of progress")
    .action(async (play: string, options) => done(await runCommand(client(), play, options)));

  program
    .command("watch")
    .argument("<runId>")
    .description("show a run's progress until it ends")
    .option("--json", "print one JSON object (the run as it ended) instead of progress")
    .action(async (runId: string, options) => done(await watchCommand(client(), runId, options)));

  program
    .command("status")
    .argument("<runId>")
    .description("show a run: status, progress per map, result or error")
    .option("--json", "print the run as JSON")
    .action(async (runId: string, options) => done(await statusCommand(client(), runId, options)));

  program
    .command("runs")
    .description("list the org's runs, newest first")
    .option("--limit <n>", "runs per page (1 to 200, default 50)", pageLimit(200))
    .option("--cursor <cursor>", "the page after this cursor (printed below a full page)")
    .option("--json", "print the page as JSON")
    .action(async (options) => done(await runsCommand(client(), options)));

  program
    .command("cancel")
    .argument("<runId>")
    .description("cancel a run: no new provider calls, it ends cancelled")
    .option("--json", "print the answer as JSON")
    .action(async (runId: string, options) => done(await cancelCommand(client(), runId, options)));

  program
    .command("rerun")
    .argument("<runId>")
    .description("run an ended run's play and input again (reusing what is done) and show its progress")
    .option("--max-spend <credits>", "the most credits the new run may bill", credits)
    .option("--force", "recompute every row (tool results are still reused)")
    .option("--force-tool-refresh", "recompute every row and call the providers again (bills again)")
    .option("--detach", "print the new run's id and exit without watching")
    .option("--json", "print one JSON object (the run as it ended) instead of progress")
    .action(async (runId: string, options) => done(await rerunCommand(client(), runId, options)));

  program
    .command("signal")
    .argument("<runId>")
    .argument("<eventKey>", "the key the play waits on (ctx.waitForEvent)")
    .description("deliver an event to a run waiting for it")
    .option("--data <json>", "the event's data as JSON (default null)")
    .option("--idempotency-key <key>", "delivering again with this key is a no-op")
    .option("--json", "print the answer as JSON")
    .action(async (runId: string, eventKey: string, options) => done(await signalCommand(client(), runId, eventKey, options)));

  program
    .command("export")
    .argument("<runId>")
    .argument("<dataset>", "the dataset's name (a map of the play)")
    .description("write a run's rows of a dataset as CSV or NDJSON")
    .addOption(new Option("--format <format>", "csv or ndjson").choices(["csv", "ndjson"]).default("csv"))
    .option("--out <file>", "write to this file instead of stdout")
    .option("--safe", "CSV: neutralise cells a spreadsheet would run as formulas")
    .action(async (runId: string, dataset: string, options) => done(await exportCommand(client(), runId, dataset, options)));

  inputOptions(program.command("estimate").argument("<play>"))
    .description("what a run would bill now (nothing is started, no provider called)")
    .option("--json", "print the estimate as JSON")
    .action(async (play: string, options) => done(await estimateCommand(client(), play, options)));

  program
    .command("uploads")
    .description("list the org's uploads (ready, or still receiving parts), in upload-id order")
    .option("--limit <n>", "uploads per page (1 to 100, default 50)", pageLimit(100))
    .option("--cursor <cursor>", "the page after this cursor (printed below a page that has a next one)")
    .option("--json", "print the page as JSON")
    .action(async (options) => done(await uploadsCommand(client(), options)));

  program
    .command("delete-upload")
    .argument("<uploadId>")
    .description("delete an upload, ready or still receiving parts, and everything stored for it")
    .option("--json", "print the answer as JSON")
    .action(async (uploadId: string, options) => done(await deleteUploadCommand(client(), uploadId, options)));

  program
    .command("plays")
    .description("list the plays this server runs")
    .option("--json", "print the list as JSON")
    .action(async (options: { json?: boolean }) => {
      const { plays } = await client().plays();
      if (options.json) process.stdout.write(`${JSON.stringify({ plays }, null, 2)}\n`);
      else for (const p of plays) process.stdout.write(`${p.name}  ${p.description}\n`);
    });

  try {
    await program.parseAsync(argv, { from: "user" });
    return exitCode;
  } catch (error) {
    // Commander has printed its own message (or the help) already.
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    process.stderr.write(`troupe: ${describeError(error).replace(/\s*\n\s*/g, " ")}\n`);
    return exitCodeOfError(error);
  }
}

/** `--max-spend`: a non-negative number of credits. */
function credits(value: string): number {
  const n = Number(value);
  if (value.trim() === "" || !Number.isFinite(n) || n < 0) throw new InvalidArgumentError("a number of credits, 0 or more");
  return n;
}

/** `--limit`: 1 to `max` (a route's largest page). */
function pageLimit(max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1 || n > max) throw new InvalidArgumentError(`a whole number from 1 to ${max}`);
    return n;
  };
}
