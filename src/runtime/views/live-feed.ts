/**
 * Delivers a run's ledger to live watchers (WebSocket connections): a
 * snapshot, then every event in `seq` order, exactly once, without gaps.
 *
 * Each connection's state holds the last `seq` it was sent. It lives in the
 * connection's (hibernation-proof) attachment, never in memory, so a
 * coordinator that hibernated and woke up continues where it left off.
 * Delivery reads the ledger from the connection's `lastSeq`, and a send and
 * its state write run without an await in between, so an event appended
 * during a replay can be neither lost nor sent twice. A connection that fell
 * behind (whatever the reason) is caught up from the ledger instead of being
 * sent the newest event out of order. A long replay (a day-long run's ledger
 * is hundreds of thousands of events) goes out {@link TURN_EVENTS} at a time,
 * one turn of the object's event loop each: in one turn it held the
 * coordinator (its reports, its alarm) for seconds, with every message of it
 * in memory at once.
 */
import type { LedgerEvent } from "../../stores/ledger-store";
import type { RunView } from "./run-view";

/** What a live connection remembers across hibernation. */
export interface LiveState {
  /** The highest `seq` this connection was sent. */
  lastSeq: number;
}

/** The part of a (partyserver) connection the feed uses. */
export interface LiveConnection {
  readonly id: string;
  readonly state: Readonly<LiveState> | null;
  setState(state: LiveState): unknown;
  send(message: string): void;
  close(code?: number, reason?: string): void;
}

/** The first message on every connection. */
export interface SnapshotMessage {
  type: "snapshot";
  run: RunView;
  /** The ledger position the snapshot reflects. */
  seq: number;
}

export interface LiveFeedOptions {
  /** Ledger events with `seq > after`, in order, at most `limit`. */
  events(after: number, limit: number): LedgerEvent[];
  /** The run as it is now, and the last `seq` of the ledger. */
  snapshot(): { run: RunView; seq: number };
}

/** Events that end a run: the feed closes the connection after sending one. */
export const TERMINAL_EVENTS: ReadonlySet<string> = new Set(["run.completed", "run.failed", "run.cancelled"]);

const REPLAY_PAGE = 500;

/** The most events one connection is sent in one turn of the event loop; the rest of a replay goes in the next. */
export const TURN_EVENTS = 2_000;

/** Normal closure once the run has ended and everything was sent. */
export const CLOSE_RUN_ENDED = 1000;

export class LiveFeed {
  #deps: LiveFeedOptions;
  /** Connections whose replay goes on in a later turn (by object: ids are the client's to choose, `?_pk=`). */
  #replaying = new Set<LiveConnection>();

  constructor(options: LiveFeedOptions) {
    this.#deps = options;
  }

