/**
 * A run's live feed as an async iterator that survives dropped sockets.
 *
 * The server sends a snapshot, then every ledger event in `seq` order, and
 * closes (1000) after the terminal event. A socket that drops before that is
 * reopened with `?after=<last seq delivered>`, so the server replays exactly
 * what was missed; events at or below that seq are skipped all the same,
 * and a gap (a seq past the next one) is filled from `GET .../events` before
 * going on. So every event is delivered once, in order, whatever the socket does.
 *
 * A connection can also die without a close (a NAT that forgot it, a laptop
 * asleep): the feed sends "ping" every `heartbeatSeconds`, the server answers
 * "pong" (its runtime does, without waking the coordinator), and a socket that
 * brings no frame at all for two heartbeats is closed and reopened like any
 * other dropped socket.
 */
import { TERMINAL_EVENTS, TERMINAL_STATUSES, type LedgerEvent, type LiveMessage, type SnapshotMessage } from "../api/responses.ts";
import { isTransient, TroupeApiError } from "./errors.ts";

/** What the feed needs from its client: where to connect, and two HTTP reads. */
export interface LiveFeedSource {
  /** The `live` URL (ws: or wss:) resuming after `after`. */
  url(after: number): string;
  WebSocket: typeof WebSocket;
  /** Throws the API's error when the run cannot be watched (bad token, no such run). */
  verify(): Promise<unknown>;
  /** Ledger events with `after < seq`, in order, a page at a time. */
  eventsAfter(after: number): Promise<LedgerEvent[]>;
}

/** Reconnection: waits grow from `baseDelayMs` to `maxDelayMs`; this many connections in a row that bring nothing end the feed with an error. */
export interface ReconnectPolicy {
  baseDelayMs: number;
  maxDelayMs: number;
  maxFailures: number;
}

export const DEFAULT_RECONNECT: ReconnectPolicy = { baseDelayMs: 250, maxDelayMs: 5_000, maxFailures: 8 };

/** How often an open socket is pinged when `heartbeatSeconds` is not given; silent for twice this, it is reopened. */
export const DEFAULT_HEARTBEAT_SECONDS = 30;
/** The longest heartbeat `heartbeatSeconds` takes: a day. */
export const MAX_HEARTBEAT_SECONDS = 86_400;

/** What {@link liveEvents} takes besides its source. */
export interface LiveEventsOptions {
  /** Deliver the events with `seq` past this one (default 0: all of them). */
  after?: number;
  /** Ends the feed quietly (and closes its socket) when it aborts. */
  signal?: AbortSignal;
  reconnect?: ReconnectPolicy;
  /**
   * Seconds between the "ping" frames sent on an open socket (default 30, at
   * most 86,400; a fraction is fine; 0 turns the heartbeat off). A socket that
   * brings no frame (an event, a snapshot, a "pong") for twice this long is
   * closed and reopened with `?after=<last seq>`, within the reconnection
   * budget. Anything else throws `invalid_option` when iteration starts.
   */
  heartbeatSeconds?: number;
}

/** The heartbeat's frames: text, so that the runtime's auto-response can answer without waking the coordinator. */
const PING = "ping";
const PONG = "pong";

/** A connection up this long was a healthy one, events or not: the waits between reconnections start over. */
const HEALTHY_CONNECTION_MS = 10_000;

/** Normal closure, for a socket the feed is done with. */
const CLOSE_NORMAL = 1000;

/**
 * Yields the snapshot of each connection (the first, and a fresh one after
 * every reconnect), then every event after `after` exactly once, in order.
 * Ends after a terminal event (`run.completed`, `run.failed`, `run.cancelled`),
 * after the snapshot of a run that had ended at or before `after`, or quietly
 * when `signal` aborts. Throws a {@link TroupeApiError}
 * when the run cannot be watched, the server stays unreachable, or
 * `heartbeatSeconds` is out of range.
 */
