/**
 * The client's live feed against a server that misbehaves (a fake WebSocket
 * on a fake clock, or a tiny socket server of the test's own: what a real
 * server does is tested in client.test.ts).
 */
import { createHash } from "node:crypto";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { TroupeClient } from "../src/client/TroupeClient.ts";
import { TroupeApiError } from "../src/client/errors.ts";
import { liveEvents, type LiveFeedSource } from "../src/client/live-events.ts";

afterEach(() => {
  vi.useRealTimers();
});

/** A socket that sends the snapshot of a running run, then drops, as a coordinator in a crash loop would. */
function droppingSockets(): { source: LiveFeedSource; opened: () => number } {
  let opened = 0;
  class DroppingSocket extends EventTarget {
    constructor(_url: string) {
      super();
      opened++;
      setTimeout(() => {
        const snapshot = { type: "snapshot", seq: 3, run: { status: "running" } };
        this.dispatchEvent(new MessageEvent("message", { data: JSON.stringify(snapshot) }));
        this.dispatchEvent(Object.assign(new Event("close"), { code: 1011, reason: "send failed" }));
      }, 0);
    }
    close(): void {}
  }
  const source: LiveFeedSource = {
    url: (after) => `ws://127.0.0.1/live?after=${after}`,
    WebSocket: DroppingSocket as unknown as typeof WebSocket,
    verify: async () => undefined,
    eventsAfter: async () => [],
  };
  return { source, opened: () => opened };
}

describe("liveEvents", () => {
  it("backs off from a server that drops every socket after its snapshot, instead of reconnecting four times a second", async () => {
    vi.useFakeTimers();
    const { source, opened } = droppingSockets();
    const stop = new AbortController();
    const snapshots: unknown[] = [];
    const watching = (async () => {
      for await (const message of liveEvents(source, { after: 3, signal: stop.signal })) snapshots.push(message);
    })();
    // Twenty seconds: at a fixed 250 ms that is 80 connections; waits of 0.25, 0.5, 1, 2, 4, then 5 s are about eight.
    for (let ms = 0; ms < 20_000; ms += 50) await vi.advanceTimersByTimeAsync(50);
    expect(opened()).toBeGreaterThan(3);
    expect(opened()).toBeLessThan(12);
    expect(snapshots.length).toBe(opened());
    stop.abort();
    await vi.advanceTimersByTimeAsync(10_000);
    await watching;
  });

  it("keeps reconnecting while a restarting server refuses its socket and fails the HTTP check too, and ends with the run", async () => {
    vi.useFakeTimers();
    let opened = 0;
    let verifies = 0;
    // The first three sockets close before a frame (the server restarts); the fourth sends the run to its end.
    class RestartingServerSocket extends EventTarget {
      constructor(_url: string) {
        super();
        const n = ++opened;
        setTimeout(() => {
          const send = (message: unknown) => this.dispatchEvent(new MessageEvent("message", { data: JSON.stringify(message) }));
          if (n === 4) {
            send({ type: "snapshot", seq: 3, run: { status: "running" } });
            send({ type: "run.completed", seq: 4, at: new Date().toISOString(), result: null, progress: {} });
          }
          this.dispatchEvent(Object.assign(new Event("close"), { code: n === 4 ? 1000 : 1006, reason: "" }));
        }, 0);
      }
      close(): void {}
    }
    const source: LiveFeedSource = {
      url: (after) => `ws://127.0.0.1/live?after=${after}`,
      WebSocket: RestartingServerSocket as unknown as typeof WebSocket,
      // While it restarts, HTTP cannot answer either: unreachable, then a 503.
      verify: async () => {
        verifies++;
        if (verifies === 1) throw new TroupeApiError({ status: 0, code: "unreachable", message: "fetch failed" });
        if (verifies === 2) throw new TroupeApiError({ status: 503, code: "http_503", message: "restarting" });
      },
      eventsAfter: async () => [],
    };
    const types: string[] = [];
    const watching = (async () => {
      for await (const message of liveEvents(source, { after: 3 })) types.push(message.type);
    })();
    for (let ms = 0; ms < 10_000 && opened < 4; ms += 50) await vi.advanceTimersByTimeAsync(50);
    await vi.advanceTimersByTimeAsync(50);
    await watching;
    expect(types).toEqual(["snapshot", "run.completed"]);
    // Asked again at each refusal until the server answered, then no more.
    expect(verifies).toBe(3);
  });

  it("still ends at once when the server says the run cannot be watched", async () => {
    class RefusedSocket extends EventTarget {
      constructor(_url: string) {
        super();
        setTimeout(() => this.dispatchEvent(Object.assign(new Event("close"), { code: 1006, reason: "" })), 0);
      }
      close(): void {}
    }
    const source: LiveFeedSource = {
      url: () => "ws://127.0.0.1/live",
      WebSocket: RefusedSocket as unknown as typeof WebSocket,
      verify: async () => {
        throw new TroupeApiError({ status: 404, code: "run_not_found", message: "no such run" });
      },
      eventsAfter: async () => [],
    };
    const feed = liveEvents(source);
    await expect(feed.next()).rejects.toMatchObject({ code: "run_not_found" });
  });
});