  /**
   * Starts a connection: the snapshot, then every event after `after` (0 for
   * the whole ledger; past the ledger's end, the snapshot's `seq`). A connection to a run that already ended is closed
   * once it has been sent everything.
   */
  open(connection: LiveConnection, after: number): void {
    const { run, seq } = this.#deps.snapshot();
    const snapshot: SnapshotMessage = { type: "snapshot", run, seq };
    if (!this.#send(connection, JSON.stringify(snapshot))) return;
    // A cursor past the ledger's end (from another run, or invented) would skip the next events: it means "from now".
    connection.setState({ lastSeq: Math.min(after, seq) });
    const ended = this.#catchUp(connection);
    if (!ended && TERMINAL_EVENTS.has(`run.${run.status}`) && (connection.state?.lastSeq ?? 0) >= seq) {
      closeQuietly(connection, CLOSE_RUN_ENDED, "the run has ended");
    }
  }

  /** Tells every opened connection about an event just appended to the ledger. */
  publish(event: LedgerEvent, connections: Iterable<LiveConnection>): void {
    for (const connection of connections) {
      try {
        const state = connection.state;
        // Not opened yet (its `open` sends this event from the ledger), or already sent.
        if (!state || event.seq <= state.lastSeq) continue;
        if (event.seq === state.lastSeq + 1) this.#deliver(connection, [event]);
        else this.#catchUp(connection);
      } catch (error) {
        // Its state could not be read or written (a socket closing under it): the others still get the event.
        console.warn(`live connection ${connection.id}: could not deliver event ${event.seq}, closing`, error);
        closeQuietly(connection, 1011, "delivery failed; reconnect with ?after=<last seq>");
      }
    }
  }

  /**
   * Sends what is past the connection's `lastSeq`, {@link TURN_EVENTS} of it in this turn and the rest in later
   * ones; true if that included the run's end.
   */
  #catchUp(connection: LiveConnection): boolean {
    for (let sent = 0; sent < TURN_EVENTS; sent += REPLAY_PAGE) {
      const from = connection.state?.lastSeq ?? 0;
      const page = this.#deps.events(from, REPLAY_PAGE);
      const outcome = this.#deliver(connection, page);
      if (outcome !== "more" || page.length < REPLAY_PAGE) return outcome === "ended";
    }
    if (!this.#replaying.has(connection)) {
      this.#replaying.add(connection);
      setTimeout(() => {
        this.#replaying.delete(connection);
        try {
          this.#catchUp(connection);
        } catch (error) {
          // Its state could not be read or written (a socket closing under it): it reconnects with `after`.
          console.warn(`live connection ${connection.id}: replay failed, closing`, error);
          closeQuietly(connection, 1011, "delivery failed; reconnect with ?after=<last seq>");
        }
      }, 0);
    }
    return false;
  }

  /** Sends `events` in order; the state (an attachment write) is updated once per batch. */
  #deliver(connection: LiveConnection, events: readonly LedgerEvent[]): "more" | "ended" | "gone" {
    let outcome: "more" | "ended" | "gone" = "more";
    let sent = 0;
    for (const event of events) {
      if (!this.#send(connection, JSON.stringify(event))) {
        outcome = "gone";
        break;
      }
      sent = event.seq;
      if (TERMINAL_EVENTS.has(event.type)) {
        closeQuietly(connection, CLOSE_RUN_ENDED, "the run has ended");
        outcome = "ended";
        break;
      }
    }
    if (sent) connection.setState({ lastSeq: sent });
    return outcome;
  }

  #send(connection: LiveConnection, message: string): boolean {
    try {
      connection.send(message);
      return true;
    } catch (error) {
      // The socket went away mid-send: close it; the client reconnects with `after` and replays from the ledger.
      console.warn(`live connection ${connection.id}: send failed, closing`, error);
      closeQuietly(connection, 1011, "send failed; reconnect with ?after=<last seq>");
      return false;
    }
  }
}

function closeQuietly(connection: LiveConnection, code: number, reason: string): void {
  try {
    connection.close(code, reason);
  } catch (error) {
    // Closing a socket the peer already closed throws; there is nothing left to close.
    console.warn(`live connection ${connection.id}: close failed`, error);
  }
}

/**
 * A watcher of a run that has already ended gets its replay on a plain (not
 * hibernatable) socket: nothing will follow, and the runtime holds a
 * hibernatable socket's connection open after its close until the object is
 * evicted (about 10 s locally), where a plain one closes at once. The
 * coordinator's auto-response does not cover it, and no "ping" is answered
 * here: the socket closes once its replay has sent the run's end (at once,
 * or over a few turns for a long ledger).
 */
export function replayEnded(feed: LiveFeed, request: Request): Response {
  const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
  server.accept();
  let state: LiveState | null = null;
  feed.open(
    {
      id: "replay",
      get state() {
        return state;
      },
      setState: (next: LiveState) => (state = next),
      send: (message: string) => server.send(message),
      close: (code?: number, reason?: string) => server.close(code, reason),
    },
    afterOf(request.url),
  );
  return new Response(null, { status: 101, webSocket: client });
}

/** The ledger position a watcher asks to resume after (`?after=`; 0, all of it, when absent or not a position). */
export function afterOf(url: string): number {
  const after = Number(new URL(url).searchParams.get("after") ?? 0);
  return Number.isSafeInteger(after) && after >= 0 ? after : 0;
}
