/** The CLI's exit codes (docs/cli.md) and the errors that carry them. */
import { TroupeApiError } from "../client/index.ts";
import { printable } from "./printable.ts";

/** What the process exits with. */
export const EXIT = {
  /** The command did what it was asked; a watched run completed. */
  ok: 0,
  /** A watched run failed, or the command could not be carried out (server error, unreachable, no such run). */
  failed: 1,
  /** The command line or its input is wrong: nothing was started. */
  usage: 2,
  /** A watched run was cancelled. */
  cancelled: 3,
  /** Interrupted (Ctrl-C, SIGINT) and detached: the run goes on. 128 + SIGINT, as shells report it. */
  interrupted: 130,
} as const;

/** An error the CLI reports as one line on stderr, exiting with `exitCode`. */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode: number = EXIT.failed) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}

/** A wrong command line or input file: exit 2. */
export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
    this.name = "UsageError";
  }
}

/** The exit code of a watched run's final status. */
export function exitCodeOfStatus(status: string): number {
  if (status === "completed") return EXIT.ok;
  if (status === "cancelled") return EXIT.cancelled;
  return EXIT.failed;
}

/**
 * The exit code of any error: a request the server refused as invalid
 * (400, 413, an unknown play) is a usage error; anything else failed.
 */
export function exitCodeOfError(error: unknown): number {
  if (error instanceof CliError) return error.exitCode;
  if (error instanceof TroupeApiError && (error.status === 400 || error.status === 413 || error.code === "unknown_play")) return EXIT.usage;
  // A request the client could not even send (a token with a newline in it): the configuration is wrong.
  if (error instanceof TroupeApiError && error.status === 0 && error.code === "invalid_request") return EXIT.usage;
  return EXIT.failed;
}

/** An error as the one line the CLI prints: the API's code and message, or the error's message. */
export function describeError(error: unknown): string {
  if (error instanceof TroupeApiError) {
    const fields = Array.isArray(error.details)
      ? error.details.filter((d): d is { path: string; message: string } => typeof d?.path === "string").map((d) => d.path)
      : [];
    const where = fields.length && !fields.every((f) => error.message.includes(f)) ? ` (${printable(fields.join(", "))})` : "";
    return `${printable(error.code)}: ${printable(error.message)}${where}`;
  }
  if (error instanceof Error) return error.message;
  return String(error);
}