/**
 * A WebSocket server on 127.0.0.1 that answers each upgrade, then lets
 * `serve` write text frames and close. It never reads what the client sends
 * (pings, close frames): a connection it leaves open behaves as one a NAT
 * dropped without a FIN. Written by hand, a frame being a few bytes: `ws`
 * ships no types here, and would answer a close frame by itself.
 */
async function rawSocketServer(serve: (connection: { n: number; url: URL; send(text: string): void; close(): void }) => void) {
  const sockets: Socket[] = [];
  let opened = 0;
  const server = createServer((_request, response) => response.writeHead(404).end());
  server.on("upgrade", (request: IncomingMessage, socket: Socket) => {
    sockets.push(socket);
    const accept = createHash("sha1")
      .update(`${request.headers["sec-websocket-key"]}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`)
      .digest("base64");
    socket.write(
      `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`,
    );
    socket.pause();
    // An unmasked frame (server to client): FIN and the opcode, the length (7 bits, or 126 and 16 bits), the payload.
    const frame = (opcode: number, payload: Buffer) =>
      socket.write(
        Buffer.concat([
          payload.length < 126
            ? Buffer.from([0x80 | opcode, payload.length])
            : Buffer.from([0x80 | opcode, 126, payload.length >> 8, payload.length & 0xff]),
          payload,
        ]),
      );
    serve({
      n: ++opened,
      url: new URL(request.url ?? "/", "http://127.0.0.1"),
      send: (text) => frame(0x1, Buffer.from(text)),
      close: () => {
        frame(0x8, Buffer.from([0x03, 0xe8]));
        socket.end();
      },
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async stop() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe("TroupeClient.events heartbeat", () => {
  it("closes a socket that went silent (no FIN) and resumes with ?after=<last seq>, to the run's end", { timeout: 20_000 }, async () => {
    const afters: (string | null)[] = [];
    const server = await rawSocketServer((connection) => {
      afters.push(connection.url.searchParams.get("after"));
      const at = new Date().toISOString();
      if (connection.n === 1) {
        // Two events, then nothing ever again, not even a pong: the connection died on the way.
        connection.send(JSON.stringify({ type: "snapshot", seq: 2, run: { status: "waiting" } }));
        connection.send(JSON.stringify({ type: "run.started", seq: 1, at }));
        connection.send(JSON.stringify({ type: "wait.started", seq: 2, at }));
        return;
      }
      connection.send(JSON.stringify({ type: "snapshot", seq: 3, run: { status: "completed" } }));
      connection.send(JSON.stringify({ type: "run.completed", seq: 3, at }));
      connection.close();
    });
    try {
      const client = new TroupeClient({ baseUrl: server.baseUrl, token: "t" });
      const seen: string[] = [];
      for await (const message of client.events("run_silent", { heartbeatSeconds: 0.5 })) {
        seen.push(message.type === "snapshot" ? "snapshot" : `${message.seq} ${message.type}`);
      }
      expect(seen).toEqual(["snapshot", "1 run.started", "2 wait.started", "snapshot", "3 run.completed"]);
      expect(afters).toEqual(["0", "2"]);
    } finally {
      await server.stop();
    }
  });
});