export async function* liveEvents(source: LiveFeedSource, options: LiveEventsOptions = {}): AsyncGenerator<LiveMessage> {
  const { signal } = options;
  const policy = options.reconnect ?? DEFAULT_RECONNECT;
  const heartbeatSeconds = options.heartbeatSeconds ?? DEFAULT_HEARTBEAT_SECONDS;
  // Timers take at most 2^31 - 1 ms (about 24.8 days; a longer one fires at once), and the silence limit is two heartbeats.
  if (!(heartbeatSeconds >= 0 && heartbeatSeconds <= MAX_HEARTBEAT_SECONDS)) {
    throw new TroupeApiError({
      status: 0,
      code: "invalid_option",
      message: `heartbeatSeconds must be a number of seconds from 0 to ${MAX_HEARTBEAT_SECONDS}, not ${heartbeatSeconds}`,
    });
  }
  const heartbeatMs = heartbeatSeconds * 1000;
  let lastSeq = options.after ?? 0;
  // Connections in a row that brought no event and did not last (the waits grow with them)...
  let quiet = 0;
  // ...and that brought nothing at all (past maxFailures the feed gives up).
  let refused = 0;
  // The run was found watchable over HTTP since the last connection that brought something.
  let verified = false;
  while (!signal?.aborted) {
    const openedAt = Date.now();
    const seqAtOpen = lastSeq;
    const socket = new SocketFrames(new source.WebSocket(source.url(lastSeq)), { signal, heartbeatMs });
    let received = false;
    try {
      for await (const frame of socket) {
        received = true;
        const message = parseMessage(frame);
        if (!message) continue;
        if (message.type === "snapshot") {
          const { run, seq } = message as SnapshotMessage;
          // As the server does: a cursor past the ledger's end means "from now", not "skip the next events".
          if (typeof seq === "number" && lastSeq > seq) lastSeq = seq;
          yield message;
          // The run had ended by this snapshot, whose seq is past its terminal event: all of it was delivered already.
          if (TERMINAL_STATUSES.has(run?.status) && typeof seq === "number" && seq <= lastSeq) return;
          continue;
        }
        const event = message as LedgerEvent;
        if (typeof event.seq !== "number" || event.seq <= lastSeq) continue;
        if (event.seq > lastSeq + 1) {
          for (const missed of await fillGap(source, lastSeq, event.seq)) {
            lastSeq = missed.seq;
            yield missed;
            if (TERMINAL_EVENTS.has(missed.type)) return;
          }
        }
        lastSeq = event.seq;
        yield event;
        if (TERMINAL_EVENTS.has(event.type)) return;
      }
    } finally {
      socket.close();
    }
    if (signal?.aborted) return;
    // A server that sends each socket its snapshot and drops it is not asked again four times a second for ever.
    quiet = lastSeq > seqAtOpen || Date.now() - openedAt >= HEALTHY_CONNECTION_MS ? 0 : quiet + 1;
    refused = received ? 0 : refused + 1;
    if (received) verified = false;
    // A socket refused at once may mean no such run or a bad token, which a browser's WebSocket cannot tell: ask over
    // HTTP (again at the next refusal while the server cannot answer that either: it restarts, or is down).
    if (refused > 0 && !verified) verified = await watchable(source);
    if (refused >= policy.maxFailures) {
      throw new TroupeApiError({
        status: 0,
        code: "live_unreachable",
        message: `the live feed could not be reached ${refused} times in a row (${socket.closeReason || "connection closed"})`,
      });
    }
    await sleep(Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, quiet - 1)), signal);
  }
}

/**
 * Whether the run can be watched, asked over HTTP: true when the server said
 * so, false when it could not answer (unreachable, 5xx, 429: the feed keeps
 * reconnecting, within its budget); throws its refusal (a bad token, no such run).
 */
async function watchable(source: LiveFeedSource): Promise<boolean> {
  try {
    await source.verify();
    return true;
  } catch (error) {
    if (isTransient(error)) return false;
    throw error;
  }
}

