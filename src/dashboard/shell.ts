/** What every dashboard page is given, and what it gives back. */
import type { TroupeClient } from "../client";

/** The dashboard around a page: the API client, navigation and notices. */
export interface Shell {
  readonly client: TroupeClient;
  /** Goes to a dashboard location (`#/`, `#/runs/<id>`). */
  navigate(hash: string): void;
  /** Shows what went wrong; an unauthorized answer asks for a token again. */
  report(error: unknown): void;
  /** Shows a passing notice (a cancel was asked for, a signal delivered). */
  info(message: string): void;
}

/** A mounted page: its element, and `dispose` to stop its timers and live feeds. */
export interface Page {
  readonly element: HTMLElement;
  dispose(): void;
}