/** Events strictly between `lastSeq` and `nextSeq`, read over HTTP. */
async function fillGap(source: LiveFeedSource, lastSeq: number, nextSeq: number): Promise<LedgerEvent[]> {
  const missed: LedgerEvent[] = [];
  let after = lastSeq;
  while (after < nextSeq - 1) {
    const page = (await source.eventsAfter(after)).filter((e) => e.seq > after && e.seq < nextSeq);
    if (!page.length) break;
    missed.push(...page);
    after = page[page.length - 1]!.seq;
  }
  return missed;
}

function parseMessage(frame: string): LiveMessage | null {
  try {
    const message: unknown = JSON.parse(frame);
    return message && typeof message === "object" && typeof (message as { type?: unknown }).type === "string"
      ? (message as LiveMessage)
      : null;
  } catch {
    // Not JSON: nothing the contract sends; skip it rather than end the feed.
    return null;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** The WebSocket `readyState` of an open socket. */
const OPEN = 1;

/**
 * One socket's text frames (but "pong") as an async iterable that ends when
 * the socket closes, or when it brought no frame for two heartbeats (counted
 * from its creation, so a handshake that hangs ends too).
 */
class SocketFrames implements AsyncIterable<string> {
  #socket: WebSocket;
  #frames: string[] = [];
  #wake: (() => void) | null = null;
  #closed = false;
  #signal: AbortSignal | undefined;
  #silentLimitMs: number;
  #lastFrameAt = Date.now();
  #pinger: ReturnType<typeof setInterval> | undefined;
  #watchdog: ReturnType<typeof setTimeout> | undefined;
  closeCode = 0;
  closeReason = "";

  constructor(socket: WebSocket, options: { signal: AbortSignal | undefined; heartbeatMs: number }) {
    this.#socket = socket;
    this.#signal = options.signal;
    this.#silentLimitMs = 2 * options.heartbeatMs;
    socket.addEventListener("message", (event: MessageEvent) => {
      this.#lastFrameAt = Date.now();
      const data: unknown = event.data;
      if (data === PONG) return;
      if (typeof data === "string") this.#push(data);
      else if (data instanceof ArrayBuffer) this.#push(new TextDecoder().decode(data));
    });
    socket.addEventListener("close", (event: CloseEvent) => {
      // A socket this side gave up on may report its close much later: the reason it was given up stands.
      if (this.#closed) return;
      this.closeCode = event.code;
      this.closeReason = event.reason;
      this.#end();
    });
    // An error is always followed by a close event, which ends the iteration; nothing more to do here.
    socket.addEventListener("error", () => undefined);
    this.#signal?.addEventListener("abort", this.#onAbort, { once: true });
    if (options.heartbeatMs > 0) {
      // Sent only once open: a socket still connecting throws on send.
      this.#pinger = setInterval(() => this.#socket.readyState === OPEN && this.#socket.send(PING), options.heartbeatMs);
      this.#watchdog = setTimeout(this.#checkSilence, this.#silentLimitMs);
    }
  }

  #onAbort = () => this.close();

  /** Closes a socket silent for too long; otherwise checks again when it would be (one timer, not one per frame). */
  #checkSilence = () => {
    const silentMs = Date.now() - this.#lastFrameAt;
    if (silentMs < this.#silentLimitMs) {
      this.#watchdog = setTimeout(this.#checkSilence, this.#silentLimitMs - silentMs);
      return;
    }
    this.closeReason = `no frame, not even a pong, for ${silentMs / 1000} s`;
    this.close();
  };

  #push(frame: string): void {
    this.#frames.push(frame);
    this.#wake?.();
  }

  #end(): void {
    this.#closed = true;
    clearInterval(this.#pinger);
    clearTimeout(this.#watchdog);
    this.#signal?.removeEventListener("abort", this.#onAbort);
    this.#wake?.();
  }

  /** Closes the socket (if still open) and ends the iteration. */
  close(): void {
    if (this.#socket.readyState === 0 || this.#socket.readyState === 1) this.#socket.close(CLOSE_NORMAL);
    this.#end();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<string> {
    for (;;) {
      const frame = this.#frames.shift();
      if (frame !== undefined) {
        yield frame;
        continue;
      }
      if (this.#closed) return;
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = null;
    }
  }
}
